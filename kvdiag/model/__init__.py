"""Models kvdiag makes itself: :mod:`kvdiag.model.synth` writes a tiny random-weight GGUF whose
attention shape (head dim, GQA ratio) selects the FlashAttention kernels a server-path repro needs.

Writing needs the optional ``gguf`` package (and numpy); importing this package does not.
"""

from kvdiag.model.synth import ModelSpec, SynthReport, synthesize

__all__ = ["ModelSpec", "SynthReport", "synthesize"]
