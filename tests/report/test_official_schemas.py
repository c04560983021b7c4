"""Every machine-readable output against its official schema, from recorded device sweeps.

The schemas are the published files (tests/fixtures/schemas/, sources and
licences in SOURCES.md there; kvdiag's own in kvdiag/data/). The sweeps are
kvdiag's recorded H200 sweeps of ggml d99724f2 (ggml layout, kvdiag 0.1.0,
format kvdiag-sweep/1) and of the BeeLlama llama.cpp fork 775450a68 (llama.cpp
layout, kvdiag 0.1.1, format kvdiag-sweep/2 with the ``sources`` resolved
against the real tree at sweep time; rendered to SARIF and JUnit on the device).
Each validation is paired with a copy broken on purpose that must fail.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
xmlschema = pytest.importorskip("xmlschema")

from kvdiag.cli import main
from kvdiag.report.formats import SweepFormat
from kvdiag.report.schemas import RUN_SCHEMA, SWEEP_SCHEMA, load_schema
from kvdiag.store.sweeps import Sweep, load_sweep, save_sweep

TESTS = Path(__file__).resolve().parents[1]
SCHEMAS = TESTS / "fixtures" / "schemas"
DEVICE = TESTS / "fixtures" / "device"
GGML_SWEEP = DEVICE / "h200x2-ggml-llama-session2" / "sweep-gpu0.json"
GGML_SWEEP_OTHER_RUN = DEVICE / "h200x2-ggml-llama-session2" / "sweep-gpu01.json"
FORK = DEVICE / "h200-fork-llama-session4"
#: the fork's cold sweep of call 2 (recorded gzipped, tree written <fork>; see the folder's README)
FORK_SWEEP_GZ = FORK / "sweep-fork-cold.json.gz"
D2_GGML = "src/ggml-cuda/fattn-mma-f16.cuh"
D2_LLAMA = "ggml/src/ggml-cuda/fattn-mma-f16.cuh"


def _json(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


SARIF = jsonschema.Draft4Validator(_json("sarif-schema-2.1.0.json"))
OSV = jsonschema.Draft202012Validator(_json("osv-schema-1.7.5.json"))
JUNIT = xmlschema.XMLSchema(str(SCHEMAS / "junit-10.xsd"))


def _kvdiag_validator(name: str):
    from referencing import Registry, Resource

    sweep, run = load_schema(SWEEP_SCHEMA), load_schema(RUN_SCHEMA)
    registry = Registry().with_resources([(s["$id"], Resource.from_contents(s)) for s in (sweep, run)])
    return jsonschema.Draft202012Validator(load_schema(name), registry=registry)


@pytest.fixture(scope="module")
def fork_sweep(tmp_path_factory) -> Path:
    """The recorded fork sweep as the file `kvdiag render` reads (unpacked)."""
    path = tmp_path_factory.mktemp("fork") / "sweep-fork-cold.json"
    path.write_bytes(gzip.decompress(FORK_SWEEP_GZ.read_bytes()))
    return path


@pytest.fixture(params=["ggml", "llama.cpp"])
def recorded(request, fork_sweep) -> tuple[str, Sweep]:
    """A real recorded sweep of each layout: ggml d99724f2, the llama.cpp fork 775450a68."""
    return request.param, load_sweep(GGML_SWEEP if request.param == "ggml" else fork_sweep)


#: D2's barrier-divergence site as each recorded sweep found it
D2_LINE = {"ggml": 1538, "llama.cpp": 1607}


def render(sweep: Sweep, fmt: SweepFormat) -> str:
    return fmt.to_formatter().format(sweep)


def _strings(value):
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, str):
        yield value


# --------------------------------------------------------------------------- SARIF


def test_sarif_of_recorded_sweeps_validates_and_names_the_file_of_the_layout(recorded):
    layout, sweep = recorded
    doc = json.loads(render(sweep, SweepFormat.SARIF))
    SARIF.validate(doc)
    run = doc["runs"][0]
    assert "SRCROOT" in run["originalUriBaseIds"]
    (d2,) = [r for r in run["results"] if r["ruleId"] == "D2"]
    artifact = d2["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": D2_GGML if layout == "ggml" else D2_LLAMA, "uriBaseId": "SRCROOT"}
    assert d2["locations"][0]["physicalLocation"]["region"] == {"startLine": D2_LINE[layout]}
    for result in run["results"]:
        assert result["locations"] and result["partialFingerprints"]
    assert not [s for s in _strings(doc) if s.startswith(("/", "file:")) or "/tmp/" in s]


@pytest.mark.parametrize("breakage", ["level", "startLine", "fingerprint", "baseId"])
def test_sarif_broken_on_purpose_fails_the_official_schema(breakage):
    doc = json.loads(render(load_sweep(GGML_SWEEP), SweepFormat.SARIF))
    result = doc["runs"][0]["results"][0]
    if breakage == "level":
        result["level"] = "fatal"
    elif breakage == "startLine":
        result["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    elif breakage == "fingerprint":
        result["partialFingerprints"]["kvdiag/v1"] = 7
    else:
        doc["runs"][0]["originalUriBaseIds"]["SRCROOT"] = "the root"
    with pytest.raises(jsonschema.ValidationError):
        SARIF.validate(doc)


def test_sarif_fingerprints_are_the_same_in_another_run_of_the_same_finding():
    first = json.loads(render(load_sweep(GGML_SWEEP), SweepFormat.SARIF))["runs"][0]["results"]
    second = json.loads(render(load_sweep(GGML_SWEEP_OTHER_RUN), SweepFormat.SARIF))["runs"][0]["results"]
    assert [r["partialFingerprints"] for r in first] == [r["partialFingerprints"] for r in second]
    assert len({r["partialFingerprints"]["kvdiag/v1"] for r in first}) == len(first)


def test_a_sweep_saved_against_its_tree_records_the_paths_that_exist_there(tmp_path):
    """At sweep time the entry's files are resolved against the real tree (a fork's ggml/ layout
    here), whatever the build options say."""
    tree = tmp_path / "fork"
    (tree / "ggml" / "src" / "ggml-cuda").mkdir(parents=True)
    (tree / "ggml" / "src" / "ggml-cuda" / "fattn-mma-f16.cuh").write_text("// the kernel\n")
    sweep = load_sweep(GGML_SWEEP)
    target = copy.deepcopy(dict(sweep.target))
    target["build"]["source_dir"] = str(tree)
    saved = load_sweep(save_sweep(Sweep(**{**sweep.__dict__, "target": target}), tmp_path / "sweep.json"))
    d2 = saved.outcome("D2")
    assert d2.sources == (D2_LLAMA,)
    _kvdiag_validator(SWEEP_SCHEMA).validate(json.loads((tmp_path / "sweep.json").read_text()))
    doc = json.loads(render(saved, SweepFormat.SARIF))
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == D2_LLAMA


def test_sarif_of_the_recorded_fork_sweep_is_what_the_device_rendered(fork_sweep):
    """`kvdiag render sweep-fork-cold.json --format sarif` on the H200 (fork.sarif) and here give
    the same document: the paths come from the sweep's recorded ``sources``, not from this machine."""
    recorded_sarif = json.loads((FORK / "fork.sarif").read_text(encoding="utf-8"))
    SARIF.validate(recorded_sarif)
    rendered = json.loads(render(load_sweep(fork_sweep), SweepFormat.SARIF))
    SARIF.validate(rendered)
    uris = {r["ruleId"]: r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in rendered["runs"][0]["results"]}
    assert uris == {"D1": "ggml/src/ggml-cuda/fattn.cu", "D2": D2_LLAMA, "D4": "tests/test-kvarn.cpp",
                    "D8": "ggml/src/ggml-cuda/fattn-common.cuh", "D10": "tests/test-upstream-merge-keepers-static.py",
                    "D13": "CMakeLists.txt"}
    # the one change since the device run: D13 (the build is stale; it names no source file) had no
    # location there, which GitHub code scanning refuses; it is placed at the root CMakeLists.txt now
    (d13,) = [r for r in recorded_sarif["runs"][0]["results"] if r["ruleId"] == "D13"]
    assert "locations" not in d13
    d13["locations"] = [{"physicalLocation": {"artifactLocation": {"uri": "CMakeLists.txt", "uriBaseId": "SRCROOT"}}}]
    assert rendered == recorded_sarif


def test_the_fork_sweep_without_its_sources_record_tells_the_layout_from_its_real_build(fork_sweep):
    """A sweep file without ``sources`` (as kvdiag 0.1.x wrote them): the fork's recorded cmake
    options (LLAMA_BUILD_TESTS, ...) say llama.cpp, so D2 still lands under ggml/."""
    data = json.loads(fork_sweep.read_text(encoding="utf-8"))
    assert any(name.startswith("LLAMA_") for name in data["target"]["build"]["options"])
    data["format"] = "kvdiag-sweep/1"
    for outcome in data["outcomes"]:
        outcome.pop("sources", None)
    doc = json.loads(render(Sweep.from_dict(data), SweepFormat.SARIF))
    SARIF.validate(doc)
    (d2,) = [r for r in doc["runs"][0]["results"] if r["ruleId"] == "D2"]
    assert d2["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == D2_LLAMA


# --------------------------------------------------------------------------- JUnit


def test_junit_of_recorded_sweeps_validates_against_junit_10_xsd(recorded):
    JUNIT.validate(render(recorded[1], SweepFormat.JUNIT))


def test_the_junit_the_device_rendered_from_the_fork_sweep_validates():
    JUNIT.validate(str(FORK / "fork.junit.xml"))


def test_junit_broken_on_purpose_fails_the_xsd():
    text = render(load_sweep(GGML_SWEEP), SweepFormat.JUNIT)
    JUNIT.validate(text)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        JUNIT.validate(text.replace('<testsuites name="kvdiag"', '<testsuites name="kvdiag" skipped="7"', 1))
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        JUNIT.validate(text.replace("<testcase ", "<testcase verdict=\"x\" ", 1))


# --------------------------------------------------------------------------- OSV


def _osv_errors(record: dict) -> list[tuple[list, str]]:
    return [(list(e.absolute_path), e.validator) for e in OSV.iter_errors(record)]


#: the one documented exception: KVDIAG- is not a registered OSV database prefix
PRIVATE_PREFIX_ONLY = [(["id"], "pattern")]


def test_every_osv_record_validates_but_for_the_private_prefix(tmp_path, capsys):
    assert main(["registry", "export", "--output", str(tmp_path / "osv")]) == 0
    files = sorted((tmp_path / "osv").iterdir())
    assert [f.name for f in files] == sorted(f"KVDIAG-D{n}.json" for n in range(1, 24))
    assert capsys.readouterr().out == ""
    for f in files:
        record = json.loads(f.read_text())
        assert record["id"] == f.stem and record["schema_version"] == "1.7.5"
        assert _osv_errors(record) == PRIVATE_PREFIX_ONLY, f.name
        assert not [a for a in record["aliases"] if "#" in a or "/" in a]
    assert main(["registry", "export"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == [json.loads(f.read_text()) for f in sorted(files, key=lambda f: int(f.stem[8:]))]


@pytest.mark.parametrize("breakage", ["alias", "reference", "event"])
def test_osv_broken_on_purpose_fails_beyond_the_prefix(tmp_path, breakage):
    assert main(["registry", "export", "--output", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "KVDIAG-D11.json").read_text())
    if breakage == "alias":
        record["aliases"] = [{"id": "ggml-org/llama.cpp#24011"}]
    elif breakage == "reference":
        record["references"][0]["type"] = "SEED"
    else:
        record["affected"][0]["ranges"][0]["events"] = [{"introduced": "0", "fixed": "x"}]
    assert _osv_errors(record) != PRIVATE_PREFIX_ONLY


def test_export_output_onto_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["registry", "export", "--output", str(tmp_path / "f")]) == 64


# --------------------------------------------------------------------------- kvdiag's own JSON


def _read_json(path: Path):
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())


@pytest.mark.parametrize("path", sorted(p.relative_to(DEVICE) for p in DEVICE.glob("*/sweep*.json*")), ids=str)
def test_recorded_sweep_files_validate_against_kvdiag_sweep_schema(path):
    data = _read_json(DEVICE / path)
    validator = _kvdiag_validator(SWEEP_SCHEMA)
    validator.validate(data)
    broken = copy.deepcopy(data)
    broken["outcomes"][0]["verdict"] = "maybe"
    assert not validator.is_valid(broken)
    rewritten = json.loads(render(Sweep.from_dict(data), SweepFormat.JSON))
    assert rewritten["format"] == "kvdiag-sweep/2"
    validator.validate(rewritten)


def _run_files():
    for p in sorted(DEVICE.glob("*/*run*.json*")):
        yield p.relative_to(DEVICE), _read_json(p)


@pytest.mark.parametrize("path,data", list(_run_files()), ids=lambda v: str(v) if isinstance(v, Path) else "")
def test_recorded_run_files_validate_against_kvdiag_run_schema(path, data):
    validator = _kvdiag_validator(RUN_SCHEMA)
    validator.validate(data)
    broken = {**data, "status": "done"}
    assert not validator.is_valid(broken)


def test_the_published_schemas_ship_with_the_package():
    from kvdiag.report.schemas import schema_path

    for name in (SWEEP_SCHEMA, RUN_SCHEMA):
        assert schema_path(name).is_file()
        jsonschema.Draft202012Validator.check_schema(load_schema(name))


# --------------------------------------------------------------------------- render


@pytest.mark.parametrize("fmt", SweepFormat.names())
def test_render_reads_a_0_1_sweep_in_every_format(fmt, tmp_path, capsys):
    old = DEVICE / "h200-ggml-d99724f2" / "sweep-base.json"
    assert json.loads(old.read_text())["format"] == "kvdiag-sweep/1"
    assert main(["render", str(old), "--format", fmt]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / f"out.{fmt}"
    assert main(["render", str(old), "--format", fmt, "-o", str(out)]) == 0
    assert out.read_text() == printed and printed.strip()


@pytest.mark.parametrize("layout,uri", [("ggml", D2_GGML), ("llama.cpp", D2_LLAMA)])
def test_render_sarif_names_the_path_of_the_swept_layout(layout, uri, fork_sweep, capsys):
    assert main(["render", str(GGML_SWEEP if layout == "ggml" else fork_sweep), "--format", "sarif"]) == 0
    doc = json.loads(capsys.readouterr().out)
    SARIF.validate(doc)
    (d2,) = [r for r in doc["runs"][0]["results"] if r["ruleId"] == "D2"]
    assert d2["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == uri


def test_render_refuses_an_output_that_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["render", str(GGML_SWEEP), "--format", "json", "-o", str(fifo)]) == 64
    assert "not a regular file" in capsys.readouterr().err
    assert main(["render", str(tmp_path / "missing.json")]) == 64
    (tmp_path / "not.json").write_text('{"format": "other"}')
    assert main(["render", str(tmp_path / "not.json")]) == 65     # malformed input (issue #21)


# --------------------------------------------------------------------------- control characters


@pytest.mark.parametrize("fmt", [SweepFormat.MARKDOWN, SweepFormat.HTML, SweepFormat.TABLE])
def test_human_formats_never_carry_control_characters(fmt):
    sweep = load_sweep(GGML_SWEEP)
    data = copy.deepcopy(sweep.to_dict())
    d2 = next(o for o in data["outcomes"] if o["entry"] == "D2")
    d2["title"] = "title\x00with NUL"
    d2["reason"] = "\x1b[31mred\x1b[0m reason \x07"
    evidence = d2["attempts"][0]["evidence"]
    evidence["sites"][0]["kernel"] = "kern\x1b]0;owned\x07el\x00"
    evidence["quoted"] = ["line \x1b[1mbold\x1b[0m\x00end"]
    text = render(Sweep.from_dict(data), fmt)
    assert not [c for c in text if ord(c) < 32 and c not in "\n\t" or 127 <= ord(c) < 160]
    if fmt is not SweepFormat.TABLE:            # the table shows the site, not these fields
        assert "red reason" in text and "\\x00" in text and "owned" in text
