"""`kvdiag model synth`: the GGUF it writes, read back with gguf.GGUFReader.

The attention shape is asserted from the file itself (metadata and tensor
dims in ggml order), as llama.cpp will read it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import gguf          # kvdiag dependencies (pyproject), so never skipped
import numpy as np
import pytest
from click.testing import CliRunner

from kvdiag.commands.model import model_group
from kvdiag.errors import UsageError
from kvdiag.model.synth import MIN_VOCAB, ModelSpec, synthesize, vocabulary

from gguf_fields import field


@pytest.fixture(scope="module")
def d2_shaped(tmp_path_factory) -> tuple[Path, object]:
    """D2's attention shape (head dim 256, GQA 4) with a narrow embedding so the file stays small."""
    path = tmp_path_factory.mktemp("synth") / "tiny.gguf"
    spec = ModelSpec(head_dim=256, n_head=8, n_head_kv=2, n_layer=2, n_embd=64, n_ff=96, n_ctx=4096, seed=3)
    synthesize(spec, path)
    return path, gguf.GGUFReader(path)


def test_metadata_says_llama_with_the_asked_attention_shape(d2_shaped):
    _, reader = d2_shaped
    assert field(reader, "general.architecture") == "llama"
    expected = {
        "llama.context_length": 4096, "llama.embedding_length": 64, "llama.block_count": 2,
        "llama.feed_forward_length": 96, "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2,
        "llama.attention.key_length": 256, "llama.attention.value_length": 256,
        "llama.rope.dimension_count": 256, "llama.vocab_size": MIN_VOCAB,
    }
    assert {k: field(reader, k) for k in expected} == expected
    assert field(reader, "llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert field(reader, "general.file_type") == int(gguf.LlamaFileType.MOSTLY_F16)


def test_tensors_have_llama_cpp_shapes_in_ggml_order(d2_shaped):
    _, reader = d2_shaped
    shapes = {t.name: tuple(int(x) for x in t.shape) for t in reader.tensors}
    assert shapes["token_embd.weight"] == (64, MIN_VOCAB)
    assert shapes["output.weight"] == (64, MIN_VOCAB)
    assert shapes["output_norm.weight"] == (64,)
    for i in range(2):
        assert shapes[f"blk.{i}.attn_q.weight"] == (64, 256 * 8)
        assert shapes[f"blk.{i}.attn_k.weight"] == (64, 256 * 2)
        assert shapes[f"blk.{i}.attn_v.weight"] == (64, 256 * 2)
        assert shapes[f"blk.{i}.attn_output.weight"] == (256 * 8, 64)
        assert shapes[f"blk.{i}.ffn_gate.weight"] == (64, 96)
        assert shapes[f"blk.{i}.ffn_up.weight"] == (64, 96)
        assert shapes[f"blk.{i}.ffn_down.weight"] == (96, 64)
        assert shapes[f"blk.{i}.attn_norm.weight"] == shapes[f"blk.{i}.ffn_norm.weight"] == (64,)
    assert len(shapes) == 3 + 2 * 9
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_weights_are_random_and_finite_and_norms_are_ones(d2_shaped):
    _, reader = d2_shaped
    tensors = {t.name: t for t in reader.tensors}
    q = np.asarray(tensors["blk.0.attn_q.weight"].data, dtype=np.float32)
    assert q.shape == (256 * 8, 64)        # numpy row-major: (ne1, ne0)
    assert np.isfinite(q).all() and 0.01 < float(q.std()) < 0.03
    assert np.all(np.asarray(tensors["output_norm.weight"].data) == 1.0)


def test_greedy_decoding_can_only_pick_printable_ascii(d2_shaped):
    """Rows of `output` outside the printable ASCII bytes are zero (logit 0), the 95 printable rows
    random: the argmax of any hidden state is a printable byte, never EOS or an invalid UTF-8 byte."""
    _, reader = d2_shaped
    tokens = field(reader, "tokenizer.ggml.tokens")
    out = np.asarray({t.name: t for t in reader.tensors}["output.weight"].data, dtype=np.float32)
    assert out.shape == (len(tokens), 64)
    printable = [i for i, t in enumerate(tokens) if t.startswith("<0x") and 0x20 <= int(t[3:5], 16) <= 0x7E]
    assert len(printable) == 95
    silent = [i for i in range(len(tokens)) if i not in printable]
    assert not out[silent].any() and all(out[i].any() for i in printable)
    hidden = np.random.default_rng(7).standard_normal((500, 64)).astype(np.float32)
    picked = set(np.argmax(hidden @ out.T, axis=1).tolist())
    assert picked <= set(printable)


def test_the_tokenizer_is_spm_with_byte_fallback_tokens(d2_shaped):
    _, reader = d2_shaped
    assert field(reader, "tokenizer.ggml.model") == "llama"
    tokens = field(reader, "tokenizer.ggml.tokens")
    types = field(reader, "tokenizer.ggml.token_type")
    scores = field(reader, "tokenizer.ggml.scores")
    assert len(tokens) == len(types) == len(scores) == MIN_VOCAB
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3] == "<0x00>" and tokens[3 + 0x0A] == "<0x0A>" and tokens[-1] == "<0xFF>"
    assert types[:3] == [2, 3, 3] and set(types[3:]) == {6}
    assert (field(reader, "tokenizer.ggml.bos_token_id"), field(reader, "tokenizer.ggml.eos_token_id"),
            field(reader, "tokenizer.ggml.unknown_token_id")) == (1, 2, 0)


def test_the_same_seed_writes_the_same_file_and_another_seed_does_not(tmp_path):
    spec = ModelSpec(head_dim=64, n_head=4, n_head_kv=1, n_layer=1, n_embd=32, dtype="f32")
    a, b, c = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "c.gguf"
    synthesize(spec, a)
    synthesize(spec, b)
    synthesize(dataclasses.replace(spec, seed=1), c)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    reader = gguf.GGUFReader(a)
    assert field(reader, "general.file_type") == int(gguf.LlamaFileType.ALL_F32)
    assert {t.tensor_type for t in reader.tensors} == {gguf.GGMLQuantizationType.F32}


def test_embedding_defaults_to_heads_times_head_dim_and_ff_to_the_embedding():
    spec = ModelSpec(head_dim=128, n_head=4, n_head_kv=4)
    assert (spec.embd, spec.ff, spec.gqa) == (512, 512, 1)
    assert spec.tensor_shapes()["blk.0.attn_q.weight"] == (512, 512)


def test_a_larger_vocab_is_padded_with_unused_tokens():
    tokens, scores, types = vocabulary(MIN_VOCAB + 2)
    assert tokens[-2:] == ["<unused_0>", "<unused_1>"] and types[-2:] == [5, 5] and len(scores) == MIN_VOCAB + 2


@pytest.mark.parametrize("kw, message", [
    ({"n_head": 6, "n_head_kv": 4}, "multiple of n_head_kv"),
    ({"head_dim": 63}, "even"),
    ({"n_vocab": 256}, "at least 259"),
    ({"dtype": "q4_0"}, "dtype"),
])
def test_impossible_shapes_are_refused_before_writing(kw, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        synthesize(ModelSpec(**kw), tmp_path / "x.gguf")
    assert not list(tmp_path.iterdir())


def test_the_cli_writes_the_file_and_reports_it(tmp_path):
    out = tmp_path / "tiny.gguf"
    result = CliRunner().invoke(model_group, ["synth", "--head-dim", "64", "--n-head", "8", "--n-head-kv", "2",
                                              "--n-layer", "1", "--n-embd", "32", "--seed", "5", "-o", str(out),
                                              "--format", "json"], standalone_mode=False)
    assert result.exception is None, result.output
    doc = json.loads(result.output)
    assert doc["gqa_ratio"] == 4 and doc["n_embd"] == 32 and doc["n_ff"] == 32 and doc["bytes"] == out.stat().st_size
    reader = gguf.GGUFReader(out)
    assert field(reader, "llama.attention.key_length") == 64 and field(reader, "llama.block_count") == 1


def test_the_cli_rejects_a_bad_auto_value(tmp_path):
    result = CliRunner().invoke(model_group, ["synth", "--head-dim", "64", "--n-head", "8", "--n-head-kv", "2",
                                              "--n-embd", "wide", "-o", str(tmp_path / "x.gguf")],
                                standalone_mode=False)
    assert isinstance(result.exception, UsageError) and "--n-embd" in str(result.exception)
