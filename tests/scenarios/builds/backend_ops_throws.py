#!/usr/bin/env python3
"""D12's throw probe on a healthy build: `--test-file` cannot be read, std::runtime_error is thrown
and not caught, libstdc++ prints what() and the process dies with SIGABRT."""
import fakeops

fakeops.handle_probes()
fakeops.err("terminate called after throwing an instance of 'std::runtime_error'")
fakeops.err("  what():  Unable to read test file")
fakeops.die("SIGABRT")
