"""Tensor data made in row chunks: the synthesizer never holds a whole large tensor.

A seed-scale model (``--preset seed-27b``: about 27 billion parameters, 28 GiB
in q8_0) cannot be built in memory and handed to ``gguf.GGUFWriter.add_tensor``
as the tiny models were. Each tensor is therefore described by a
:class:`TensorPlan` (its name, ggml shape, ggml type and byte size, known before
any data exists, so the header can be written first) and a generator that yields
its bytes a block of rows at a time, each block at most :data:`CHUNK_BYTES`.
Peak memory is then a few chunks, whatever the model's size.

Quantized weights are written directly as valid random q8_0 blocks (an f16
scale ``d`` and 32 int8 values): no float tensor is drawn and quantized, which
would cost four times the memory and most of the time. The int8 values are
uniform over [-128, 127] (standard deviation :data:`INT8_UNIFORM_STD`), so a
block's values have standard deviation ``d * INT8_UNIFORM_STD``; ``d`` is chosen
from the standard deviation the tensor should have and is the same finite f16
in every block of a tensor (a zero ``d`` makes a row exactly zero).

Float weights (f16/f32) are drawn with numpy's ``standard_normal`` row chunk by
row chunk: numpy's generator yields the same stream in chunks as in one call,
so a tiny model streamed this way is byte-for-byte the model the in-memory
writer made (a test checks this against the previous writer's bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

CHUNK_BYTES = 32 << 20             # one chunk of output bytes at most (a whole row is never split)
QK8_0 = 32                         # values per q8_0 block
Q8_0_BLOCK_BYTES = 2 + QK8_0       # an f16 scale and 32 int8 values
F16_SMALLEST_SUBNORMAL, F16_MAX = 2.0 ** -24, 65504.0
INT8_UNIFORM_STD = float(np.sqrt((256.0 ** 2 - 1) / 12))    # std of an int8 drawn uniformly from [-128, 127]

GGML_F32, GGML_F16, GGML_Q8_0 = 0, 1, 8                      # ggml_type values (gguf.GGMLQuantizationType)
_BYTES_PER_VALUE = {GGML_F32: 4, GGML_F16: 2}

RowSteer = Callable[[np.ndarray, int], np.ndarray]           # (float rows, index of the first row) -> rows


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of the file: what the header says about it, and how its bytes are made."""

    name: str
    ne: tuple[int, ...]             # ggml order: ne0 (the row length) first
    ggml_type: int
    chunks: Callable[[], Iterator[np.ndarray]]

    @property
    def n_rows(self) -> int:
        rows = 1
        for n in self.ne[1:]:
            rows *= int(n)
        return rows

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.ne[0], self.ggml_type)

    @property
    def nbytes(self) -> int:
        return self.n_rows * self.row_bytes


def row_bytes(row_length: int, ggml_type: int) -> int:
    if ggml_type == GGML_Q8_0:
        if row_length % QK8_0:
            raise ValueError(f"a q8_0 row holds whole blocks of {QK8_0} values (got {row_length})")
        return row_length // QK8_0 * Q8_0_BLOCK_BYTES
    return row_length * _BYTES_PER_VALUE[ggml_type]


def rows_per_chunk(row_length: int, ggml_type: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """As many whole rows as fit in one chunk (one at least)."""
    return max(1, chunk_bytes // max(1, row_bytes(row_length, ggml_type)))


def row_spans(n_rows: int, per_chunk: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n_rows, per_chunk):
        yield start, min(n_rows, start + per_chunk)


def constant_rows(ne: tuple[int, ...], value: float) -> Iterator[np.ndarray]:
    """An f32 tensor filled with one value (norm weights, the delta net's decay)."""
    per = rows_per_chunk(ne[0], GGML_F32)
    for start, end in row_spans(_rows(ne), per):
        yield np.full((end - start, ne[0]), value, dtype=np.float32)


def normal_float_rows(rng: np.random.Generator, ne: tuple[int, ...], std: float, out_dtype,
                      steer: RowSteer | None = None,
                      zero_rows: Callable[[int, int], np.ndarray] | None = None) -> Iterator[np.ndarray]:
    """Normal(0, std) float rows, optionally steered, cast to ``out_dtype`` (f16 or f32) chunk by chunk.

    ``zero_rows(start, end)`` gives a boolean mask of the rows in [start, end) to zero (the
    unspeakable rows of ``output``)."""
    ggml_type = GGML_F16 if np.dtype(out_dtype) == np.float16 else GGML_F32
    per = rows_per_chunk(ne[0], ggml_type)
    for start, end in row_spans(_rows(ne), per):
        rows = rng.standard_normal((end - start, ne[0]), dtype=np.float32) * np.float32(std)
        if steer is not None:
            rows = steer(rows, start)
        rows = rows.astype(out_dtype)
        if zero_rows is not None:
            rows[zero_rows(start, end)] = 0
        yield rows


def random_q8_0_rows(rng: np.random.Generator, ne: tuple[int, ...], std: float,
                     zero_rows: Callable[[int, int], np.ndarray] | None = None) -> Iterator[np.ndarray]:
    """Valid random q8_0 rows whose values have standard deviation ``std``, written as blocks directly."""
    want = std / INT8_UNIFORM_STD
    if not (F16_SMALLEST_SUBNORMAL <= want <= F16_MAX):          # a subnormal scale is valid for ggml
        raise ValueError(f"a q8_0 scale for std {std} is not a finite non-zero f16")
    d = np.float16(want)
    blocks_per_row = ne[0] // QK8_0
    per = rows_per_chunk(ne[0], GGML_Q8_0)
    scale = np.frombuffer(d.tobytes(), dtype=np.uint8)
    for start, end in row_spans(_rows(ne), per):
        n_blocks = (end - start) * blocks_per_row
        blocks = np.empty((n_blocks, Q8_0_BLOCK_BYTES), dtype=np.uint8)
        blocks[:, :2] = scale
        blocks[:, 2:] = np.frombuffer(rng.bytes(n_blocks * QK8_0), dtype=np.uint8).reshape(n_blocks, QK8_0)
        rows = blocks.reshape(end - start, blocks_per_row * Q8_0_BLOCK_BYTES)
        if zero_rows is not None:
            rows[zero_rows(start, end)] = 0
        yield rows


def quantized_float_rows(rng: np.random.Generator, ne: tuple[int, ...], std: float, steer: RowSteer) -> Iterator[np.ndarray]:
    """Normal float rows that a steering function edits (an identity added), quantized to q8_0 per chunk.

    For the few tensors whose values are not plain noise; gguf's q8_0 quantizer is bit-exact with
    ggml's reference."""
    from gguf.quants import quantize  # noqa: PLC0415 - the writer only runs where gguf is importable
    from gguf.constants import GGMLQuantizationType  # noqa: PLC0415

    per = rows_per_chunk(ne[0], GGML_F32)      # float rows are the larger form in memory
    for start, end in row_spans(_rows(ne), per):
        rows = steer(rng.standard_normal((end - start, ne[0]), dtype=np.float32) * np.float32(std), start)
        yield quantize(rows, GGMLQuantizationType.Q8_0)


def sample_std(rng: np.random.Generator, ne: tuple[int, ...], std: float) -> float:
    """The standard deviation of the float rows :func:`normal_float_rows` will draw, without keeping them:
    the generator's state is saved, the rows drawn and summed chunk by chunk, and the state restored."""
    state = rng.bit_generator.state
    spans = list(row_spans(_rows(ne), rows_per_chunk(ne[0], GGML_F32)))
    if len(spans) == 1:                 # one chunk: numpy's own float32 std, as the in-memory writer took it
        value = float((rng.standard_normal((_rows(ne), ne[0]), dtype=np.float32) * np.float32(std)).std())
        rng.bit_generator.state = state
        return value
    total, total_sq, count = 0.0, 0.0, 0
    for start, end in spans:
        rows = (rng.standard_normal((end - start, ne[0]), dtype=np.float32) * np.float32(std)).astype(np.float64)
        total += float(rows.sum())
        total_sq += float(np.square(rows).sum())
        count += rows.size
    rng.bit_generator.state = state
    mean = total / count
    return float(np.sqrt(max(0.0, total_sq / count - mean * mean)))


def _rows(ne: tuple[int, ...]) -> int:
    rows = 1
    for n in ne[1:]:
        rows *= int(n)
    return rows
