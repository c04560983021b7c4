#!/usr/bin/env python3
"""Stands in for compute-sanitizer in the controls' tests: runs nothing on a GPU.

Understands ``--version`` and ``--tool T --log-file F --error-exitcode N [--opt V ...]
PROGRAM...``. The program is ``python -m kvdiag.controls.launch NAME --cubin C`` or an
nvcc-built canary program ``<cache>/NAME-<hash>.exe ARGS``; the
fake copies ``$FAKE_SANITIZER_LOGS/NAME.log`` to F (the recorded report), prints the
launcher's JSON line when ``NAME.launcher`` says ``ok``, and exits N when the report
counts errors, like the real tool. It also records its argv in ``NAME.argv``.
"""
import json
import os
import re
import sys
from pathlib import Path

args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer")
    print("Version 2025.3.1.0 (build 36398583) (public-release)")
    sys.exit(0)
opts = {}
i = 0
while i < len(args) and args[i].startswith("--"):
    opts[args[i]] = args[i + 1]
    i += 2
program = args[i:]
if "kvdiag.controls.launch" in program:
    name, launcher = program[program.index("kvdiag.controls.launch") + 1], "cupy"
else:  # an nvcc-built canary program: <cache>/<name>-<hash>.exe n bx by bz gx gy gz init
    name, launcher = Path(program[0]).name.rsplit("-", 1)[0], "nvcc-exe"
logs = Path(os.environ["FAKE_SANITIZER_LOGS"])
(logs / f"{name}.argv").write_text(json.dumps(sys.argv), encoding="utf-8")
text = (logs / f"{name}.log").read_text(encoding="utf-8")
Path(opts["--log-file"].replace("%%", "%")).write_text(text, encoding="utf-8")
if (logs / f"{name}.launcher").read_text(encoding="utf-8").strip() == "ok":
    print(json.dumps({"launcher": launcher, "kernel": name, "ok": True}))
m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"\((\d+) errors?,", text)
sys.exit(int(opts["--error-exitcode"]) if m and int(m.group(1)) else 0)
