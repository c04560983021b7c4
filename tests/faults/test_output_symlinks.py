"""Issue 28: writing an output through a symlink says which file it wrote, and never
through another user's link.

Writing through your own link stays allowed (a stable name such as latest.sarif
pointing at this week's report): the link's target is replaced, the link stays,
and the message names both (`wrote TARGET (through symlink LINK)`); it used to name
only the link. A link on the way owned by another user is refused with one line
(exit 64) and its target left as it was: in a shared folder, another user's
`report.sarif -> ~/.bashrc` would otherwise replace your file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from faults_helpers import REPO, Faults, one_line

ROOT = os.geteuid() == 0
OTHER_UID = 12345
SWEEP = REPO / "tests" / "fixtures" / "device" / "h200-ggml-d99724f2" / "sweep-base.json"
needs_root = pytest.mark.skipif(not ROOT, reason="another user's link is staged with lchown (root)")


def _link(kv: Faults, name: str, content: str = "old\n") -> tuple[Path, Path]:
    """(the link kv.root/<name>, its target kv.root/real/<name>, holding `content`)."""
    target = kv.root / "real" / name
    target.parent.mkdir(exist_ok=True)
    target.write_text(content)
    link = kv.root / name
    link.symlink_to(target)
    return link, target


def _synth(output) -> list:
    return ["model", "synth", "--head-dim", "64", "--n-head", "2", "--n-head-kv", "2", "--n-layer", "1",
            "--n-embd", "128", "--n-ff", "128", "-o", output]


def _assert_wrote_through(text: str, link: Path, target: Path) -> None:
    assert f"{target} (through symlink {link})" in text, text
    assert link.is_symlink() and Path(os.readlink(link)) == target
    assert target.read_bytes() != b"old\n"


def test_synth_render_and_report_through_a_link_name_the_file_they_wrote(kv: Faults):
    link, target = _link(kv, "tiny.gguf")
    code, out, err = kv.cli(*_synth(link))
    assert code == 0, err
    assert out.startswith(f"wrote {target} (through symlink {link}) ("), out
    _assert_wrote_through(out, link, target)
    assert target.read_bytes()[:4] == b"GGUF"

    link, target = _link(kv, "latest.sarif")
    code, _, err = kv.cli("render", SWEEP, "--format", "sarif", "-o", link)
    assert code == 0 and one_line(err) == f"kvdiag: wrote {target} (through symlink {link})"
    _assert_wrote_through(err, link, target)


def test_sweep_save_and_output_merge_and_report_through_links(kv: Faults):
    build = kv.build("throws_healthily.sh")
    save, save_target = _link(kv, "base.json")
    out_link, out_target = _link(kv, "sweep.md")
    code, _, err = kv.cli("sweep", "--only", "D12", "--build", build, "--no-staleness", "--format", "markdown",
                          "--shard", "1/1", "--save", save, "-o", out_link)
    assert code in (0, 1, 3, 4), err
    _assert_wrote_through(err, out_link, out_target)
    _assert_wrote_through(err, save, save_target)
    merged, merged_target = _link(kv, "merged.json")
    code, _, err = kv.cli("merge", save, "-o", merged, "--no-record")
    assert code in (0, 1, 3, 4) and f"into {merged_target} (through symlink {merged})" in one_line(err), err
    _assert_wrote_through(err, merged, merged_target)
    report, report_target = _link(kv, "report.md")
    code, _, err = kv.cli("report", "D12", "-o", report)
    assert code == 0 and one_line(err) == f"kvdiag: wrote {report_target} (through symlink {report})", err


def test_registry_export_names_the_records_it_wrote_through_links(kv: Faults):
    out = kv.root / "osv"
    out.mkdir()
    target = kv.root / "elsewhere.json"
    target.write_text("old\n")
    (out / "KVDIAG-D12.json").symlink_to(target)
    code, _, err = kv.cli("--registry", kv.registry_copy("D12"), "registry", "export", "--output", out)
    assert code == 0
    assert one_line(err) == (f"kvdiag: wrote 1 OSV record(s) to {out}; 1 through a symlink: "
                             f"{target} (through symlink {out / 'KVDIAG-D12.json'})")
    assert '"KVDIAG-D12"' in target.read_text()


@needs_root
@pytest.mark.parametrize("where", ["the file", "a folder on the way"])
def test_another_users_link_is_refused_and_its_target_untouched(kv: Faults, where):
    precious = kv.root / "precious"
    precious.mkdir()
    (precious / "bashrc").write_text("precious user data\n")
    shared = kv.root / "shared"
    shared.mkdir(mode=0o1777)
    if where == "the file":
        link = shared / "report.sarif"
        link.symlink_to(precious / "bashrc")
        output = link
    else:
        link = shared / "out"
        link.symlink_to(precious)
        output = link / "bashrc"
    os.lchown(link, OTHER_UID, OTHER_UID)
    for args in (["render", SWEEP, "--format", "sarif", "-o", output], _synth(output)):
        code, out, err = kv.cli(*args)
        assert code == 64 and out == "", (code, out, err)
        assert one_line(err) == (f"kvdiag: refusing to write {output}: {link} is a symlink owned by uid {OTHER_UID}, "
                                 f"not by you (uid {os.getuid()}) or root")
    assert (precious / "bashrc").read_text() == "precious user data\n"
    assert sorted(p.name for p in precious.iterdir()) == ["bashrc"]
    shutil.rmtree(precious)


def test_a_link_that_dangles_into_a_missing_folder_is_refused_and_no_folder_is_made(kv: Faults):
    """The module's rule: your own dangling link is written through, but never by making folders
    where it points (a link to /nonexistent/dir/x.md once created /nonexistent/dir)."""
    missing = kv.root / "nowhere" / "deeper"
    link = kv.root / "report.sarif"
    link.symlink_to(missing / "x.sarif")
    code, _, err = kv.cli("render", SWEEP, "--format", "sarif", "-o", link)
    assert code == 64 and one_line(err).startswith(f"kvdiag: refusing to write {link}: it is a symlink into a "
                                                   "missing folder")
    assert not (kv.root / "nowhere").exists() and link.is_symlink()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="stages a folder that cannot be made with /proc (Linux)")
def test_an_output_whose_folder_cannot_be_made_is_a_usage_error_and_a_sweep_is_refused_before_it_runs(kv: Faults):
    unwritable = Path("/proc/kvdiag-no-such-folder/out.json")     # mkdir there fails, even for root
    code, _, err = kv.cli("render", SWEEP, "-o", unwritable)
    assert code == 64 and one_line(err) == f"kvdiag: cannot write {unwritable}: No such file or directory"  # was 70
    build = kv.build("throws_healthily.sh")
    code, out, err = kv.cli("sweep", "--only", "D12", "--build", build, "--no-staleness", "--save", unwritable)
    assert code == 64 and str(unwritable) in one_line(err) and "D12" not in out
    assert not kv.runs("D12")                          # refused before the first entry ran
