"""The verdict pipeline every verb shares: plan -> attempt -> observe -> judge -> verdict.

``planning`` turns a step into argv (``launch_program`` picks the test program and lists its
launches), ``processes`` puts the sanitizer in front and gives each step its budget, ``execute``
runs an entry's attempts and records them, ``judge`` turns one attempt's observations
(:mod:`kvdiag.engine.evidence`) into a verdict.  Around them: ``applicability``/``ranges``/``presence``
(can this build have the defect), ``gates`` (the controls a not-reproduced needs),
``arm``/``comparison``/``compile_check`` (other kinds of step), ``site_check``, ``target`` (the build,
GPU and tools, prepared once), ``devices``, ``show`` (what `kvdiag show --build` prints).
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_entry": "execute",
    "RunOptions": "planning",
    "RunInterrupted": "execute",
    "plan_step": "planning",
    "attempt_step": "execute",
    "judge_attempt": "judge",
    "prepare_target": "target",
    "Target": "target",
    "controls_gate_provider": "gates",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
