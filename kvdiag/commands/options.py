"""Number, id and path options of every command, checked before anything runs: one line and exit 64.

click's ``FloatRange`` lets ``nan`` through (every comparison with NaN is false), and
``--timeout nan`` then disabled every deadline, the step budget included; ``inf`` did the
same to ``--step-budget``. A time here is a finite number of seconds above 0 (and at
most a stated ceiling); a count is a whole number in its range. A bad value is a
:class:`~kvdiag.errors.UsageError` naming the option, on one line, like every other
usage error of kvdiag (click's own message takes four lines and ends in a usage text).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import click

from kvdiag.errors import UsageError

__all__ = ["BUILD_ENV", "Count", "GivenPath", "IdList", "Seconds", "build_option", "parse_sets"]

BUILD_ENV = "LLAMA_KV_BUILD"


def _option(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    names = getattr(param, "opts", None) or [param.name or "value"]
    return max(names, key=len)


def _shown(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


class Seconds(click.ParamType):
    """A duration in seconds: finite, above 0 (at least ``least`` when given), at most ``most``."""

    name = "seconds"

    def __init__(self, most: float, least: float | None = None):
        self.most = float(most)
        self.least = least

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float) and math.isfinite(value) and self._fits(value):
            return value
        try:
            seconds = float(str(value).strip())
        except ValueError:
            raise UsageError(f"{_option(param)}: {value!r} is not a number of seconds") from None
        if not (math.isfinite(seconds) and self._fits(seconds)):
            low = f"at least {_shown(self.least)}" if self.least is not None else "above 0"
            raise UsageError(f"{_option(param)} {value}: a time must be a finite number of seconds, "
                             f"{low} and at most {_shown(self.most)}")
        return seconds

    def _fits(self, seconds: float) -> bool:
        return 0 < seconds <= self.most and (self.least is None or seconds >= self.least)


class Count(click.ParamType):
    """A whole number from ``least`` to ``most`` (either bound may be absent)."""

    name = "integer"

    def __init__(self, least: int | None = None, most: int | None = None):
        self.least, self.most = least, most

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
        except ValueError:
            raise UsageError(f"{_option(param)}: {value!r} is not a whole number") from None
        if (self.least is not None and number < self.least) or (self.most is not None and number > self.most):
            if self.most is None:
                span = f"at least {self.least}"
            elif self.least is None:
                span = f"at most {self.most}"
            else:
                span = f"from {self.least} to {self.most}"
            raise UsageError(f"{_option(param)} {value}: must be a whole number {span}")
        return number


class GivenPath(click.Path):
    """click's Path, refusing an empty string: ``Path("")`` is ``.``, so ``--output ""`` once wrote
    thirteen records into the current folder and ``--build ""`` inspected it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            raise UsageError(f"{_option(param)}: an empty path was given")
        return super().convert(value, param, ctx)


class IdList(click.ParamType):
    """Comma-separated ids (``D2,D10``; GPUs ``0,1``), none of them empty.

    ``--only ,`` or ``--only ''`` used to select nothing, and nothing meant "every
    entry": an empty shell variable turned a one-entry check into a full sweep. The
    value is returned as given; the commands split it as before."""

    name = "ids"

    def __init__(self, example: str):
        self.example = example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not all(item.strip() for item in text.split(",")):
            what = "no id" if not text.strip(" ,") else "an empty id"
            raise UsageError(f"{_option(param)} {text!r}: {what} in the list (give ids separated by commas, "
                             f"e.g. {self.example})")
        return text


class _EnvNamedOption(click.Option):
    """An option that can come from the environment and says so when it is missing: click's own
    "Missing option '--build'" left a user who had exported a misspelt variable guessing."""

    def get_error_hint(self, ctx: click.Context) -> str:
        return f"{super().get_error_hint(ctx)} (or ${self.envvar})"


def build_option(help: str = f"The build folder (default: ${BUILD_ENV}).", required: bool = False) -> Callable:
    """Every command's ``--build``: a path that is never empty, read from ``$LLAMA_KV_BUILD`` when not given."""
    return click.option("--build", "build_dir", cls=_EnvNamedOption, type=GivenPath(path_type=Path), envvar=BUILD_ENV,
                        required=required, help=help)


def parse_sets(sets) -> dict[str, str]:
    """`run --set KEY=VALUE ...` as a mapping; one line and exit 64 for an item without its `=`."""
    out = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out
