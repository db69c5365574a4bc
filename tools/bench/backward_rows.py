"""Rows of the ops suite for the training backward ops of issue 16, beside torch's own backward kernels.

ConvolutionBackward at a ResNet-like 3x3 layer (N32 C256 56x56 -> 256, stride 1, padding 1, bf16; ``--sizes full``,
a small layer otherwise), all three gradients, against ``aten.convolution_backward`` (what autograd calls for
``F.conv2d``; cuDNN on NVIDIA). Its metric is TFLOP/s over the two GEMM-shaped gradients (``2·2·N·P·Cout·Cin·taps``).
On rocm two more rows force the other paths beside the default (cuDNN's deterministic engines):
``ConvolutionBackward cudnn-nondet`` (atomic-sum engines too) and ``ConvolutionBackward gemm`` (im2col + GEMM, what
runs where cuDNN is absent).

BatchNormBackward in training at N32 C256 56x56 bf16 (float32 weight and statistics, as mixed-precision training
keeps them), all three gradients, against ``aten.native_batch_norm_backward``; GB/s over the bytes a fused
kernel must move (read gradOut and input, write gradInput), so the figure is a fraction of the memory's speed.

MoeGatingTopKBackward at DeepSeek-V3's router in training (16,384 tokens, 256 experts, top-8; ``--sizes full``):
float32 scores, bf16 gradients, against the page's formula in torch ops (what autograd runs through the sigmoid
forward's renormalisation: gather, two row sums, scatter_add, x(1 - x)); GB/s over xNorm, gradY and expertIdx read
and the gradient written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.eager import to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("ConvolutionBackward", "BatchNormBackward", "MoeGatingTopKBackward")
"""The ``--only`` names of these rows."""


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    if suite.wanted("ConvolutionBackward"):
        full = suite.sizes.norm[0] >= 8192
        runner = suite.runner("conv_grad")
        for path in suite.choices("conv_grad", "path_override", ("cudnn-nondet", "gemm")):
            if path is not None and path.startswith("cudnn") and runner.cudnn.refusal() is not None:
                suite.progress(f"ConvolutionBackward {path}: skipped ({runner.cudnn.refusal()})")
                continue
            _convolution(suite, (32, 256, 56, 56, 256) if full else (2, 16, 8, 8, 16), path)
    if suite.wanted("BatchNormBackward"):
        full = suite.sizes.norm[0] >= 8192
        _batch_norm(suite, (32, 256, 56, 56) if full else (2, 16, 8, 8))
    if suite.wanted("MoeGatingTopKBackward"):
        _gating_backward(suite, (16384, 256, 8) if suite.sizes.full else (64, 64, 8))


def _convolution(suite: Suite, shape: tuple[int, int, int, int, int], path: str | None) -> None:
    from acl_tools.bench.ops import Case

    n, c, h, w, k = shape
    dtype, kernel = D.ACL_BF16, 3
    x_shape, w_shape, y_shape = (n, c, h, w), (k, c, kernel, kernel), (n, k, h, w)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "gradOutput": suite.array(y_shape, dtype),
            "input": suite.array(x_shape, dtype),
            "weight": suite.array(w_shape, dtype),
            "biasSizes": aclnn.aclCreateIntArray([k]),
            "stride": aclnn.aclCreateIntArray([1, 1]),
            "padding": aclnn.aclCreateIntArray([1, 1]),
            "dilation": aclnn.aclCreateIntArray([1, 1]),
            "transposed": False,
            "outputPadding": aclnn.aclCreateIntArray([0, 0]),
            "groups": 1,
            "outputMask": aclnn.aclCreateBoolArray([True, True, True]),
            "cubeMathType": 0,
        }
        return suite.forced("conv_grad", "path_override", path, lambda: suite.prepared("ConvolutionBackward", args))

    def torch_fn() -> Callable[[], object]:
        dy, x, wt = suite.tensor(y_shape, dtype), suite.tensor(x_shape, dtype), suite.tensor(w_shape, dtype)
        backward = suite.torch.ops.aten.convolution_backward
        mask = [True, True, True]
        return lambda: backward(dy, x, wt, [k], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, mask)

    flops = 2.0 * 2.0 * n * h * w * k * c * kernel * kernel
    label = f"N{n} C{c} {h}x{w} -> {k}, 3x3"
    note = "torch: aten.convolution_backward (autograd's conv2d backward)"
    op = "ConvolutionBackward" if path is None else f"ConvolutionBackward {path}"
    suite.case(
        Case(op, label, dtype.short, "TFLOP/s", flops, note=note),
        acl,
        torch_fn,
        "ConvolutionBackward",
    )


def _batch_norm(suite: Suite, shape: tuple[int, int, int, int]) -> None:
    from acl_tools.bench.ops import Case

    dtype, f32 = D.ACL_BF16, D.ACL_FLOAT
    c = shape[1]

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"gradOut": suite.array(shape, dtype), "input": suite.array(shape, dtype)}
        args |= {name: suite.array((c,), f32) for name in ("weight", "runningMean", "runningVar", "saveMean")}
        args |= {"saveInvstd": suite.array((c,), f32), "training": True, "eps": 1e-5}
        args["outputMask"] = aclnn.aclCreateBoolArray([True, True, True])
        return suite.prepared("BatchNormBackward", args)

    def torch_fn() -> Callable[[], object]:
        dy, x = suite.tensor(shape, dtype), suite.tensor(shape, dtype)
        w, rm, rv, sm, si = (suite.tensor((c,), f32) for _ in range(5))
        backward = suite.torch.ops.aten.native_batch_norm_backward
        return lambda: backward(dy, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True])

    nbytes = 3 * int(np.prod(shape)) * dtype.info.storage_bits // 8
    note = "training; torch: aten.native_batch_norm_backward; GB/s over dy + x read, dx written"
    case = Case("BatchNormBackward", f"N{shape[0]} C{c} {shape[2]}x{shape[3]}", dtype.short, "GB/s", nbytes, note=note)
    suite.case(case, acl, torch_fn, "BatchNormBackward")


def _gating_backward(suite: Suite, shape: tuple[int, int, int]) -> None:
    from acl_tools.bench.ops import Case

    tokens, experts, k = shape
    dtype, scale, eps = D.ACL_BF16, 2.5, 1e-20
    x_host = suite.rng.uniform(0.01, 0.99, (tokens, experts)).astype(np.float32)
    idx_host = np.argsort(suite.rng.random((tokens, experts)), axis=1)[:, :k].astype(np.int32)  # distinct per row

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"xNorm": to_device(x_host, suite.backend), "gradY": suite.array((tokens, k), dtype)}
        args |= {"expertIdx": to_device(idx_host, suite.backend), "renorm": 0, "normType": 1}
        args |= {"routedScalingFactor": scale, "eps": eps}
        return suite.prepared("MoeGatingTopKBackward", args)

    def torch_fn() -> Callable[[], object]:
        torch = suite.torch
        x = torch.from_numpy(x_host).to(suite.device)
        idx = torch.from_numpy(idx_host).to(suite.device).long()
        grad = suite.tensor((tokens, k), dtype)

        def run() -> object:
            chosen = x.gather(1, idx)
            d = chosen.sum(1, keepdim=True) + eps
            g = grad.float() * scale
            beta = (chosen / d * g).sum(1, keepdim=True)
            norm = torch.zeros_like(x).scatter_add_(1, idx, (g - beta) / d)
            return (x * (1 - x) * norm).to(grad.dtype)

        return run

    nbytes = tokens * experts * (4 + dtype.info.storage_bits // 8) + tokens * k * (dtype.info.storage_bits // 8 + 4)
    note = "torch: gather, row sums, scatter_add, x(1 - x) (the page's formula; autograd's ops)"
    case = Case("MoeGatingTopKBackward", f"[{tokens},{experts}] top-{k}", dtype.short, "GB/s", nbytes, note=note)
    suite.case(case, acl, torch_fn, "MoeGatingTopKBackward")
