"""engine.scan.dispatch with kvdiag.proc.turns: a unit judges its output while the next unit's process runs,
and never more than ``workers`` processes run at once on one device.

No processes: a unit's "process" is the block it holds its turn for (as engine.verdict.devices.gpu_lease
holds it around a real one), its "judging" what it does after. Each dispatch runs in a thread the test joins
with a timeout, so a unit that can never start fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from kvdiag.engine.scan import dispatch as dispatch_module
from kvdiag.engine.scan.dispatch import dispatch
from kvdiag.engine.verdict.devices import gpu_lease
from kvdiag.proc.turns import TurnCancelled, Turns, process_turn, with_turns

LIMIT_S = 20


def run_dispatch(units, job, workers, devices=(), cancel=None) -> list:
    finished: list = []
    errors: list = []

    def body():
        try:
            dispatch(units, lambda unit, device: (lambda: job(unit, device)),
                     lambda unit, result, device: finished.append(result) or [],
                     workers=workers, devices=devices, cancel=cancel or threading.Event(), salvage=lambda r: None)
        except BaseException as exc:     # noqa: BLE001 - the test reads it
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(LIMIT_S)
    assert not errors, errors
    assert not thread.is_alive(), "the dispatch did not end"
    return finished


def test_a_unit_judges_while_the_next_units_process_runs():
    """One worker: "a"'s judging waits for "b"'s process to have started. With one unit in flight per worker
    (the old dispatch) "b" could start only once "a" had been judged, and "a" would give up waiting."""
    b_started = threading.Event()

    def job(unit, device):
        with process_turn():
            if unit == "b":
                b_started.set()
        if unit == "a":
            return ("a", b_started.wait(5))
        return (unit, True)

    assert sorted(run_dispatch(["a", "b"], job, workers=1)) == [("a", True), ("b", True)]


def test_never_more_processes_at_once_than_workers_per_device():
    lock = threading.Lock()
    now = {"processes": 0, "units": 0}
    most = {"processes": 0, "units": 0}

    def count(key, step):
        with lock:
            now[key] += step
            most[key] = max(most[key], now[key])

    def job(unit, device):
        count("units", 1)
        with process_turn():
            count("processes", 1)
            time.sleep(0.05)
            count("processes", -1)
        time.sleep(0.05)                                   # judging: no turn held
        count("units", -1)
        return (unit, device)

    devices = ("gpu0", "gpu1")
    done = run_dispatch(list(range(24)), job, workers=2, devices=devices)
    assert sorted(u for u, _ in done) == list(range(24))
    assert most["processes"] <= 2 * len(devices)           # -j 2 per device
    assert most["units"] <= 2 * len(devices) * dispatch_module.UNITS_PER_WORKER


def test_each_device_has_its_own_turns():
    """Two devices, one worker each: a process on one device never waits for the other's."""
    both = threading.Barrier(2, timeout=5)

    def job(unit, device):
        with process_turn():
            both.wait()                                    # both processes at once, or a BrokenBarrierError
        return device

    assert sorted(run_dispatch(["a", "b"], job, workers=1, devices=("gpu0", "gpu1"))) == ["gpu0", "gpu1"]


def test_a_turn_nests_within_a_unit():
    def job(unit, device):
        with process_turn():
            with process_turn():                           # a control inside the case's lease
                return unit

    assert run_dispatch(["a"], job, workers=1) == ["a"]


def test_a_unit_waiting_for_its_turn_never_starts_once_cancelled():
    cancel = threading.Event()
    turns = Turns(1, cancel)
    holding, outcome = threading.Event(), []

    def holder():
        with turns.turn():
            holding.set()
            cancel.wait(LIMIT_S)

    def waiter():
        holding.wait(LIMIT_S)
        try:
            with turns.turn():
                outcome.append("started")
        except TurnCancelled:
            outcome.append("cancelled")

    threads = [threading.Thread(target=t, daemon=True) for t in (holder, waiter)]
    for t in threads:
        t.start()
    assert holding.wait(5)
    time.sleep(0.3)
    assert outcome == []                                   # the turn is held: it waits
    cancel.set()
    for t in threads:
        t.join(5)
    assert outcome == ["cancelled"]


def test_turns_go_in_the_order_the_units_were_handed_out():
    """Four units handed out at once for two turns: the first two start first, whichever thread asks first."""
    order, lock = [], threading.Lock()

    def job(unit, device):
        if unit in ("a", "b"):
            time.sleep(0.2)                                # the first two ask last
        with process_turn():
            with lock:
                order.append(unit)
            time.sleep(0.1)
        return unit

    run_dispatch(["a", "b", "c", "d"], job, workers=2)
    assert sorted(order[:2]) == ["a", "b"] and sorted(order[2:]) == ["c", "d"]


def test_units_cancelled_before_their_turn_are_neither_finished_nor_salvaged():
    """Ctrl-C while two units hold the turns and two wait: the waiting two never start, the dispatch is told
    (``not_started``) and salvages only the two that ran."""
    cancel = threading.Event()
    running_now = threading.Semaphore(0)
    finished, salvaged, unstarted, errors = [], [], [], []

    def job(unit):
        with process_turn():
            running_now.release()
            cancel.wait(LIMIT_S)
        return unit

    def finish(unit, result, device):
        raise KeyboardInterrupt                            # the Ctrl-C lands as the first result is taken

    def body():
        try:
            returned = dispatch(["a", "b", "c", "d"], lambda unit, device: (lambda: job(unit)), finish,
                                workers=2, devices=(), cancel=cancel, salvage=salvaged.append,
                                not_started=unstarted.append)
            finished.append(returned)
        except BaseException as exc:     # noqa: BLE001 - the test reads it
            errors.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    assert running_now.acquire(timeout=5) and running_now.acquire(timeout=5)
    time.sleep(0.3)
    assert not running_now.acquire(timeout=0.2)           # c and d wait for a turn
    cancel.set()                                           # a and b end, finish raises, c and d are cancelled
    thread.join(LIMIT_S)
    assert not errors and finished == [True]
    assert sorted(salvaged) == ["a", "b"] and sorted(unstarted) == ["c", "d"]


def test_outside_a_dispatch_nothing_waits():
    with process_turn():
        with process_turn():
            pass


def test_gpu_lease_takes_the_units_turn_for_a_cpu_only_entry_too():
    turns = Turns(1, threading.Event())
    entry = SimpleNamespace(requires=SimpleNamespace(gpu=False))
    seen = []

    def other_unit_may_start() -> bool:
        done = threading.Event()

        def other():
            with turns.turn():
                done.set()

        threading.Thread(target=other, daemon=True).start()
        return done.wait(0.5)

    def job():
        with gpu_lease(entry, None, None):
            seen.append(other_unit_may_start())            # the one turn is this unit's
        seen.append(other_unit_may_start() or other_unit_may_start())

    with_turns(job, turns)()
    assert seen[0] is False and seen[1] is True


def test_a_unit_ahead_that_never_asks_delays_the_others_but_does_not_stop_them():
    """The first unit handed out waits for something before asking for its turn (here: for the second unit's
    process to have run); the second takes the free turn after PATIENCE_S instead of waiting for ever."""
    from kvdiag.proc import turns as turns_module

    second_ran = threading.Event()

    def job(unit, device):
        if unit == "first":
            ok = second_ran.wait(turns_module.PATIENCE_S + 5)
            with process_turn():
                return ("first", ok)
        with process_turn():
            second_ran.set()
        return ("second", True)

    assert sorted(run_dispatch(["first", "second"], job, workers=1)) == [("first", True), ("second", True)]
