"""The progress display: bars on a terminal (a stream whose isatty() is true), plain lines elsewhere, none quiet."""

from __future__ import annotations

import io
import time

from kvdiag.commands.progress import TerminalProgress, progress_display
from kvdiag.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def drive(progress: TerminalProgress, wait: float = 0.3) -> None:
    """What a sweep reports: a job of 3 entries, a build step on a worker's lane, one entry done."""
    progress.say("sweep of 3 entries")
    progress.begin("entries", 3)
    lane = progress.lane("cpu")
    lane.start("D7 [build-kvarn] run 1/1", budget_s=60)
    lane.line("stdout", "[12/345] Building CUDA object ggml/src/ggml-cuda/fattn.cu.o")
    time.sleep(wait)
    progress.advance("D1 confirmed")
    lane.line("stdout", "  FLASH_ATTN_EXT(hsk=256,nb=3): OK")
    time.sleep(wait)
    lane.stop()
    progress.end()


def test_a_terminal_gets_the_job_bar_with_its_eta_and_what_runs():
    stream = Terminal()
    with progress_display(stream=stream, interval=0.05) as progress:
        assert progress.mode == "bar"
        drive(progress)
    out = stream.getvalue()
    assert "kvdiag: sweep of 3 entries" in out
    assert "entries: 1/3" in out and "<" in out                      # elapsed<remaining: the ETA
    assert "D7 [build-kvarn] run 1/1, [12/345] Building CUDA object" in out
    assert "at FLASH_ATTN_EXT(hsk=256,nb=3)" in out
    assert "0:00 of 60 s" in out


def test_a_pipe_gets_the_messages_only():
    stream = Pipe()
    with progress_display(stream=stream, interval=0.05) as progress:
        assert progress.mode == "plain"
        drive(progress)
    assert stream.getvalue() == "kvdiag: sweep of 3 entries\n"


def test_a_pipe_gets_an_occasional_line_for_a_long_step():
    stream = Pipe()
    with progress_display(stream=stream, interval=0.05, plain_interval=0.2) as progress:
        drive(progress, wait=0.35)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "kvdiag: sweep of 3 entries"
    assert any(ln.startswith("kvdiag: D7 [build-kvarn] run 1/1, [12/345] Building") and ln.endswith("s elapsed")
               for ln in lines[1:]), lines
    assert all("\r" not in ln and "\x1b[" not in ln for ln in lines)


def test_quiet_shows_nothing_even_on_a_terminal():
    stream = Terminal()
    with progress_display(quiet=True, stream=stream, interval=0.05) as progress:
        drive(progress, wait=0.1)
    assert stream.getvalue() == ""


def test_the_engine_hook_alone_is_silent_and_keeps_the_state(capsys):
    progress = Progress()
    lane = progress.lane("gpu0")
    lane.start("D2 [fast] run 1/1", budget_s=120)
    lane.line("stdout", "[3/7] Linking CXX executable bin/test-backend-ops")
    assert lane.doing() == "D2 [fast] run 1/1, [3/7] Linking CXX executable bin/test-backend-ops"
    progress.say("nothing printed")
    progress.begin("entries", 2)
    progress.advance("D2 confirmed")
    lane.stop()
    assert lane.doing() == ""
    assert capsys.readouterr() == ("", "")


def test_counted_reports_every_item_done_even_one_the_loop_skips():
    seen = []

    class Recording(Progress):
        def begin(self, what, total):
            seen.append(("begin", what, total))

        def advance(self, done=None, n=1):
            seen.append(("advance", done))

        def end(self):
            seen.append(("end",))

    from kvdiag.progress import counted

    progress = Recording()
    for tool in counted(["memcheck", "racecheck"], progress, "sanitizer tools", lambda t: f"control {t}",
                        lambda t: f"{t}: pass"):
        if tool == "memcheck":
            continue
        assert progress.running and progress.label == "control racecheck"
    assert seen == [("begin", "sanitizer tools", 2), ("advance", "memcheck: pass"), ("advance", "racecheck: pass"),
                    ("end",)]
    assert not progress.running
