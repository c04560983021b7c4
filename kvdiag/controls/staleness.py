"""The control for D13's detector: does the build tool's dry run, on this machine, see a stale build?

A `ninja -n` or `make -n` that reports "nothing to do" is only evidence that a
build is current if the same dry run, here, reports work when there is some. The
control makes that state with the machine's own tool, never from a recorded file:
it writes a tiny project (sources and a build description, nothing a build tool
writes), builds it for real with the same program the user's build uses, asks
the check kvdiag runs on the user's build (`kvdiag.workspace.staleness.check`) to call
the fresh build current, edits a header that only the compiler's dependency
information records, and asks it to call the build stale. The log and dependency
files the check reads back are then the ones this tool version wrote: ninja 1.11's
log v5 or 1.13's v7, whichever ran.

Three forms, chosen by the build's generator: a ``build.ninja`` (ninja, CMake's
Ninja generators or a hand-written one), a CMake project configured with the
"Unix Makefiles" generator and the build's ``make`` (CMake writes that Makefile,
so no version of CMake's format is copied here), and a plain ``Makefile`` for a
build without CMake. The ninja form puts an always-run command in front of the
object (the shape of llama.cpp's "Provisioning UI assets"): the fresh build must
still be current, and the edited header behind it must still be found.

:func:`prove_current` is the one place a "current" answer becomes one: with the
control passed, the Staleness carries its proof; otherwise it becomes "not
checked" with the reason, so the D13 verdict and every table that shows a build's
currency say the same. The outcome is kept per tool binary in ``controls.json``.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from kvdiag.controls.cache import ControlRecord, control_run_lock, load_control, store_record
from kvdiag.controls.gate import Gate
from kvdiag.proc.runner import CommandNotFound, run_command
from kvdiag.workspace.staleness.check import Staleness, check_build_staleness, not_checked, resolve_tool

TOOL = "staleness"
BUILD_TIMEOUT_S = 120.0
HEADER = "kernel.h"

_NINJA = """# staged by kvdiag's staleness control: built by the ninja under test, then kernel.h is edited
rule cc
  command = cat $in > $out && echo "$out: $in kernel.h" > $out.d
  depfile = $out.d
  deps = gcc
  description = Building CUDA object $out
rule link
  command = cat $in > $out
  description = Linking CXX executable $out
rule assets
  command = test -f assets.h || echo "// assets" > assets.h
  description = Provisioning UI assets
  restat = 1
build CMakeFiles/assets assets.h: assets
build out/kernel.o: cc kernel.cu | assets.h
build bin/test-backend-ops: link out/kernel.o
default bin/test-backend-ops
"""

_CMAKELISTS = """cmake_minimum_required(VERSION 3.18)
project(kvdiag_staleness_control C)
add_executable(test-backend-ops main.c)
"""

_MAKEFILE = """# staged by kvdiag's staleness control: built by the make under test, then kernel.h is edited
bin/test-backend-ops: main.c kernel.h
\tmkdir -p bin && cat main.c kernel.h > $@
"""

_SOURCES = {
    "kernel.cu": "// staged by kvdiag: its object depends on kernel.h only through the dependency file\n",
    "main.c": '#include "kernel.h"\nint main(void) { return KERNEL_STATUS; }\n',
    HEADER: "#define KERNEL_STATUS 0\n",
}


@dataclass(frozen=True)
class _Form:
    """One way to stage the control: its files, how to build them, what to ask the check."""

    label: str
    tool: str                       # "ninja" or "make": the program that builds and dry-runs it
    generator: str | None           # what the check is told the build's generator is
    files: dict[str, str]
    targets: tuple[str, ...]
    cmake: bool = False             # configured by cmake into build/ first
    finds_header: bool = True       # the check's causes name the edited header


_FORMS = {
    "ninja": _Form("ninja -n", "ninja", "Ninja", {"build.ninja": _NINJA, **_SOURCES}, ("bin/test-backend-ops",)),
    "cmake-make": _Form("make -n", "make", "Unix Makefiles", {"CMakeLists.txt": _CMAKELISTS, **_SOURCES},
                        ("test-backend-ops",), cmake=True),
    "make": _Form("make -q", "make", None, {"Makefile": _MAKEFILE, **_SOURCES}, ("bin/test-backend-ops",),
                  finds_header=False),
}


def form_for(generator: str | None) -> str:
    """The form for a build made by CMake's ``generator``; "make" (a plain Makefile) for a build
    without CMake is asked for by its check's tool (:func:`prove_current`)."""
    gen = generator or "Ninja"
    if gen.startswith("Ninja"):
        return "ninja"
    if gen.endswith("Makefiles") and not gen.startswith("NMake"):
        return "cmake-make"
    return "make"


_GENERATOR_OF_TOOL = {"ninja -n": "Ninja", "make -n": "Unix Makefiles", "make -q": "plain make"}


def staged_files(generator: str | None) -> dict[str, str]:
    """What the control writes before it builds: sources and a build description, nothing a tool writes."""
    return dict(_FORMS[form_for(generator)].files)


def prove_current(staleness: Staleness, *, generator: str | None, log_dir: Path,
                  home: Path | None = None) -> Staleness:
    """A "current" answer with the control's proof, or "not checked" saying why it has none.

    Stale and unchecked answers need no control and come back as they are."""
    if not staleness.checked or staleness.stale is not False:
        return staleness
    # the form of the tool that answered: a build without CMake has a build.ninja or a plain Makefile
    generator = _GENERATOR_OF_TOOL.get(staleness.tool or "", generator)
    gate = staleness_control(generator, log_dir, program=staleness.program, home=home)
    if gate.allowed:
        return replace(staleness, proof=gate.reason)
    return not_checked(f"the dry run found nothing to rebuild ({staleness.detail}), but {gate.reason}",
                       staleness.tool, staleness.program)


def staleness_control(generator: str | None, log_dir: Path, *, program: str | None = None,
                      home: Path | None = None) -> Gate:
    """May this tool's "nothing to rebuild" count on this machine? Runs the control once per tool
    binary (kept in ``home``'s controls.json when given)."""
    form = _FORMS[form_for(generator)]
    tool = resolve_tool(program, form.tool)
    key = _key(form, tool)
    if home is None:
        return _gate(run_staleness_control(generator, log_dir, program=tool, key=key))
    with control_run_lock(home, TOOL):
        record = load_control(home, key, TOOL)
        if record is None:
            record = run_staleness_control(generator, log_dir, program=tool, key=key)
            if record.positive_detected is not None:
                store_record(home, record)
    return _gate(record)


def _gate(record: ControlRecord) -> Gate:
    if record.passed:
        return Gate(True, record.detail)
    return Gate(False, f"{record.detail}: its 'nothing to rebuild' proves nothing here")


def run_staleness_control(generator: str | None, log_dir: Path, *, program: str, key: str = "") -> ControlRecord:
    """Stage, build for real, check (current), edit the header, check (stale)."""
    form = _FORMS[form_for(generator)]
    date = datetime.now(timezone.utc).isoformat(timespec="seconds")
    failed = lambda why: ControlRecord(key, TOOL, False, date, f"the {form.label} control {why}",  # noqa: E731
                                       versions={"program": program}, log_dir=str(log_dir))
    with tempfile.TemporaryDirectory(prefix="kvdiag-staleness-control-") as tmp:
        source = Path(tmp) / "src"
        _write(source, form.files)
        build = Path(tmp) / "build" if form.cmake else source
        problem = _build(form, source, build, program, log_dir)
        if problem:
            return failed(f"could not build its staged project ({problem})")

        def check() -> Staleness:
            return check_build_staleness(build, generator=form.generator, log_dir=log_dir,
                                         targets=list(form.targets), program=program)
        fresh = check()
        negative = fresh.checked and fresh.stale is False
        if not _edit_after_build(source / HEADER, build):
            return failed("could not give the edited header a time after the build's outputs")
        edited = check()
    positive = edited.checked and bool(edited.stale) and (
        not form.finds_header or any(HEADER in cause for cause in edited.causes))
    version = _version(program, log_dir)
    detail = (f"the {form.label} control ({version}) called a staged build current right after building it and "
              f"stale after an edit of its header, on this machine" if positive and negative else
              f"the {form.label} control ({version}) did not tell a staged build apart: fresh build "
              f"{_said(fresh)}; after a header edit {_said(edited)}")
    return ControlRecord(key, TOOL, positive and negative, date, detail,
                         versions={"program": program, "version": version},
                         positive_detected=positive, positive_detail=f"after a header edit: {_said(edited)}",
                         negative_clean=negative, negative_detail=f"right after the build: {_said(fresh)}",
                         log_dir=str(log_dir))


def _write(folder: Path, files: dict[str, str]) -> None:
    """The staged files, all dated an hour back: older than anything the build writes."""
    folder.mkdir(parents=True)
    past = time.time() - 3600
    for name, text in files.items():
        (folder / name).write_text(text)
        os.utime(folder / name, (past, past))


def _build(form: _Form, source: Path, build: Path, program: str, log_dir: Path) -> str | None:
    """Build the staged project with ``program``; why it could not, or None."""
    if form.cmake:
        commands = [["cmake", "-G", "Unix Makefiles", f"-DCMAKE_MAKE_PROGRAM={program}", "-S", str(source),
                     "-B", str(build)], [program, "-C", str(build), *form.targets]]
    else:
        commands = [[program, "-C", str(build), *form.targets]]
    for i, argv in enumerate(commands, start=1):
        try:
            result = run_command(argv, timeout=BUILD_TIMEOUT_S, log_dir=log_dir, name=f"staleness-control-{i}",
                                 env_overrides={"LC_ALL": "C"})
        except CommandNotFound as exc:
            return str(exc)
        if not result.ok:
            return f"{Path(argv[0]).name}: {result.describe()}"
    return None


def _edit_after_build(header: Path, build: Path, attempts: int = 300) -> bool:
    """Edit the header so that its time is after every file the build wrote (waiting out a coarse clock)."""
    newest = max(p.stat().st_mtime_ns for p in build.rglob("*") if p.is_file())
    for _ in range(attempts):
        if time.time_ns() > newest:
            header.write_text(header.read_text() + "// edited by kvdiag's staleness control\n")
            if header.stat().st_mtime_ns > newest:
                return True
        time.sleep(0.01)
    return False


def _said(st: Staleness) -> str:
    if not st.checked:
        return f"not checked ({st.detail})"
    return f"{'stale' if st.stale else 'current'} ({st.detail}{'; ' + st.causes[0] if st.causes else ''})"


def _version(program: str, log_dir: Path) -> str:
    """``<name> <version>`` of the tool, as its --version prints it (its first line)."""
    try:
        result = run_command([program, "--version"], timeout=30, log_dir=log_dir, name="staleness-control-version")
    except CommandNotFound:
        return program
    first = next((x.strip() for x in result.stdout_text().splitlines() if x.strip()), "")
    if not first:
        return program
    return f"{Path(program).name} {first} ({program})" if first[0].isdigit() else f"{first} ({program})"


def _key(form: _Form, program: str) -> str:
    """The tool binary the outcome holds for: a replaced or another binary runs the control again."""
    parts = [TOOL, form.label, _stamp(program)]
    if form.cmake:
        parts.append(_stamp(resolve_tool(None, "cmake")))
    return "|".join(parts)


def _stamp(program: str) -> str:
    try:
        st = os.stat(program)
    except OSError:
        return f"{program}:missing"
    return f"{os.path.realpath(program)}:{st.st_size}:{st.st_mtime_ns}"
