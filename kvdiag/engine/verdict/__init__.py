"""The verdict pipeline every verb shares: plan -> attempt -> observe -> judge -> verdict.

``execute.run_entry`` calls the stages in order, each once: ``plan`` (the entry in the build's
case form, the step, its comparison arm, the run's record, whether it runs at all), then per
attempt ``attempt`` (``planning``'s argv, ``processes``, :mod:`kvdiag.engine.evidence`'s
observation, ``judge``), then ``outcome`` (the verdict, its case, comparison, site and range,
recorded). Around them: ``applicability``/``ranges``/``placement``/``presence`` (can this build have
the defect), ``arm``, ``comparison``, ``compile_check``, ``launch_program``, ``devices``,
``site_check``, ``target`` (the build, GPU and tools, and the controls gate, prepared once) and
``show`` (what `kvdiag show --build` prints).
"""

from kvdiag.lazy_face import lazy_face

_EXPORTS = {
    "run_entry": "execute",
    "RunInterrupted": "execute",
    "RunOptions": "planning",
    "plan_run": "plan",
    "plan_step": "planning",
    "attempt_step": "attempt",
    "judge_attempt": "judge",
    "prepare_target": "target",
    "Target": "target",
    "controls_gate_provider": "target",
}

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
