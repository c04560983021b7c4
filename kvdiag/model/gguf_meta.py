"""Read a GGUF file's metadata (the key/value header), without the `gguf` package.

Applicability checks ask questions of the user's model before anything starts
— does it carry an MTP head (`<arch>.nextn_predict_layers`)? which head dim? —
and must answer them on a machine with only kvdiag's own dependencies. The
header is read and tensor data never is; large arrays (the tokenizer's
vocabulary) are skipped and recorded by length only.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Mapping

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
KEEP_ARRAY_ITEMS = 64      # arrays longer than this are kept as ArrayInfo (length and item type)
MAX_KV = 1 << 20           # a header claiming more pairs than this is not a GGUF file we trust
MAX_STRING = 1 << 26       # 64 MiB: a chat template is a few KB, no metadata string comes near this
MAX_DEPTH = 8              # arrays of arrays: real files nest one level; more is hostile or broken


class GGUFError(ValueError):
    """The file is not a readable GGUF (wrong magic, truncated header, a length past the end of the
    file, unknown value type); the message names the byte offset and what was wrong (exit 65)."""


@dataclass(frozen=True)
class ArrayInfo:
    item_type: int
    length: int


@dataclass(frozen=True)
class GGUFMetadata:
    version: int
    tensor_count: int
    values: Mapping[str, Any]

    @property
    def architecture(self) -> str | None:
        arch = self.values.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_value(self, suffix: str) -> Any:
        """`<architecture>.<suffix>`, e.g. arch_value("nextn_predict_layers"); None when absent."""
        arch = self.architecture
        return self.values.get(f"{arch}.{suffix}") if arch else None


class _Reader:
    """Reads the header with every declared length checked against what is left of the file."""

    def __init__(self, fh: BinaryIO, path: Path | str, size: int):
        self.fh, self.path, self.size = fh, path, size

    def fail(self, what: str, at: int | None = None) -> GGUFError:
        return GGUFError(f"{self.path}: malformed GGUF at byte {self.fh.tell() if at is None else at}: {what}")

    def left(self) -> int:
        return self.size - self.fh.tell()

    def read(self, n: int, what: str) -> bytes:
        if n > self.left():
            raise self.fail(f"truncated: {what} of {n} bytes runs past the end of the file "
                            f"({self.left()} bytes left)")
        return self.fh.read(n)

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        at = self.fh.tell()
        n = self.unpack("<Q", f"the length of {what}")
        if n > MAX_STRING:
            raise self.fail(f"{what} declares {n} bytes (limit {MAX_STRING})", at)
        return self.read(n, what).decode("utf-8", errors="replace")

    def value(self, vtype: int, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype], "a value")
        if vtype == _STRING:
            return self.string("a string value")
        if vtype == _ARRAY:
            if depth >= MAX_DEPTH:
                raise self.fail(f"arrays nested deeper than {MAX_DEPTH}")
            at = self.fh.tell()
            item_type, length = self.unpack("<I", "an array's item type"), self.unpack("<Q", "an array's length")
            if item_type in _SCALARS:
                size = struct.calcsize(_SCALARS[item_type])
                if length * size > self.left():
                    raise self.fail(f"an array of {length} items of {size} bytes runs past the end of the file", at)
                if length > KEEP_ARRAY_ITEMS:
                    self.fh.seek(size * length, 1)
                    return ArrayInfo(item_type, length)
                return [self.unpack(_SCALARS[item_type], "an array item") for _ in range(length)]
            if item_type not in (_STRING, _ARRAY):
                raise self.fail(f"unknown array item type {item_type}", at)
            if length * 8 > self.left():     # every string or array item takes at least 8 bytes
                raise self.fail(f"an array of {length} items cannot fit in the {self.left()} bytes left", at)
            items = [self.value(item_type, depth + 1) for _ in range(length)]
            return items if length <= KEEP_ARRAY_ITEMS else ArrayInfo(item_type, length)
        raise self.fail(f"unknown metadata value type {vtype}")


def read_metadata(path: Path | str) -> GGUFMetadata:
    """The metadata of the GGUF at `path`; GGUFError (or OSError) when it cannot be read."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        reader = _Reader(fh, path, size)
        if fh.read(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        version = reader.unpack("<I", "the version")
        if version < 2:
            raise GGUFError(f"{path}: GGUF version {version} is not supported (2 and later are)")
        tensor_count, kv_count = reader.unpack("<Q", "the tensor count"), reader.unpack("<Q", "the metadata count")
        if kv_count > MAX_KV or kv_count * 12 > reader.left():    # a pair is at least 12 bytes
            raise reader.fail(f"implausible metadata count {kv_count}")
        values: dict[str, Any] = {}
        for _ in range(kv_count):
            key = reader.string("a key")
            values[key] = reader.value(reader.unpack("<I", f"the type of {key!r}"))
    return GGUFMetadata(version=version, tensor_count=tensor_count, values=values)
