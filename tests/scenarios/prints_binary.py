"""Writes bytes that are not valid UTF-8, and a multi-byte character, to stdout."""
import sys

sys.stdout.buffer.write(b"valid \xc3\xa9 then invalid \xff\xfe end\n")
sys.stdout.buffer.write(b"\x00nul byte line\n")
sys.stdout.buffer.flush()
