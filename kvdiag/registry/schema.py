"""The registry entry schema, as data.

An entry is a Markdown file whose first block is a fenced TOML front matter
(```toml … ```), the way rustsec's advisory-db keeps one advisory per file. The
schema below is the single description of that front matter: the loader builds
entries from it, the linter checks files against it, `docs/registry.md` documents
it. Keeping it as data (not as code paths) is what lets the linter report every
unknown key and bad value at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdiag.constants import SANITIZER_TOOLS


@dataclass(frozen=True)
class Key:
    """One key of a section: its type, whether it is required, and its closed set if any."""

    type: str  # str | int | float | bool | date | list[str] | commits | regex | regexes | argv | argv-list | table | list[table]
    #            | source-facts
    required: bool = False
    enum: tuple[str, ...] = ()
    doc: str = ""


@dataclass(frozen=True)
class Section:
    """A TOML table (or array of tables when ``many``) and its keys."""

    keys: dict[str, Key]
    required: bool = False
    many: bool = False
    doc: str = ""
    subtables: dict[str, "Section"] = field(default_factory=dict)


OWNERS = ("upstream", "beellama", "fork", "build", "toolchain")
STATUSES = ("open", "fix-pending", "fixed", "historical", "not-planned", "unconfirmed", "draft")
SEVERITIES = ("critical", "high", "medium", "low", "info")
REFERENCE_TYPES = ("REPORT", "FIX", "EVIDENCE", "ARTICLE", "WEB", "PACKAGE", "SEED")
STEP_KINDS = ("backend-ops", "command", "build-check", "server", "compile")
SIGNATURE_TYPES = ("sanitizer", "abort", "case", "output", "exit", "stale", "relative")
RELATIVE_PICKS = ("max", "min", "first", "last")
FINDING_KINDS = (
    "barrier-divergence", "invalid-read", "invalid-write", "misaligned-access",
    "out-of-bounds", "race-hazard", "uninitialized-access", "api-error", "host-api-access", "other",
)
ABORT_KINDS = ("ggml-abort", "ggml-assert", "cuda-error", "cpp-exception", "signal", "other")
CASE_STATUSES = ("OK", "FAIL", "NOT_SUPPORTED", "INCOMPLETE")
EVIDENCE_KINDS = ("sites", "instantiations", "error-count", "case-metrics", "abort", "running-case", "matched-lines")
PROBE_KINDS = ("instrument", "fix")
SIGNALS = ("SIGABRT", "SIGILL", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGKILL", "SIGTERM")


def _s(doc: str = "", **kw: Any) -> Key:
    return Key("str", doc=doc, **kw)


DEFECT = Section(
    required=True,
    doc="Identity of the defect.",
    keys={
        "id": _s("Registry id, D<number>.", required=True),
        "title": _s("One line, what goes wrong.", required=True),
        "summary": _s("One or two sentences for `kvdiag show` and reports.", required=True),
        "owner": _s("Who has to fix it.", required=True, enum=OWNERS),
        "status": _s("Where the fix stands.", required=True, enum=STATUSES),
        "severity": _s("How bad it is when hit.", required=True, enum=SEVERITIES),
        "reported": Key("date", required=True, doc="When it was first recorded."),
        "modified": Key("date", required=True, doc="When this entry last changed."),
        "aliases": Key("list[str]", doc="Ids of the same defect in advisory databases (CVE-…, GHSA-…); "
                                         "upstream issues and pull requests go in [[references]]."),
        "related": Key("list[str]", doc="Other registry ids; relation only, never causality. A related "
                                         "entry's sanitizer findings in this entry's runs are set apart, "
                                         "not a different finding."),
        "source": _s("Where the entry comes from (a seed document, a run)."),
    },
)

REFERENCE = Section(
    many=True,
    doc="Typed links, OSV style.",
    keys={
        "type": _s(required=True, enum=REFERENCE_TYPES),
        "url": _s(required=True),
        "note": _s(),
    },
)

LOCATION = Section(
    required=True,
    doc="Where the defect lives in the target's source tree.",
    keys={
        "component": _s("Subsystem, e.g. ggml-cuda/fattn.", required=True),
        "files": Key("list[str]", doc="Source paths relative to the repository root."),
        "functions": Key("list[str]"),
        "lines": _s("Line or ranges at the commit the entry was written against."),
        "commit": _s("The commit the lines refer to."),
        "sites": Key("list[table]", doc="Sites found by their context ([[location.sites]]: file, holds, "
                                        "anchor, at): `kvdiag registry verify` names the line each is at in a "
                                        "tree, or says it is ambiguous (listing the candidates) or not found."),
    },
)

AFFECTED = Section(
    many=True,
    doc="OSV GIT ranges, one table per range: the commits of its timeline in one repository. A build is judged "
        "against them by git ancestry (docs/verdicts.md, 'Affected ranges').",
    keys={
        "repo": _s("The repository, as kvdiag/registry/repos.py names it (ggml, llama.cpp, a fork).", required=True),
        "introduced": Key("commits", required=True, doc='Full commit id(s) that brought the defect in, or "0" '
                                                          "for from the beginning."),
        "fixed": Key("commits", doc="Full commit id(s) of the fix (one per branch it was picked to)."),
        "last_affected": Key("commits", doc="The last commit(s) known to have it, when the fix is unknown "
                                            "(never together with fixed)."),
        "limit": Key("commits", doc='The range covers only ancestors of a limit ("*": no limit).'),
        "note": _s("What is and is not established about these commits."),
    },
)

APPLIES = Section(
    doc="When the build cannot have the defect: any condition false gives not-applicable.",
    keys={
        "cc_min": _s("Lowest compute capability, e.g. 7.5."),
        "cc_max": _s("Highest compute capability."),
        "cmake_options": Key("list[str]", doc="Options that must exist in CMakeCache.txt (a fork feature)."),
        "cmake_values": Key("table", doc="Options that must have these values, e.g. {GGML_CUDA = \"ON\"}."),
        "source_paths": Key("list[str]", doc="Paths that must exist in the source tree (fork detection)."),
        "tests": Key("list[str]", doc="Test names the tree must have: registered with CTest in the build "
                                      "(CTestTestfile.cmake), or a tests/<name>.* source in any language."),
        "ops": Key("list[str]", doc="Ops test-backend-ops must know."),
        "backend_ops_flags": Key("list[str]", doc="Options test-backend-ops must accept, e.g. --seed."),
        "server_flags": Key("list[str]", doc="Text llama-server's --help must contain, e.g. draft-mtp."),
        "source_facts": Key("source-facts", doc="[[applies.source_facts]]: what the defect needs in the source, "
                                                "each {files, pattern, says}: a regex (multi-line) that must match "
                                                "in one of the files (either layout, llama.cpp's ggml/ or ggml's "
                                                "root). None matching, or none of the files there, is "
                                                "not-applicable, quoting `says` and where it was looked for; a "
                                                "tree not at hand checks nothing (a note)."),
        "note": _s(),
    },
)

REQUIRES = Section(
    doc="What must be present to run: anything missing gives skipped.",
    keys={
        "binaries": Key("list[str]", doc="Executables in the build, e.g. test-backend-ops."),
        "sanitizer": Key("bool", doc="compute-sanitizer must be found."),
        "gpu": Key("bool", doc="A CUDA GPU must be visible."),
        "env": Key("list[str]", doc="Environment variables that must be set, e.g. LLAMA_KV_MODEL."),
        "lineinfo": Key("bool", doc="Warn (not skip) when the build lacks -lineinfo: sites lose file:line."),
        "model_keys": Key("list[str]", doc="GGUF metadata keys (after the architecture prefix) the model in "
                                           "$LLAMA_KV_MODEL must carry with a non-zero value, e.g. "
                                           "nextn_predict_layers (an MTP head)."),
        "note": _s(),
    },
)

SIGNATURE = Section(
    many=True,
    required=True,
    doc="What must match in one run's output to confirm. Every table must match (AND).",
    keys={
        "type": _s(required=True, enum=SIGNATURE_TYPES),
        "step": _s("Repro step the matcher applies to (default: every step)."),
        # sanitizer
        "tool": _s(enum=SANITIZER_TOOLS),
        "kind": _s("Finding kind (sanitizer) or abort kind (abort)."),
        "site": Key("regex", doc="Over 'file:line' of the finding."),
        "kernel": Key("regex", doc="Over the kernel's demangled name."),
        "min_count": Key("int", doc="Least number of findings (sanitizer) or failing cases (case)."),
        # abort
        "message": Key("regex", doc="Over the abort's message line."),
        "backtrace": Key("regex", doc="Over the abort's backtrace lines."),
        # case
        "params": Key("regex", doc="Over the test case's parameter string."),
        "status": _s(enum=CASE_STATUSES),
        "metric": _s("ERR, NMSE or MAA."),
        "min_value": Key("float"),
        # output, relative
        "pattern": Key("regex", doc="Over the named stream (relative: with a named group `value`, the number)."),
        "stream": _s(enum=("stdout", "stderr", "combined", "sanitizer")),
        # relative
        "arm": _s("relative: the comparison arm (the judged step's `compare_with`) whose figure is the baseline."),
        "ratio_min": Key("float", doc="relative: least ratio defect-arm figure / comparison-arm figure."),
        "difference_min": Key("float", doc="relative: least difference defect-arm figure - comparison-arm figure."),
        "unit": _s("relative: the figure's unit, for the verdict's text (e.g. MiB)."),
        "pick": _s("relative: which figure counts when an arm prints several matching lines (default max).",
                   enum=RELATIVE_PICKS),
        # exit
        "signal": _s(enum=SIGNALS),
        "code": Key("int"),
    },
)

STEP = Section(
    many=True,
    required=True,
    doc="One way to reproduce. The first step marked default (or the first) is what `kvdiag run` runs.",
    keys={
        "name": _s(required=True),
        "kind": _s(required=True, enum=STEP_KINDS),
        "description": _s(required=True),
        "default": Key("bool"),
        "argv": Key("argv", doc="One command: a list of jinja2 templates, one per argument."),
        "commands": Key("argv-list", doc="Several commands run in order (e.g. configure then build)."),
        "timeout": Key("int", required=True, doc="Seconds before the process group is killed."),
        "runs": Key("int", doc="Runs for a flaky defect; the verdict carries k/N."),
        "expected_seconds": Key("float", doc="Typical wall time on the reference machine."),
        "tty": Key("bool", doc="Give the program a pseudo-terminal so stdout is line-buffered."),
        "env": Key("table", doc="Environment variables set for the command (templates)."),
        "sanitizer": _s(enum=SANITIZER_TOOLS),
        "sanitizer_options": Key("list[str]"),
        "kernel_filter": _s("compute-sanitizer --kernel-name value."),
        "print_limit": Key("int"),
        "min_cases": Key("int", doc="backend-ops: fewer executed matching cases (default 1) is inconclusive, "
                                    "never not-reproduced; not-applicable only when the affected range or a "
                                    "source fact says the defect cannot be in the tree."),
        "expect": Key("regexes", doc="What a healthy run prints: proof the path executed (control). One regex, "
                                     "or an array of regexes that must all be seen (e.g. that the draft path ran "
                                     "and that the KV cache was in host memory)."),
        "evidence": Key("list[str]", enum=EVIDENCE_KINDS),
        "compare_with": _s("A step without a signature run once after this step's runs, on the same build: its "
                           "comparison arm (e.g. the same server with a q8_0 cache). The lines its `expect` "
                           "patterns match are quoted beside the verdict, which stays this step's."),
        "vars": Key("table", doc="Template variables of this step (op, params, …); scan overrides params."),
        "requires_env": Key("list[str]", doc="Environment variables this step alone needs (e.g. a model path)."),
        "requires_binaries": Key("list[str]", doc="Binaries this step needs, instead of requires.binaries."),
        "cmake_defines": Key("table", doc="compile: the -D options of the scratch configure of the build's source "
                                          "tree, e.g. {GGML_CUDA_KVARN = \"ON\"}."),
        "sources": Key("list[str]", doc="compile: the translation units (paths in the source tree) whose objects "
                                        "are built; nothing else is."),
        "absent_when_unlisted": _s("backend-ops: why the defect is one of this step's cases (D6: a claim about "
                                   "test-backend-ops' quantized-K softcap cases): a program that lists no case "
                                   "matching the step's params, in its own case format, cannot show it, so that is "
                                   "not-applicable quoting this reason, instead of inconclusive. Cases listed but "
                                   "refused, or fewer than min_cases executed, stay as without it."),
        "exercise_probe": _s("backend-ops: the entry's probe (a [[probes]] name) that adds the cases this step "
                             "needs to a tree whose test-backend-ops lacks them; a verdict that finds no case "
                             "inside an affected range names it."),
        "cmake_options": Key("list[str]", doc="compile: the options the source tree's CMake must define for this "
                                              "step, instead of [applies] cmake_options (a step written for an "
                                              "older layout of the tree, where the option had another name or "
                                              "none); [] requires none: the configured project compiling the "
                                              "sources is what makes it applicable."),
    },
)

SCAN = Section(
    doc="The case space `kvdiag scan` walks; every case gets its own verdict.",
    keys={
        "step": _s("The step run per case.", required=True),
        "op": _s(required=True),
        "params": Key("regex", required=True, doc="Regex selecting the case space."),
        "print_limit": Key("int", doc="The sanitizer's --print-limit per case (instead of the step's): a scan "
                                      "asks which cases are hit, and printing findings is what costs."),
        "sanitizer_options": Key("list[str]", doc="Sanitizer options per case, replacing the step's "
                                                  "(e.g. --show-backtrace no)."),
        "dimensions": Key("list[str]", doc="The case parameters that select a kernel instantiation (hsk, hsv, "
                                           "nr23, nb, type_K, type_V): a scan groups affected cases by them and "
                                           "`registry radius` writes case regexes over them."),
    },
)

RADIUS = Section(
    many=True,
    doc="A measured blast radius, written by `kvdiag registry radius` from a saved scan: one table per tree.",
    keys={
        "repo": _s("The repository of the measured tree (an [[affected]] repo URL).", required=True),
        "commit": _s("The commit the scan ran on, as recorded by the scan (7 to 40 hex digits).", required=True),
        "tree": _s("What the tree is, in words (upstream llama.cpp, BeeLlama fork)."),
        "measured": Key("date", required=True, doc="When the scan ran."),
        "kvdiag": _s("The kvdiag version that scanned.", required=True),
        "gpu": _s("The GPU and compute capability it ran on."),
        "op": _s(required=True),
        "scanned": Key("regex", required=True, doc="The case-space regex the scan walked."),
        "cases": Key("int", doc="Cases the scan judged."),
        "affected_cases": Key("int", doc="Of them, affected."),
        "kernels": Key("list[str]", doc="The __global__ kernel instantiations the findings were "
                                                       "in (canonical: name<args>, see kvdiag.parse.launches)."),
        "instantiations": Key("list[str]", doc="The functions the findings name (a __device__ tile function "
                                               "inlined into its kernel), canonical."),
        "clean_kernels": Key("list[str]", doc="Kernel instantiations of the entry's family that launched under "
                                              "the detector in the scan with no finding."),
        "params": Key("regexes", required=True, doc="Case regexes (test-backend-ops -p) that together select "
                                                    "every affected case; `kvdiag scan` without --params scans "
                                                    "their union."),
        "folded": Key("list[str]", doc="What `registry radius` left out to keep each list within 1000 items "
                                       "(kvdiag.registry.radius.MAX_RADIUS_ITEMS), one line per list it cut."),
        "note": _s(),
    },
)

DRIFT = Section(
    doc="Numeric drift criterion for `kvdiag drift` (quantized FA numerics).",
    keys={
        "op": _s(required=True),
        "params": Key("regex", required=True),
        "runs": Key("int", required=True),
        "seeds": Key("list[str]", doc="Seeds when the build's test-backend-ops takes --seed."),
        "confirm_min_fails": Key("int", doc="Failing runs of one case that confirm the defect."),
        "confirm_min_err": Key("float", doc="Least ERR of those failures."),
    },
)

PROBE_REF = Section(
    many=True,
    doc="Patch files under probes/, each with its own header.",
    keys={
        "name": _s(required=True),
        "file": _s(required=True),
        "kind": _s(required=True, enum=PROBE_KINDS),
        "note": _s(),
    },
)

SECTIONS: dict[str, Section] = {
    "defect": DEFECT,
    "references": REFERENCE,
    "location": LOCATION,
    "affected": AFFECTED,
    "applies": APPLIES,
    "requires": REQUIRES,
    "repro": STEP,
    "signature": SIGNATURE,
    "scan": SCAN,
    "radius": RADIUS,
    "drift": DRIFT,
    "probes": PROBE_REF,
}

# Names a template may use; anything else is an undefined variable for the linter.
TEMPLATE_GLOBALS = ("bin", "build_dir", "source_dir", "backend", "scratch", "env", "model", "seed")
