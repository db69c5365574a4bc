"""Rows of the ops suite for CrossEntropyLoss, beside torch's ``cross_entropy``.

A training step's loss over a Qwen3 vocabulary: [8192, 151936] bf16 logits (``--sizes full``; [512, 151936] in
the small size), int64 targets, reduction mean, no weight, no smoothing. The acl op also writes logProbOut (the
gradient's input), which torch's ``cross_entropy`` materialises internally as its log_softmax too, so both read
the logits and write one [N, C] tensor: GB/s over 2·N·C·2 bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("CrossEntropyLoss",)
"""The ``--only`` names of these rows."""

VOCAB = 151936
"""Qwen3's vocabulary."""


def run_cases(suite: Suite) -> None:
    """Add the row (only where ``--only`` lets it run)."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("CrossEntropyLoss"):
        return
    tokens = 8192 if suite.sizes.norm[0] >= 8192 else 512
    dtype = D.ACL_BF16
    targets = suite.rng.integers(0, VOCAB, tokens).astype(np.int64)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "input": suite.array((tokens, VOCAB), dtype),
            "target": to_device(targets, suite.backend),
            "weightOptional": None,
            "reductionOptional": "mean",
            "ignoreIndex": -100,
            "labelSmoothing": 0.0,
            "lseSquareScaleForZloss": 0.0,
            "returnZloss": False,
            "lossOut": empty((), dtype, suite.backend),
            "logProbOut": empty((tokens, VOCAB), dtype, suite.backend),
            "zlossOut": empty((), dtype, suite.backend),
            "lseForZlossOut": empty((tokens,), dtype, suite.backend),
        }
        return suite.prepared("CrossEntropyLoss", args)

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor((tokens, VOCAB), dtype)
        t = suite.torch.from_numpy(targets).to(suite.device)
        return lambda: suite.torch.nn.functional.cross_entropy(x, t, reduction="mean")

    nbytes = 2 * tokens * VOCAB * dtype.info.storage_bits // 8
    for setting in suite.env_rows("CrossEntropyLoss", dtype):  # the default row, then ACL_CE_ROWS=vec's
        note = "reduction mean" + ("" if setting is None else f", {setting[0]}={setting[1]}")
        case = Case("CrossEntropyLoss", f"[{tokens},{VOCAB}]", dtype.short, "GB/s", nbytes, note=note)
        suite.case(case, functools.partial(suite.with_env, setting, acl), torch_fn, "CrossEntropyLoss")
