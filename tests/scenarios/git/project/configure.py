"""Synthetic project: `configure.py BUILD` records the configuration (like cmake -S -B)."""

import json
import sys
from pathlib import Path

source = Path(__file__).resolve().parent
build = Path(sys.argv[1])
build.mkdir(parents=True, exist_ok=True)
(build / "configured.json").write_text(json.dumps({"source": str(source)}) + "\n")
print(f"configured {source} into {build}")
