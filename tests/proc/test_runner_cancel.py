"""run_command's `cancel` event: how a scan stops its workers from another thread."""

from __future__ import annotations

import threading

from proc_helpers import pid_gone, scenario, wait_until

from kvdiag.proc.runner import run_command


def test_cancel_from_another_thread_kills_the_group_and_returns(tmp_path):
    cancel = threading.Event()
    timer = threading.Timer(0.7, cancel.set)
    timer.start()
    result = run_command(scenario("forks_grandchild_and_hangs.py"), timeout=30, log_dir=tmp_path,
                         name="cancelled", cancel=cancel)
    timer.join()
    assert result.interrupted and not result.timed_out and not result.ok
    assert result.duration_s < 15
    grandchild = int(result.stdout_text().split()[1])
    assert wait_until(lambda: pid_gone(grandchild), timeout=10)
    assert (tmp_path / "cancelled.cmd.json").is_file()


def test_an_unset_cancel_event_changes_nothing(tmp_path):
    result = run_command(scenario("exits_with.py", 3), timeout=30, log_dir=tmp_path, name="plain",
                         cancel=threading.Event())
    assert result.returncode == 3 and not result.interrupted
