"""``kvdiag model synth``: write a random-weight GGUF for server-path repros, tiny or at the seed's scale.

Registered in kvdiag/cli.py with ``cli.add_command(model_group)``. Like every
command it returns an exit code and raises kvdiag's errors for ``main`` to print
(a missing ``gguf`` package or an impossible shape is a UsageError).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from kvdiag.commands.options import Count, GivenPath
from kvdiag.errors import UsageError
from kvdiag.fileio import written_as


def _auto_int(value: str, option: str) -> int | None:
    if value == "auto":
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{option} takes a number or 'auto', not {value!r}") from None


@click.group("model")
def model_group() -> None:
    """Models kvdiag makes itself, for server-path repros."""


@model_group.command("synth")
@click.option("--preset", type=click.Choice(["seed-27b"]), default=None,
              help="A named shape; the options below override single values of it. seed-27b: the seed's "
                   "64-layer qwen35 with one MTP block, q8_0 (about 27 GiB; see kvdiag.model.presets).")
@click.option("--head-dim", type=Count(), default=None, help="Attention head dimension (K and V): selects the FA kernel.")
@click.option("--n-head", type=Count(), default=None, help="Query heads.")
@click.option("--n-head-kv", type=Count(), default=None, help="K/V heads; n_head / n_head_kv is the GQA ratio.")
@click.option("--n-layer", type=Count(), default=None, help="Transformer blocks.  [default: 2]")
@click.option("--n-embd", default=None, help="Embedding width (auto: n_head * head_dim).  [default: auto]")
@click.option("--n-ff", default=None, help="Feed-forward width (auto: n_embd).  [default: auto]")
@click.option("--n-ctx", type=Count(), default=None, help="<arch>.context_length.  [default: 4096]")
@click.option("--vocab", "n_vocab", type=Count(), default=None,
              help="Vocabulary size: 3 specials + 256 byte tokens at least; more adds unused tokens.  [default: 259]")
@click.option("--seed", type=Count(0), default=None, help="Seed of the random weights.  [default: 0]")
@click.option("--type", "dtype", type=click.Choice(["f16", "f32", "q8_0"]), default=None,
              help="Type of the weight matrices (norms are always f32); q8_0 is written as random "
                   "blocks directly.  [default: f16]")
@click.option("--init", "weight_init", type=click.Choice(["fixed", "fan-in"]), default=None,
              help="Random weights: fixed std 0.02 (tiny models), or fan-in scaled so a deep, wide trunk "
                   "keeps the draft steering.  [default: fixed]")
@click.option("--arch", type=click.Choice(["llama", "qwen35"]), default=None,
              help="llama: plain attention. qwen35: Qwen3.5's hybrid trunk (gated delta net + attention), "
                   "the architecture that can carry an MTP head.  [default: llama]")
@click.option("--mtp-layers", type=Count(0, 1), default=None,
              help="qwen35 only: append the NextN/MTP block that llama-server's --spec-type draft-mtp "
                   "drafts with (D3 needs 1).  [default: 0]")
@click.option("--attention-interval", type=Count(1), default=None,
              help="qwen35 only: every Nth trunk layer is attention, the others gated delta net "
                   "(1: attention only).  [default: 4]")
@click.option("-o", "--output", type=GivenPath(dir_okay=False, path_type=Path), required=True,
              help="The .gguf file to write.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def synth_cmd(preset, output, fmt, **given) -> int:
    """Write a random-weight GGUF that llama-server loads.

    The output is not meaningful text (greedy decoding emits printable ASCII
    only): the head dim and the GQA ratio are what select the FlashAttention
    kernel instantiation. For D2's shape:

    \b
      kvdiag model synth --head-dim 256 --n-head 8 --n-head-kv 2 -o tiny.gguf

    For D3 (MTP speculative decoding, --spec-type draft-mtp), a qwen35 model
    with one MTP block:

    \b
      kvdiag model synth --arch qwen35 --mtp-layers 1 --head-dim 256 \\
          --n-head 8 --n-head-kv 2 --n-layer 4 --n-embd 256 --n-ff 512 \\
          -o tiny-mtp.gguf

    At the seed's scale (64 layers, 27B parameters, q8_0, written in row chunks
    with bounded memory; check the disk has about 28 GiB free):

    \b
      kvdiag model synth --preset seed-27b -o seed-27b.gguf
    """
    from kvdiag.model.synth import synthesize

    spec = _spec(preset, given)
    started = time.monotonic()
    report = synthesize(spec, output)
    seconds = time.monotonic() - started
    if fmt == "json":
        click.echo(json.dumps({**report.to_dict(), "preset": preset, "seconds": round(seconds, 1)}, indent=2))
        return 0
    click.echo(f"wrote {written_as(output, report.path)} ({report.bytes / 2**20:.1f} MiB, {report.n_params:,} parameters, "
               f"{spec.dtype}) in {seconds:.1f} s")
    mtp = f" mtp_layers={spec.mtp_layers} (block_count {spec.block_count})" if spec.mtp_layers else ""
    click.echo(f"  {spec.arch}: head_dim={spec.head_dim} n_head={spec.n_head} n_head_kv={spec.n_head_kv} "
               f"(GQA {spec.gqa}) n_layer={spec.n_layer} n_embd={spec.embd} n_ff={spec.ff} "
               f"n_ctx={spec.n_ctx} n_vocab={spec.n_vocab}{mtp}")
    click.echo("  tokenizer: SentencePiece byte fallback (<unk> <s> </s> + 256 byte tokens); random weights")
    return 0


_DEFAULTS = {"n_layer": 2, "n_ctx": 4096, "n_vocab": 259, "seed": 0, "dtype": "f16", "weight_init": "fixed",
             "arch": "llama", "mtp_layers": 0, "attention_interval": 4}


def _spec(preset: str | None, given: dict):
    """The ModelSpec from a preset (or the defaults) with every option the user gave on top."""
    from kvdiag.model.presets import PRESETS
    from kvdiag.model.synth import ModelSpec

    values = dict(PRESETS[preset]) if preset else dict(_DEFAULTS)
    for key in ("n_embd", "n_ff"):
        if given.get(key) is not None:
            given[key] = _auto_int(given[key], "--" + key.replace("_", "-"))
    values.update({k: v for k, v in given.items() if v is not None})
    missing = [f"--{k.replace('_', '-')}" for k in ("head_dim", "n_head", "n_head_kv") if k not in values]
    if missing:
        raise UsageError(f"give {', '.join(missing)} (or --preset seed-27b)")
    return ModelSpec(**values)


@model_group.command("info")
@click.argument("path", type=GivenPath(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def info_cmd(path: Path, fmt: str) -> int:
    """What kvdiag reads of a GGUF's header: architecture, head dims, MTP layers, every key.

    The reader bounds every declared length by the file's size: a malformed or
    hostile file exits 65 with the byte offset and what was wrong.
    """
    from kvdiag.errors import DataError
    from kvdiag.model.gguf_meta import ArrayInfo, GGUFError, read_metadata

    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    try:
        meta = read_metadata(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except GGUFError as exc:
        raise DataError(str(exc)) from None

    def shown(value):
        if isinstance(value, ArrayInfo):
            return f"[{value.length} items of type {value.item_type}]"
        return value

    values = {k: shown(v) for k, v in meta.values.items()}
    if fmt == "json":
        click.echo(json.dumps({"version": meta.version, "tensor_count": meta.tensor_count, "values": values},
                              indent=2, default=str))
        return 0
    click.echo(f"GGUF v{meta.version}, {meta.tensor_count} tensors, architecture {meta.architecture or '?'}")
    for key, value in values.items():
        text = str(value)
        click.echo(f"  {key} = {text if len(text) <= 100 else text[:99] + '…'}")
    return 0
