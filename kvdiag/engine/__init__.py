"""From an entry and a build to a verdict: one subpackage per verb over one shared pipeline.

``run``, ``scan``, ``bisect``, ``verify``, ``drift`` and ``sweep`` are the verbs (``discover``
is reserved); ``verdict`` is the pipeline they share (plan, attempt, judge) and ``evidence``
its observe stage. Each names its entry points in its ``__init__``; docs/architecture.md
draws them, tests/architecture/test_engine_rooms.py holds their one direction.
"""
