"""The ``qwen35`` layout: a hybrid (gated delta net + attention) model that carries an MTP head.

Why this architecture: D3 needs a llama-server that runs ``--spec-type
draft-mtp``, and that draft type only drafts with a model's own NextN/MTP
block. In both trees kvdiag targets (the BeeLlama fork 775450a68 and upstream
749f688fc) the architectures with a ``LLM_GRAPH_TYPE_DECODER_MTP`` graph are
deepseek2/32/4, glm-dsa, step35, hy-v3, mimo2, cohere2moe, qwen3next, qwen35 and
qwen35moe (``src/models/*.cpp``). Of these, ``qwen35`` is dense (no experts,
no MLA, no indexer), its loader and MTP graph are identical in the two trees
(``src/models/qwen35.cpp``), and it is the seed's own family: the seed's
"Qwen3.8-27B" is a 64-layer qwen35 (``LLM_TYPE_27B`` is qwen35 with 64 layers).

What llama.cpp reads (``llama_model_qwen35::load_arch_hparams`` /
``load_arch_tensors``; ``ne0`` first):

* ``block_count`` counts the trunk *and* the MTP block(s): ``n_layer()`` is
  ``block_count - nextn_predict_layers`` and the MTP block is the layer right
  after the trunk (``blk.{n_layer}``). The MTP graph asserts exactly one.
* required keys beyond the common ones: ``rope.dimension_sections`` (4 ints,
  IMROPE), ``ssm.conv_kernel``, ``ssm.inner_size``, ``ssm.state_size``,
  ``ssm.time_step_rank``, ``ssm.group_count``; optional
  ``full_attention_interval`` (default 4: layer i is recurrent unless
  ``(i + 1) % interval == 0``) and ``nextn_predict_layers``.
* attention layers: ``attn_q`` is {n_embd, 2 * head_dim * n_head} (query and
  gate), ``attn_k``/``attn_v`` {n_embd, head_dim * n_head_kv}, ``attn_output``
  {head_dim * n_head, n_embd}, ``attn_q_norm``/``attn_k_norm`` {head_dim};
  every layer has ``attn_norm`` and ``post_attention_norm`` {n_embd} and the
  dense FFN ``ffn_gate``/``ffn_up`` {n_embd, n_ff}, ``ffn_down`` {n_ff, n_embd}.
* recurrent (gated delta net) layers, with key_dim = state * groups,
  value_dim = state * v_heads, conv_dim = 2 * key_dim + value_dim:
  ``attn_qkv`` {n_embd, conv_dim}, ``attn_gate`` {n_embd, value_dim},
  ``ssm_conv1d`` {conv_kernel, conv_dim}, ``ssm_dt.bias`` and ``ssm_a``
  {v_heads}, ``ssm_beta``/``ssm_alpha`` {n_embd, v_heads}, ``ssm_norm``
  {state}, ``ssm_out`` {value_dim, n_embd}; ``ssm.inner_size`` must be
  value_dim (the graph's conv channel count is inner_size + 2 * key_dim).
* the MTP block: an attention layer plus ``nextn.eh_proj`` {2 * n_embd,
  n_embd}, ``nextn.enorm`` and ``nextn.hnorm`` {n_embd}. Its embedding, head
  norm and LM head default to the trunk's ``token_embd``, ``output_norm`` and
  ``output`` when ``nextn.embed_tokens`` / ``shared_head_*`` are absent, so the
  printable-ASCII ``output`` rows bind the draft as they bind the target.

Drafts that get accepted: with every weight random, the MTP block and the
trunk predict unrelated tokens and almost no draft is accepted (a CPU run of the
fork: 1 of 2688 drafted tokens in 900). D3's verdict needs accepted drafts, so
a model with an MTP block is steered towards a bigram model that both halves
compute: ``token_embd`` is scaled up (RMS ``EMBED_RMS``) so that the residual
stream of the trunk is mostly the last token's embedding and the greedy next
token is about f(last token); ``nextn.eh_proj`` gets ``EH_GAIN`` times the
identity on its embedding half, so the MTP block sees mostly the embedding of
the token it is given and predicts about f(that token): the target's own next
token. The random layers perturb both, so some drafts are still rejected.

Values: ``ssm_a`` is -1 (it is -exp(A_log): a positive value makes the delta
net's decay exp(softplus(.) * a) grow without bound over a long generation),
``ssm_dt.bias`` 0, other 1-D tensors (norms) 1; ``ssm_conv1d`` is kept F32.
"""

from __future__ import annotations

from typing import Any

ModelSpec = Any     # a kvdiag.model.synth.ModelSpec (synth imports this module, not the other way round)

ARCH = "qwen35"
F32_MATRICES = frozenset({"ssm_conv1d.weight"})
ONE_D_FILL = {"ssm_a": -1.0, "ssm_dt.bias": 0.0}
EMBED_RMS = 4.0        # token_embd's RMS in a model with an MTP block (the layers add about 0.3 each)
EH_GAIN = 4.0          # nextn.eh_proj's identity on the token-embedding half of its input


def rope_dim(spec: ModelSpec) -> int:
    """A quarter of the head dim (Qwen3.5's partial rotary factor), even."""
    return max(2, (spec.head_dim // 4) // 2 * 2)


def rope_sections(spec: ModelSpec) -> list[int]:
    """IMROPE sections over the rotated pairs, split as Qwen3.5 splits 32 pairs: [11, 11, 10, 0]."""
    half = rope_dim(spec) // 2
    base, rem = divmod(half, 3)
    return [base + (rem > 0), base + (rem > 1), base, 0]


def is_recurrent(spec: ModelSpec, il: int) -> bool:
    return il < spec.n_layer and (il + 1) % spec.attention_interval != 0


def ssm_dims(spec: ModelSpec) -> tuple[int, int, int]:
    """(key_dim, value_dim, conv_dim) of the gated delta net."""
    key_dim = spec.ssm_state * spec.ssm_groups
    value_dim = spec.ssm_state * spec.ssm_v_heads
    return key_dim, value_dim, 2 * key_dim + value_dim


def problems(spec: ModelSpec) -> list[str]:
    out = []
    if spec.mtp_layers not in (0, 1):
        out.append(f"qwen35's MTP graph runs exactly one MTP block (--mtp-layers 0 or 1, got {spec.mtp_layers})")
    for key in ("ssm_state", "ssm_groups", "ssm_v_heads", "ssm_conv", "attention_interval"):
        if getattr(spec, key) < 1:
            out.append(f"{key} must be at least 1 (got {getattr(spec, key)})")
    if spec.ssm_groups >= 1 and spec.ssm_v_heads % spec.ssm_groups:
        out.append(f"ssm_v_heads ({spec.ssm_v_heads}) must be a multiple of ssm_groups ({spec.ssm_groups})")
    if spec.head_dim < 4:
        out.append(f"qwen35 rotates a quarter of the head dim: head_dim must be at least 4 (got {spec.head_dim})")
    return out


def tensor_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    e, v, ff, hd = spec.embd, spec.n_vocab, spec.ff, spec.head_dim
    q, kv = hd * spec.n_head, hd * spec.n_head_kv
    key_dim, value_dim, conv_dim = ssm_dims(spec)
    vh = spec.ssm_v_heads
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (e, v), "output_norm.weight": (e,),
                                          "output.weight": (e, v)}
    for il in range(spec.n_layer + spec.mtp_layers):
        b = f"blk.{il}."
        shapes.update({b + "attn_norm.weight": (e,), b + "post_attention_norm.weight": (e,)})
        if is_recurrent(spec, il):
            shapes.update({
                b + "attn_qkv.weight": (e, conv_dim), b + "attn_gate.weight": (e, value_dim),
                b + "ssm_conv1d.weight": (spec.ssm_conv, conv_dim), b + "ssm_dt.bias": (vh,), b + "ssm_a": (vh,),
                b + "ssm_beta.weight": (e, vh), b + "ssm_alpha.weight": (e, vh),
                b + "ssm_norm.weight": (spec.ssm_state,), b + "ssm_out.weight": (value_dim, e),
            })
        else:
            shapes.update({
                b + "attn_q.weight": (e, 2 * q), b + "attn_k.weight": (e, kv), b + "attn_v.weight": (e, kv),
                b + "attn_output.weight": (q, e), b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,),
            })
        shapes.update({b + "ffn_gate.weight": (e, ff), b + "ffn_up.weight": (e, ff), b + "ffn_down.weight": (ff, e)})
        if il >= spec.n_layer:
            shapes.update({b + "nextn.eh_proj.weight": (2 * e, e), b + "nextn.enorm.weight": (e,),
                           b + "nextn.hnorm.weight": (e,)})
    return shapes


def row_steering(name: str, spec: ModelSpec):
    """How the random rows of tensor ``name`` are steered so that drafts get accepted (see the
    module's docstring), as a function of (float rows, index of the first row), or None.

    ``token_embd``'s scale is set by the writer (it needs the whole tensor's spread, or the
    fan-in rule's std, see ``synth.matrix_std``); ``nextn.eh_proj`` gets ``EH_GAIN`` times the
    identity on its embedding half. Rows come in chunks, so the identity is placed by row index."""
    if name.endswith(".nextn.eh_proj.weight"):
        e = spec.embd                       # numpy shape (e, 2e): [output, input]; input = [enorm(embd), hnorm(h)]

        def add_identity(rows, start: int):
            for i in range(rows.shape[0]):
                if start + i < e:
                    rows[i, start + i] += EH_GAIN
            return rows
        return add_identity
    return None


def steering_edits_values(name: str) -> bool:
    """Whether the steering adds structure to the values (not just a scale): such a tensor is drawn
    as floats and quantized, where plain noise is written as random quantized blocks."""
    return name.endswith(".nextn.eh_proj.weight")


def one_d_fill(name: str) -> float:
    """The constant a 1-D tensor is filled with (see the module's docstring)."""
    suffix = name.split(".", 2)[-1] if name.startswith("blk.") else name
    return ONE_D_FILL.get(suffix, 1.0)


def keeps_f32(name: str) -> bool:
    return name.split(".", 2)[-1] in F32_MATRICES


def metadata(writer, spec: ModelSpec) -> None:
    """The architecture's keys beyond the common ones (``qwen35.*``)."""
    _, value_dim, _ = ssm_dims(spec)
    writer.add_rope_dimension_count(rope_dim(spec))
    writer.add_array(f"{ARCH}.rope.dimension_sections", rope_sections(spec))
    writer.add_uint32(f"{ARCH}.ssm.conv_kernel", spec.ssm_conv)
    writer.add_uint32(f"{ARCH}.ssm.inner_size", value_dim)
    writer.add_uint32(f"{ARCH}.ssm.state_size", spec.ssm_state)
    writer.add_uint32(f"{ARCH}.ssm.time_step_rank", spec.ssm_v_heads)
    writer.add_uint32(f"{ARCH}.ssm.group_count", spec.ssm_groups)
    writer.add_uint32(f"{ARCH}.full_attention_interval", spec.attention_interval)
    if spec.mtp_layers:
        writer.add_uint32(f"{ARCH}.nextn_predict_layers", spec.mtp_layers)
