"""Documented exit codes, distinct per verdict class so CI and `git bisect run` can use them.

Verdict runs exit with the code of their verdict. Codes >= 64 are never verdicts.
`kvdiag bisect` maps verdicts onto git's own convention (0 the old term, 1 the new term, 125 skip)
itself; these codes are for every other command.
"""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0                  # not-reproduced, or a command that is not a verdict succeeded
    CONFIRMED = 1           # the defect's signature matched in this run
    NOT_APPLICABLE = 2      # the build cannot have the defect
    SKIPPED = 3             # a requirement is missing (binary, GPU, sanitizer, model)
    INCONCLUSIVE = 4        # a different failure, a timeout, or an unproven detector
    USAGE = 64              # bad command line or unknown id
    DATA = 65               # a registry file or input log is malformed
    HARNESS = 70            # kvdiag itself failed
    HANGUP = 129            # SIGHUP (the terminal went away); recorded like Ctrl-C
    INTERRUPTED = 130       # Ctrl-C; the partial run is still recorded
    TERMINATED = 143        # SIGTERM; the partial run is still recorded


EXIT_CODE_TABLE = [
    (ExitCode.OK, "not-reproduced, or success of a non-verdict command"),
    (ExitCode.CONFIRMED, "confirmed: the signature matched"),
    (ExitCode.NOT_APPLICABLE, "not-applicable"),
    (ExitCode.SKIPPED, "skipped: a requirement is missing"),
    (ExitCode.INCONCLUSIVE, "inconclusive: another failure, a timeout, or a detector control not passed"),
    (ExitCode.USAGE, "usage error (bad option, unknown id, unusable path or KVDIAG_HOME, a recorded run that "
                     "cannot be reused as asked)"),
    (ExitCode.DATA, "malformed registry entry or input file (sweep, run.json, GGUF, log, history)"),
    (ExitCode.HARNESS, "kvdiag itself failed, or the disk is full (the run directory keeps what it could)"),
    (ExitCode.HANGUP, "ended by SIGHUP (the run is recorded `interrupted`, every descendant ended)"),
    (ExitCode.INTERRUPTED, "interrupted by Ctrl-C (the partial run is recorded `interrupted`)"),
    (ExitCode.TERMINATED, "ended by SIGTERM (the run is recorded `interrupted`, every descendant ended)"),
]
