#!/usr/bin/env python3
"""D12's throw probe on a build with broken unwind tables: the throw traps (ud2) and the
process dies with SIGILL before anything reaches std::terminate."""
import fakeops

fakeops.handle_probes()
fakeops.die("SIGILL")
