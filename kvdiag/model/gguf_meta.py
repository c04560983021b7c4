"""Read a GGUF file's metadata (the key/value header), without the `gguf` package.

Applicability checks ask questions of the user's model before anything starts
— does it carry an MTP head (`<arch>.nextn_predict_layers`)? which head dim? —
and must answer them on a machine with only kvdiag's own dependencies. The
header is read and tensor data never is; large arrays (the tokenizer's
vocabulary) are skipped and recorded by length only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Mapping

MAGIC = b"GGUF"
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
KEEP_ARRAY_ITEMS = 64      # arrays longer than this are kept as ArrayInfo (length and item type)
MAX_KV = 1 << 20           # a header claiming more pairs than this is not a GGUF file we trust


class GGUFError(ValueError):
    """The file is not a readable GGUF (wrong magic, truncated header, unknown value type)."""


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


def _read(fh: BinaryIO, n: int) -> bytes:
    data = fh.read(n)
    if len(data) != n:
        raise GGUFError("truncated header")
    return data


def _unpack(fh: BinaryIO, fmt: str) -> Any:
    return struct.unpack(fmt, _read(fh, struct.calcsize(fmt)))[0]


def _string(fh: BinaryIO) -> str:
    return _read(fh, _unpack(fh, "<Q")).decode("utf-8", errors="replace")


def _value(fh: BinaryIO, vtype: int) -> Any:
    if vtype in _SCALARS:
        return _unpack(fh, _SCALARS[vtype])
    if vtype == _STRING:
        return _string(fh)
    if vtype == _ARRAY:
        item_type, length = _unpack(fh, "<I"), _unpack(fh, "<Q")
        if item_type in _SCALARS:
            size = struct.calcsize(_SCALARS[item_type])
            if length > KEEP_ARRAY_ITEMS:
                fh.seek(size * length, 1)
                return ArrayInfo(item_type, length)
            return [_unpack(fh, _SCALARS[item_type]) for _ in range(length)]
        items = [_value(fh, item_type) for _ in range(length)]
        return items if length <= KEEP_ARRAY_ITEMS else ArrayInfo(item_type, length)
    raise GGUFError(f"unknown metadata value type {vtype}")


def read_metadata(path: Path | str) -> GGUFMetadata:
    """The metadata of the GGUF at `path`; GGUFError (or OSError) when it cannot be read."""
    with open(path, "rb") as fh:
        if fh.read(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        version = _unpack(fh, "<I")
        if version < 2:
            raise GGUFError(f"{path}: GGUF version {version} is not supported (2 and later are)")
        tensor_count, kv_count = _unpack(fh, "<Q"), _unpack(fh, "<Q")
        if kv_count > MAX_KV:
            raise GGUFError(f"{path}: implausible metadata count {kv_count}")
        values: dict[str, Any] = {}
        for _ in range(kv_count):
            key = _string(fh)
            values[key] = _value(fh, _unpack(fh, "<I"))
    return GGUFMetadata(version=version, tensor_count=tensor_count, values=values)
