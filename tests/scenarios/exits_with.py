"""Prints 'exiting with CODE' and exits with CODE. usage: exits_with.py CODE"""
import sys

code = int(sys.argv[1])
print(f"exiting with {code}", flush=True)
sys.exit(code)
