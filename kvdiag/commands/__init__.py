"""Command groups kept out of kvdiag/cli.py, registered there with ``cli.add_command``.

* :mod:`kvdiag.commands.probes` -- ``probe`` (list, check, apply, revert, drop), ``verify``, ``bisect``
  and the hidden ``bisect-step`` that ``git bisect run`` calls.

This package imports nothing itself, so ``python -m kvdiag.commands.probes`` runs cleanly.
"""
