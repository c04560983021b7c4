"""The canary catalogue: markers, pairs, and that every canary compiles (compile only; nothing runs)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kvdiag.controls.canaries import (
    ALL_TOOLS,
    CANARIES,
    CANARY_DIR,
    PAIRS,
    Canary,
    MarkerError,
    find_expect_markers,
)
from kvdiag.controls.launch import CompileError, Compiler, find_nvcc

KINDS = {"barrier-divergence", "race-hazard", "invalid-write", "uninitialized-access"}


def test_every_tool_has_one_pair_and_every_cu_is_catalogued():
    assert set(PAIRS) == set(ALL_TOOLS)
    for tool, pair in PAIRS.items():
        assert pair.positive.positive and not pair.negative.positive
        assert pair.positive.tool == pair.negative.tool == tool
        assert pair.positive.twin == pair.negative.name and pair.negative.twin == pair.positive.name
        assert pair.positive.expected_kind in KINDS
    assert {p.stem for p in CANARY_DIR.glob("*.cu")} == set(CANARIES)


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_kernel_is_extern_c_and_named_like_its_file(name):
    text = CANARIES[name].source.read_text()
    assert re.search(rf'extern "C" __global__ void {name}\(const float \*in, float \*out, int n\)', text)


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_positive_has_exactly_one_marker_and_the_catalogue_finds_its_line(tool):
    c = PAIRS[tool].positive
    lines = c.source.read_text().splitlines()
    marked = [i for i, line in enumerate(lines, start=1) if "KVDIAG-EXPECT" in line]
    assert len(marked) == 1
    assert c.expected_line() == marked[0]
    assert lines[marked[0] - 1].rstrip().endswith(f"// KVDIAG-EXPECT: {c.expected_kind}")
    assert c.expected_site() == f"{c.name}.cu:{marked[0]}"


def test_the_marked_lines_are_the_defective_statements():
    """Guard against a marker drifting onto a comment or a neighbour line."""
    stmt = {name: CANARIES[name].source.read_text().splitlines()[CANARIES[name].expected_line() - 1]
            for name in ("barrier_divergent", "shared_race", "oob_write", "uninit_read")}
    assert stmt["barrier_divergent"].strip().startswith("__syncthreads();")
    assert stmt["shared_race"].strip().startswith("slot[t] =")
    assert stmt["oob_write"].strip().startswith("out[i] =")
    assert "in[i]" in stmt["uninit_read"]


@pytest.mark.parametrize("tool", ALL_TOOLS)
def test_negative_twins_carry_no_marker(tool):
    assert PAIRS[tool].negative.expected_line() is None
    assert find_expect_markers(PAIRS[tool].negative.source) == []


def _canary_from(tmp_path: Path, text: str, *, positive: bool = True, kind: str = "invalid-write"):
    import kvdiag.controls.canaries as mod

    src = tmp_path / "probe.cu"
    src.write_text(text)
    c = Canary("probe", "memcheck", positive, "x", kind if positive else None, block=(1, 1, 1))
    object.__setattr__(c, "name", "probe")
    return c, mod


@pytest.mark.parametrize("text,problem", [
    ("int x;\n", "exactly one"),
    ("a; // KVDIAG-EXPECT: invalid-write\nb; // KVDIAG-EXPECT: invalid-write\n", "exactly one"),
    ("a; // KVDIAG-EXPECT: race-hazard\n", "marker says 'race-hazard'"),
    ("a; // KVDIAG-EXPECT:\n", "malformed marker"),
])
def test_broken_markers_are_refused(tmp_path, monkeypatch, text, problem):
    c, mod = _canary_from(tmp_path, text)
    monkeypatch.setattr(mod, "CANARY_DIR", tmp_path)
    with pytest.raises(MarkerError, match=problem):
        c.expected_line()


def test_a_marker_on_a_negative_twin_is_refused(tmp_path, monkeypatch):
    c, mod = _canary_from(tmp_path, "a; // KVDIAG-EXPECT: invalid-write\n", positive=False)
    monkeypatch.setattr(mod, "CANARY_DIR", tmp_path)
    with pytest.raises(MarkerError, match="negative control"):
        c.expected_line()


# --------------------------------------------------------------------------- compile only


def _nvcc() -> Path:
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not installed")
    return nvcc


@pytest.fixture(scope="module")
def sm90_cubins(tmp_path_factory) -> dict[str, Path]:
    """Compile only; nothing runs. Every canary with this machine's nvcc, for sm_90, -lineinfo."""
    nvcc = _nvcc()
    home = tmp_path_factory.mktemp("home")
    compiler = Compiler(home=home, arch="sm_90", nvcc=nvcc, log_dir=home / "logs")
    return {name: compiler.compile(c) for name, c in CANARIES.items()}


@pytest.mark.parametrize("name", sorted(CANARIES))
def test_canary_compiles_to_an_sm90_cubin(sm90_cubins, name):
    cubin = sm90_cubins[name]
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert name.encode() in data                 # the extern "C" symbol, unmangled
    assert cubin.parent.name.startswith("sm_90-nvcc")


def test_compiled_cubins_are_cached_and_keyed_by_source(tmp_path):
    nvcc = _nvcc()
    compiler = Compiler(home=tmp_path, arch="sm_90", nvcc=nvcc, log_dir=tmp_path / "logs")
    c = CANARIES["oob_write"]
    first = compiler.compile(c)
    mtime = first.stat().st_mtime_ns
    assert compiler.compile(c) == first and first.stat().st_mtime_ns == mtime   # no second nvcc run
    assert len(list((tmp_path / "logs").glob("nvcc-oob_write-*.cmd.json"))) == 1
    assert compiler.version() and compiler.version() in str(first.parent)


def test_compile_failure_names_the_canary_and_the_log(tmp_path, monkeypatch):
    nvcc = _nvcc()
    import kvdiag.controls.canaries as mod

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "broken.cu").write_text('extern "C" __global__ void broken( { }\n')
    monkeypatch.setattr(mod, "CANARY_DIR", tmp_path / "src")
    c = Canary("broken", "memcheck", False, "x", None, block=(1, 1, 1))
    with pytest.raises(CompileError, match=r"nvcc failed on broken\.cu for sm_90 \(exit \d+\)"):
        Compiler(home=tmp_path, arch="sm_90", nvcc=nvcc).compile(c)
    assert not list(tmp_path.glob("canaries/*/*.cubin"))


def _nvdisasm() -> str:
    found = shutil.which("nvdisasm") or next(
        (str(p) for p in (Path("/usr/local/cuda/bin/nvdisasm"),) if p.exists()), None)
    if found is None:
        pytest.skip("nvdisasm not installed (the device machine has it)")
    return found


@pytest.mark.parametrize("name,opcode", [
    ("barrier_divergent", "BAR.SYNC"),
    ("shared_race", "STS"),
    ("oob_write", "STG"),
    ("uninit_read", "LDG"),
])
def test_the_marked_line_compiles_to_the_defective_instruction(sm90_cubins, name, opcode):
    """SASS with line info: the line the tool must name holds the barrier / store / load."""
    import subprocess

    text = subprocess.run([_nvdisasm(), "-g", "-c", str(sm90_cubins[name])], check=True,
                          capture_output=True, text=True).stdout
    line = CANARIES[name].expected_line()
    current, opcodes = None, []
    for raw in text.splitlines():
        m = re.search(r'//## File ".*?", line (\d+)', raw)
        if m:
            current = int(m.group(1))
        elif current == line and re.search(rf"\b{re.escape(opcode)}\b", raw):
            opcodes.append(raw.strip())
    assert opcodes, f"no {opcode} at {name}.cu:{line}"


def test_divergent_canary_keeps_two_distinct_barriers(sm90_cubins):
    """The compiler must not merge the if- and else-barriers into one (that would be the fix)."""
    import subprocess

    text = subprocess.run([_nvdisasm(), "-c", str(sm90_cubins["barrier_divergent"])], check=True,
                          capture_output=True, text=True).stdout
    uniform = subprocess.run([_nvdisasm(), "-c", str(sm90_cubins["barrier_uniform"])], check=True,
                             capture_output=True, text=True).stdout
    assert text.count("BAR.SYNC") == uniform.count("BAR.SYNC") + 1 == 4
