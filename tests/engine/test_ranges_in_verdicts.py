"""D11 across its fix: a real git history staged in the test, a stand-in test-backend-ops of each era.

The staged llama.cpp history (origin: upstream's URL)::

    base - b9584 (tag) - fix (#24011) - b10497 (tag)

The build's CMakeCache names the staged tree as its source; `kvdiag run` evaluates the
entry's affected range there by git ancestry. The stand-in test-backend-ops
(`tests/scenarios/builds/backend_ops_concat_before_fix.py`) lists CONCAT cases of
type f32 and i32 only, as release b9584's does, so `-p type=f16` selects none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_helpers import REGISTRY
from history_repos import LLAMA_URL, Staged, git, isolated_git  # noqa: F401 - fixture
from kvdiag.cli import main
from kvdiag.engine.verdict.ranges import short
from kvdiag.records.verdict import Verdict
from kvdiag.registry.loader import load_registry

D11_FIX = "85f99dca8b4539163e6858c9df7c9e8b0ad3632a"
F16_CASES = [f"type=f16,ne_a=[11,12,13,14],ne_b_d=7,dim={dim},v={v}" for v in range(4) for dim in range(4)]
NO_F16_CASE = "no CONCAT test case matches /type=f16/ in this build (0 cases)"
HINT = ("would exercise it: a CONCAT case matching /type=f16/; probe D11-f16-concat-cases adds such cases to "
        "test-backend-ops (kvdiag probe apply D11-f16-concat-cases --source <tree> --into <dir>, build "
        "test-backend-ops there, run D11 on it)")


@pytest.fixture(scope="module")
def d11():
    return load_registry(REGISTRY).get("D11")


@pytest.fixture
def history(tmp_path: Path, isolated_git):
    repo = Staged(tmp_path / "llama.cpp", remote=LLAMA_URL)
    c = {"base": repo.commit("ggml-cuda: concat asserts F32")}
    c["b9584"] = repo.commit("release b9584")
    repo.tag("b9584")
    c["fix"] = repo.commit("ggml: support concat for scalar types at cuda backend (#24011)")
    c["b10497"] = repo.commit("release b10497")
    repo.tag("b10497")
    return repo, c


def staged_d11(kv, fix: str):
    """D11 with its llama.cpp range's fix at the staged fix commit (the real one cannot be made here)."""
    text = (REGISTRY / "D11.md").read_text().replace(D11_FIX, fix)
    (kv.registry_dir / "D11.md").write_text(text)
    registry = load_registry(kv.registry_dir)
    assert not registry.problems, [str(p) for p in registry.problems]
    return registry.get("D11")


def build_on(kv, tree: Path, *, f16_cases: bool = False, kernel_fixed: bool = False) -> Path:
    build = kv.build("backend_ops_concat_before_fix", cache_extra={"CMAKE_HOME_DIRECTORY:INTERNAL": str(tree)})
    if f16_cases:      # what probe D11-f16-concat-cases adds to that era's test-backend-ops
        (build / "case-space.txt").write_text("\n".join(F16_CASES) + "\n")
    if kernel_fixed:
        (build / "kernel-fixed").write_text("")
    return build


def run(kv, entry, build: Path):
    return kv.run(entry, kv.target(build, sanitizer=None))


# ------------------------------------------------------------------ before the fix

def test_before_the_fix_no_f16_case_is_inconclusive_with_the_range_never_not_applicable(kv, d11, history):
    """The real D11: a complete clone whose history predates 85f99dca8 (the fix is not in it)."""
    repo, c = history
    repo.checkout("b9584")
    r = run(kv, d11, build_on(kv, repo.path))
    o = r.outcome
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.reason == (f"present by range, not exercised by this build's tests: {NO_F16_CASE}; affected by range "
                        f"(introduced 0, fixed {short(D11_FIX)} not an ancestor of {short(c['b9584'])}); {HINT}")
    assert (o.range.status, o.range.head) == ("affected", c["b9584"])
    assert o.range.tree == f"llama.cpp (remote {LLAMA_URL})"
    assert r.evidence.cases_matched == 0
    assert "0/0 tests passed" in r.log("fast-1.stdout.log")
    saved = r.run_json["outcome"]
    assert (saved["verdict"], saved["range"]["status"]) == ("inconclusive", "affected")
    assert saved["range"]["summary"] == (f"affected by range (introduced 0, fixed {short(D11_FIX)} not an ancestor "
                                         f"of {short(c['b9584'])})")


def test_before_the_fix_a_case_that_reaches_it_confirms(kv, d11, history):
    """The same tree with the probe's F16 cases: the first one aborts in the F32-only kernel."""
    repo, _ = history
    repo.checkout("b9584")
    r = run(kv, d11, build_on(kv, repo.path, f16_cases=True))
    assert r.outcome.verdict is Verdict.CONFIRMED
    assert any("concat.cu:149: GGML_ASSERT(src0->type == GGML_TYPE_F32) failed" in q for q in r.evidence.quoted)
    assert r.outcome.range.status == "affected"
    assert r.outcome.warnings == ()


def test_a_staged_fix_commit_places_heads_on_both_sides(kv, history):
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    repo.checkout("b9584")
    before = run(kv, entry, build_on(kv, repo.path)).outcome
    assert (before.verdict, before.range.summary) == (
        Verdict.INCONCLUSIVE, f"affected by range (introduced 0, fixed {short(c['fix'])} not an ancestor of "
                              f"{short(c['b9584'])})")


# ------------------------------------------------------------------ after the fix

def test_after_the_fix_no_case_is_not_applicable_with_the_range_saying_fixed(kv, history):
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    repo.checkout("b10497")
    o = run(kv, entry, build_on(kv, repo.path)).outcome
    assert o.verdict is Verdict.NOT_APPLICABLE
    assert o.reason == f"{NO_F16_CASE}; fixed by range ({short(c['fix'])} is an ancestor of {short(c['b10497'])})"
    assert o.range.status == "fixed"


def test_after_the_fix_clean_cases_are_not_reproduced_with_the_fixed_note(kv, history):
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    repo.checkout("b10497")
    o = run(kv, entry, build_on(kv, repo.path, f16_cases=True, kernel_fixed=True)).outcome
    assert o.verdict is Verdict.NOT_REPRODUCED
    assert o.reason.startswith("16 matching case(s) executed (16 OK, 0 FAIL); the signature did not match")
    assert o.reason.endswith(f"; fixed by range ({short(c['fix'])} is an ancestor of {short(c['b10497'])})")


def test_a_confirmation_in_a_tree_the_range_calls_fixed_is_warned_about(kv, history):
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    repo.checkout("b10497")
    o = run(kv, entry, build_on(kv, repo.path, f16_cases=True)).outcome
    assert o.verdict is Verdict.CONFIRMED
    assert o.warnings == (f"the signature matched although the range says fixed by range ({short(c['fix'])} is an "
                          f"ancestor of {short(c['b10497'])}): the entry's range, or this tree's history, is wrong",)


# ------------------------------------------------------------------ trees the range cannot place

def test_a_shallow_clone_is_unknown_and_so_inconclusive(kv, d11, history, tmp_path):
    repo, c = history
    clone = repo.shallow_clone(tmp_path / "depth1", branch="b9584", depth=1, origin=LLAMA_URL)
    o = run(kv, d11, build_on(kv, clone)).outcome
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.range.summary.startswith(f"range unknown (shallow clone: {short(D11_FIX)} is not in the fetched history; "
                                      f"not placed otherwise: ")
    assert o.range.placement == "unplaced"
    assert o.reason == (f"not exercised by this build's tests, and nothing shows the defect absent: {NO_F16_CASE}; "
                        f"{o.range.summary}; {HINT}")


def test_a_shallow_clone_from_before_head_on_the_fixed_branch_is_decidable(kv, history, tmp_path):
    """What the device needs: `git clone --shallow-since=<a date before HEAD>` of the branch that has the
    fix, then HEAD checked out at the old release. HEAD is then an ancestor of the fix."""
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    since = git(repo.path, "show", "-s", "--format=%cI", c["base"])
    clone = repo.shallow_clone(tmp_path / "since", branch="master", depth=None, since=since, checkout="b9584")
    o = run(kv, entry, build_on(kv, clone)).outcome
    assert (o.verdict, o.range.status) == (Verdict.INCONCLUSIVE, "affected")


def test_a_tree_without_git_is_unknown_and_so_inconclusive(kv, d11, history, tmp_path):
    repo, c = history
    plain = repo.exported(tmp_path / "b9584-tarball", "b9584")
    o = run(kv, d11, build_on(kv, plain)).outcome
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.range.summary.startswith(f"range unknown (no .git: {plain} is not a git checkout; not placed otherwise: ")


# ------------------------------------------------------------------ a source fact against the range

def test_a_source_fact_saying_absent_inside_an_affected_range_is_inconclusive(kv, history):
    repo, c = history
    entry = kv.entry("D930", f'''
        [[affected]]
        repo = "{LLAMA_URL}"
        introduced = "0"

        [applies]
        cmake_options = ["GGML_CUDA_KVARN"]

        [requires]
        binaries = ["test-backend-ops"]

        [[repro]]
        name = "fast"
        kind = "backend-ops"
        description = "any"
        argv = ["{{{{ bin['test-backend-ops'] }}}}", "test", "-o", "CONCAT"]
        timeout = 60

        [[signature]]
        type = "output"
        pattern = "never"
        ''')
    o = run(kv, entry, build_on(kv, repo.path)).outcome
    assert o.verdict is Verdict.INCONCLUSIVE
    assert o.reason == (f"affected by range (introduced 0, no fix recorded (HEAD {short(c['b10497'])})), but the build "
                        f"has no GGML_CUDA_KVARN option (the feature does not exist in this tree): the entry's range "
                        f"or its source fact is out of date, and a build inside an affected range is never "
                        f"not-applicable (`kvdiag registry verify` checks the facts)")
    assert o.attempts == ()


def test_cli_json_carries_the_range_and_exits_4_before_the_fix(kv, d11, history, monkeypatch, capsys):
    from engine_helpers import fake_gpu

    repo, c = history
    repo.checkout("b9584")
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    code = main(["run", "D11", "--build", str(build_on(kv, repo.path)), "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 4
    assert (data["verdict"], data["range"]["status"], data["range"]["head"]) == ("inconclusive", "affected",
                                                                                 c["b9584"])


def test_a_scan_with_no_case_to_run_is_judged_by_the_range_too(kv, d11, history, monkeypatch):
    """`kvdiag scan` used to run nothing and exit 0; now the range decides, as for `kvdiag run`."""
    from engine_helpers import fake_gpu
    from kvdiag.engine.scan.session import run_scan
    from kvdiag.errors import ScanNotRun

    repo, c = history
    repo.checkout("b9584")
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    with pytest.raises(ScanNotRun) as caught:
        run_scan(d11, build_on(kv, repo.path), jobs=1, op="CONCAT", params="type=f16", limit=None, sanitizer=None)
    assert caught.value.verdict == "inconclusive"
    assert str(caught.value).startswith("D11 has nothing to scan here: inconclusive: present by range, not exercised "
                                        "by this build's tests: no CONCAT case matches /type=f16/ in this build")


def test_every_case_refused_inside_an_affected_range_is_inconclusive(kv, history):
    """A fork that fixed D11 the seed's way (CUDA claims F32 only) before upstream's fix: the backend
    refuses the F16 cases while the range says the defect is there; the two disagree."""
    repo, c = history
    entry = staged_d11(kv, c["fix"])
    for tag in ("b9584", "b10497"):
        repo.checkout(tag)
        build = build_on(kv, repo.path, f16_cases=True)
        (build / "supports-f32-only").write_text("")
        o = run(kv, entry, build).outcome
        if tag == "b9584":
            assert o.verdict is Verdict.INCONCLUSIVE
            assert o.reason.startswith(f"affected by range (introduced 0, fixed {short(c['fix'])} not an ancestor of "
                                       f"{short(c['b9584'])}), but all 16 matching case(s) are not supported by this "
                                       f"backend: the entry's range or its source fact is out of date")
        else:
            assert o.verdict is Verdict.NOT_APPLICABLE
            assert o.reason == (f"all 16 matching case(s) are not supported by this backend; fixed by range "
                                f"({short(c['fix'])} is an ancestor of {short(c['b10497'])})")


def test_a_scan_whose_every_case_is_refused_inside_a_range_is_inconclusive_as_run_is(kv, history, monkeypatch):
    """`kvdiag scan` answered not-applicable here while `kvdiag run` said inconclusive: one answer per entry."""
    from engine_helpers import fake_gpu
    from kvdiag.engine.scan.session import run_scan
    from kvdiag.errors import ScanNotRun

    repo, c = history
    entry = staged_d11(kv, c["fix"])
    monkeypatch.setattr("kvdiag.workspace.host.fingerprint_gpu", lambda **kw: fake_gpu())
    for tag, wanted in (("b9584", "inconclusive"), ("b10497", "not-applicable")):
        repo.checkout(tag)
        build = build_on(kv, repo.path, f16_cases=True)
        (build / "supports-f32-only").write_text("")
        ran = run(kv, entry, build).outcome
        with pytest.raises(ScanNotRun) as caught:
            run_scan(entry, build, jobs=1, op="CONCAT", params="type=f16", limit=None, sanitizer=None)
        assert (caught.value.verdict, ran.verdict.value) == (wanted, wanted)
        assert "all 16 matching case(s) are not supported by this backend" in str(caught.value)
