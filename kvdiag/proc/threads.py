"""Worker threads the main thread waits for while Ctrl-C, SIGTERM or SIGHUP may arrive.

kvdiag turns those signals into a ``KeyboardInterrupt`` raised in the main thread
(``kvdiag.proc.signals``), wherever it happens to be. Inside ``Thread.join`` that is
unsafe on the Pythons kvdiag runs on (3.11, 3.12; CPython gh-90882): when the
exception interrupts ``join(timeout)`` while the thread still runs, ``join`` releases
the thread's state lock it never acquired and marks the thread stopped, so
``is_alive()`` is False from then on although the thread keeps running. A loop that
joins its workers "until none is alive" then returns with a worker still at work: the
caller saves its results without that worker's entry, the process ends its
descendants while the worker still drives one, and the worker's last write
(a run.json ``finished``) lands after the run was closed as ``interrupted``.

So nothing here calls ``join`` on a running thread: each :class:`Worker` sets an
event as the last thing it does; :func:`wait_all` waits on those events (an
interrupted ``Event.wait`` leaves nothing inconsistent) and joins a thread only
after its event is set.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

__all__ = ["Worker", "run_each", "wait_all"]

_POLL_S = 0.2


class Worker:
    """A daemon thread running ``target(*args)`` that says, by an event, when it is done."""

    def __init__(self, target: Callable[..., Any], *args: Any, name: str):
        self.done = threading.Event()
        self._target = target
        self._args = args
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self._target(*self._args)
        finally:
            self.done.set()

    def start(self) -> None:
        self.thread.start()

    @property
    def finished(self) -> bool:
        return self.done.is_set()


def wait_all(workers: Sequence[Worker], on_interrupt: Callable[[], None]) -> None:
    """Return once every worker finished.

    A ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM/SIGHUP as kvdiag raises them) while
    waiting calls ``on_interrupt`` (which should tell the workers to stop) and the
    wait goes on: it is never cut short with a worker still running.
    """
    while True:
        try:
            running = [w for w in workers if not w.finished]
            if not running:
                break
            running[0].done.wait(_POLL_S)
        except KeyboardInterrupt:
            on_interrupt()
    for worker in workers:
        try:
            worker.thread.join()      # its body has returned: this only lets the thread exit
        except KeyboardInterrupt:
            on_interrupt()


def run_each(tasks: Sequence[Callable[[], Any]], on_interrupt: Callable[[], None], *, name: str,
             at_once: int = 0) -> tuple[list[Any], bool]:
    """Each task in a :class:`Worker` of its own, at most ``at_once`` of them running together (0: all);
    their results in order, and whether a ``KeyboardInterrupt`` came.

    On one, while the workers start or while they run, ``on_interrupt`` is called once (it should stop
    the running tasks) and no task starts after it: its result is None. The wait then goes on as
    :func:`wait_all`'s, never cut short with a task still running, so the caller saves every result
    there is. A task's own exception is raised once every task has ended.
    """
    gate = threading.Semaphore(at_once) if at_once > 0 else None
    stopped = threading.Event()
    results: list[Any] = [None] * len(tasks)
    errors: list[BaseException] = []

    def body(index: int, task: Callable[[], Any]) -> None:
        if gate is not None:
            gate.acquire()
        try:
            if not stopped.is_set():
                results[index] = task()
        except BaseException as exc:     # re-raised in the caller's thread once every task has ended
            errors.append(exc)
        finally:
            if gate is not None:
                gate.release()

    def interrupt() -> None:
        if not stopped.is_set():
            stopped.set()
            on_interrupt()

    workers: list[Worker] = []
    try:
        for index, task in enumerate(tasks):
            worker = Worker(body, index, task, name=f"{name}-{index + 1}")
            workers.append(worker)
            worker.start()
    except KeyboardInterrupt:
        interrupt()
    # A worker whose start() the interrupt cut before its thread began never runs: not waited for. One
    # that did begin either ran its task (and is waited for) or finds ``stopped`` set and does nothing.
    wait_all([w for w in workers if w.thread.ident is not None], interrupt)
    if errors:
        raise errors[0]
    return results, stopped.is_set()
