"""Prints whether its stdout and stderr are terminals, in CRLF-prone two lines."""
import os
import sys

print(f"stdout isatty={os.isatty(1)}", flush=True)
print(f"stderr isatty={os.isatty(2)}", file=sys.stderr, flush=True)
print("second line", flush=True)
