"""Models kvdiag makes itself: :mod:`kvdiag.model.synth` writes a random-weight GGUF whose
attention shape (head dim, GQA ratio) selects the FlashAttention kernels a server-path repro needs;
:mod:`kvdiag.model.presets` names the seed's own shapes; :mod:`kvdiag.model.tensor_data` makes the
bytes in row chunks; :mod:`kvdiag.model.gguf_meta` reads a header without numpy.

Writing needs the ``gguf`` package and numpy; importing this package needs neither (the header
reader runs on every D3 applicability check).
"""
