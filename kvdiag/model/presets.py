"""Named model shapes: the seed's own model, so that a repro runs at the scale the seed saw.

``seed-27b`` is the shape of the seed register's model (Qwen3.8-27B-UD-IQ2_M, a
64-layer qwen35 with one MTP block; seed 004). Where each number comes from:

* ``n_layer = 64``: llama.cpp's qwen35 loader (``src/models/qwen35.cpp``,
  ``load_arch_hparams``, identical in BeeLlama 775450a68 and upstream 749f688fc)
  types a 64-layer trunk as ``LLM_TYPE_27B`` (``case 64: type = LLM_TYPE_27B``).
* the trunk pattern: the same loader makes layer ``i`` recurrent unless
  ``(i + 1) % full_attention_interval == 0``, default 4: 48 gated-delta-net
  layers and 16 attention layers, the MTP block after them attention only.
* the widths and heads, which llama.cpp reads from the file and the source does
  not fix: the Qwen3.5 27B text config (``qwen3_5_text``): hidden 5120,
  intermediate 17408, 24 query heads, 4 KV heads (GQA 6), head dim 256, delta
  net 16 key heads and 48 value heads of 128, conv kernel 4, vocabulary
  248320, RoPE theta 1e7 over a quarter of the head dim, RMS epsilon 1e-6,
  context 262144, one MTP layer (``mtp_num_hidden_layers``).
* the weights: q8_0 (a type every CUDA build loads; the seed's IQ2_M is an
  importance-matrix quantization kvdiag cannot make from random weights) and
  the ``fan-in`` initialization, which keeps a 64-layer random trunk from
  drowning the embedding-steered next token (``synth.matrix_std``).

What is not the seed's: the tokenizer (kvdiag's byte-fallback vocabulary padded
with unused tokens to 248320 rows, so ``token_embd`` and ``output`` have the
real size) and of course the weights. 27,320,692,736 parameters, a 27.0 GiB file (measured on an
H200: written in 115.6 s with a peak RSS of 230.8 MiB).
"""

from __future__ import annotations

from types import MappingProxyType

SEED_27B = MappingProxyType({
    "arch": "qwen35", "mtp_layers": 1, "n_layer": 64, "attention_interval": 4,
    "n_embd": 5120, "n_ff": 17408, "n_head": 24, "n_head_kv": 4, "head_dim": 256,
    "ssm_state": 128, "ssm_groups": 16, "ssm_v_heads": 48, "ssm_conv": 4,
    "n_vocab": 248320, "n_ctx": 262144, "rope_freq_base": 1e7, "rms_eps": 1e-6,
    "dtype": "q8_0", "weight_init": "fan-in", "name": "kvdiag-seed-27b-qwen35-mtp1",
})

PRESETS = MappingProxyType({"seed-27b": SEED_27B})
