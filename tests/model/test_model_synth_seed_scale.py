"""The seed-scale model: ``kvdiag model synth --preset seed-27b`` and the streaming q8_0 writer.

The 27 GiB model itself is written on the device (tests/fixtures/device/… records it); here
the same writer makes the same architecture at a size CI can hold, and gguf's reader checks it
key for key and tensor for tensor. A child process then writes a model several times the
writer's chunk and its peak memory is measured: it must stay near the interpreter's own.
"""

from __future__ import annotations

import dataclasses
import json
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf
import numpy as np
import pytest
from click.testing import CliRunner

from kvdiag.commands.model import model_group
from kvdiag.errors import UsageError
from kvdiag.model import tensor_data
from kvdiag.model.presets import SEED_27B
from kvdiag.model.synth import ModelSpec, matrix_std, synthesize

from gguf_fields import field

REPO = Path(__file__).resolve().parents[2]
SEED = ModelSpec(**SEED_27B)
# The seed's architecture at a size CI writes in a second: every option the preset sets, smaller widths.
SMALL_SEED = dataclasses.replace(SEED, n_layer=8, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, head_dim=64,
                                 ssm_state=32, ssm_groups=2, ssm_v_heads=4, n_vocab=1024)


def test_the_preset_has_the_seed_models_shapes():
    """64 layers (the loader's LLM_TYPE_27B), 48 delta-net and 16 attention layers, one MTP block,
    GQA 6 at head dim 256, and about 27 billion parameters."""
    shapes = SEED.tensor_shapes()
    attention = [i for i in range(64) if f"blk.{i}.attn_q.weight" in shapes]
    assert attention == list(range(3, 64, 4)) and len(attention) == 16
    assert sum(f"blk.{i}.ssm_a" in shapes for i in range(64)) == 48
    assert shapes["blk.64.nextn.eh_proj.weight"] == (2 * 5120, 5120)
    assert shapes["blk.3.attn_q.weight"] == (5120, 2 * 24 * 256) and shapes["blk.3.attn_k.weight"] == (5120, 4 * 256)
    assert shapes["blk.0.attn_qkv.weight"] == (5120, 2 * 16 * 128 + 48 * 128)
    assert shapes["blk.0.ffn_down.weight"] == (17408, 5120) and shapes["output.weight"] == (5120, 248320)
    params = sum(int(np.prod(ne)) for ne in shapes.values())
    assert 26.5e9 < params < 27.5e9
    assert SEED.gqa == 6 and SEED.problems() == []


def test_q8_0_rows_are_valid_blocks_with_the_asked_spread():
    rng = np.random.default_rng(0)
    rows = np.concatenate(list(tensor_data.random_q8_0_rows(rng, (256, 64), 0.05)))
    assert rows.shape == (64, 256 // 32 * 34) and rows.dtype == np.uint8
    values = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType.Q8_0)
    assert values.shape == (64, 256) and np.isfinite(values).all()
    assert float(values.std()) == pytest.approx(0.05, rel=0.05)
    with pytest.raises(ValueError, match="not a finite non-zero f16"):
        next(tensor_data.random_q8_0_rows(rng, (64, 1), 1e9))


@pytest.fixture(scope="module")
def small_seed(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed") / "small-seed.gguf"
    report = synthesize(SMALL_SEED, path)
    return path, report, gguf.GGUFReader(path)


def test_the_small_seed_model_reads_back_key_for_key(small_seed):
    _, _, reader = small_seed
    assert field(reader, "general.file_type") == int(gguf.LlamaFileType.MOSTLY_Q8_0)
    assert field(reader, "qwen35.block_count") == 9 and field(reader, "qwen35.nextn_predict_layers") == 1
    assert field(reader, "qwen35.context_length") == 262144
    assert field(reader, "qwen35.rope.freq_base") == pytest.approx(1e7)
    assert field(reader, "qwen35.ssm.group_count") == 2 and field(reader, "qwen35.ssm.inner_size") == 4 * 32
    assert len(field(reader, "tokenizer.ggml.tokens")) == 1024


def test_the_small_seed_model_reads_back_tensor_for_tensor(small_seed):
    """Every tensor the spec names, at its shape; matrices q8_0 except the f32 conv; 1-D tensors f32;
    the printable-only head, the steered embedding and eh_proj's identity survive quantization."""
    _, report, reader = small_seed
    tensors = {t.name: t for t in reader.tensors}
    assert {n: tuple(int(x) for x in t.shape) for n, t in tensors.items()} == dict(SMALL_SEED.tensor_shapes())
    for name, t in tensors.items():
        if len(t.shape) == 1 or name.endswith("ssm_conv1d.weight"):
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, name
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0, name

    def values(name):
        t = tensors[name]
        return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(
            [int(x) for x in reversed(t.shape)])

    embd = values("token_embd.weight")
    assert float(np.sqrt((embd ** 2).mean())) == pytest.approx(4.0, rel=0.02)
    out = values("output.weight")
    assert out[3 + 0x20:3 + 0x7F].any(axis=1).all() and not out[:3 + 0x20].any() and not out[3 + 0x7F:].any()
    eh = values("blk.8.nextn.eh_proj.weight")                  # (n_embd out, 2 n_embd in)
    assert np.allclose(np.diag(eh[:, :256]), 4.0, atol=0.2)
    down = values("blk.0.ffn_down.weight")                     # residual writer: scaled by depth
    assert float(down.std()) == pytest.approx(matrix_std("blk.0.ffn_down.weight", (512, 256), SMALL_SEED), rel=0.05)
    assert report.bytes == Path(small_seed[0]).stat().st_size


def test_the_same_seed_writes_the_same_q8_0_file(small_seed, tmp_path):
    again = tmp_path / "again.gguf"
    synthesize(SMALL_SEED, again)
    assert again.read_bytes() == Path(small_seed[0]).read_bytes()


def test_a_model_bigger_than_the_free_disk_is_refused_before_writing(tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(100, 100, 10 << 20))
    with pytest.raises(UsageError, match=r"has 10\.0 MiB free"):
        synthesize(SMALL_SEED, tmp_path / "x.gguf")
    assert not list(tmp_path.iterdir())


def test_peak_memory_stays_bounded_when_the_model_is_larger_than_the_limit(tmp_path):
    """A 0.6 GiB q8_0 model written by a child process: its peak RSS stays under a limit of the
    interpreter's own footprint plus 160 MiB (a few 32 MiB chunks), about a quarter of the file.
    An in-memory writer holds the whole file and fails this."""
    limit_over_baseline = 160 << 20
    out = tmp_path / "big.gguf"
    script = textwrap.dedent(f"""
        import dataclasses, json, resource, sys
        sys.path.insert(0, {str(REPO)!r})
        import gguf, numpy
        from kvdiag.model.synth import ModelSpec, synthesize
        from kvdiag.model.presets import SEED_27B
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        spec = dataclasses.replace(ModelSpec(**SEED_27B), n_layer=16, n_embd=1024, n_ff=4096, n_head=8,
                                   n_head_kv=2, head_dim=128, n_vocab=8192)
        report = synthesize(spec, {str(out)!r})
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({{"base_kib": base, "peak_kib": peak, "bytes": report.bytes}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["bytes"] > 3 * limit_over_baseline
    assert (got["peak_kib"] - got["base_kib"]) * 1024 < limit_over_baseline, got


def test_the_cli_writes_a_preset_with_overrides(tmp_path):
    out = tmp_path / "p.gguf"
    result = CliRunner().invoke(model_group, [
        "synth", "--preset", "seed-27b", "--n-layer", "4", "--n-embd", "128", "--n-ff", "256", "--n-head", "2",
        "--n-head-kv", "1", "--head-dim", "64", "--vocab", "512", "-o", str(out), "--format", "json"],
        standalone_mode=False)
    assert result.exception is None, result.output
    doc = json.loads(result.output)
    assert (doc["preset"], doc["dtype"], doc["n_layer"], doc["mtp_layers"]) == ("seed-27b", "q8_0", 4, 1)
    assert field(gguf.GGUFReader(out), "qwen35.ssm.group_count") == 16


def test_the_cli_without_a_preset_still_needs_the_attention_shape(tmp_path):
    result = CliRunner().invoke(model_group, ["synth", "--n-head", "4", "-o", str(tmp_path / "x.gguf")],
                                standalone_mode=False)
    assert isinstance(result.exception, UsageError)
    assert "--head-dim, --n-head-kv" in str(result.exception)


def test_llama_cpp_types_the_preset_depth_27b_and_its_drafts_are_accepted():
    """The recorded CPU llama-server of the fork on the preset at narrow widths (64 layers, q8_0,
    fan-in; tests/fixtures/cpu-fork-775450a68-mtp/README.md): the loader's LLM_TYPE_27B branch
    took it, and two drafts in three were accepted at that depth."""
    import gzip
    import re

    log = gzip.decompress((REPO / "tests/fixtures/cpu-fork-775450a68-mtp/"
                           "server-seed-shape-64-layers.combined.log.gz").read_bytes()).decode()
    assert re.search(r"print_info: model type += 27B", log) and re.search(r"print_info: file type += Q8_0", log)
    assert re.search(r"print_info: n_layer += 64\b", log)
    accepted, drafted = map(int, re.search(r"draft acceptance = [0-9.]+ \( *(\d+) accepted / +(\d+) generated",
                                           log).groups())
    assert (accepted, drafted) == (198, 300)
