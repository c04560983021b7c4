"""kvdiag's own JSON Schemas for the files it writes (run.json, sweep files), shipped in the package.

Users validate with any JSON Schema (2020-12) validator, e.g.
``python -m jsonschema -i sweep.json $(python -c 'import kvdiag.report.schemas as s; print(s.SWEEP_SCHEMA)')``;
`schema_path` gives the files, `load_schema` their contents.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

SWEEP_SCHEMA = "kvdiag-sweep.schema.json"
RUN_SCHEMA = "kvdiag-run.schema.json"


def schema_path(name: str) -> Path:
    return Path(str(resources.files("kvdiag") / "data" / name))


def load_schema(name: str) -> dict[str, Any]:
    return json.loads(schema_path(name).read_text(encoding="utf-8"))
