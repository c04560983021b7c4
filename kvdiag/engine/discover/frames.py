"""Which tools' sanitizer records carry their device frames (`kvdiag discover --backtrace`).

A record's device frames name the kernel that launched an inlined function, and they are what a
record costs: the sanitizer captures them for every record, printed or not. Where a defect reports
in every thread (D2's divergent barrier), that cost is most of a discovery's time, so under
``auto`` the tools whose records name their own site keep going without them.
"""

from __future__ import annotations

BACKTRACES = ("auto", "device", "no")  # --backtrace: per tool, or --show-backtrace for every tool
# Tools whose records go without device frames under "auto". Synccheck's records name their barrier's
# own line, so its roots keep their sites without frames, while capturing the frames is what a record
# costs: on D2's 40 FA cases (20480 records, device session 19, H200) device frames took 10.8 s,
# none 4.0 s, and the whole op's 2936 cases took 666 s of process time without them against 2888 s
# for 832 cases with them (docs/performance.md).
FRAMELESS = frozenset({"synccheck"})
MIXED_BACKTRACE = "mixed"   # merged shards that ran different --backtrace values (store.discoveries.merged_backtrace)


def shows_backtrace(tool: str, backtrace: str) -> str:
    """The --show-backtrace value ``tool`` runs with under ``--backtrace`` (one of BACKTRACES)."""
    if backtrace == "auto":
        return "no" if tool in FRAMELESS else "device"
    return backtrace


def frameless_tools(tools, backtrace: str) -> list[str]:
    """Of ``tools``, those whose records go without device frames."""
    return [tool for tool in tools if shows_backtrace(tool, backtrace) == "no"]
