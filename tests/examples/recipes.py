"""The recipes under examples/ and their shell: where each script and snippet is, and the
`kvdiag` command lines in them, parsed by kvdiag's own click CLI without running anything.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click
import yaml

from kvdiag.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
DOCS_WITH_SNIPPETS = (REPO / "docs" / "fleets.md",)
WORKFLOWS = sorted((EXAMPLES / "github-actions").glob("*.yml"))
MANIFESTS = sorted((EXAMPLES / "kubernetes").glob("*.yaml"))


@dataclass(frozen=True)
class Snippet:
    where: str          # file, and what in it
    text: str


def shell_scripts() -> list[Path]:
    """Every file under examples/ that starts with a shell's #! line."""
    return sorted(p for p in EXAMPLES.rglob("*") if p.is_file()
                  and re.match(r"#!\s*/(usr/)?bin/(env )?(ba)?sh\b", p.read_text(encoding="utf-8").split("\n")[0]))


def doc_snippets() -> list[Snippet]:
    """The ```sh / ```bash blocks of the docs that show recipes."""
    found = []
    for doc in DOCS_WITH_SNIPPETS:
        text = doc.read_text(encoding="utf-8")
        for i, match in enumerate(re.finditer(r"^```(?:sh|bash)\n(.*?)^```", text, re.M | re.S), start=1):
            found.append(Snippet(f"{doc.relative_to(REPO)} block {i}", match.group(1)))
    return found


def manifest_containers() -> list[tuple[Path, dict, dict]]:
    """(file, its Job, a container) for every container of every Job in the manifests."""
    out = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == "Job":
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    out.append((path, doc, container))
    return out


def manifest_snippets() -> list[Snippet]:
    """The scripts the manifests' containers run (``command: [bash, -c]``, the script in ``args``)."""
    found = []
    for path, job, container in manifest_containers():
        command = container.get("command") or []
        if command[-1:] == ["-c"] and Path(command[0]).name in ("bash", "sh"):
            found.append(Snippet(f"{path.relative_to(REPO)} job {job['metadata']['name']}", container["args"][0]))
    return found


def workflow_snippets() -> list[Snippet]:
    """Every ``run:`` of the workflows (actionlint shellchecks them; here their kvdiag lines are read)."""
    found = []
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
        for job_id, job in workflow["jobs"].items():
            for n, step in enumerate(job.get("steps") or [], start=1):
                if "run" in step:
                    found.append(Snippet(f"{path.relative_to(REPO)} {job_id} step {n}", step["run"]))
    return found


# --------------------------------------------------------------------------- kvdiag command lines

_OPERATORS = {";", "&&", "||", "|", "&", ">", ">>", "<", "(", ")", "2>", "|&"}
_EXPANSION = re.compile(r"\$\{\{[^}]*\}\}|\$\(\([^)]*\)\)|\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\$[@*#?0-9]")


def kvdiag_command_lines(script: str) -> list[list[str]]:
    """The argument lists of every ``kvdiag …`` command in a shell script, a shell expansion
    (``$X``, ``${X}``, ``$((…))``, ``${{ … }}``) standing in as the word ``x``."""
    text = re.sub(r"\\\n\s*", " ", script)
    found = []
    for line in text.split("\n"):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:          # a quote spanning lines: not a kvdiag line of ours
            continue
        for i, token in enumerate(tokens):
            at_start = i == 0 or tokens[i - 1] in _OPERATORS or tokens[i - 1] in ("then", "do", "else") \
                or re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[i - 1])
            if token == "kvdiag" and at_start:
                args = []
                for word in tokens[i + 1:]:
                    if word in _OPERATORS:
                        break
                    args.append(_EXPANSION.sub("x", word))
                found.append(args)
    return found


def parse_error(group: click.Group, args: list[str]) -> str | None:
    """What is wrong with ``kvdiag ARGS`` for its parser, or None: `dry_parse`, its error caught
    (click's own, or kvdiag's UsageError that its option types raise)."""
    try:
        dry_parse(group, args)
    except click.ClickException as exc:
        return exc.format_message()
    except UsageError as exc:
        return str(exc)
    return None


def dry_parse(group: click.Group, args: list[str]) -> None:
    """Parse ``kvdiag ARGS`` as click would run it, down to the (sub)command, and stop before
    the command's code: unknown options, bad choices or numbers, a missing required option or
    argument raise click's errors (kvdiag's own option types raise its UsageError). ``--help``
    and ``--version`` end it early, as they would."""
    try:
        ctx = group.make_context("kvdiag", list(args))
        command: click.Command = group
        while isinstance(command, click.Group):
            pending = getattr(ctx, "_protected_args", None)
            rest = [*(pending if pending is not None else ctx.protected_args), *ctx.args]
            if not rest:
                return
            name, sub, rest = command.resolve_command(ctx, rest)
            ctx = sub.make_context(name, rest, parent=ctx)
            command = sub
    except click.exceptions.Exit:
        return
