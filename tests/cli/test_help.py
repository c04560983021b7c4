"""Help as written: the exit-code table one code per line, each command's own codes and an example."""

from __future__ import annotations

import re

import click
import pytest

from kvdiag.cli import cli, main
from kvdiag.exitcodes import EXIT_CODE_TABLE
from kvdiag.help_text import COMMAND_HELP

from tests.cli.help_layout import block, parse_page


def _paths(group: click.Group, prefix: str = ""):
    for name, command in group.commands.items():
        yield f"{prefix}{name}", command
        if isinstance(command, click.Group):
            yield from _paths(command, f"{prefix}{name} ")


ALL = sorted(path for path, _ in _paths(cli))


def _help(capsys, *args: str) -> str:
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


def exit_codes_shown(text: str) -> dict[int, str]:
    """The page's exit-code table: code -> meaning, a meaning continued on the lines under it joined."""
    rows: dict[int, str] = {}
    for line in block(parse_page(text), "Exit codes:")[1:]:
        head = line[:7].strip()
        if head:
            code = int(head)
            rows[code] = line[7:].strip()
        else:
            rows[code] += " " + line.strip()
    return rows


def test_top_level_help_shows_the_exit_codes_one_per_line(capsys):
    shown = exit_codes_shown(_help(capsys))
    assert shown == {int(code): text for code, text in EXIT_CODE_TABLE}


def test_every_command_is_in_the_help_table():
    assert sorted(COMMAND_HELP) == ALL


@pytest.mark.parametrize("path", ALL)
def test_every_command_shows_an_example_and_its_exit_codes(capsys, path):
    text = _help(capsys, *path.split())
    example = text.split("Example", 1)[1].split("Exit codes:", 1)[0]
    assert re.search(r"^\s+(kvdiag|git bisect run kvdiag) ", example, re.M), example
    _, codes = COMMAND_HELP[path]
    assert exit_codes_shown(text) == dict(codes), path


@pytest.mark.parametrize("path", ["run", "scan", "drift", "sweep"])
def test_commands_that_judge_list_the_harness_failure_and_the_interrupt(path):
    codes = {code for code, _ in COMMAND_HELP[path][1]}
    assert {0, 1, 4, 64, 70, 130} <= codes
