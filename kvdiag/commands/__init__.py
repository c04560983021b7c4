"""Command groups kept out of kvdiag/cli.py, registered there with ``cli.add_command``.

* :mod:`kvdiag.commands.probes` -- ``probe`` (list, check, apply, revert, drop) and ``verify``.
* :mod:`kvdiag.commands.bisect` -- ``bisect`` (cause or fix) and the hidden ``bisect-step`` that
  ``git bisect run`` calls.

This package imports nothing itself, so ``python -m kvdiag.commands.bisect`` runs cleanly.
"""
