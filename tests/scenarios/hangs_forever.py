"""Prints 'ready' and then sleeps until killed."""
import time

print("ready", flush=True)
while True:
    time.sleep(60)
