"""Reference kernel of the convolution family, written for obviousness: one einsum per kernel offset.

A convolution sums, for every kernel offset, the weight slice at that offset times the input window
it meets (a strided slice of the padded input). A transposed convolution does the reverse: each input
position scatters ``input · weight`` to ``position·stride + offset·dilation``, and the padding is
then cropped from the edges. Everything runs in float64, on operands rounded as ``cubeMathType``
asks (fp32 inputs: 1 and 3 HF32, 2 fp16), exactly as the matmul family's reference does: the mode is
a contract about the operands, so a backend honouring it gives the same products.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from acl_core.spec.ops.matmul import operand_precision
from acl_core.spec.promotion import promote_types
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.matmul import reduce_precision

Array = np.ndarray
_ALL3: tuple[slice, ...] = (slice(None),) * 3  # batch, group, channel-in-group


def _window(offset: int, dilation: int, stride: int, count: int) -> slice:
    """Positions ``offset·dilation + i·stride`` for i in [0, count)."""
    start = offset * dilation
    return slice(start, start + stride * (count - 1) + 1, stride) if count else slice(start, start)


def convolve(
    x: Array,
    w: Array,
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    sizes: Sequence[int],
) -> Array:
    """Grouped N-D convolution of ``x`` [N, C_in, *L] with ``w`` [C_out, C_in/groups, *K]."""
    n, c_in = x.shape[:2]
    c_out, kernel_dims = w.shape[0], w.shape[2:]
    padded = np.pad(x, [(0, 0), (0, 0), *pads])
    xg = padded.reshape(n, groups, c_in // groups, *padded.shape[2:])
    wg = w.reshape(groups, c_out // groups, c_in // groups, *kernel_dims)
    out = np.zeros((n, groups, c_out // groups, *sizes))
    for offsets in itertools.product(*(range(k) for k in kernel_dims)):
        window = tuple(_window(o, d, s, c) for o, d, s, c in zip(offsets, dilation, stride, sizes))
        out += np.einsum("ngc...,goc->ngo...", xg[_ALL3 + window], wg[_ALL3 + offsets])
    return out.reshape(n, c_out, *sizes)


def convolve_transposed(
    x: Array,
    w: Array,
    stride: Sequence[int],
    pads: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    groups: int,
    sizes: Sequence[int],
) -> Array:
    """Grouped N-D transposed convolution of ``x`` [N, C_in, *L] with ``w`` [C_in, C_out/groups, *K]."""
    n, c_in = x.shape[:2]
    per_group_out, kernel_dims = w.shape[1], w.shape[2:]
    spatial = x.shape[2:]
    xg = x.reshape(n, groups, c_in // groups, *spatial)
    wg = w.reshape(groups, c_in // groups, per_group_out, *kernel_dims)
    # every position any input reaches, plus room for outputPadding's extra trailing rows
    full = [pb + size for (pb, _), size in zip(pads, sizes)]
    full = [
        max(f, (length - 1) * s + d * (k - 1) + 1)
        for f, length, s, d, k in zip(full, spatial, stride, dilation, kernel_dims)
    ]
    out = np.zeros((n, groups, per_group_out, *full))
    for offsets in itertools.product(*(range(k) for k in kernel_dims)):
        window = tuple(_window(o, d, s, length) for o, d, s, length in zip(offsets, dilation, stride, spatial))
        out[_ALL3 + window] += np.einsum("ngc...,gco->ngo...", xg, wg[_ALL3 + offsets])
    crop = tuple(slice(pb, pb + size) for (pb, _), size in zip(pads, sizes))
    return out[_ALL3 + crop].reshape(n, groups * per_group_out, *sizes)


@kernel("Convolution")
def convolution(k: RefCall) -> None:
    """output = conv(input, weight) + bias, or its transposed form, per the validated plan."""
    p = k.plan
    x, w = k.read("input"), k.read("weight")
    compute = promote_types(k["input"].dtype, k["weight"].dtype)
    precision = operand_precision(compute, int(k["cubeMathType"]), "Convolution", strict=False)
    x, w = reduce_precision(x, precision), reduce_precision(w, precision)
    fn = convolve_transposed if p["transposed"] else convolve
    with np.errstate(invalid="ignore", over="ignore"):
        y = fn(x, w, p["stride"], p["pads"], p["dilation"], p["groups"], p["sizes"])
        if k["bias"] is not None:
            y = y + k.read("bias", np.float64).reshape((1, -1) + (1,) * (y.ndim - 2))
    k.write("output", y)
