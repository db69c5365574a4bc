"""Reference kernel of ConvolutionBackward: the forward family's einsums, turned around, in float64.

A plain convolution's input gradient is the transposed convolution of gradOutput with the same
weight (``convolve_transposed`` crops it to the input's size); a transposed convolution's is the
plain convolution of gradOutput. The weight gradient sums, for every kernel offset, gradOutput times
the input window that offset met (for a transposed convolution, input and gradOutput swap roles).
The GEMM operands are rounded as ``cubeMathType`` asks, as the forward reference does; gradBias is a
plain sum of gradOutput, which no cube unit forms.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from acl_core.spec.ops.matmul import operand_precision
from acl_core.spec.promotion import promote_types
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.convolution import convolve, convolve_transposed
from acl_reference.kernels.matmul import reduce_precision

Array = np.ndarray
_ALL3: tuple[slice, ...] = (slice(None),) * 3


def weight_grad(
    x: Array,
    dy: Array,
    kernel_dims: Sequence[int],
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
) -> Array:
    """``dW[oc, c, k] = Σ_n,o dy[n, oc, o]·x_padded[n, g·C/g + c, o·stride + k·dilation]``, [C_out, C_in/g, *K]."""
    n, c_in = x.shape[:2]
    c_out, sizes = dy.shape[1], dy.shape[2:]
    padded = np.pad(x, [(0, 0), (0, 0), *pads])
    xg = padded.reshape(n, groups, c_in // groups, *padded.shape[2:])
    positions = math.prod(sizes)
    dyg = dy.reshape(n, groups, c_out // groups, positions)
    grad = np.zeros((groups, c_out // groups, c_in // groups, *kernel_dims))
    for offsets in itertools.product(*(range(k) for k in kernel_dims)):
        window = tuple(
            slice(o * d, o * d + s * (c - 1) + 1, s) if c else slice(0, 0)
            for o, d, s, c in zip(offsets, dilation, stride, sizes)
        )
        xw = xg[_ALL3 + window].reshape(n, groups, c_in // groups, positions)
        grad[_ALL3 + offsets] = np.einsum("ngcp,ngop->goc", xw, dyg)
    return grad.reshape(c_out, c_in // groups, *kernel_dims)


@kernel("ConvolutionBackward")
def convolution_backward(k: RefCall) -> None:
    """gradInput, gradWeight and gradBias of Convolution, as outputMask asks."""
    p = k.plan
    dy, x, w = k.read("gradOutput"), k.read("input"), k.read("weight")
    compute = promote_types(promote_types(k["gradOutput"].dtype, k["input"].dtype), k["weight"].dtype)
    precision = operand_precision(compute, int(k["cubeMathType"]), "ConvolutionBackward", strict=False)
    bias_grad = dy.astype(np.float64).sum(axis=(0, *range(2, dy.ndim)))  # cubeMathType is about GEMM operands
    dy, x, w = (reduce_precision(a, precision) for a in (dy, x, w))
    geometry = (p["stride"], p["pads"], p["dilation"], p["groups"])
    want_input, want_weight, want_bias = p["output_mask"]
    with np.errstate(invalid="ignore", over="ignore"):
        if want_input:
            spatial = x.shape[2:]
            fn = convolve if p["transposed"] else convolve_transposed
            k.write("gradInput", fn(dy, w, *geometry, spatial))
        if want_weight:
            kernel_dims = w.shape[2:]
            a, b = (dy, x) if p["transposed"] else (x, dy)
            k.write("gradWeight", weight_grad(a, b, kernel_dims, *geometry))
        if want_bias:
            k.write("gradBias", bias_grad)
