"""Error types. The library raises these; only the CLI turns them into exits."""


class KvdiagError(Exception):
    """Base for every error kvdiag reports to its user as one line."""


class UsageError(KvdiagError):
    """The user asked for something that cannot be done as asked (bad id, bad path)."""


class RegistryError(KvdiagError):
    """The registry (or one entry) cannot be read."""


class HarnessError(KvdiagError):
    """kvdiag itself failed: a bug, a disk error, an unexpected state."""
