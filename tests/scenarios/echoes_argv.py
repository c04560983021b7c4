"""Prints its arguments (after the script name) as one JSON list."""
import json
import sys

print(json.dumps(sys.argv[1:]))
