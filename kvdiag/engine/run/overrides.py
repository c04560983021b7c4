"""`--set KEY=VALUE` checked before anything runs: a key the step does not have, or a value
out of range, is a usage error (64) instead of being silently ignored."""

from __future__ import annotations

from kvdiag.engine.verdict.plan import pick_step
from kvdiag.errors import UsageError

#: template globals a user may override, with the value kvdiag gives them otherwise
OVERRIDABLE_GLOBALS = {"seed": 1234, "backend": "CUDA0"}


def validated_sets(overrides: dict[str, str], entries, step_name: str | None) -> dict:
    """--set keys must be variables of the chosen step of some selected entry (or seed/backend);
    a value takes the type of the step's own value (an integer stays a positive integer)."""
    steps = [pick_step(e, step_name) for e in entries if step_name is None or e.step(step_name) is not None]
    known: dict[str, object] = dict(OVERRIDABLE_GLOBALS)
    for s in steps:
        known.update(s.vars)
    out: dict[str, object] = {}
    for key, value in overrides.items():
        if key == "timeout":
            raise UsageError("timeout is not a step variable: use --timeout SECONDS")
        if key not in known:
            names = ", ".join(sorted(known))
            raise UsageError(f"--set {key}: not a variable of the step(s) run here (known: {names})")
        default = known[key]
        if isinstance(default, int) and not isinstance(default, bool):
            try:
                number = int(value)
            except ValueError:
                raise UsageError(f"--set {key}={value}: needs an integer") from None
            if number < (0 if key == "seed" else 1):
                raise UsageError(f"--set {key}={value}: must be {'>= 0' if key == 'seed' else '>= 1'}")
            out[key] = number
        elif not value:
            raise UsageError(f"--set {key}=: an empty value")
        else:
            out[key] = value
    return out
