"""Ignores SIGTERM, prints 'ready', and sleeps: only SIGKILL ends it."""
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(60)
