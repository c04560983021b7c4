"""Issue 28: no code runs from a shared store, and a home another user controls is refused.

kvdiag reads back what it keeps under KVDIAG_HOME (run records, the inspection cache,
scratch builds, compiled canaries it runs), so the home and every folder in it get the
lock folders' check (kvdiag.trust): owned by you, not group- or world-writable without
the sticky bit, no symlink on the way owned by another user. Each refusal is one line
naming the path and why, exit 64, and nothing is written there. Another user is staged
with chown (root only); the mode scenarios run as anyone.
"""

from __future__ import annotations

import json
import os
import pickle

import pytest

from faults_helpers import Faults, one_line

ROOT = os.geteuid() == 0
OTHER_UID = 12345
needs_root = pytest.mark.skipif(not ROOT, reason="staging another user's folder or link needs chown (root)")


class _Payload:
    """What a planted cache file ran when the memo unpickled it: it makes a marker folder."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _refused(kv: Faults, *args) -> str:
    code, out, err = kv.cli(*args)
    assert code == 64 and out == "", (code, out, err)
    return one_line(err)


@needs_root
def test_a_home_owned_by_another_user_is_refused_and_left_empty(kv: Faults):
    kv.home.mkdir(mode=0o700)
    os.chown(kv.home, OTHER_UID, OTHER_UID)
    line = _refused(kv, "runs")
    assert line == (f"kvdiag: refusing KVDIAG_HOME {kv.home}: it is owned by uid {OTHER_UID}, not by you "
                    f"(uid {os.getuid()}); point KVDIAG_HOME at a folder of your own (mode 700)")
    build = kv.build("throws_healthily.sh")
    assert "owned by uid 12345" in _refused(kv, "run", "D12", "--build", build, "--no-staleness")
    assert list(kv.home.iterdir()) == []


def test_a_group_writable_home_is_refused_and_a_sticky_one_is_not(kv: Faults):
    kv.home.mkdir()
    kv.home.chmod(0o770)
    line = _refused(kv, "runs")
    assert line == (f"kvdiag: refusing KVDIAG_HOME {kv.home}: it is group- or world-writable (mode 770) without "
                    f"the sticky bit; point KVDIAG_HOME at a folder of your own (mode 700)")
    assert list(kv.home.iterdir()) == []
    kv.home.chmod(0o1777)
    code, _, err = kv.cli("runs")
    assert code == 0, err


@needs_root
def test_a_symlink_on_the_way_to_the_home_owned_by_another_user_is_refused(kv: Faults, monkeypatch):
    real = kv.root / "real"
    real.mkdir()
    link = kv.root / "shared"
    link.symlink_to(real)
    os.lchown(link, OTHER_UID, OTHER_UID)
    home = link / "kvdiag-home"
    monkeypatch.setenv("KVDIAG_HOME", str(home))
    line = _refused(kv, "runs")
    assert line == (f"kvdiag: refusing KVDIAG_HOME {home}: {link} is a symlink owned by uid {OTHER_UID}, "
                    f"not by you (uid {os.getuid()}) or root; point KVDIAG_HOME at a folder of your own (mode 700)")
    assert list(real.iterdir()) == []            # no home was made at the end of the link
    os.lchown(link, os.getuid(), os.getgid())     # your own link is followed
    code, _, err = kv.cli("runs")
    assert code == 0 and (real / "kvdiag-home").is_dir(), err


@needs_root
@pytest.mark.parametrize("folder", ["runs", "cache", "scratch-builds", "canaries"])
def test_a_folder_of_the_home_owned_by_another_user_is_refused(kv: Faults, folder):
    (kv.home / folder).mkdir(parents=True)
    os.chown(kv.home / folder, OTHER_UID, OTHER_UID)
    line = _refused(kv, "runs")
    assert line.startswith(f"kvdiag: refusing KVDIAG_HOME's folder {kv.home / folder}: it is owned by uid {OTHER_UID}")


def test_a_run_store_others_can_write_is_refused_before_a_run(kv: Faults):
    (kv.home / "runs").mkdir(parents=True)
    (kv.home / "runs").chmod(0o777)
    build = kv.build("throws_healthily.sh")
    line = _refused(kv, "run", "D12", "--build", build, "--no-staleness")
    assert f"{kv.home / 'runs'}: it is group- or world-writable (mode 777)" in line
    assert list((kv.home / "runs").iterdir()) == []


def test_a_planted_cache_file_runs_nothing_and_is_replaced_by_data(kv: Faults):
    """The attack of issue 28: a serialized object planted as the test-backend-ops probe's cache."""
    from kvdiag.workspace.memo import binary_key

    build = kv.build("throws_healthily.sh")
    key = binary_key(build / "bin" / "test-backend-ops")
    marker = kv.root / "payload-ran"
    cache = kv.home / "cache"
    cache.mkdir(parents=True, mode=0o700)
    for name in (f"backend-ops-{key}.pickle", f"backend-ops-{key}.json"):
        (cache / name).write_bytes(pickle.dumps(_Payload(marker)))
    code, out, err = kv.cli("run", "D12", "--build", build, "--no-staleness")
    assert code in (0, 1, 3, 4) and "Traceback" not in err, (code, out, err)
    assert not marker.exists()
    kept = json.loads((cache / f"backend-ops-{key}.json").read_text())
    assert (kept["format"], kept["kind"], kept["key"]) == ("kvdiag-cache/1", "backend-ops", key)
    assert kept["value"]["path"] == str(build / "bin" / "test-backend-ops")
