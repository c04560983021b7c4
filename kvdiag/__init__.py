"""kvdiag: reproduce and diagnose known CUDA defects of llama.cpp-family engines.

The package is laid out by axis of variation: ``registry`` (defect entries as
data), ``proc`` (the one subprocess layer), ``parse`` (readers of real tool
output), ``target`` (what the user's build and GPU are), ``engine`` (from an
entry and a build to a verdict), ``controls`` (canaries that prove a detector
works here), ``store`` (runs on disk) and ``report`` (formats that only read
results). Only ``kvdiag.cli`` exits.
"""

__version__ = "0.1.1"
