"""Prints the value of each environment variable named on the command line, then its cwd."""
import os
import sys

for name in sys.argv[1:]:
    print(f"{name}={os.environ.get(name, '<unset>')}")
print(f"cwd={os.getcwd()}")
