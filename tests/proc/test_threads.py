"""kvdiag.proc.threads: the main thread waits for its workers to the end, signals or not.

The signal is sent to the main thread itself (``pthread_kill``), so it lands inside the
wait, where a plain ``Thread.join(timeout)`` loop on CPython 3.11/3.12 (gh-90882) marks
the running worker stopped and returns early (5 of 5 tries on this machine's 3.11.7
with this harness).
"""

from __future__ import annotations

import signal
import threading
import time

import pytest

from kvdiag.proc.threads import Worker, run_each, wait_all


@pytest.fixture
def usr1_interrupts():
    """SIGUSR1 raises KeyboardInterrupt in the main thread (how kvdiag's handler treats SIGTERM)."""
    def handler(_signum, _frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGUSR1, handler)
    yield
    signal.signal(signal.SIGUSR1, old)


def _poke_main_thread(times: int, every: float) -> threading.Thread:
    main = threading.main_thread().ident

    def poke():
        for _ in range(times):
            time.sleep(every)
            signal.pthread_kill(main, signal.SIGUSR1)

    thread = threading.Thread(target=poke, daemon=True)
    thread.start()
    return thread


def test_signals_inside_the_wait_call_on_interrupt_and_the_wait_still_lasts_until_the_worker_ends(
        usr1_interrupts):
    release = threading.Event()
    worker = Worker(release.wait, name="waits-for-release")
    worker.start()
    interrupts = []
    poker = _poke_main_thread(times=3, every=0.05)
    threading.Timer(0.8, release.set).start()
    started = time.monotonic()
    wait_all([worker], on_interrupt=lambda: interrupts.append(time.monotonic()))
    poker.join()
    assert release.is_set(), "wait_all returned while its worker was still running"
    assert worker.finished and not worker.thread.is_alive()
    assert len(interrupts) == 3
    assert time.monotonic() - started >= 0.75


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_that_raises_still_counts_as_finished():
    def breaks():
        raise RuntimeError("a worker's own failure")

    worker = Worker(breaks, name="breaks")
    worker.start()
    wait_all([worker], on_interrupt=lambda: None)
    assert worker.finished and not worker.thread.is_alive()


def test_run_each_keeps_every_result_in_order_and_runs_at_most_so_many_at_once():
    running, most = [], []
    lock = threading.Lock()

    def task(n):
        with lock:
            running.append(n)
            most.append(len(running))
        time.sleep(0.05)
        with lock:
            running.remove(n)
        return n * n

    results, interrupted = run_each([lambda n=n: task(n) for n in range(6)], on_interrupt=lambda: None,
                                    name="squares", at_once=2)
    assert results == [0, 1, 4, 9, 16, 25] and interrupted is False
    assert max(most) == 2


def test_a_signal_while_the_tasks_run_stops_the_rest_and_waits_for_the_running_one(usr1_interrupts):
    """The first task is running when SIGUSR1 lands: on_interrupt stops it, the queued ones never start."""
    stop = threading.Event()
    started = []

    def task(n):
        started.append(n)
        stop.wait(5)
        return "stopped" if stop.is_set() else "timed out"

    poker = _poke_main_thread(times=1, every=0.2)
    results, interrupted = run_each([lambda n=n: task(n) for n in range(3)], on_interrupt=stop.set,
                                    name="stoppable", at_once=1)
    poker.join()
    assert interrupted is True and started == [0]
    assert results == ["stopped", None, None]


def test_a_task_s_own_error_is_raised_after_every_task_ended():
    finished = []

    def fails():
        raise ValueError("the task's own fault")

    def slow():
        time.sleep(0.2)
        finished.append(True)

    with pytest.raises(ValueError, match="the task's own fault"):
        run_each([fails, slow], on_interrupt=lambda: None, name="mixed")
    assert finished == [True]
