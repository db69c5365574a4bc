"""Load a Hugging Face Qwen3 checkpoint's safetensors onto the device, cast there with aclnnCast.

Each tensor is read with the ``safetensors`` library in its stored dtype (bf16 through ml_dtypes),
copied to the device as it is, and converted to the compute dtype on the device by ``aclnnCast``
when the two differ. The q/k/v projections are stacked into one [(Nq+2Nkv)*D, H] matrix and the
gate/up projections into one [2I, H] matrix (gate first), so each is one GEMM; every matrix stays in
the checkpoint's [out, in] layout and is read through a transposed aclTensor view, as CANN code does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy, which safetensors' NumPy loader needs)
import numpy as np
from safetensors import safe_open

from acl_core.dtypes import DataType, from_numpy
from acl_tools.qwen3.config import Qwen3Config
from acl_tools.qwen3.device import Buffer, Session


class CheckpointError(ValueError):
    """A tensor is missing from the checkpoint or has the wrong shape."""


class TensorSource:
    """Every tensor of a checkpoint directory's ``*.safetensors`` files, by name."""

    def __init__(self, model_dir: str | Path) -> None:
        self.files = sorted(Path(model_dir).glob("*.safetensors"))
        if not self.files:
            raise CheckpointError(f"no *.safetensors file in {model_dir}")
        self.where: dict[str, Path] = {}
        for path in self.files:
            with safe_open(str(path), framework="numpy") as f:
                for name in f.keys():
                    self.where[name] = path

    def __contains__(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str, shape: Sequence[int]) -> np.ndarray:
        """Tensor ``name`` as stored, checked to have ``shape``."""
        path = self.where.get(name)
        if path is None:
            raise CheckpointError(f"tensor {name} is missing from the checkpoint")
        with safe_open(str(path), framework="numpy") as f:
            array = f.get_tensor(name)
        if tuple(array.shape) != tuple(shape):
            raise CheckpointError(f"tensor {name} has shape {list(array.shape)}; expected {list(shape)}")
        return array


@dataclass
class Matrix:
    """A weight matrix [out, in] on the device and its transposed [in, out] view for ``x @ W^T``."""

    buffer: Buffer
    t: Any

    @classmethod
    def of(cls, buffer: Buffer) -> Matrix:
        """Wrap ``buffer`` (shape [out, in]) with its transposed view."""
        rows, cols = buffer.shape
        return cls(buffer, buffer.view([cols, rows], [1, cols]))


@dataclass
class LayerWeights:
    """One decoder layer's weights on the device."""

    input_norm: Buffer
    qkv: Matrix
    q_norm: Buffer
    k_norm: Buffer
    o: Matrix
    post_norm: Buffer
    gate_up: Matrix
    down: Matrix


@dataclass
class Weights:
    """The whole model's weights on the device."""

    embed: Buffer
    layers: list[LayerWeights]
    norm: Buffer
    lm_head: Matrix
    stored_dtypes: dict[str, int]

    def nbytes(self) -> int:
        """Device bytes the weights take (a tied lm_head counted once)."""
        seen: dict[int, int] = {}
        for buf in self.buffers():
            seen[buf.ptr] = buf.nbytes
        return sum(seen.values())

    def buffers(self) -> Iterable[Buffer]:
        """Every weight buffer."""
        yield self.embed
        yield self.norm
        yield self.lm_head.buffer
        for lw in self.layers:
            yield from (lw.input_norm, lw.q_norm, lw.k_norm, lw.post_norm)
            yield from (lw.qkv.buffer, lw.o.buffer, lw.gate_up.buffer, lw.down.buffer)


class _Loader:
    def __init__(self, session: Session, source: TensorSource, dtype: DataType) -> None:
        self.session = session
        self.source = source
        self.dtype = dtype
        self.stored: dict[str, int] = {}

    def place(self, dst: Buffer, name: str, shape: Sequence[int], row_offset: int = 0) -> None:
        """Put tensor ``name`` into ``dst`` from element ``row_offset * shape[1:]``, casting on the device."""
        array = self.source.get(name, shape)
        src_dtype = from_numpy(array.dtype)
        self.stored[src_dtype.short] = self.stored.get(src_dtype.short, 0) + 1
        offset = row_offset * int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else row_offset
        if src_dtype == dst.dtype:
            self.session.upload(dst, array, offset * dst.itemsize)
            return
        staging = self.session.alloc(array.shape, src_dtype)
        try:
            self.session.upload(staging, array)
            self.session.run("Cast", staging.tensor(), int(dst.dtype), dst.view(array.shape, offset=offset))
            self.session.synchronize()
        finally:
            self.session.release(staging)

    def vector(self, name: str, size: int) -> Buffer:
        buf = self.session.alloc([size], self.dtype)
        self.place(buf, name, [size])
        return buf

    def matrix(self, parts: Sequence[tuple[str, int]], cols: int) -> Matrix:
        rows = sum(r for _, r in parts)
        buf = self.session.alloc([rows, cols], self.dtype)
        at = 0
        for name, r in parts:
            self.place(buf, name, [r, cols], at)
            at += r
        return Matrix.of(buf)


def load_weights(
    session: Session,
    model_dir: str | Path,
    config: Qwen3Config,
    dtype: DataType,
    progress: Callable[[int, int], None] | None = None,
) -> Weights:
    """Read every weight of ``model_dir`` onto the session's device in ``dtype``."""
    c = config
    loader = _Loader(session, TensorSource(model_dir), dtype)
    h, d, inter = c.hidden_size, c.head_dim, c.intermediate_size
    nq, nkv = c.num_attention_heads * d, c.num_key_value_heads * d
    embed = session.alloc([c.vocab_size, h], dtype)
    loader.place(embed, "model.embed_tokens.weight", [c.vocab_size, h])
    layers = []
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(
            LayerWeights(
                input_norm=loader.vector(p + "input_layernorm.weight", h),
                qkv=loader.matrix(
                    [
                        (p + "self_attn.q_proj.weight", nq),
                        (p + "self_attn.k_proj.weight", nkv),
                        (p + "self_attn.v_proj.weight", nkv),
                    ],
                    h,
                ),
                q_norm=loader.vector(p + "self_attn.q_norm.weight", d),
                k_norm=loader.vector(p + "self_attn.k_norm.weight", d),
                o=loader.matrix([(p + "self_attn.o_proj.weight", h)], nq),
                post_norm=loader.vector(p + "post_attention_layernorm.weight", h),
                gate_up=loader.matrix([(p + "mlp.gate_proj.weight", inter), (p + "mlp.up_proj.weight", inter)], h),
                down=loader.matrix([(p + "mlp.down_proj.weight", h)], inter),
            )
        )
        if progress is not None:
            progress(i + 1, c.num_hidden_layers)
    norm = loader.vector("model.norm.weight", h)
    if c.tie_word_embeddings:
        lm_head = Matrix.of(embed)
    else:
        lm_head = loader.matrix([("lm_head.weight", c.vocab_size)], h)
    return Weights(embed, layers, norm, lm_head, loader.stored)
