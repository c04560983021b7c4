"""Alternates lines on stdout and stderr, flushing each, so their order is known:
out 0, err 1, out 2, err 3, ... then a last stdout fragment without a newline."""
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
for i in range(n):
    stream = sys.stdout if i % 2 == 0 else sys.stderr
    stream.write(f"{'out' if i % 2 == 0 else 'err'} {i}\n")
    stream.flush()
    time.sleep(0.01)
sys.stdout.write("tail without newline")
sys.stdout.flush()
