"""The engine's name for the verdict records, which live in :mod:`kvdiag.records.verdict`.

The store and the report read the same records without importing the engine;
code written against ``kvdiag.engine.verdict`` keeps working through this name.
"""

from kvdiag.records.verdict import Attempt, Evidence, Outcome, Verdict, aggregate, combined_exit_code

__all__ = ["Attempt", "Evidence", "Outcome", "Verdict", "aggregate", "combined_exit_code"]
