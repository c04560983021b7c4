"""Reading a device session's recorded files (tests/fixtures/device/<session>) back, gzipped or not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


class RecordedSession:
    def __init__(self, folder: Path):
        self.folder = folder

    def text(self, name: str) -> str:
        path = self.folder / name
        return gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()

    def json(self, name: str) -> dict:
        return json.loads(self.text(name))


def affected(scan: dict) -> set[str]:
    """The cases a scan's JSON calls confirmed."""
    return {p for p, c in scan["cases"].items() if c["verdict"] == "confirmed"}
