"""The doctor: its checks, its exit codes, and running the pairs (with stand-ins for the GPU tools)."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from controls_helpers import FAKE_NVCC, FAKE_SANITIZER, install_fake_sanitizer_logs, make_env
from kvdiag.controls import doctor as doctor_mod
from kvdiag.controls.cache import load_control, not_reproduced_gate
from kvdiag.controls.doctor import ensure_control
from kvdiag.controls.canaries import ALL_TOOLS, PAIRS
from kvdiag.controls.doctor import (
    Check,
    ControlResult,
    DoctorReport,
    doctor_exit_code,
    format_report,
    run_doctor,
)

ALL_PASS = {
    "barrier_divergent": ("synccheck-positive-detected.log", False),   # the launcher dies after the error
    "barrier_uniform": ("synccheck-negative-clean.log", True),
    "shared_race": ("racecheck-positive-detected.log", True),
    "shared_race_fixed": ("racecheck-negative-clean.log", True),
    "oob_write": ("memcheck-positive-detected.log", False),
    "oob_write_fixed": ("memcheck-negative-clean.log", True),
    "uninit_read": ("initcheck-positive-detected.log", True),
    "uninit_read_fixed": ("initcheck-negative-clean.log", True),
}


# --------------------------------------------------------------------------- no GPU, no sanitizer


def test_doctor_on_this_machine_skips_everything_and_exits_3(tmp_path, monkeypatch):
    """The real fingerprint of a machine without GPU or compute-sanitizer (CI, the python kind)."""
    monkeypatch.delenv("KVDIAG_COMPUTE_SANITIZER", raising=False)
    from kvdiag.proc.sanitizer import find_sanitizer
    from kvdiag.workspace.gpu import fingerprint_gpu

    if fingerprint_gpu(log_dir=tmp_path / "probe").available or find_sanitizer() is not None:
        pytest.skip("this machine has a GPU or compute-sanitizer: the no-GPU path is tested with a fake below")
    report = run_doctor(home=tmp_path / "home", sanitizer=None, build_dir=None, refresh=False,
                        log_dir=tmp_path / "logs")
    by_name = {c.name: c for c in report.checks}
    assert by_name["gpu"].status == "skip" and by_name["gpu"].detail.startswith("no CUDA GPU visible")
    assert by_name["compute-sanitizer"].status == "skip"
    assert by_name["compute-sanitizer"].detail.startswith("compute-sanitizer not found")
    for c in report.checks:
        assert c.status in ("skip", "pass"), c      # nvcc or cupy may well be here: that is a pass
        assert c.detail and "\n" not in c.detail
        if c.name not in ("nvcc", "pycuda", "cupy"):
            assert c.status == "skip", c
    assert [c.name for c in report.checks if c.name.startswith("control ")] == [f"control {t}" for t in ALL_TOOLS]
    assert report.controls == () and report.trusted_tools == ()
    assert doctor_exit_code(report) == 3
    assert not (tmp_path / "home" / "controls.json").exists()
    text = format_report(report)
    assert "nothing proven" in text
    json.dumps(report.to_dict())


def test_no_gpu_and_no_sanitizer_say_both(tmp_path):
    report = run_doctor(home=tmp_path, sanitizer=None, build_dir=None, refresh=False, log_dir=tmp_path / "l",
                        environment=make_env(gpu=False, driver=None, sanitizer=None))
    controls = [c for c in report.checks if c.name.startswith("control ")]
    assert {c.status for c in controls} == {"skip"}
    assert controls[0].detail == "not run: no CUDA GPU visible, compute-sanitizer not found"
    assert doctor_exit_code(report) == 3


def test_gpu_without_sanitizer_skips_the_controls(tmp_path, monkeypatch):
    monkeypatch.setattr("kvdiag.controls.doctor.find_sanitizer", lambda explicit=None: None)
    report = run_doctor(home=tmp_path, sanitizer=None, build_dir=None, refresh=False, log_dir=tmp_path / "l",
                        environment=make_env(sanitizer=None))
    assert {c.name: c.status for c in report.checks}["gpu"] == "pass"
    assert {c.detail for c in report.checks if c.name.startswith("control ")} == {
        "not run: compute-sanitizer not found"}
    assert doctor_exit_code(report) == 3


def test_gpu_and_sanitizer_without_launcher_or_nvcc_cannot_be_trusted(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor_mod, "available_launchers",
                        lambda: {"pycuda": "ModuleNotFoundError: x", "cupy": "ModuleNotFoundError: y"})
    monkeypatch.setattr(doctor_mod, "find_nvcc", lambda: None)
    report = run_doctor(home=tmp_path, sanitizer=FAKE_SANITIZER, build_dir=None, refresh=False,
                        log_dir=tmp_path / "l", environment=make_env(nvcc_path=None))
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["pycuda"] == statuses["cupy"] == "fail"
    assert statuses["control memcheck"] == "fail"
    assert "nvcc is not found" in {c.name: c.detail for c in report.checks}["control memcheck"]
    assert doctor_exit_code(report) == 4


def test_without_pycuda_and_cupy_the_canaries_run_as_nvcc_built_programs(tmp_path, monkeypatch):
    """The README's plain install on a GPU machine: no Python GPU bindings, nvcc present."""
    logs = tmp_path / "fake-logs"
    monkeypatch.setenv("FAKE_SANITIZER_LOGS", str(logs))
    monkeypatch.setattr(doctor_mod, "available_launchers",
                        lambda: {"pycuda": "ModuleNotFoundError: x", "cupy": "ModuleNotFoundError: y"})
    install_fake_sanitizer_logs(logs, ALL_PASS)
    report = run_doctor(home=tmp_path / "home", sanitizer=FAKE_SANITIZER, build_dir=None, refresh=False,
                        log_dir=tmp_path / "l", environment=make_env(nvcc_path=str(FAKE_NVCC)))
    checks = {c.name: c for c in report.checks}
    assert checks["pycuda"].status == checks["cupy"].status == "warn"
    assert "run as nvcc-built programs" in checks["cupy"].detail
    assert doctor_exit_code(report) == 0, [c.summary() for c in report.controls]
    assert {c.launcher for c in report.controls} == {"nvcc-exe"}
    argv = json.loads((logs / "barrier_divergent.argv").read_text())
    program = next(argv[i:] for i, a in enumerate(argv) if a.endswith(".exe"))
    assert "barrier_divergent-" in program[0] and "sm_90-nvcc13.0.88" in program[0]
    assert program[1:] == ["128", "32", "4", "1", "1", "1", "1", "1"]      # n, block, grid, init_input
    uninit = json.loads((logs / "uninit_read.argv").read_text())
    assert uninit[-1] == "0"                                                  # its input is never written


def test_one_launcher_is_enough_the_other_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(doctor_mod, "available_launchers",
                        lambda: {"pycuda": "ModuleNotFoundError: No module named 'pycuda'", "cupy": None})
    checks = {c.name: c for c in doctor_mod._tool_checks(make_env(), Path("/x/compute-sanitizer"))}
    assert checks["cupy"].status == "pass"
    assert checks["pycuda"].status == "warn" and "cupy launches the canaries" in checks["pycuda"].detail


def test_a_directory_that_is_not_a_build_is_a_failed_check_not_an_exception(tmp_path):
    report = run_doctor(home=tmp_path, sanitizer=None, build_dir=tmp_path / "nope", refresh=False,
                        log_dir=tmp_path / "l", environment=make_env(gpu=False, sanitizer=None))
    build = {c.name: c for c in report.checks}["build"]
    assert build.status == "fail" and "does not exist" in build.detail


def test_unknown_tool_is_a_usage_error(tmp_path):
    from kvdiag.errors import UsageError

    with pytest.raises(UsageError, match="unknown sanitizer tool"):
        run_doctor(home=tmp_path, sanitizer=None, build_dir=None, refresh=False, tools=("asan",),
                   log_dir=tmp_path, environment=make_env(gpu=False))


# --------------------------------------------------------------------------- exit codes


def _result(tool: str, passed: bool) -> ControlResult:
    return ControlResult(tool, PAIRS[tool].positive.name, passed, "p", True, "n", "cupy", passed, 1.0, "l")


def test_exit_codes():
    all_ok = DoctorReport("k", "d", (Check("gpu", "pass", "x"),), tuple(_result(t, True) for t in ALL_TOOLS))
    assert doctor_exit_code(all_ok) == 0 and all_ok.ok and all_ok.trusted_tools == ALL_TOOLS
    one_bad = DoctorReport("k", "d", (), tuple(_result(t, t != "racecheck") for t in ALL_TOOLS))
    assert doctor_exit_code(one_bad) == 4 and "racecheck" not in one_bad.trusted_tools
    subset = DoctorReport("k", "d", (), (_result("memcheck", True),), tools=("memcheck",))
    assert doctor_exit_code(subset) == 0
    missing = DoctorReport("k", "d", (), (_result("memcheck", True),))
    assert doctor_exit_code(missing) == 4
    failed_check = DoctorReport("k", "d", (Check("build", "fail", "stale"),),
                                tuple(_result(t, True) for t in ALL_TOOLS))
    assert doctor_exit_code(failed_check) == 4
    skipped = DoctorReport("k", "d", (Check("control memcheck", "skip", "not run: no CUDA GPU visible"),), ())
    assert doctor_exit_code(skipped) == 3


# --------------------------------------------------------------------------- running the pairs


@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """An imagined H200 whose compute-sanitizer replays fixture logs and whose nvcc writes dummies."""
    logs = tmp_path / "fake-logs"
    monkeypatch.setenv("FAKE_SANITIZER_LOGS", str(logs))
    monkeypatch.setattr(doctor_mod, "available_launchers", lambda: {"pycuda": "ModuleNotFoundError: x",
                                                                     "cupy": None})

    def run(scenario=ALL_PASS, *, refresh=False, tools=ALL_TOOLS, name="run"):
        install_fake_sanitizer_logs(logs, scenario)
        for f in logs.glob("*.argv"):
            f.unlink()
        return run_doctor(home=tmp_path / "home", sanitizer=FAKE_SANITIZER, build_dir=None, refresh=refresh,
                          tools=tools, log_dir=tmp_path / name, environment=make_env(nvcc_path=str(FAKE_NVCC)))

    run.logs = logs
    run.home = tmp_path / "home"
    return run


def test_all_pairs_pass_exit_0_and_are_stored(fake_machine):
    report = fake_machine()
    assert [c.tool for c in report.controls] == list(ALL_TOOLS)
    assert all(c.passed for c in report.controls), [c.summary() for c in report.controls]
    assert doctor_exit_code(report) == 0 and report.ok
    sync = {c.tool: c for c in report.controls}["synccheck"]
    line = PAIRS["synccheck"].positive.expected_line()
    assert sync.positive_detail == f"barrier-divergence at barrier_divergent.cu:{line}, 32 errors"
    assert sync.negative_detail == "0 errors (barrier_uniform.cu, launcher cupy)"
    assert sync.launcher == "cupy"
    for tool in ALL_TOOLS:
        gate = not_reproduced_gate(fake_machine.home, report.env_key, tool)
        assert gate.allowed, gate.reason


def test_the_sanitizer_is_invoked_as_documented(fake_machine):
    import sys

    fake_machine()
    argv = json.loads((fake_machine.logs / "barrier_divergent.argv").read_text())
    i = argv.index("--tool")
    assert argv[i:i + 2] == ["--tool", "synccheck"]
    assert argv[argv.index("--error-exitcode") + 1] == "99"
    assert argv[argv.index("--show-backtrace") + 1] == "device"
    program = argv[argv.index(sys.executable):]
    assert program[:4] == [sys.executable, "-m", "kvdiag.controls.launch", "barrier_divergent"]
    assert program[4] == "--cubin" and program[5].endswith(".cubin") and "sm_90-nvcc13.0.88" in program[5]
    memcheck = json.loads((fake_machine.logs / "oob_write.argv").read_text())
    assert "--show-backtrace" not in memcheck


def test_every_canary_s_error_ends_its_kernel_not_its_context(fake_machine):
    """Under an MPS daemon a destroyed context is a fatal GPU error for every client of the GPU at that moment
    (device session 27); with `kernel` the tool reports the same finding and the context lives."""
    fake_machine()
    runs = sorted(fake_machine.logs.glob("*.argv"))
    assert len(runs) == 8
    for path in runs:
        argv = json.loads(path.read_text())
        assert argv[argv.index("--destroy-on-device-error") + 1] == "kernel", path.name


def test_positive_at_the_wrong_line_fails_only_that_tool(fake_machine):
    scenario = dict(ALL_PASS, barrier_divergent=("synccheck-positive-wrong-line.log", False))
    report = fake_machine(scenario)
    assert report.trusted_tools == ("memcheck", "racecheck", "initcheck")
    assert doctor_exit_code(report) == 4
    check = {c.name: c for c in report.checks}["control synccheck"]
    assert check.status == "fail" and check.detail.startswith("positive NOT detected: expected barrier-divergence")
    gate = not_reproduced_gate(fake_machine.home, report.env_key, "synccheck")
    assert not gate.allowed and "positive control was not detected" in gate.reason


def test_dirty_negative_fails(fake_machine):
    report = fake_machine(dict(ALL_PASS, oob_write_fixed=("memcheck-negative-dirty.log", True)))
    mem = {c.tool: c for c in report.controls}["memcheck"]
    assert mem.positive_detected and not mem.negative_clean and not mem.passed
    assert not not_reproduced_gate(fake_machine.home, report.env_key, "memcheck").allowed


def test_sanitizer_refusing_the_device_fails_every_tool(fake_machine):
    scenario = {name: ("tool-refused-device.log", False) for name in ALL_PASS}
    report = fake_machine(scenario)
    assert report.trusted_tools == ()
    assert doctor_exit_code(report) == 4
    for c in report.controls:
        assert "Device not supported" in c.positive_detail and "Device not supported" in c.negative_detail


def test_negative_whose_launcher_never_reported_fails(fake_machine):
    report = fake_machine(dict(ALL_PASS, uninit_read_fixed=("initcheck-negative-clean.log", False)))
    init = {c.tool: c for c in report.controls}["initcheck"]
    assert not init.negative_clean and "nothing proves the kernel ran" in init.negative_detail


def test_passed_controls_are_reused_failed_ones_rerun_refresh_reruns_all(fake_machine):
    first = fake_machine(dict(ALL_PASS, shared_race=("racecheck-negative-clean.log", True)), name="first")
    assert first.trusted_tools == ("memcheck", "synccheck", "initcheck")
    second = fake_machine(name="second")
    ran = {p.stem for p in fake_machine.logs.glob("*.argv")}
    assert ran == {"shared_race", "shared_race_fixed"}          # only the failed tool ran again
    assert second.trusted_tools == ALL_TOOLS and doctor_exit_code(second) == 0
    cached = {c.tool: c for c in second.controls}
    assert cached["memcheck"].cached_from == first.date and cached["racecheck"].cached_from is None
    assert "(cached; --refresh runs it again)" in {c.name: c for c in second.checks}["control memcheck"].detail
    fake_machine(refresh=True, name="third")
    assert len(list(fake_machine.logs.glob("*.argv"))) == 8


def test_ensure_control_runs_only_when_there_is_no_record(fake_machine, tmp_path):
    install_fake_sanitizer_logs(fake_machine.logs, ALL_PASS)
    env = make_env(nvcc_path=str(FAKE_NVCC))
    home = tmp_path / "lazy-home"
    record = ensure_control(home, env, "racecheck", FAKE_SANITIZER, tmp_path / "lazy")
    assert record.passed and record.tool == "racecheck" and record.env_key == env.key()
    assert load_control(home, env.key(), "racecheck") == record
    assert not_reproduced_gate(home, env.key(), "racecheck").allowed
    (fake_machine.logs / "shared_race.argv").unlink()
    assert ensure_control(home, env, "racecheck", FAKE_SANITIZER, tmp_path / "lazy") == record
    assert not (fake_machine.logs / "shared_race.argv").exists()


def test_ensure_control_without_gpu_stores_nothing(tmp_path):
    env = make_env(gpu=False)
    record = ensure_control(tmp_path, env, "memcheck", None, tmp_path / "l")
    assert not record.passed and record.detail.startswith("not run: no CUDA GPU visible")
    assert load_control(tmp_path, env.key(), "memcheck") is None


def test_compile_failure_fails_the_control_with_the_reason(fake_machine, tmp_path, monkeypatch):
    broken = tmp_path / "nvcc"
    broken.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'release 13.0, V13.0.88' && exit 0\n"
                      "echo 'fatal: out of cheese' >&2; exit 2\n")
    broken.chmod(0o755)
    install_fake_sanitizer_logs(fake_machine.logs, ALL_PASS)
    report = run_doctor(home=tmp_path / "h", sanitizer=FAKE_SANITIZER, build_dir=None, refresh=False,
                        tools=("memcheck",), log_dir=tmp_path / "l", environment=make_env(nvcc_path=str(broken)))
    (mem,) = report.controls
    assert not mem.passed and "canary not compiled: nvcc failed on oob_write.cu" in mem.positive_detail
    assert "out of cheese" in mem.positive_detail
    assert doctor_exit_code(report) == 4


# --------------------------------------------------------------------------- the real thing


@pytest.fixture
def real_gpu(tmp_path):
    from kvdiag.proc.sanitizer import find_sanitizer
    from kvdiag.workspace.gpu import fingerprint_gpu

    if not fingerprint_gpu(log_dir=tmp_path / "probe").available:
        pytest.skip("no CUDA GPU visible")
    if find_sanitizer() is None:
        pytest.skip("compute-sanitizer not found")


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::DeprecationWarning")   # fork while CUDA's own threads run (py3.12)
@pytest.mark.parametrize("launcher", ["pycuda", "cupy"])
def test_real_doctor_trusts_all_four_tools(real_gpu, tmp_path, monkeypatch, launcher):
    """End to end on the device machine: every canary under its real tool; all four must pass."""
    import importlib.util

    if importlib.util.find_spec(launcher) is None:
        pytest.skip(f"{launcher} is not importable here")
    monkeypatch.setenv("KVDIAG_LAUNCHER", launcher)
    report = run_doctor(home=tmp_path / "home", sanitizer=None, build_dir=None, refresh=True,
                        log_dir=tmp_path / "logs")
    print(format_report(report))
    assert doctor_exit_code(report) == 0, format_report(report)
    assert report.trusted_tools == ALL_TOOLS
    for c in report.controls:
        assert c.launcher == launcher, c
        assert c.positive_detail.startswith(f"{PAIRS[c.tool].positive.expected_kind} at "
                                            f"{PAIRS[c.tool].positive.expected_site()}")
    for tool in ALL_TOOLS:
        assert not_reproduced_gate(tmp_path / "home", report.env_key, tool).allowed


@pytest.mark.gpu
def test_real_doctor_trusts_all_four_tools_through_nvcc_built_programs(real_gpu, tmp_path, monkeypatch):
    """The README's plain install: pycuda and cupy hidden, every canary an nvcc-built program."""
    monkeypatch.setattr(doctor_mod, "available_launchers",
                        lambda: {"pycuda": "ModuleNotFoundError: hidden", "cupy": "ModuleNotFoundError: hidden"})
    report = run_doctor(home=tmp_path / "home", sanitizer=None, build_dir=None, refresh=True,
                        log_dir=tmp_path / "logs")
    print(format_report(report))
    assert doctor_exit_code(report) == 0, format_report(report)
    assert {c.launcher for c in report.controls} == {"nvcc-exe"}
    for c in report.controls:
        assert c.positive_detail.startswith(f"{PAIRS[c.tool].positive.expected_kind} at "
                                            f"{PAIRS[c.tool].positive.expected_site()}")


def test_ensure_control_from_many_threads_runs_the_control_once(fake_machine, tmp_path, monkeypatch):
    """A scan's workers all ask for synccheck's control at once: one runs it, the rest wait for its
    record (on the device, concurrent runs compiled the same canary and 11 of 132 cases ended
    'control could not run')."""
    install_fake_sanitizer_logs(fake_machine.logs, ALL_PASS)
    env = make_env(nvcc_path=str(FAKE_NVCC))
    home = tmp_path / "threads-home"
    barrier = threading.Barrier(8)
    calls = []
    real = doctor_mod.run_tool_control

    def counted(**kwargs):
        calls.append(kwargs["tool"])
        time.sleep(0.2)  # widen the window two unlocked callers would both fall into
        return real(**kwargs)

    monkeypatch.setattr(doctor_mod, "run_tool_control", counted)

    def ask(_):
        barrier.wait()
        return ensure_control(home, env, "synccheck", FAKE_SANITIZER, tmp_path / "threads")

    with ThreadPoolExecutor(8) as pool:
        records = list(pool.map(ask, range(8)))
    assert all(r.passed for r in records) and len({r.date for r in records}) == 1
    assert calls == ["synccheck"]
