"""Synthetic project: `build.py BUILD` "compiles" kernel.txt into BUILD/bin/test-backend-ops.

The built program behaves the way kernel.txt says: a line "divergent" makes it print a
barrier error for the hsk=256 cases (the defect), "wrong" makes every case FAIL, and
"syntax error" makes the build itself fail. A project with a standin_dir.txt (the folder
of tests/scenarios/servers) also gets a BUILD/bin/llama-server: "divergent" makes it abort
mid-request like D3 (fake_llama_server.py).
"""

import json
import stat
import sys
from pathlib import Path

source = Path(__file__).resolve().parent
build = Path(sys.argv[1])
if not (build / "configured.json").is_file():
    print("build.py: not configured (run configure.py first)", file=sys.stderr)
    sys.exit(2)
kernel = (source / "kernel.txt").read_text()
if "syntax error" in kernel:
    print("kernel.txt:1:1: error: expected ';' before '}' token", file=sys.stderr)
    print("build.py: 1 error generated", file=sys.stderr)
    sys.exit(1)
mode = {"divergent": "divergent" in kernel, "wrong": "wrong" in kernel}
program = (source / "fake_test_backend_ops.py").read_text()
out = build / "bin" / "test-backend-ops"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(f"#!{sys.executable}\nMODE = {json.dumps(mode)!r}\n{program}")
out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
print(f"built {out} ({mode})")
if (source / "standin_dir.txt").is_file():
    server = build / "bin" / "llama-server"
    standin_dir = (source / "standin_dir.txt").read_text().strip()
    body = (source / "fake_llama_server.py").read_text()
    server.write_text(f"#!{sys.executable}\nMODE = {json.dumps(mode)!r}\nSTANDIN = {standin_dir!r}\n{body}")
    server.chmod(server.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    print(f"built {server} ({mode})")
