"""Which kernel instantiations a CUDA library contains, read from ``cuobjdump -symbols`` or ``nm -C``.

The kernels live in the library's fatbin: ``cuobjdump -symbols`` lists every device ELF's
symbols, and a ``__global__`` function is a ``FUNC … ENTRY`` symbol there, by its mangled
name (demangled with ``c++filt``). ``__device__`` functions such as
``flash_attn_ext_f16_process_tile`` are inlined into their kernels and have no symbol of
their own: a symbol check names the kernel (``flash_attn_ext_f16<…>``), never the tile.

Without cuobjdump, ``nm -C`` on the host side of the library is the fallback: nvcc gives
every kernel instantiation a host function of the same name (the launch stub), kept in the
symbol table unless the library was stripped.
"""

from __future__ import annotations

import re

from kvdiag.parse.launches import canonical

# Two versions, two spellings of a kernel symbol. cuobjdump 13.5 (the PyPI wheel, CPU host):
# `FUNC  GLOBAL  DEFAULT  ENTRY  _Z18…` (tests/fixtures/symbols). cuobjdump 13.0 (CUDA 13.0 on the
# H200): `STT_FUNC  STB_LOCAL  STO_ENTRY  _Z18…` (tests/fixtures/device/h200-session7). Knowing only
# the first, kvdiag listed no kernel on the H200 and fell back to nm's host stubs.
_ENTRY = re.compile(r"^\s*(?:STT_)?FUNC\s+(?:\S+\s+){1,2}(?:STO_)?ENTRY\s+(?P<name>\S+)\s*$")
# Only the line's head is a pattern; the name is the rest, stripped. `\s+(?P<name>.*\S)\s*$` took
# 15.7 s on a 64 000-character line of blanks with no name after them (each start of the blank run
# tried against every end: tests/parse/test_parsers_linear.py found it).
_NM_HEAD = re.compile(r"[0-9a-fA-F]+\s+[tTwW]\s+")
# Host functions nvcc makes around a kernel, which are not kernels themselves.
_NOT_A_KERNEL = ("__device_stub__", "__wrapper__device_stub_", "guard variable", "__nv_", "__cuda", "__sti__")


def cuobjdump_entries(text: str) -> tuple[str, ...]:
    """The mangled names of every ENTRY (kernel) symbol, each once, in listing order."""
    return tuple(dict.fromkeys(m.group("name") for m in map(_ENTRY.match, text.splitlines()) if m))


def demangled_kernels(text: str) -> tuple[str, ...]:
    """c++filt's lines (one demangled kernel each) as canonical instantiations."""
    return tuple(dict.fromkeys(canonical(line) for line in text.splitlines() if line.strip()))


def nm_kernels(text: str) -> tuple[str, ...]:
    """Canonical names of the text symbols ``nm -C --defined-only`` lists, nvcc's stubs left out.

    It lists every host function too: the caller asks whether a given kernel is among
    them, never for the list of kernels."""
    out: dict[str, None] = {}
    for line in text.splitlines():
        head = _NM_HEAD.match(line)
        name = line[head.end():].rstrip() if head else ""
        if name and not any(word in name for word in _NOT_A_KERNEL):
            out.setdefault(canonical(name), None)
    return tuple(out)
