"""A test case described once, in the format each era's test-backend-ops prints it.

test-backend-ops prints a case as ``OP(name=value,...)``, the names being the C++
member names its ``vars()`` stringifies (``VAR_TO_STR(x)`` is ``#x "=" ...``), and
its ``-p`` filter is a ``std::regex_search`` over that string. So a field renamed in
the C++ source is a case regex that silently selects nothing on the other side of
the rename. ggml's ``tests/test-backend-ops.cpp`` between 2025-08 and 2026-08 (read
in ggml-org/ggml's history):

- ``FLASH_ATTN_EXT``: ``type_KV=f16`` until 6976b270 (2026-05-01, "vulkan: Support
  asymmetric FA in coopmat2 path") split it into ``type_K=f16,type_V=f16``; that is
  the one rename. 3b145175 (2025-08-05) inserted ``sinks`` after ``mask``, and
  480cc77c and 5a232ab4 (2026-08-20/21) appended ``kv_view`` and ``v_is_view_of_k``
  after ``permute``: added fields, which a search regex does not mind (none of the
  registry's regexes is anchored after ``permute``).
- ``CONCAT`` (``type,ne_a,ne_b_d,dim,v``): unchanged.

The registry writes the current form (``type_K``/``type_V``); :func:`adapt_regex`
rewrites a regex in either form into the form a build prints, and is idempotent, so
an entry adapted once may be adapted again. An asymmetric K/V pair has no joined
form: such a regex is left as written, and selects nothing where no case can have it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SPLIT = "type_K,type_V"    # ggml 6976b270 (2026-05-01) on
JOINED = "type_KV"         # before it
FORMATS = (SPLIT, JOINED)

# One value of a type field inside a case regex: a type name or a small regex over one
# (f16, q8_0, (q|iq), (?:f16|q8_0), \w+, [a-z0-9_]+), never the field's terminator, a group
# holding a comma, a space or an end anchor such as (?:[, ]|$).
_VALUE = r"(?:\((?:\?:)?[^(),\s$]*\)|[\w\[\]\\.*+-])+"
_PAIR = re.compile(rf"type_K=(?P<k>{_VALUE}),type_V=(?P<v>{_VALUE})")
_LONE = re.compile(r"type_([KV])=")
_JOINED_FIELD = re.compile(rf"type_KV=(?P<t>{_VALUE})")
_NAMES = {SPLIT: ("type_K", "type_V"), JOINED: ("type_KV",)}


@dataclass(frozen=True)
class CaseFormat:
    """How this build's test-backend-ops names a K/V cache type in a case (None: unknown), and
    where that was read."""

    kv_types: str | None = None
    source: str = "not read"

    @property
    def known(self) -> bool:
        return self.kv_types in FORMATS

    def adapt(self, regex: str | None) -> str | None:
        return adapt_regex(regex, self.kv_types) if regex is not None else None

    def adapt_all(self, regexes):
        """A regex or a list of them (a radius' ``params``), adapted alike."""
        if isinstance(regexes, (list, tuple)):
            return type(regexes)(self.adapt(r) for r in regexes)
        return self.adapt(regexes)

    def adapt_dimensions(self, dimensions: tuple[str, ...]) -> tuple[str, ...]:
        """Scan dimensions (case field names) as this build names them, each once."""
        if not self.known:
            return tuple(dimensions)
        out: list[str] = []
        for name in dimensions:
            out += _NAMES[self.kv_types] if name in ("type_K", "type_V", "type_KV") else [name]
        return tuple(dict.fromkeys(out))

    def describe(self) -> str:
        if self.kv_types == JOINED:
            return (f"this test-backend-ops prints a FLASH_ATTN_EXT case's cache type as type_KV= (ggml before "
                    f"6976b270, 2026-05-01; {self.source}): case regexes written with type_K=/type_V= are mapped "
                    f"to it")
        if self.kv_types == SPLIT:
            return f"this test-backend-ops prints type_K=,type_V= ({self.source})"
        return f"the case format of this test-backend-ops is not known ({self.source}): case regexes run as written"

    def to_dict(self) -> dict:
        return {"kv_types": self.kv_types, "source": self.source}


def adapt_regex(regex: str, kv_types: str | None) -> str:
    """``regex`` (a case's ``-p`` regex, in either era's form) in the form ``kv_types`` prints."""
    if kv_types == JOINED:
        joined = _PAIR.sub(lambda m: f"type_KV={m['k']}" if m["k"] == m["v"] else m.group(0), regex)
        if _PAIR.search(joined):
            return joined    # an asymmetric pair: no joined form, selects nothing on such a build
        return _LONE.sub("type_KV=", joined)
    if kv_types == SPLIT:
        # a joined value may be a prefix (type_KV=(q|iq) selects q8_0): K's value runs on to its comma
        return _JOINED_FIELD.sub(lambda m: f"type_K={m['t']}[^,]*,type_V={m['t']}", regex)
    return regex


def kv_types_in(text) -> str | None:
    """Which form a program (bytes, a memory map) or a listing (str) carries: the field names as
    ``VAR_TO_STR`` stringifies them (``type_KV=``, or ``type_K=`` and ``type_V=``); None when it
    carries neither, or both."""
    def has(name: str) -> bool:
        return text.find(name if isinstance(text, str) else name.encode()) != -1

    joined = has("type_KV=")
    split = has("type_K=") and has("type_V=")
    if joined == split:
        return None
    return JOINED if joined else SPLIT
