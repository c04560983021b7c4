"""Putting compute-sanitizer in front of a step's command, as the entry asks."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from kvdiag.registry.entry import Step


def sanitizer_invocation(step: Step):
    """The step's sanitizer settings as an invocation (None when the step runs bare)."""
    from kvdiag.proc.sanitizer import SanitizerInvocation

    if not step.sanitizer:
        return None
    return SanitizerInvocation(
        tool=step.sanitizer,
        options=tuple(step.sanitizer_options),
        kernel_filter=step.kernel_filter,
        print_limit=step.print_limit,
    )


def wrap_with_sanitizer(step: Step, program_argv: Sequence[str], log_file: Path,
                        sanitizer: Path | None) -> tuple[str, ...]:
    """argv with the sanitizer in front (or unchanged); `sanitizer` None shows the bare name."""
    invocation = sanitizer_invocation(step)
    if invocation is None:
        return tuple(program_argv)
    return invocation.argv(sanitizer or Path("compute-sanitizer"), log_file, program_argv)
