"""How a `kvdiag` invocation ends: every failure mapped onto its documented exit code and
one line on stderr, then the process's own loose ends tied (``finish``).

`kvdiag.cli.main` is the only caller: ``dispatch`` runs the click group and turns
what it raised into (exit code, reason); ``finish`` gives a signal's exit code
(128 + its number), closes any run still "running" (``interrupted`` or ``failed``
with the reason) and, when kvdiag owns the process, ends every descendant.
"""

from __future__ import annotations

import errno
import os
import signal as _signal

import click

from kvdiag.errors import CommandInterrupted, KvdiagError
from kvdiag.exitcodes import ExitCode
from kvdiag.proc import signals


def finish(code: int, reason: str, own_process: bool) -> int:
    """Give the exit code the signal's number, close open runs, end every descendant."""
    from kvdiag.proc.groups import sigint_deferred
    from kvdiag.store.runs import finish_open_runs

    with sigint_deferred():
        signum = signals.received()
        if signum is not None or code == int(ExitCode.INTERRUPTED):
            code = signals.exit_code_for(signum)
            name = _signal.Signals(signum).name if signum is not None else "SIGINT"
            finish_open_runs("interrupted", f"interrupted by {name}")
        else:
            finish_open_runs("failed", reason or f"kvdiag exited with {code} before the run finished")
        if own_process:
            signals.end_descendants()
    return code


def undecodable(args: list[str], environ: dict[str, str] | None = None) -> str | None:
    """Why an argument (or a KVDIAG_*/LLAMA_KV_* variable, which stand for arguments) is no
    UTF-8 text, or None. Python hands undecodable bytes over as surrogates; kvdiag writes ids
    and paths into UTF-8 records (run.json, the history, logs), so they are refused up front
    (exit 64) instead of failing later as kvdiag's own error (exit 70)."""
    environ = dict(os.environ if environ is None else environ)
    named = [(f"argument {i}", a) for i, a in enumerate(args, start=1)]
    named += [(f"${k}", v) for k, v in sorted(environ.items()) if k.startswith(("KVDIAG_", "LLAMA_KV_"))]
    for what, value in named:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            try:        # as the bytes were given (a file name), else as the text is
                shown = value.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            except UnicodeEncodeError:
                shown = ascii(value)[1:-1]
            return (f"{what} ({shown}) is not valid UTF-8: kvdiag records ids and paths as UTF-8 text; "
                    "rename it or give another")
    return None


def dispatch(group: click.Group, args: list[str]) -> tuple[int, str]:
    """Run the command; (exit code, the one-line reason when it failed)."""
    why = undecodable(args)
    if why is not None:
        return _say(why, ExitCode.USAGE)
    try:
        result = group.main(args=args, prog_name="kvdiag", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code, ""
    except click.ClickException as exc:     # one line, as every refusal (issue 43: click printed three)
        ctx = getattr(exc, "ctx", None)
        see = f" (see '{ctx.command_path if ctx is not None else 'kvdiag'} --help')"
        return _say(f"{exc.format_message()}{see}", ExitCode.USAGE)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__context__, EOFError):   # click turns EOFError (a truncated .gz) into Abort
            return _say(f"unexpected end of input: {exc.__context__ or 'the file is truncated'}", ExitCode.DATA)
        return _say(_interrupted_line(), ExitCode.INTERRUPTED)
    except (KeyboardInterrupt, CommandInterrupted):
        return _say(_interrupted_line(), ExitCode.INTERRUPTED)
    except KvdiagError as exc:          # each error carries its documented exit code (kvdiag.errors)
        return _say(f"{exc.prefix}{exc}", exc.exit_code)
    except PermissionError as exc:     # a folder or file of the user's that kvdiag may not read or write
        return _say(f"permission denied: {exc.filename or exc}", ExitCode.USAGE)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            where = f" {exc.filename}" if exc.filename else ""
            return _say(f"cannot write{where}: {exc.strerror} (what was written is kept)", ExitCode.HARNESS)
        return _say(f"internal failure ({type(exc).__name__}: {exc}); {_save_traceback()}", ExitCode.HARNESS)
    except Exception as exc:  # a bug in kvdiag: one line for the user, the traceback on disk
        return _say(f"internal failure ({type(exc).__name__}: {exc}); {_save_traceback()}", ExitCode.HARNESS)
    return (int(result) if isinstance(result, int) else 0), ""


def _say(line: str, code: ExitCode) -> tuple[int, str]:
    click.echo(f"kvdiag: {line}", err=True)
    return int(code), line


def _interrupted_line() -> str:
    signum = signals.received()
    if signum is None:
        return "interrupted"
    return f"interrupted by {_signal.Signals(signum).name}; the partial run is recorded"


def _save_traceback() -> str:
    import time
    import traceback

    try:
        from kvdiag.fileio import write_atomic
        from kvdiag.home import home_folder, kvdiag_home

        path = home_folder(kvdiag_home(), "crashes") / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        write_atomic(path, traceback.format_exc())
        return f"traceback saved to {path}"
    except (OSError, KvdiagError):
        return "the traceback could not be saved"

