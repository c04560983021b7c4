"""Formats: they read results and entries, and never decide anything."""
