"""Prints a line every 0.1 s for the given seconds, then sleeps until killed (silent)."""
import sys
import time

end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    print(f"line {n}", flush=True)
    n += 1
    time.sleep(0.1)
while True:
    time.sleep(60)
