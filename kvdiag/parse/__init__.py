"""Readers of real tool output: compute-sanitizer, test-backend-ops, program deaths.

Each parser turns text (or an iterable of lines) into frozen dataclasses with a
``to_dict()`` for the run store. They never raise on unexpected text: output of
a crashing program is by nature partial, and an empty report is an answer.
"""

from kvdiag.parse.aborts import (
    ABORT_KINDS,
    AbortInfo,
    describe_exit,
    parse_aborts,
    parse_aborts_lines,
    signal_from_returncode,
    signal_name,
)
from kvdiag.parse.backend_ops import (
    STATUSES,
    BackendCase,
    BackendOpsCapabilities,
    BackendOpsReport,
    BackendSummary,
    CaseMetric,
    detect_capabilities,
    params_dict,
    parse_backend_ops,
    parse_backend_ops_lines,
)
from kvdiag.parse.sanitizer import (
    KINDS,
    TOOLS,
    Frame,
    RacecheckSummary,
    SanitizerFinding,
    SanitizerReport,
    SanitizerSite,
    instantiations,
    parse_sanitizer,
    parse_sanitizer_lines,
)
from kvdiag.parse.text import strip_ansi

__all__ = [
    "ABORT_KINDS",
    "KINDS",
    "STATUSES",
    "TOOLS",
    "AbortInfo",
    "BackendCase",
    "BackendOpsCapabilities",
    "BackendOpsReport",
    "BackendSummary",
    "CaseMetric",
    "Frame",
    "RacecheckSummary",
    "SanitizerFinding",
    "SanitizerReport",
    "SanitizerSite",
    "describe_exit",
    "detect_capabilities",
    "instantiations",
    "params_dict",
    "parse_aborts",
    "parse_aborts_lines",
    "parse_backend_ops",
    "parse_backend_ops_lines",
    "parse_sanitizer",
    "parse_sanitizer_lines",
    "signal_from_returncode",
    "signal_name",
    "strip_ansi",
]
