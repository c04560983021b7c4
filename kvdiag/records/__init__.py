"""The values kvdiag's layers hand each other: verdicts, attempts, outcomes.

They sit below the engine, the store and the report so that each of those can
read and write them without importing the others. Nothing here runs anything.
"""
