#!/usr/bin/env python3
"""D12's throw probe where the throw path never runs: nothing printed, exit 0."""
import fakeops

fakeops.handle_probes()
