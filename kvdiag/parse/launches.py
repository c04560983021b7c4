"""Kernel instantiations: the launch lines of kvdiag's launch probe, and one spelling for every source.

Three tools name the same kernel instantiation three ways:

* compute-sanitizer: ``void flash_attn_ext_f16<(int)256, (int)256, (int)4, (int)4, (bool)0, (bool)0>(const char *, …)``
* the launch probe (``probes/test-backend-ops-launch.patch``, the C++ runtime's demangler):
  ``void flash_attn_ext_f16<256, 256, 4, 4, false, false>(char const*, …)``
* ``cuobjdump -symbols`` / ``nm -C`` through c++filt: as the launch probe.

:func:`canonical` reduces each to ``flash_attn_ext_f16<256, 256, 4, 4, false, false>``: the
name, the template arguments with integer casts dropped and ``(bool)0/1`` as ``false/true``,
no return type, no parameter list. That is the form kvdiag groups, stores and compares.

Since the probe also says how much shared memory each launch holds, a line may end in
``  [kvdiag-smem <static>+<dynamic>]`` (bytes; ``?`` where the driver could not size the kernel's
static part, ``?+?`` for a cuBLAS call, whose own kernels the probe cannot see). :class:`Launch`
keeps both numbers apart from the kernel; a line without the suffix (an older probe, the CUPTI
lister) holds ``None``: unknown, never zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvdiag.parse.sanitizer import split_signature
from kvdiag.parse.text import cut_long_lines

LAUNCH_MARKER = "kvdiag-launch: "
#: the CUPTI launch lister's first line (repro/launches/kvdiag_launches.cpp): without it, nothing was listed.
#: When CUPTI refuses it, it writes "kvdiag-launch-lister: not listing: <why>" instead (on stderr).
LISTER_READY = "kvdiag-launch-lister: cupti "
_READY_LINE = re.compile(r"^kvdiag-launch-lister: cupti \d+\s*$", re.M)
PROBE_LISTER = "launch probe"
_INT_CAST = re.compile(r"^\((?:unsigned )?(?:int|long|long long|short|char|unsigned|size_t|int64_t|uint32_t)\)"
                       r"(-?\d+)[uUlL]*$")
_BOOL_CAST = re.compile(r"^\(bool\)([01])$")
_LITERAL_SUFFIX = re.compile(r"^(-?\d+)[uUlL]+$")
SHARED_MARKER = "[kvdiag-smem "
_SHARED_TAIL = re.compile(r"\[kvdiag-smem (\?|\d+)\+(\?|\d+)\]")


@dataclass(frozen=True)
class Launch:
    """One ``kvdiag-launch:`` line: the kernel as printed, its canonical form, where it was."""

    printed: str
    kernel: str
    line_no: int
    static_smem: int | None = None      # the kernel's static shared memory in bytes; None: not said
    dynamic_smem: int | None = None     # the launch's dynamic shared memory in bytes; None: not said

    @property
    def shared_memory(self) -> int | None:
        """Bytes of shared memory the launch holds, or None when the line does not say both parts."""
        if self.static_smem is None or self.dynamic_smem is None:
            return None
        return self.static_smem + self.dynamic_smem

    def to_dict(self) -> dict:
        out = {"printed": self.printed, "kernel": self.kernel, "line_no": self.line_no}
        if self.static_smem is not None or self.dynamic_smem is not None:
            out.update(static_smem=self.static_smem, dynamic_smem=self.dynamic_smem)
        return out


def canonical_arg(arg: str) -> str:
    arg = arg.strip()
    if m := _BOOL_CAST.match(arg):
        return "true" if m.group(1) == "1" else "false"
    if m := _INT_CAST.match(arg):
        return m.group(1)
    if m := _LITERAL_SUFFIX.match(arg):
        return m.group(1)
    return arg


def canonical(signature: str) -> str:
    """``name<args>`` of any spelling of a kernel (see the module docstring); the bare name for a
    kernel without template arguments."""
    name, args = split_signature(signature)
    if not args:
        return name
    return f"{name}<{', '.join(canonical_arg(a) for a in args)}>"


def template_args(instantiation: str) -> tuple[str, ...]:
    """The canonical template arguments of a canonical instantiation."""
    return tuple(canonical_arg(a) for a in split_signature(instantiation)[1])


def parse_launches(text: str) -> tuple[Launch, ...]:
    """Every launch line, in order. The marker may follow other text on its line (an older
    test-backend-ops prints a case's name before running it, so a launch lands mid-line)."""
    found = []
    for line_no, line in enumerate(cut_long_lines(text)[0].splitlines(), start=1):
        at = line.find(LAUNCH_MARKER)
        if at < 0:
            continue
        printed = line[at + len(LAUNCH_MARKER):].strip()
        static = dynamic = None
        at = printed.rfind(SHARED_MARKER)       # found from the end: linear on any line
        if at > 0 and (sized := _SHARED_TAIL.fullmatch(printed, at)):
            printed = printed[:at].rstrip()
            static = None if sized.group(1) == "?" else int(sized.group(1))
            dynamic = None if sized.group(2) == "?" else int(sized.group(2))
        if printed:
            found.append(Launch(printed=printed, kernel=canonical(printed), line_no=line_no,
                                static_smem=static, dynamic_smem=dynamic))
    return tuple(found)


def distinct_kernels(launches) -> tuple[str, ...]:
    """The canonical kernels launched, first launch first, each once."""
    return tuple(dict.fromkeys(launch.kernel for launch in launches))


def confirmed_listing(lister: str | bool | None, text: str) -> str | None:
    """Which lister listed this output's launches, or None when none did. The launch probe is compiled
    into the program and always lists when asked; the CUPTI lister lists only where it said it was
    subscribed (another tool may hold CUPTI, or take the injection slot), so that a run it never saw
    is not read as one that launched nothing."""
    if not lister:
        return None
    name = PROBE_LISTER if lister is True else str(lister)
    if name != PROBE_LISTER and not _READY_LINE.search(text):
        return None
    return name
