"""A tiny random-weight GGUF that llama-server loads: the model for server-path repros.

The server-path defects (D3's abort, D2's barrier reached through a real
decode) depend on the *shape* of attention, not on what the model says: the
head dim and the GQA ratio ``n_head / n_head_kv`` are what select the CUDA
FlashAttention kernel instantiation (D2's case is hsk=hsv=256 with GQA 4). So a
model with the right attention shape and random weights reaches the same
kernels in seconds, where the seed needed a 27B model.

The file is llama.cpp's standard ``llama`` architecture:

* metadata: ``general.*`` (architecture, name, file_type, quantization_version)
  and ``llama.*`` (context_length, embedding_length, block_count,
  feed_forward_length, attention.head_count, attention.head_count_kv,
  attention.key_length / value_length = head dim, rope.dimension_count = head
  dim (llama.cpp asserts n_rot == head dim for this architecture),
  rope.freq_base, attention.layer_norm_rms_epsilon, vocab_size);
* tensors, in ggml order ``ne0`` first: ``token_embd`` {n_embd, n_vocab},
  ``output_norm`` {n_embd}, ``output`` {n_embd, n_vocab}, and per layer
  ``attn_norm`` {n_embd}, ``attn_q`` {n_embd, head_dim*n_head}, ``attn_k`` and
  ``attn_v`` {n_embd, head_dim*n_head_kv}, ``attn_output`` {head_dim*n_head,
  n_embd}, ``ffn_norm`` {n_embd}, ``ffn_gate`` / ``ffn_up`` {n_embd, n_ff},
  ``ffn_down`` {n_ff, n_embd}. The ``gguf`` package takes numpy arrays in
  row-major order and writes their shape reversed, so an array of shape
  ``(ne1, ne0)`` becomes the tensor {ne0, ne1}. Norm weights are F32 (ones);
  the matrices F16 (default) or F32, normal with std 0.02.

The tokenizer is SentencePiece-style (``tokenizer.ggml.model = "llama"``) with
only ``<unk>``, ``<s>``, ``</s>`` and the 256 byte tokens ``<0x00>``…``<0xFF>``
(type BYTE), scores all zero. It was chosen over a GPT-2 byte-level BPE vocab
because it needs the least to be valid: llama.cpp's SPM tokenizer falls back to
byte tokens for any piece it cannot find, so no merges list is needed (the BPE
loader *requires* ``tokenizer.ggml.merges``, and needs the GPT-2 byte-to-unicode
table and a pre-tokenizer name), and llama.cpp finds the newline token
(``<0x0A>``) by name, which exists. Every prompt therefore tokenizes into bytes
(plus BOS), whatever its text. ``--vocab`` larger than 259 adds ``<unused_N>``
tokens (type UNUSED) to widen the output layer.

The rows of ``output`` that belong to anything but the printable ASCII bytes
(0x20-0x7E) are zero, so their logit is exactly 0 while the 95 printable ones
are random: greedy decoding (the registry's requests use temperature 0) then
emits printable ASCII only and never EOS, and runs for the full ``n_predict``.
Random weights over all 256 bytes produced invalid UTF-8, and upstream
llama-server (749f688fc) answered every completion on such a model with HTTP
500 "The model produced output that does not match the expected Content-only
format" (device run, two H200s, 2026-11-29). This remedy has not yet been
re-run on a device.

``arch="qwen35"`` writes the same tokenizer and printable-ASCII ``output``
around a hybrid Qwen3.5 trunk, and ``mtp_layers=1`` appends the NextN/MTP block
that llama-server's ``--spec-type draft-mtp`` drafts with (D3's path): the
layout and the reasons for that architecture are in :mod:`kvdiag.model.qwen35`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvdiag.errors import UsageError
from kvdiag.fileio import commit_atomic, temp_beside
from kvdiag.model import qwen35, tensor_data
from kvdiag.model.tensor_data import TensorPlan

ARCHES = ("llama", qwen35.ARCH)
SPECIALS = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
N_BYTE_TOKENS = 256
MIN_VOCAB = len(SPECIALS) + N_BYTE_TOKENS          # 259
WEIGHT_STD = 0.02
WEIGHT_INITS = ("fixed", "fan-in")
LAYER_RMS = 0.3                     # what one layer adds to the residual stream under the fan-in rule
RESIDUAL_WRITERS = frozenset({"attn_output", "ffn_down", "ssm_out"})
TYPES = ("f16", "f32", "q8_0")

# gguf's TokenType values (kept here so the spec needs no gguf import)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 5, 6


def gguf_module():
    """The ``gguf`` package, or a UsageError saying how to get it."""
    try:
        import gguf  # noqa: PLC0415
    except ImportError:
        raise UsageError("writing a GGUF needs the gguf package (and numpy): "
                         "pip install 'gguf>=0.10' numpy (both are kvdiag dependencies: "
                         "reinstall kvdiag with python3 -m pip install -e .)") from None
    return gguf


MAX_PARAMS = 1 << 31       # 4 GiB of f16 weights: far past any tiny server-path repro's need
MAX_PARAMS_Q8_0 = 1 << 35  # 34 billion q8_0 parameters (36 GiB): room for the seed's 27B shapes, no more
MAX_LAYERS = 4096


def _product(ne) -> int:
    total = 1
    for n in ne:
        total *= int(n)
    return total


@dataclass(frozen=True)
class ModelSpec:
    """The attention shape and sizes of the model to write."""

    head_dim: int = 128
    n_head: int = 8
    n_head_kv: int = 2
    n_layer: int = 2
    n_embd: int | None = None       # default n_head * head_dim
    n_ff: int | None = None         # default n_embd
    n_ctx: int = 4096
    n_vocab: int = MIN_VOCAB
    seed: int = 0
    dtype: str = "f16"
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5
    name: str = ""
    arch: str = "llama"
    mtp_layers: int = 0             # qwen35: NextN/MTP blocks appended after the trunk
    attention_interval: int = 4     # qwen35: every Nth trunk layer is attention, the rest gated delta net
    ssm_state: int = 64             # qwen35: delta-net head dim (K and V)
    ssm_groups: int = 2             # qwen35: delta-net K heads
    ssm_v_heads: int = 4            # qwen35: delta-net V heads
    ssm_conv: int = 4               # qwen35: conv kernel
    weight_init: str = "fixed"      # fixed: std 0.02 (tiny models); fan-in: see matrix_std (deep, wide models)

    @property
    def embd(self) -> int:
        return self.n_embd if self.n_embd is not None else self.n_head * self.head_dim

    @property
    def ff(self) -> int:
        return self.n_ff if self.n_ff is not None else self.embd

    @property
    def gqa(self) -> int:
        return self.n_head // self.n_head_kv

    @property
    def model_name(self) -> str:
        mtp = f"-mtp{self.mtp_layers}" if self.mtp_layers else ""
        return self.name or (f"kvdiag-tiny-{self.arch}-d{self.head_dim}-h{self.n_head}-kv{self.n_head_kv}"
                             f"-l{self.n_layer}{mtp}")

    @property
    def block_count(self) -> int:
        """``<arch>.block_count``: the trunk and the MTP blocks after it."""
        return self.n_layer + self.mtp_layers

    def problems(self) -> list[str]:
        out = []
        for key in ("head_dim", "n_head", "n_head_kv", "n_layer", "n_ctx"):
            if getattr(self, key) < 1:
                out.append(f"{key} must be at least 1 (got {getattr(self, key)})")
        if self.head_dim % 2:
            out.append(f"head_dim must be even for RoPE (got {self.head_dim})")
        if self.n_head_kv >= 1 and self.n_head % self.n_head_kv:
            out.append(f"n_head ({self.n_head}) must be a multiple of n_head_kv ({self.n_head_kv})")
        if self.embd < 1 or self.ff < 1:
            out.append("n_embd and n_ff must be at least 1")
        if self.n_vocab < MIN_VOCAB:
            out.append(f"the vocabulary needs at least {MIN_VOCAB} tokens "
                       f"({len(SPECIALS)} specials + {N_BYTE_TOKENS} bytes), got {self.n_vocab}")
        if self.weight_init not in WEIGHT_INITS:
            out.append(f"weight_init must be one of {', '.join(WEIGHT_INITS)} (got {self.weight_init!r})")
        if self.dtype not in TYPES:
            out.append(f"dtype must be one of {', '.join(TYPES)} (got {self.dtype!r})")
        if self.arch not in ARCHES:
            out.append(f"arch must be one of {', '.join(ARCHES)} (got {self.arch!r})")
        elif self.arch == qwen35.ARCH:
            out.extend(qwen35.problems(self))
        elif self.mtp_layers:
            out.append(f"only qwen35 carries MTP blocks here (got --mtp-layers {self.mtp_layers} with {self.arch})")
        if not out and self.n_layer <= MAX_LAYERS:
            weights = sum(_product(ne) for ne in self.tensor_shapes().values())
            limit = MAX_PARAMS_Q8_0 if self.dtype == "q8_0" else MAX_PARAMS
            if weights > limit:
                out.append(f"the shape asks for {weights:,} parameters; a {self.dtype} model is at most {limit:,} "
                           f"(the product of the dimensions is checked before anything is allocated)")
            if self.dtype == "q8_0":
                out.extend(f"{name} rows of {ne[0]} values are not whole q8_0 blocks of {tensor_data.QK8_0}"
                           for name, ne in self.tensor_shapes().items()
                           if len(ne) > 1 and not qwen35.keeps_f32(name) and ne[0] % tensor_data.QK8_0)
        elif self.n_layer > MAX_LAYERS:
            out.append(f"n_layer must be at most {MAX_LAYERS} (got {self.n_layer})")
        return out

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every tensor's shape in ggml order (ne0 first), as llama.cpp expects it."""
        if self.arch == qwen35.ARCH:
            return qwen35.tensor_shapes(self)
        e, v, ff = self.embd, self.n_vocab, self.ff
        q, kv = self.head_dim * self.n_head, self.head_dim * self.n_head_kv
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (e, v), "output_norm.weight": (e,),
                                              "output.weight": (e, v)}
        for i in range(self.n_layer):
            shapes.update({
                f"blk.{i}.attn_norm.weight": (e,),
                f"blk.{i}.attn_q.weight": (e, q),
                f"blk.{i}.attn_k.weight": (e, kv),
                f"blk.{i}.attn_v.weight": (e, kv),
                f"blk.{i}.attn_output.weight": (q, e),
                f"blk.{i}.ffn_norm.weight": (e,),
                f"blk.{i}.ffn_gate.weight": (e, ff),
                f"blk.{i}.ffn_up.weight": (e, ff),
                f"blk.{i}.ffn_down.weight": (ff, e),
            })
        return shapes


# Token ids of the printable ASCII bytes 0x20-0x7E: the only rows of `output` left non-zero.
SPEAKABLE_TOKENS = frozenset(range(len(SPECIALS) + 0x20, len(SPECIALS) + 0x7F))


def vocabulary(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the byte-fallback SentencePiece vocab."""
    tokens = list(SPECIALS) + [f"<0x{b:02X}>" for b in range(N_BYTE_TOKENS)]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * N_BYTE_TOKENS
    extra = n_vocab - len(tokens)
    tokens += [f"<unused_{i}>" for i in range(extra)]
    types += [TOKEN_UNUSED] * extra
    return tokens, [0.0] * len(tokens), types


@dataclass(frozen=True)
class SynthReport:
    """What was written: ``path`` is the file itself, ``given`` the path asked for (a symlink to
    ``path`` when the two differ)."""

    path: Path
    spec: ModelSpec
    tensors: dict[str, tuple[int, ...]] = field(default_factory=dict)
    n_params: int = 0
    bytes: int = 0
    given: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.spec
        through = str(self.given) if self.given is not None and Path(self.given) != Path(self.path) else None
        return {"path": str(self.path), "through_symlink": through, "architecture": s.arch,
                "mtp_layers": s.mtp_layers, "name": s.model_name, "head_dim": s.head_dim,
                "n_head": s.n_head, "n_head_kv": s.n_head_kv, "gqa_ratio": s.gqa, "n_layer": s.n_layer,
                "n_embd": s.embd, "n_ff": s.ff, "n_ctx": s.n_ctx, "n_vocab": s.n_vocab, "dtype": s.dtype,
                "seed": s.seed, "n_params": self.n_params, "bytes": self.bytes,
                "tensors": {k: list(v) for k, v in self.tensors.items()}}


def synthesize(spec: ModelSpec, path: Path) -> SynthReport:
    """Write the GGUF (atomically: a temporary file renamed into place), streamed tensor by tensor.

    The header goes first (every tensor's shape, type and size is known from the spec), then
    each tensor's bytes in row chunks (:mod:`kvdiag.model.tensor_data`): memory stays at a few
    chunks whatever the model's size, so a seed-scale model is written as a tiny one is."""
    problems = spec.problems()
    if problems:
        raise UsageError("; ".join(problems))
    gguf = gguf_module()

    path = Path(path)
    tmp = temp_beside(path)              # refuses a FIFO, device node or directory before any work
    plans = tensor_plans(spec)
    _check_room(path, sum(p.nbytes for p in plans))
    writer = gguf.GGUFWriter(str(tmp), spec.arch)
    try:
        _metadata(writer, gguf, spec)
        for plan in plans:
            writer.add_tensor_info(plan.name, tuple(reversed(plan.ne)), _NUMPY_STAND_IN, plan.nbytes,
                                   raw_dtype=gguf.GGMLQuantizationType(plan.ggml_type))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        _write_tensor_data(writer, plans)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    written = commit_atomic(tmp, path)
    shapes = {p.name: p.ne for p in plans}
    n_params = sum(_product(ne) for ne in shapes.values())
    return SynthReport(path=written, spec=spec, tensors=shapes, n_params=n_params, bytes=written.stat().st_size,
                       given=path)


# add_tensor_info takes a numpy dtype beside raw_dtype; any but uint8 keeps the shape as given (in values).
_NUMPY_STAND_IN = np.dtype(np.float32)


def _write_tensor_data(writer, plans: list[TensorPlan]) -> None:
    """Each tensor's bytes where the header placed them: aligned start, the data, padding after
    (what ``GGUFWriter.write_tensor_data`` does for a whole array, done here chunk by chunk)."""
    fout = writer.fout[0]
    for plan in plans:
        writer.write_padding(fout, fout.tell())
        written = 0
        for chunk in plan.chunks():
            fout.write(memoryview(np.ascontiguousarray(chunk)).cast("B"))
            written += chunk.nbytes
        if written != plan.nbytes:
            raise RuntimeError(f"{plan.name}: wrote {written} bytes, the header says {plan.nbytes}")
        writer.write_padding(fout, plan.nbytes)


def _check_room(path: Path, data_bytes: int) -> None:
    """A large model that cannot fit is refused before anything is written (a full disk mid-file
    costs minutes and leaves the disk full)."""
    need = data_bytes + (64 << 20)
    free = shutil.disk_usage(path.parent if str(path.parent) else Path(".")).free
    if need > free:
        raise UsageError(f"{path}: the model needs about {_size(need)} and {path.parent or '.'} has "
                         f"{_size(free)} free")


def _size(n: int) -> str:
    """GiB with one decimal from 1 GiB on, MiB below (issue 43: "0.1 GiB … 0.0 GiB free" on a 50 MB disk)."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def tensor_plans(spec: ModelSpec) -> list[TensorPlan]:
    """Every tensor in file order, with the generator of its bytes (one random stream, seeded once)."""
    rng = np.random.default_rng(spec.seed)
    plans = []
    for name, ne in spec.tensor_shapes().items():
        plans.append(_plan(name, tuple(ne), spec, rng))
    return plans


def _plan(name: str, ne: tuple[int, ...], spec: ModelSpec, rng) -> TensorPlan:
    """How one tensor's bytes are made. The generators run in file order, sharing ``rng``, so a
    given seed always writes the same file."""
    if len(ne) == 1:
        fill = qwen35.one_d_fill(name)
        return TensorPlan(name, ne, tensor_data.GGML_F32, lambda: tensor_data.constant_rows(ne, fill))
    zero = _unspeakable_rows(spec) if name == "output.weight" else None
    steer = qwen35.row_steering(name, spec) if spec.mtp_layers else None
    std = matrix_std(name, ne, spec)
    if qwen35.keeps_f32(name) or spec.dtype in ("f16", "f32"):
        out = np.float32 if qwen35.keeps_f32(name) or spec.dtype == "f32" else np.float16
        ggml_type = tensor_data.GGML_F32 if out is np.float32 else tensor_data.GGML_F16

        def float_rows():
            row_steer = steer
            if spec.mtp_layers and name == "token_embd.weight" and spec.weight_init == "fixed":
                scale = np.float32(qwen35.EMBED_RMS / (tensor_data.sample_std(rng, ne, std) or 1.0))
                row_steer = lambda rows, _start: rows * scale  # noqa: E731
            return tensor_data.normal_float_rows(rng, ne, std, out, steer=row_steer, zero_rows=zero)
        return TensorPlan(name, ne, ggml_type, float_rows)
    if steer is not None and qwen35.steering_edits_values(name):
        return TensorPlan(name, ne, tensor_data.GGML_Q8_0,
                          lambda: tensor_data.quantized_float_rows(rng, ne, std, steer))
    return TensorPlan(name, ne, tensor_data.GGML_Q8_0, lambda: tensor_data.random_q8_0_rows(rng, ne, std, zero))


def matrix_std(name: str, ne: tuple[int, ...], spec: ModelSpec) -> float:
    """The standard deviation of a weight matrix's random values.

    ``fixed`` (the tiny models): :data:`WEIGHT_STD` everywhere, as every recorded run used.
    ``fan-in`` (deep and wide models, the seed-27b preset): 1/sqrt(fan_in), so every projection
    keeps its activations near unit size however wide the layer; the matrices that write into the
    residual stream (:data:`RESIDUAL_WRITERS`) are scaled to :data:`LAYER_RMS` * sqrt(4 / n_layer),
    so the whole trunk adds about what the tiny 4-layer model's layers add (0.3 each, 0.6 in all)
    and the token embedding (RMS ``qwen35.EMBED_RMS``) still decides the next token: the steering
    that gets drafts accepted holds at 64 layers as at 4. ``token_embd`` under ``fan-in`` is drawn
    at ``EMBED_RMS`` directly when the model has an MTP block."""
    if spec.weight_init == "fixed":
        return WEIGHT_STD
    if name == "token_embd.weight":
        return qwen35.EMBED_RMS if spec.mtp_layers else 1.0
    fan_in = ne[0]
    if name.rsplit(".", 2)[-2] in RESIDUAL_WRITERS:
        return LAYER_RMS * (4.0 / max(4, spec.block_count)) ** 0.5 / fan_in ** 0.5
    return 1.0 / fan_in ** 0.5


def _unspeakable_rows(spec: ModelSpec):
    """The rows of ``output`` to zero: every token but the printable ASCII bytes."""
    speakable = np.zeros(spec.n_vocab, dtype=bool)
    speakable[sorted(t for t in SPEAKABLE_TOKENS if t < spec.n_vocab)] = True
    return lambda start, end: ~speakable[start:end]


def _metadata(writer, gguf, spec: ModelSpec) -> None:
    writer.add_name(spec.model_name)
    writer.add_description("random weights written by kvdiag model synth: the attention shape is the point, "
                           "not the text")
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "f32": gguf.LlamaFileType.ALL_F32,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[spec.dtype]
    writer.add_file_type(int(file_type))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(spec.n_ctx)
    writer.add_embedding_length(spec.embd)
    writer.add_block_count(spec.block_count)
    writer.add_feed_forward_length(spec.ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    if spec.arch == qwen35.ARCH:
        qwen35.metadata(writer, spec)
    else:
        writer.add_rope_dimension_count(spec.head_dim)
    writer.add_rope_freq_base(spec.rope_freq_base)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_vocab_size(spec.n_vocab)
    tokens, scores, types = vocabulary(spec.n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(UNK_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
