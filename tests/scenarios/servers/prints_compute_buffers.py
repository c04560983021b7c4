"""Prints, as it starts, the recorded log lines of its cache type, then answers like llama-server.

The lines are ``$STANDIN_BUFFERS/<ctk>.log`` (``-ctk kvarn5`` prints ``kvarn5.log``;
no such file prints none): D5's two arms, one stand-in. With ``<ctk>.exit``
present beside it, the server prints the lines and exits with the status that
file holds before it listens (an arm that fails at start-up).
"""
import os
import sys
from pathlib import Path

import standin


def cache_type(argv: list[str]) -> str:
    return argv[argv.index("-ctk") + 1] if "-ctk" in argv[:-1] else "f16"


args = standin.parse_args()
standin.start(args)
folder = Path(os.environ.get("STANDIN_BUFFERS", "."))
ctk = cache_type(sys.argv[1:])
lines = folder / f"{ctk}.log"
if lines.is_file():
    sys.stderr.write(lines.read_text())
    sys.stderr.flush()
status = folder / f"{ctk}.exit"
if status.is_file():
    sys.exit(int(status.read_text().strip()))
standin.serve(args)
