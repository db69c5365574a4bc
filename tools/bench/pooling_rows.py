"""Rows of the ops suite for the pooling family, beside torch.nn.functional's avg_pool2d and max_pool2d.

A ResNet-like pool (k3 s2 p1) over N32 C256 56x56 in bf16 (``--sizes full``; N2 C8 16x16 in the small
size): AvgPool2d and MaxPool2dWithIndices (int64 indices, torch's ``return_indices``). Both are
bandwidth-bound: GB/s over the bytes read (the input once) and written (the output, and the indices).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.eager import empty

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("AvgPool2d", "MaxPool2dWithIndices")
"""The ``--only`` names of these rows."""

FULL, SMALL = (32, 256, 56, 56), (2, 8, 16, 16)
KERNEL, STRIDE, PAD = 3, 2, 1


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    shape = FULL if suite.sizes.norm[0] >= 8192 else SMALL
    for op in OPS:
        if suite.wanted(op):
            _row(suite, op, shape, D.ACL_BF16)


def _row(suite: Suite, op: str, shape: tuple[int, int, int, int], dtype: D) -> None:
    from acl_tools.bench.ops import Case

    n, c, h, w = shape
    pooled = (n, c, (h + 2 * PAD - KERNEL) // STRIDE + 1, (w + 2 * PAD - KERNEL) // STRIDE + 1)
    maximum = op == "MaxPool2dWithIndices"

    def acl() -> tuple[Callable[[], None], Any]:
        ints = aclnn.aclCreateIntArray
        args: dict[str, Any] = {"self": suite.array(shape, dtype), "kernelSize": ints([KERNEL]), "ceilMode": False}
        if maximum:
            args |= {"stride": ints([STRIDE]), "padding": ints([PAD]), "dilation": ints([1])}
            args |= {"out": empty(pooled, dtype, suite.backend), "indices": empty(pooled, D.ACL_INT64, suite.backend)}
        else:
            args |= {"strides": ints([STRIDE]), "paddings": ints([PAD]), "countIncludePad": True, "divisorOverride": 0}
            args |= {"cubeMathType": 0, "out": empty(pooled, dtype, suite.backend)}
        return suite.prepared(op, args)

    def torch_fn() -> Callable[[], object]:
        F = suite.torch.nn.functional
        x = suite.tensor(shape, dtype)
        if maximum:
            return lambda: F.max_pool2d(x, KERNEL, STRIDE, PAD, return_indices=True)
        return lambda: F.avg_pool2d(x, KERNEL, STRIDE, PAD)

    item = dtype.info.storage_bits // 8
    outputs = pooled[0] * pooled[1] * pooled[2] * pooled[3]
    nbytes = n * c * h * w * item + outputs * (item + (8 if maximum else 0))
    label = f"N{n} C{c} {h}x{w} k{KERNEL} s{STRIDE} p{PAD}"
    suite.case(Case(op, label, dtype.short, "GB/s", nbytes), acl, torch_fn, op)
