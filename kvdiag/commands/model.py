"""``kvdiag model synth``: write a tiny random-weight GGUF for server-path repros.

Registered in kvdiag/cli.py with ``cli.add_command(model_group)``. Like every
command it returns an exit code and raises kvdiag's errors for ``main`` to print
(a missing ``gguf`` package or an impossible shape is a UsageError).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from kvdiag.commands.options import Count
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
@click.option("--head-dim", type=Count(), required=True, help="Attention head dimension (K and V): selects the FA kernel.")
@click.option("--n-head", type=Count(), required=True, help="Query heads.")
@click.option("--n-head-kv", type=Count(), required=True, help="K/V heads; n_head / n_head_kv is the GQA ratio.")
@click.option("--n-layer", type=Count(), default=2, show_default=True, help="Transformer blocks.")
@click.option("--n-embd", default="auto", show_default=True, help="Embedding width (auto: n_head * head_dim).")
@click.option("--n-ff", default="auto", show_default=True, help="Feed-forward width (auto: n_embd).")
@click.option("--n-ctx", type=Count(), default=4096, show_default=True, help="<arch>.context_length.")
@click.option("--vocab", "n_vocab", type=Count(), default=259, show_default=True,
              help="Vocabulary size: 3 specials + 256 byte tokens at least; more adds unused tokens.")
@click.option("--seed", type=Count(0), default=0, show_default=True, help="Seed of the random weights.")
@click.option("--type", "dtype", type=click.Choice(["f16", "f32"]), default="f16", show_default=True,
              help="Type of the weight matrices (norms are always f32).")
@click.option("--arch", type=click.Choice(["llama", "qwen35"]), default="llama", show_default=True,
              help="llama: plain attention. qwen35: Qwen3.5's hybrid trunk (gated delta net + attention), "
                   "the architecture that can carry an MTP head.")
@click.option("--mtp-layers", type=Count(0, 1), default=0, show_default=True,
              help="qwen35 only: append the NextN/MTP block that llama-server's --spec-type draft-mtp "
                   "drafts with (D3 needs 1).")
@click.option("--attention-interval", type=Count(1), default=4, show_default=True,
              help="qwen35 only: every Nth trunk layer is attention, the others gated delta net "
                   "(1: attention only).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The .gguf file to write.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def synth_cmd(head_dim, n_head, n_head_kv, n_layer, n_embd, n_ff, n_ctx, n_vocab, seed, dtype, arch, mtp_layers,
              attention_interval, output, fmt) -> int:
    """Write a tiny random-weight GGUF that llama-server loads.

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
    """
    from kvdiag.model.synth import ModelSpec, synthesize

    spec = ModelSpec(head_dim=head_dim, n_head=n_head, n_head_kv=n_head_kv, n_layer=n_layer,
                     n_embd=_auto_int(n_embd, "--n-embd"), n_ff=_auto_int(n_ff, "--n-ff"), n_ctx=n_ctx,
                     n_vocab=n_vocab, seed=seed, dtype=dtype, arch=arch, mtp_layers=mtp_layers,
                     attention_interval=attention_interval)
    report = synthesize(spec, output)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
        return 0
    click.echo(f"wrote {written_as(output, report.path)} ({report.bytes / 2**20:.1f} MiB, {report.n_params:,} parameters, {dtype})")
    mtp = f" mtp_layers={spec.mtp_layers} (block_count {spec.block_count})" if spec.mtp_layers else ""
    click.echo(f"  {spec.arch}: head_dim={spec.head_dim} n_head={spec.n_head} n_head_kv={spec.n_head_kv} "
               f"(GQA {spec.gqa}) n_layer={spec.n_layer} n_embd={spec.embd} n_ff={spec.ff} "
               f"n_ctx={spec.n_ctx} n_vocab={spec.n_vocab}{mtp}")
    click.echo("  tokenizer: SentencePiece byte fallback (<unk> <s> </s> + 256 byte tokens); random weights")
    return 0


@model_group.command("info")
@click.argument("path", type=click.Path(path_type=Path, dir_okay=False))
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
