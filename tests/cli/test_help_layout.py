"""Every command's `--help` reads like click's own: no stray runs of spaces in a reflowed
line, ``\\b`` tables kept line by line within click's width, and the project's example and
exit-code table (tests/cli/help_layout.py reads the page).

The commands are found by walking the click group, so a command added later is
checked without being named here.
"""

from __future__ import annotations

import click
import pytest

from kvdiag.cli import cli, main
from kvdiag.help_text import HELP_WIDTH, add_help_blocks

from tests.cli.help_layout import convention_problems, layout_problems, parse_page


def _walk(group: click.Group, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _walk(command, (*path, name))
        else:
            yield (*path, name), command


COMMANDS = list(_walk(cli))


@pytest.fixture
def click_width(monkeypatch) -> int:
    """The width click reflows to on an 80-column terminal (it reads $COLUMNS first)."""
    monkeypatch.setenv("COLUMNS", "80")
    return click.formatting.HelpFormatter().width


def _page(capsys, path: tuple[str, ...]) -> str:
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def test_the_walk_finds_the_groups_and_their_subcommands():
    paths = {" ".join(p) for p, _ in COMMANDS}
    assert {"", "sweep", "scan", "merge", "registry lint", "probe check", "model synth"} <= paths
    assert len(paths) > 25


def test_click_width_is_the_block_width_plus_its_indent(click_width):
    assert click_width == 78 == HELP_WIDTH + 2


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "kvdiag")
def test_help_reads_like_clicks_own(capsys, click_width, path):
    command = dict(COMMANDS)[path]
    text = _page(capsys, path)
    assert layout_problems(command, text, click_width) == []
    assert convention_problems(" ".join(path), text) == []


# --------------------------------------------------------------------------- the checks can fail


def _planted(help_text: str, *, blocks: bool = True) -> tuple[click.Command, str]:
    @click.group()
    def group() -> None:
        """A group."""

    @group.command("sweep", help=help_text)
    @click.option("--shard", help="Run  shard I of N.")
    def planted() -> None:
        pass

    if blocks:
        add_help_blocks(group)
    with click.Context(planted, info_name="kvdiag sweep", terminal_width=80) as ctx:
        return planted, planted.get_help(ctx)


def test_a_docstring_indented_under_unindented_blocks_is_caught():
    """The cause of issue #26: an indented body with unindented blocks appended, raw."""
    command, text = _planted("Run.\n\n    The target is inspected once. GPU entries run one after another on each GPU\n"
                             "    (one worker per visible GPU).\n\n\b\nExample:\n  kvdiag sweep --build B\n")
    problems = layout_problems(command, text, 78)
    assert any(p.startswith("help: a run of spaces in a reflowed line: 'GPU     (one") for p in problems), problems
    assert any("Options: a run of spaces" in p and "Run  shard" in p for p in problems), problems


def test_a_wide_table_a_reflowed_table_and_missing_blocks_are_caught():
    command, text = _planted("Run.\n\n\b\nExit codes:\n    0  " + "x" * 90 + "\n", blocks=False)
    assert any(p.startswith("line over 78 columns") for p in layout_problems(command, text, 78))
    assert convention_problems("sweep", text) == ["sweep: no example of the command"]
    command, text = _planted("Run.\n\nExit codes:\n  0  ok\n  1  bad\n", blocks=False)
    assert convention_problems("sweep", text) != []          # reflowed into one line: not a table
    command.help = command.help.replace("Exit codes:", "\b\nExit codes:")
    assert any("is not shown line by line" in p for p in layout_problems(command, text, 78))


def test_the_blocks_wrap_a_long_example_as_a_shell_continues_it(capsys, click_width):
    page = parse_page(_page(capsys, ("bisect",)))
    example = next(p for p in page.paragraphs if p[0].strip() == "Example:")
    assert example[1].endswith(" \\") and example[2].startswith("        --")
    assert " ".join(line.strip().rstrip("\\").strip() for line in example[1:]) == \
        "kvdiag bisect D2 --source ~/ggml --old 1a2b3c4 --new HEAD --build ~/ggml/build"
