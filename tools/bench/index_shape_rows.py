"""Rows of the ops suite for StridedSlice, RepeatInterleave and EmbeddingDenseBackward, beside torch.

StridedSlice: the first half of each row of a 256 MiB bf16 [8192, 16384] matrix (torch: the slice made
contiguous). RepeatInterleave: a 128 MiB bf16 [32768, 2048] matrix, each row repeated 1 to 3 times by a
repeats tensor into about 256 MiB (torch: ``repeat_interleave`` with ``output_size``, so neither side syncs),
and the integer form repeating KV heads x4 (GQA: [8, 8, 2048, 128] into [8, 32, 2048, 128], 256 MiB out).
EmbeddingDenseBackward: Qwen3's vocabulary (151936) and a hidden of 1024 over 8192 tokens, bf16 (torch:
``aten.embedding_dense_backward``). All GB/s over the bytes read and written. The small size shrinks every
shape for a CPU run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.eager import to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite


def _mib(nbytes: int) -> str:
    from acl_tools.bench.ops import _mib as mib

    return mib(nbytes)


OPS: tuple[str, ...] = ("StridedSlice", "RepeatInterleave", "EmbeddingDenseBackward")
"""The ``--only`` names of these rows (RepeatInterleave covers its tensor and integer rows)."""

NO_MASKS = {"beginMask": 0, "endMask": 0, "ellipsisMask": 0, "newAxisMask": 0, "shrinkAxisMask": 0}
VOCAB, HIDDEN, TOKENS = 151936, 1024, 8192


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    full = suite.sizes.norm[0] >= 8192
    if suite.wanted("StridedSlice"):
        _strided_slice(suite, (8192, 16384) if full else (256, 512))
    if suite.wanted("RepeatInterleave"):
        _repeat_rows(suite, (32768, 2048) if full else (512, 256))
        _repeat_heads(suite, (8, 8, 2048, 128) if full else (2, 2, 64, 32))
    if suite.wanted("EmbeddingDenseBackward"):
        _embedding_backward(suite, (TOKENS, VOCAB, HIDDEN) if full else (256, 4096, 128))


def _strided_slice(suite: Suite, shape: tuple[int, int]) -> None:
    from acl_tools.bench.ops import Case

    rows, cols = shape
    dtype = D.ACL_BF16

    def acl() -> tuple[Callable[[], None], Any]:
        spec = {name: aclnn.aclCreateIntArray(v) for name, v in (("begin", [0, 0]), ("end", [rows, cols // 2]))}
        args = {"self": suite.array(shape, dtype), **spec, "strides": aclnn.aclCreateIntArray([1, 1])}
        return suite.prepared("StridedSlice", {**args, **NO_MASKS})

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor(shape, dtype)
        return lambda: x[:, : cols // 2].contiguous()

    nbytes = 2 * rows * (cols // 2) * 2
    case = Case("StridedSlice", f"{_mib(rows * cols * 2)} [{rows},{cols}][:, :{cols // 2}]", "bf16", "GB/s", nbytes)
    suite.case(case, acl, torch_fn, "StridedSlice")


def _repeat_rows(suite: Suite, shape: tuple[int, int]) -> None:
    from acl_tools.bench.ops import Case

    rows, cols = shape
    dtype = D.ACL_BF16
    reps = suite.rng.integers(1, 4, rows).astype(np.int64)
    total = int(reps.sum())

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"self": suite.array(shape, dtype), "repeats": to_device(reps, suite.backend), "dim": 0}
        return suite.prepared("RepeatInterleaveWithDim", {**args, "outputSize": total})

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor(shape, dtype)
        r = suite.torch.from_numpy(reps).to(suite.device)
        return lambda: suite.torch.repeat_interleave(x, r, dim=0, output_size=total)

    nbytes = (rows + total) * cols * 2 + rows * 8
    label = f"{_mib(rows * cols * 2)} [{rows},{cols}] rows x1..3 -> {_mib(total * cols * 2)}"
    op = "RepeatInterleaveWithDim"
    for setting in suite.env_rows(op, dtype):  # the default row, then ACL_REPEAT_ROWS=rows'
        note = "" if setting is None else f"{setting[0]}={setting[1]}"
        case = Case(op, label, "bf16", "GB/s", nbytes, note=note)
        suite.case(case, functools.partial(suite.with_env, setting, acl), torch_fn, op)


def _repeat_heads(suite: Suite, shape: tuple[int, int, int, int]) -> None:
    from acl_tools.bench.ops import Case

    b, h, s, d = shape
    dtype = D.ACL_BF16

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"self": suite.array(shape, dtype), "repeats": 4, "dim": 1, "outputSize": 4 * h}
        return suite.prepared("RepeatInterleaveIntWithDim", args)

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor(shape, dtype)
        return lambda: suite.torch.repeat_interleave(x, 4, dim=1)

    n = b * h * s * d
    label = f"KV heads x4 [{b},{h},{s},{d}] -> {_mib(4 * n * 2)}"
    op = "RepeatInterleaveIntWithDim"
    suite.case(Case(op, label, "bf16", "GB/s", 5 * n * 2), acl, torch_fn, op)


def _embedding_backward(suite: Suite, shape: tuple[int, int, int]) -> None:
    from acl_tools.bench.ops import Case

    tokens, vocab, hidden = shape
    dtype = D.ACL_BF16
    idx = suite.rng.integers(0, vocab, tokens).astype(np.int64)

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"grad": suite.array((tokens, hidden), dtype), "indices": to_device(idx, suite.backend)}
        args |= {"numWeights": vocab, "paddingIdx": 2**64 - 1, "scaleGradByFreq": False}
        return suite.prepared("EmbeddingDenseBackward", args)

    def torch_fn() -> Callable[[], object]:
        g = suite.tensor((tokens, hidden), dtype)
        i = suite.torch.from_numpy(idx).to(suite.device)
        return lambda: suite.torch.ops.aten.embedding_dense_backward(g, i, vocab, -1, False)

    nbytes = (tokens + vocab) * hidden * 2 + tokens * 8
    label = f"{tokens} tok, vocab {vocab}, hidden {hidden}"
    op = "EmbeddingDenseBackward"
    suite.case(Case(op, label, "bf16", "GB/s", nbytes, note="no padding, unscaled"), acl, torch_fn, op)
