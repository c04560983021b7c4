"""Probe files: the header parser and validation, on the real probes and on small bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.probes.patch import (
    ProbeError,
    ProbeFileError,
    load_probes,
    parse_header,
    parse_probe_file,
    parse_requires,
    split_probe_text,
)
from probes_helpers import REPO, run_cli, write_probe

REAL = REPO / "probes"
DIFF = """\
diff --git a/src/kernel.cu b/src/kernel.cu
index 1111111..2222222 100644
--- a/src/kernel.cu
+++ b/src/kernel.cu
@@ -1 +1 @@
-old
+new
"""


def test_real_probes_parse_with_every_field():
    probes = load_probes(REAL)
    assert probes.problems == ()
    assert set(probes.names()) == {"D2-fix-uniform-barrier", "D2-count-divergent-barrier", "print-every-case-error",
                                   "D11-f16-concat-cases", "test-backend-ops-launch", "D2-without-mma-kernels",
                                   "D18-fix-combine-barrier", "D19-fix-bound-sink-read"}
    d19 = probes.get("D19-fix-bound-sink-read")
    assert (d19.defect, d19.kind, d19.commit) == ("D19", "fix", "d99724f2b141fed9e1a9f402213506c081433465")
    assert d19.touched_files() == (("src/ggml-cuda/fattn-mma-f16.cuh", False),)
    assert d19.keeps_output_correct is True          # measured in session 24 (`kvdiag verify D19`, 8 OK each side)
    d18 = probes.get("D18-fix-combine-barrier")
    assert (d18.defect, d18.kind, d18.keeps_output_correct) == ("D18", "fix", True)    # measured in session 21
    assert d18.touched_files() == (("src/ggml-cuda/fattn-mma-f16.cuh", False),)
    fix = probes.get("D2-fix-uniform-barrier")
    assert (fix.defect, fix.kind, fix.requires) == ("D2", "fix", ())
    assert fix.repository == "https://github.com/ggml-org/ggml"
    assert fix.commit == "d99724f2b141fed9e1a9f402213506c081433465"
    assert fix.prefix == "src/ggml-cuda"
    assert fix.path_prefix.startswith("src/ggml-cuda (in llama.cpp trees")
    assert fix.keeps_output_correct is True          # "yes, measured: `kvdiag verify D2` on an H200 ..."
    # the indented continuation lines are part of the summary, joined by single spaces
    assert fix.summary.startswith("Split the meta-data combine of flash_attn_ext_f16_process_tile around one block")
    assert fix.summary.endswith("the arithmetic is unchanged.")
    assert fix.touched_files() == (("src/ggml-cuda/fattn-mma-f16.cuh", False),)
    assert fix.diff.startswith("diff --git a/src/ggml-cuda/fattn-mma-f16.cuh")
    instrument = probes.get("D2-count-divergent-barrier")
    assert instrument.kind == "instrument" and instrument.keeps_output_correct is True
    assert probes.get("print-every-case-error").defect == "D8"
    launch = probes.get("test-backend-ops-launch")     # serves every entry
    assert (launch.defect, launch.kind, launch.touched_files()) == ("any", "instrument",
                                                                   (("tests/test-backend-ops.cpp", False),))


def test_header_continuation_and_requires_lists():
    fields, problems = parse_header("summary: one\n  two\n\tthree\nrequires: a, b c\n", "x.patch")
    assert problems == []
    assert fields == {"summary": "one two three", "requires": "a, b c"}
    assert parse_requires("a, b c") == ("a", "b", "c")
    assert parse_requires("none") == () and parse_requires("None") == ()


def test_header_ends_at_a_line_of_three_dashes_only():
    header, diff = split_probe_text("kind: fix\n--- not the end\n---\n" + DIFF)
    assert header == "kind: fix\n--- not the end\n"
    assert diff == DIFF
    with pytest.raises(ValueError, match="no header end"):
        split_probe_text("kind: fix\n" + DIFF)


@pytest.mark.parametrize(("edit", "key", "message"), [
    (lambda t: t.replace("kind: fix", "kind: patch"), "kind", "'patch' is not one of instrument, fix"),
    (lambda t: t.replace("defect: D90\n", ""), "defect", "required key is missing"),
    (lambda t: t.replace("defect: D90", "defect: bug-2"), "defect", "not a registry id"),
    (lambda t: t.replace("commit: 0123456789abcdef0123456789abcdef01234567", "commit: HEAD"), "commit",
     "not a commit id"),
    (lambda t: t.replace("requires: none", "requires: none\nowner: me"), "owner", "unknown key"),
    (lambda t: t.replace("kvdiag-probe: bad", "kvdiag-probe: renamed"), "kvdiag-probe",
     "differs from the file name 'bad'"),
    (lambda t: t.replace("requires: none", "requires: bad"), "requires", "cannot require itself"),
    (lambda t: t.replace("kind: fix", "kind: fix\nkind: fix"), "kind", "given twice"),
    (lambda t: "  dangling continuation\n" + t, "line 1", "continuation line without a key"),
    (lambda t: t.replace("defect: D90", "defect D90"), "line 2", "not a 'key: value' line"),
    (lambda t: t.replace("---\n", ""), "(file)", "no header end"),
    (lambda t: t.split("---\n")[0] + "---\njust text\n", "(diff)", "no 'diff --git"),
])
def test_bad_probe_files_report_file_key_message(tmp_path: Path, edit, key, message):
    path = write_probe(tmp_path, "bad", DIFF)
    path.write_text(edit(path.read_text()))
    with pytest.raises(ProbeFileError) as info:
        parse_probe_file(path)
    lines = [str(p) for p in info.value.problems]
    assert any(line.startswith(f"bad.patch: {key}: ") and message in line for line in lines), lines


def test_load_probes_keeps_good_ones_and_reports_bad_ones(tmp_path: Path):
    write_probe(tmp_path, "good", DIFF)
    write_probe(tmp_path, "orphan", DIFF, requires="missing-one")
    broken = write_probe(tmp_path, "broken", DIFF, kind="wrong")
    probes = load_probes(tmp_path)
    assert set(probes.names()) == {"good", "orphan"}
    assert [str(p) for p in probes.problems] == [
        "broken.patch: kind: 'wrong' is not one of instrument, fix",
        "orphan.patch: requires: unknown probe 'missing-one'",
    ]
    with pytest.raises(ProbeError, match="malformed"):
        probes.get("broken")
    with pytest.raises(ProbeError, match="closest: good"):
        probes.get("goood")
    assert probes.get(str(broken.with_name("good.patch"))).name == "good"   # a path works too


def test_probe_list_table(capsys):
    code = run_cli(["probe", "list"])
    out = capsys.readouterr().out
    assert code == 0
    header = out.splitlines()[0].split()
    assert header == ["name", "defect", "kind", "output-correct", "repository@commit", "requires"]
    row = next(line for line in out.splitlines() if line.startswith("D2-fix-uniform-barrier"))
    assert row.split() == ["D2-fix-uniform-barrier", "D2", "fix", "yes", "ggml-org/ggml@d99724f2b141", "-"]
    row = next(line for line in out.splitlines() if line.startswith("D2-count-divergent-barrier"))
    assert row.split()[1:4] == ["D2", "instrument", "yes"]


def test_probe_list_reports_problems_with_exit_65(tmp_path: Path, capsys):
    write_probe(tmp_path, "good", DIFF, requires="none")
    write_probe(tmp_path, "needs", DIFF, requires="good", kind="instrument")
    write_probe(tmp_path, "broken", DIFF, kind="wrong")
    code = run_cli(["probe", "list", "--probes", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 65
    assert "needs" in captured.out and "good" in captured.out.split("needs")[1]
    assert "kvdiag: probe problem: broken.patch: kind: 'wrong' is not one of instrument, fix" in captured.err
