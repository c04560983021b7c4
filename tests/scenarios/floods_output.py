"""Writes N numbered lines of WIDTH bytes to stdout (and every 100th to stderr) as fast as it can.

usage: floods_output.py N WIDTH
"""
import sys

n = int(sys.argv[1])
width = int(sys.argv[2])
out = sys.stdout.buffer
err = sys.stderr.buffer
pad = b"x" * width
for i in range(n):
    out.write(b"%08d " % i + pad + b"\n")
    if i % 100 == 0:
        err.write(b"err %08d\n" % i)
out.flush()
err.flush()
