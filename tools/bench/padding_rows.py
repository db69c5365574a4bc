"""A row of the ops suite for the padding family, beside torch.nn.functional.pad(mode="reflect").

ReflectionPad2d with pad 3 on every side over N32 C256 56x56 in bf16 (``--sizes full``; N2 C8 16x16 in the
small size). Bandwidth-bound: GB/s over the bytes read (the input once) and written (the padded output).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.eager import empty

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("ReflectionPad2d",)
"""The ``--only`` names of these rows."""

FULL, SMALL = (32, 256, 56, 56), (2, 8, 16, 16)
PAD = 3


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    shape = FULL if suite.sizes.norm[0] >= 8192 else SMALL
    if suite.wanted("ReflectionPad2d"):
        _row(suite, shape, D.ACL_BF16)


def _row(suite: Suite, shape: tuple[int, int, int, int], dtype: D) -> None:
    from acl_tools.bench.ops import Case

    n, c, h, w = shape
    padded = (n, c, h + 2 * PAD, w + 2 * PAD)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"self": suite.array(shape, dtype), "padding": aclnn.aclCreateIntArray([PAD] * 4)}
        args["out"] = empty(padded, dtype, suite.backend)
        return suite.prepared("ReflectionPad2d", args)

    def torch_fn() -> Callable[[], object]:
        F = suite.torch.nn.functional
        x = suite.tensor(shape, dtype)
        return lambda: F.pad(x, [PAD] * 4, mode="reflect")

    item = dtype.info.storage_bits // 8
    nbytes = (n * c * h * w + padded[0] * padded[1] * padded[2] * padded[3]) * item
    label = f"N{n} C{c} {h}x{w} pad {PAD}"
    suite.case(Case("ReflectionPad2d", label, dtype.short, "GB/s", nbytes), acl, torch_fn, "ReflectionPad2d")
