"""Runs on disk: one directory per run, JSON written atomically, logs streamed beside it."""
