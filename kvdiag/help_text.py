"""Each command's example and the exit codes it can return, appended to its `--help` as written.

Kept in one table, so a test can check that every command has both, and so
the meanings stay those of `kvdiag.exitcodes` (the `kvdiag --help` table).
Click reflows help paragraphs; a paragraph opened by ``\\b`` is kept line by
line, which is how the examples and the code tables stay one per line.

Two things keep that output looking like click's own. A docstring is dedented
(`inspect.cleandoc`) before anything is appended to it: click dedents the help
it is given as one text, so an unindented block appended to an indented
docstring left every docstring line after the first with its four spaces, and
each reflowed paragraph with runs of them ("on each GPU     (one worker…").
And the ``\\b`` blocks are wrapped here to the width click reflows to
(`HELP_WIDTH`): click never wraps a ``\\b`` block, so a long example or meaning
is continued on an indented line of its own.
"""

from __future__ import annotations

import inspect
import textwrap

import click

from kvdiag.exitcodes import EXIT_CODE_TABLE

#: the general meaning of each code (`kvdiag --help`)
MEANING = {int(code): text for code, text in EXIT_CODE_TABLE}

USAGE = (64, "usage error (bad option, unknown id, missing file)")
DATA = (65, "a registry file or an input file is malformed")
HARNESS = (70, "kvdiag itself failed")
INTERRUPTED = (130, "interrupted (Ctrl-C; SIGTERM exits 143, SIGHUP 129); the partial run is recorded")
VERDICTS = [(0, "not-reproduced"), (1, "confirmed"), (2, "not-applicable"), (3, "skipped: a requirement is missing"),
            (4, "inconclusive: another failure, a timeout, or a detector control not passed")]

#: command path -> (example lines, [(code, what it means for this command)])
COMMAND_HELP: dict[str, tuple[tuple[str, ...], list[tuple[int, str]]]] = {
    "list": (("kvdiag list --owner ggml --tool synccheck",),
             [(0, "listed"), (65, "listed, but a registry file is malformed (problems on stderr)"), USAGE, HARNESS]),
    "registry": (("kvdiag registry lint",), [(0, "success"), USAGE, DATA, HARNESS]),
    "registry lint": (("kvdiag registry lint",),
                      [(0, "no problems"), (65, "problems found, one line each"), HARNESS]),
    "registry export": (("kvdiag registry export --output osv/     # osv/KVDIAG-D1.json ...",
                         "kvdiag registry export D2 > d2.json"),
                        [(0, "exported"), (64, "unknown id, or --output cannot be written"), DATA, HARNESS]),
    "registry radius": (("kvdiag scan D2 --build ~/llama.cpp/build --params hsk --format json > scan.json",
                         "kvdiag registry radius D2 --from scan.json --tree 'upstream llama.cpp'"),
                        [(0, "written (or shown, with --dry-run)"),
                         (64, "unknown id, unreadable --from, a scan with no affected case or no commit"),
                         (65, "--from is not a well-formed saved scan, or the entry with the new table would not "
                              "lint: not written, the problems printed"),
                         HARNESS]),
    "registry verify": (("kvdiag registry verify --source ~/llama.cpp --build ~/llama.cpp/build",),
                        [(0, "every fact matches the tree"), (65, "some fact does not, one line each"), USAGE,
                         HARNESS]),
    "show": (("kvdiag show D2 --build ~/llama.cpp/build",), [(0, "shown"), USAGE, DATA, HARNESS]),
    "run": (("kvdiag run D2 --build ~/llama.cpp/build",),
            [*VERDICTS, USAGE, DATA, (70, "kvdiag itself failed on an entry (verdict error)"), INTERRUPTED]),
    "scan": (("kvdiag scan D2 --build ~/llama.cpp/build -j 8",),
             [(0, "no case affected, none inconclusive"), (1, "some case is affected"),
              (2, "the entry is not applicable to this build"), (3, "skipped: a requirement is missing"),
              (4, "no case affected, but some inconclusive"), USAGE, DATA, HARNESS, INTERRUPTED]),
    "discover": (("kvdiag discover --build ~/ggml/build --tool racecheck,synccheck --draft-into drafts/",
                  "kvdiag discover --build B --ops SOFT_MAX,CPY --format markdown"),
                 [(0, "every case judged, no root"), (1, "some root found (with --new-only: a new one)"),
                  (3, "skipped: no GPU, compute-sanitizer, test-backend-ops or trusted tool"),
                  (4, "no root, but some case was cut (each listed with why)"), USAGE, DATA, HARNESS, INTERRUPTED]),
    "drift": (("kvdiag drift D6 --build ~/llama.cpp/build --runs 10",),
              [*VERDICTS, USAGE, DATA, HARNESS, INTERRUPTED]),
    "analyze": (("kvdiag analyze synccheck.log.gz --format json",),
                [(0, "analysed"), (64, "no such log file"), (65, "not a compute-sanitizer log, or unreadable"),
                 HARNESS]),
    "runs": (("kvdiag runs --entry D2 --limit 5",), [(0, "listed"), USAGE, HARNESS]),
    "doctor": (("kvdiag doctor --refresh",),
               [(0, "every tool's positive control detected and its negative clean"),
                (3, "no GPU or no compute-sanitizer: nothing proven"),
                (4, "some control failed or could not run, or a check failed"),
                (64, "bad option (--sanitizer that is not compute-sanitizer)"), HARNESS, INTERRUPTED]),
    "sweep": (("kvdiag sweep --build ~/llama.cpp/build --format sarif -o kvdiag.sarif",),
              [(0, "nothing confirmed, failed or inconclusive; some entry not-reproduced"),
               (1, "some entry is confirmed"),
               (2, "nothing judged: every entry not-applicable"), (3, "nothing judged: some entry skipped"),
               (4, "some entry is inconclusive"), USAGE, DATA, (70, "kvdiag itself failed on some entry"),
               INTERRUPTED]),
    "merge": (("kvdiag merge shard-1.json shard-2.json -o sweep.json",
               "kvdiag merge scan-1.json scan-2.json scan-3.json -o scan.json"),
              [(0, "merged; nothing confirmed (or affected), failed or inconclusive"),
               (1, "merged; some entry is confirmed, or some case affected"),
               (2, "merged sweep; nothing judged: every entry not-applicable"),
               (3, "merged sweep; nothing judged: some entry skipped"),
               (4, "merged; some entry or case is inconclusive"),
               (64, "not shards of one selection and target, a shard missing (named), or a file is missing"),
               (65, "a file is not a kvdiag sweep or scan"),
               (70, "merged; kvdiag had failed on some entry")]),
    "render": (("kvdiag render sweep.json --format sarif -o kvdiag.sarif",),
               [(0, "rendered"), (64, "no such file, or -o is not a regular file"),
                (65, "the file is not a kvdiag sweep"), HARNESS]),
    "compare": (("kvdiag compare before.json after.json --changed-only",),
                [(0, "no regression"), (1, "some entry regressed (newly confirmed)"), USAGE,
                 (65, "a file is not a kvdiag sweep"), HARNESS]),
    "history": (("kvdiag history D2 --limit 10",), [(0, "shown"), USAGE, HARNESS]),
    "report": (("kvdiag report D2 -o d2-upstream.md",),
               [(0, "written"), (64, "unknown id, or no finished run of it"), HARNESS]),
    "bisect": (("kvdiag bisect D2 --source ~/ggml --old 1a2b3c4 --new HEAD --build ~/ggml/build",),
               [(0, "the introducing (or, with --fix, the fixing) commit was found"),
                (4, "the ends do not hold (their verdicts named), or skipped commits leave it ambiguous"), USAGE,
                DATA, (70, "kvdiag itself failed; the source tree changed under the bisection; or git acted on an "
                           "answer no step recorded (a step that died), and then no commit is named"), INTERRUPTED]),
    "bisect-step": (("git bisect run kvdiag bisect-step D2 --source ~/ggml --build-dir /tmp/bisect-build",),
                    [(0, "the old term: not reproduced (cause) or confirmed (--direction fix)"),
                     (1, "the new term: confirmed (cause) or not reproduced (fix)"),
                     (125, "skip: the commit did not build or the verdict was neither")]),
    "verify": (("kvdiag verify D2 --source ~/ggml --probe D2-fix-uniform-barrier --build ~/ggml/build",
                "kvdiag verify D3 --source ~/fork --probe D2-fix-uniform-barrier --build ~/fork/build --before latest"),
               [(0, "fix verified: confirmed before, not reproduced after, numeric test passed"),
                (1, "not verified: still reproduces, or the fix breaks results"),
                (4, "inconclusive (including a patched tree that does not build, and a flaky entry whose "
                    "two rates the runs cannot tell apart)"),
                (64, "usage error (a probe that does not apply; a --before run that is not the same arm, "
                     "naming what differs)"), HARNESS, INTERRUPTED]),
    "probe": (("kvdiag probe list",), [(0, "success"), (1, "a probe does not apply"), USAGE, HARNESS]),
    "probe list": (("kvdiag probe list --format json",),
                   [(0, "listed"), (65, "listed, but a probe file is malformed"), HARNESS]),
    "probe check": (("kvdiag probe check D2-fix-uniform-barrier --source ~/llama.cpp",),
                    [(0, "every probe applies"), (1, "a probe does not apply (named, with git's lines)"),
                     USAGE, HARNESS]),
    "probe apply": (("kvdiag probe apply D2-fix-uniform-barrier --source ~/llama.cpp --into /tmp/d2-probe",),
                    [(0, "applied; the worktree's path printed"), (1, "a probe does not apply"), USAGE, HARNESS]),
    "probe revert": (("kvdiag probe revert --worktree /tmp/d2-probe",),
                     [(0, "reverted"), (1, "a probe does not revert cleanly"), USAGE, HARNESS]),
    "probe drop": (("kvdiag probe drop /tmp/d2-probe",), [(0, "removed"), USAGE, HARNESS]),
    "model": (("kvdiag model synth --head-dim 256 --n-head 8 --n-head-kv 2 -o tiny.gguf",), [(0, "success"), USAGE, HARNESS]),
    "model synth": (("kvdiag model synth --head-dim 256 --n-head 8 --n-head-kv 2 -o tiny.gguf",),
                    [(0, "written"), (64, "bad option, no gguf package, a shape too large, or an "
                                            "output that is not a regular file"), HARNESS]),
    "model info": (("kvdiag model info tiny.gguf",),
                   [(0, "printed"), (64, "no such file"), (65, "malformed GGUF (the byte offset and what is wrong)")]),
}


#: the widest line click writes with its default 80 columns (it reflows to 78), less the two
#: columns it indents a command's help text by: the width of a ``\\b`` block's lines
HELP_WIDTH = 76
_CODE_INDENT = " " * 7          # "  130  " : where a code's meaning starts


def exit_code_lines(codes) -> list[str]:
    """``  130  meaning`` lines, a meaning too long for `HELP_WIDTH` continued under itself."""
    lines = []
    for code, text in codes:
        lines += textwrap.wrap(text, HELP_WIDTH, initial_indent=f"  {code:>3}  ", subsequent_indent=_CODE_INDENT,
                               break_long_words=False, break_on_hyphens=False)
    return lines


def _shell_words(example: str) -> list[str]:
    """The example's words, an option kept with its value (``--build ~/b``), a comment whole."""
    text, hash_, comment = example.partition(" #")
    words: list[str] = []
    for word in text.split():
        if words and words[-1].startswith("-") and " " not in words[-1] and not word.startswith("-"):
            words[-1] += f" {word}"
        else:
            words.append(word)
    return words + ([f"#{comment}".strip()] if hash_ else [])


def example_lines(example: str) -> list[str]:
    """One example as shell lines of `HELP_WIDTH` at most: a long one is continued with `` \\``
    and an indented line, as a shell reads it, so it can still be pasted."""
    lines, line = [], "  "
    for word in _shell_words(example):
        candidate = f"{line} {word}" if line.strip() else f"{line}{word}"
        if len(candidate) + 2 > HELP_WIDTH and line.strip() and not word.startswith("#"):
            lines.append(line + " \\")
            line = f"      {word}"
        else:
            line = candidate
    return lines + [line]


def help_blocks(path: str) -> str:
    """The ``\\b`` paragraphs appended to ``path``'s help: its example(s), then its exit codes."""
    examples, codes = COMMAND_HELP[path]
    example_block = "\n".join(["\b", "Example:" if len(examples) == 1 else "Examples:",
                               *(line for e in examples for line in example_lines(e))])
    code_block = "\n".join(["\b", "Exit codes:", *exit_code_lines(codes)])
    return f"{example_block}\n\n{code_block}"


def with_blocks(help_text: str | None, blocks: str) -> str:
    """``help_text`` dedented as click would dedent it alone, then ``blocks`` after its last
    paragraph (before a ``\\f``, which ends what click shows)."""
    shown, cut, hidden = inspect.cleandoc(help_text or "").partition("\f")
    return f"{shown.rstrip()}\n\n{blocks}" + (f"\n{cut}{hidden}" if cut else "")


def add_help_blocks(group: click.Group, prefix: str = "") -> None:
    """Append each command's blocks to its help (every command of ``group``, recursively)."""
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if path in COMMAND_HELP and not getattr(command, "_kvdiag_help_added", False):
            command.help = with_blocks(command.help, help_blocks(path))
            command._kvdiag_help_added = True
        if isinstance(command, click.Group):
            add_help_blocks(command, f"{path} ")
