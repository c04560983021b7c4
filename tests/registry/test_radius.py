"""A measured radius: built from a recorded H200 scan, written into an entry touching nothing else, linted,
and read back as `kvdiag scan`'s default case space."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from kvdiag.cli import main
from kvdiag.engine.scan.radius import case_regexes, measure_radius
from kvdiag.errors import UsageError
from kvdiag.registry.loader import load_registry
from kvdiag.registry.radius import radius_kernels, radius_params, tables_for, write_radius

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "tests" / "fixtures" / "device" / "h200-fork-llama-session4" / "scan-D2-upstream-nobind.run.json.gz"
UPSTREAM = "749f688fcaa4c472ec034b08cb8a907c45cfaa02"


@pytest.fixture(scope="module")
def recorded() -> dict:
    with gzip.open(RECORDED, "rt") as fh:
        return json.load(fh)


def test_the_recorded_upstream_scan_gives_a_radius_whose_regexes_select_every_affected_case(recorded):
    table = measure_radius(recorded, commit=UPSTREAM, tree="upstream llama.cpp")
    affected = [p for p, c in recorded["scan"]["cases"].items() if c["verdict"] == "confirmed"]
    assert (table["cases"], table["affected_cases"], len(affected)) == (132, 60, 60)
    assert table["repo"] == "https://github.com/ggml-org/llama.cpp"      # LLAMA_* options in the cache
    assert table["gpu"] == "NVIDIA H200 (cc 9.0)" and table["scanned"] == "hsk=256"
    assert table["kernels"] is None          # a scan from before the grouping names what findings were in
    assert "flash_attn_ext_f16_process_tile<256, 256, 4, 4, 2, false, false, false, true>" in table["instantiations"]
    unaffected = [p for p, c in recorded["scan"]["cases"].items() if c["verdict"] == "not-reproduced"]
    selected = [p for p in unaffected if any(re.search(r, p) for r in table["params"])]
    assert all(any(re.search(r, p) for r in table["params"]) for p in affected)
    assert len(selected) < len(unaffected)   # the regexes narrow the space


def test_a_dimension_value_never_selects_a_longer_one():
    regexes = case_regexes(["hsk=256,nb=3,type_K=f16,type_V=f16"], ["hsk", "nb", "type_K"])
    assert not any(re.search(r, "hsk=256,nb=32,type_K=f16,type_V=f16") for r in regexes)
    assert not any(re.search(r, "hsk=2560,nb=3,type_K=f16,type_V=f16") for r in regexes)


def test_a_scan_without_an_affected_case_or_a_commit_is_refused(recorded):
    scan = dict(recorded["scan"], cases={p: dict(c, verdict="not-reproduced") for p, c in recorded["scan"]["cases"].items()})
    with pytest.raises(UsageError, match="no affected case"):
        measure_radius({"scan": scan, "target": recorded["target"]}, commit=UPSTREAM)
    no_git = json.loads(json.dumps(recorded))
    no_git["target"]["build"]["git"] = None
    with pytest.raises(UsageError, match="give --commit"):
        measure_radius(no_git)


def _staged_registry(tmp_path: Path) -> Path:
    folder = tmp_path / "registry"
    shutil.copytree(ROOT / "registry", folder)
    return folder


def test_registry_radius_writes_only_its_table_and_replaces_the_one_of_the_same_commit(recorded, tmp_path, capsys):
    folder = _staged_registry(tmp_path)
    scan = tmp_path / "scan.json"
    scan.write_text(json.dumps(recorded))
    before = (folder / "D2.md").read_text()
    head, _, rest = before.partition("[[radius]]")
    code = main(["--registry", str(folder), "registry", "radius", "D2", "--from", str(scan), "--commit", UPSTREAM,
                 "--tree", "upstream (test)", "--date", "2026-12-03"])
    assert code == 0
    after = (folder / "D2.md").read_text()
    assert after.startswith(head) and after.count("[[radius]]") == before.count("[[radius]]")
    assert "tree = 'upstream (test)'" in after and "measured = 2026-12-03" in after
    assert after.split("```", 2)[2] == before.split("```", 2)[2]    # the body, byte for byte
    entry = load_registry(folder).get("D2")
    assert not load_registry(folder).problems
    assert [t["tree"] for t in tables_for(entry.radius, UPSTREAM)] == ["upstream (test)"]


def test_a_new_tree_is_appended_and_a_file_without_radius_gets_its_first(tmp_path):
    text = "```toml\n[defect]\nid = \"D9\"\n# a comment kept\n\n[[probes]]\nname = \"x\"\n```\n\n# body\n"
    table = {"repo": "r", "commit": "abcdef1", "measured": "2026-12-03", "kvdiag": "0", "op": "OP",
             "scanned": "x", "kernels": ["k<1>"], "params": ["^x"]}
    once = write_radius(text, table)
    assert once.startswith(text.split("```\n\n# body")[0]) and once.endswith("```\n\n# body\n")
    twice = write_radius(once, dict(table, commit="1234567"))
    replaced = write_radius(twice, dict(table, kernels=["k<2>"]))     # abcdef1's table, the other one kept
    assert twice.count("[[radius]]") == 2 and (replaced.count("k<1>"), replaced.count("k<2>")) == (1, 1)


def test_the_scan_space_and_the_entrys_kernels_come_from_the_tree_at_hands_radius():
    radius = ({"commit": "aaaaaaa", "params": ["^a", "^b"], "kernels": ["k<1>"]},
              {"commit": "bbbbbbb", "params": "^c", "kernels": ["k<2>"]})
    assert radius_params(radius, "aaaaaaa0000") == "(?:^a)|(?:^b)"
    assert radius_params(radius, "ccccccc") == "(?:^a)|(?:^b)|(?:^c)"      # unknown tree: every recorded one
    assert radius_kernels(radius, "bbbbbbb") == ("k<2>",)


def test_lint_refuses_a_radius_in_another_spelling(tmp_path, capsys):
    folder = _staged_registry(tmp_path)
    path = folder / "D2.md"
    path.write_text(path.read_text().replace("flash_attn_ext_f16_process_tile<256, 256, 32, 1, 4, false, false, false, true>'",
                                             "flash_attn_ext_f16_process_tile<(int)256>'", 1))
    assert main(["--registry", str(folder), "registry", "lint"]) == 65
    assert "radius[0].instantiations: 'flash_attn_ext_f16_process_tile<(int)256>' is not canonical" in capsys.readouterr().out
