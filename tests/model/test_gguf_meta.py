"""kvdiag's own GGUF metadata reader against files the `gguf` package wrote.

Every key the writer put in is read back with the same value (long arrays by
length), and broken files fail with GGUFError, never a struct traceback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdiag.model.gguf_meta import ArrayInfo, GGUFError, read_metadata
from kvdiag.model.synth import ModelSpec, synthesize

gguf = pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("meta") / "tiny.gguf"
    synthesize(ModelSpec(head_dim=256, n_head=8, n_head_kv=2, n_layer=2, n_embd=64, n_ff=96, n_ctx=4096, seed=1), path)
    return path


def test_reads_the_attention_shape_the_synthesizer_wrote(tiny):
    meta = read_metadata(tiny)
    assert meta.architecture == "llama" and meta.version >= 2
    assert meta.arch_value("attention.key_length") == 256 and meta.arch_value("attention.value_length") == 256
    assert meta.arch_value("attention.head_count") == 8 and meta.arch_value("attention.head_count_kv") == 2
    assert meta.arch_value("block_count") == 2 and meta.arch_value("context_length") == 4096
    assert meta.arch_value("nextn_predict_layers") is None           # no MTP head
    assert meta.tensor_count == len(gguf.GGUFReader(tiny).tensors)


def test_agrees_with_gguf_reader_on_every_key(tiny):
    reader = gguf.GGUFReader(tiny)
    meta = read_metadata(tiny)
    assert set(meta.values) == {k for k in reader.fields if not k.startswith("GGUF.")}
    tokens = meta.values["tokenizer.ggml.tokens"]
    assert isinstance(tokens, ArrayInfo) and tokens.length == len(reader.fields["tokenizer.ggml.tokens"].data)


def test_an_mtp_key_is_found(tmp_path):
    path = tmp_path / "mtp.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_uint32("qwen35.nextn_predict_layers", 1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta = read_metadata(path)
    assert meta.architecture == "qwen35" and meta.arch_value("nextn_predict_layers") == 1


@pytest.mark.parametrize("content, message", [
    (b"", "bad magic"),
    (b"GGML\x03\x00\x00\x00", "bad magic"),
    (b"GGUF\x03\x00\x00\x00\x00", "truncated"),
    (b"GGUF\x01\x00\x00\x00" + b"\x00" * 16, "version 1"),
])
def test_broken_files_fail_with_one_clear_error(tmp_path, content, message):
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFError, match=message):
        read_metadata(path)


def test_a_truncated_model_fails_cleanly(tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[:300])
    with pytest.raises(GGUFError, match="truncated"):
        read_metadata(cut)
