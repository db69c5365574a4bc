"""Reference kernels of the matmul family: float64 products of (optionally precision-reduced) operands.

The spec decides in phase 1 what ``cubeMathType`` does (``plan["precision"]``: "hf32", "fp16" or None,
see :mod:`acl_core.spec.ops.matmul`); these kernels apply it to FLOAT32 operands, multiply and add in
float64 and round once into the output.
"""

from __future__ import annotations

import itertools

import numpy as np

from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.matmul import gmm_weight_transposed, round_to_hf32
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.quant import mx_expand

Array = np.ndarray


def reduce_precision(values: Array, precision: str | None) -> Array:
    """A FLOAT32 operand rounded as ``precision`` says ("hf32", "fp16"), as float64; others just widened."""
    if values.dtype == np.float32 and precision == "hf32":
        return round_to_hf32(values).astype(np.float64)
    if values.dtype == np.float32 and precision == "fp16":
        with np.errstate(over="ignore"):
            return values.astype(np.float16).astype(np.float64)
    return values.astype(np.float64)


def _operand(k: RefCall, name: str) -> Array:
    return reduce_precision(k.read(name), k.plan.get("precision"))


def _product(a: Array, b: Array) -> Array:
    with np.errstate(all="ignore"):
        return np.matmul(a, b)


@kernel("Matmul", "Mm", "BatchMatMul")
def matmul(k: RefCall) -> None:
    """out = self @ mat2 (torch.matmul semantics: 1-D operands promoted, batch dims broadcast)."""
    k.write("out", _product(_operand(k, "self"), _operand(k, "mat2")))


def _scaled_add(k: RefCall, m1: str, m2: str) -> None:
    product = _product(_operand(k, m1), _operand(k, m2))
    beta, alpha = float(k.value("beta")), float(k.value("alpha"))
    with np.errstate(all="ignore"):
        result = alpha * product
        if beta != 0:  # beta == 0 ignores self entirely, so NaN/Inf there do not propagate
            result = result + beta * k.read("self", np.float64)
    k.write("out", result)


@kernel("Addmm")
def addmm(k: RefCall) -> None:
    """out = beta*self + alpha*(mat1 @ mat2)."""
    _scaled_add(k, "mat1", "mat2")


@kernel("Baddbmm")
def baddbmm(k: RefCall) -> None:
    """out = beta*self + alpha*(batch1 @ batch2), batched."""
    _scaled_add(k, "batch1", "batch2")


# ----------------------------------------------------------------------------- GroupedMatmulV5
def _launch_error(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def group_sizes(group_list: Array | None, list_type: int, axis: int, axis_name: str) -> list[int]:
    """Group sizes from a cumulative (0) or per-group count (1) list; 161002 when inconsistent with ``axis``."""
    if group_list is None:
        raise _launch_error("groupListOptional is required here")
    values = [int(v) for v in np.asarray(group_list).reshape(-1)]
    if any(v < 0 for v in values):
        raise _launch_error(f"groupListOptional holds a negative value: {values}")
    if list_type == 0:
        if any(b < a for a, b in itertools.pairwise(values)):
            raise _launch_error(f"groupListOptional (cumulative, groupListType=0) decreases: {values}")
        sizes = [b - a for a, b in itertools.pairwise([0, *values])]
    else:
        sizes = values
    if sum(sizes) > axis:
        raise _launch_error(f"groupListOptional covers {sum(sizes)} along {axis_name}, which has only {axis}")
    return sizes


def _bias(k: RefCall, groups: int, single_weight: bool) -> list[Array | None]:
    if k["biasOptional"] is None:
        return [None] * groups
    biases = k.read_list("biasOptional", np.float64)
    return list(biases[0]) if single_weight else biases


@kernel("GroupedMatmulV5")
def grouped_matmul(k: RefCall) -> None:
    """y_i = x_i @ weight_i (+ bias_i) over groups along M (groupType 0), K (2) or none (-1)."""
    grouped_matmul_with(k, None)


def grouped_matmul_with(k: RefCall, weights: list[Array] | None) -> None:
    """GroupedMatmulV5 with the weights' values given (e.g. read from FRACTAL_NZ) or read."""
    plan = k.plan["gmm"]
    xs = [x.astype(np.float64) for x in k.read_list("x")]
    ws = [w.astype(np.float64) for w in (k.read_list("weight") if weights is None else weights)]
    if plan.get("mx"):
        xs, ws = _mx_dequantise(k, xs[0], ws[0])
    list_type = int(k.value("groupListType"))
    group_list = k.read("groupListOptional") if k["groupListOptional"] is not None else None
    gt = plan["group_type"]
    if gt == -1:
        results = []
        for x, w, b in zip(xs, ws, _bias(k, len(ws), False)):
            y = _product(x, w)
            results.append(y if b is None else y + b)
        k.write_list("out", results)
    elif gt == 0:
        _grouped_m(k, xs, ws, group_list, list_type, plan["weight_split"])
    else:
        x = xs[0]
        if plan["single_out"]:
            sizes = group_sizes(group_list, list_type, x.shape[1], "K of x")
            starts = np.cumsum([0, *sizes])
            y = np.stack([_product(x[:, s:e], ws[0][s:e]) for s, e in itertools.pairwise(starts)])
            k.write_list("out", [y])
        else:
            starts = np.cumsum([0, *(w.shape[0] for w in ws)])
            k.write_list("out", [_product(x[:, s : s + w.shape[0]], w) for s, w in zip(starts, ws)])


def _mx_dequantise(k: RefCall, x: Array, w: Array) -> tuple[list[Array], list[Array]]:
    """MX mode: x [M, K] and weight [g, K, N] times their E8M0 block scales, exactly, in float64."""
    token = k.read_list("perTokenScaleOptional")[0].view(np.uint8)
    scale = k.read_list("scaleOptional")[0].view(np.uint8)
    if not gmm_weight_transposed(k["weight"][0]):  # (g, kb, N, 2) -> (g, N, kb, 2)
        scale = np.swapaxes(scale, 1, 2)
    kk = x.shape[1]
    with np.errstate(all="ignore"):
        return [x * mx_expand(token, kk)], [w * np.swapaxes(mx_expand(scale, kk), -1, -2)]


def _grouped_m(
    k: RefCall, xs: list[Array], ws: list[Array], group_list: Array | None, list_type: int, weight_split: bool
) -> None:
    """M-axis groups into the single output; rows no group covers are left untouched, as on CANN."""
    weights = ws if weight_split else list(ws[0])
    biases = _bias(k, len(weights), not weight_split)
    if len(xs) > 1:
        rows = [x.shape[0] for x in xs]
        if group_list is not None and group_sizes(group_list, list_type, sum(rows), "M") != rows:
            raise _launch_error(f"groupListOptional does not match the rows of the x tensors {rows}")
        x = np.concatenate(xs, axis=0)
        sizes = rows
    else:
        x = xs[0]
        sizes = group_sizes(group_list, list_type, x.shape[0], "M of x")
    y = k.read_list("out", np.float64)[0]
    start = 0
    for size, w, b in zip(sizes, weights, biases):
        part = _product(x[start : start + size], w)
        y[start : start + size] = part if b is None else part + b
        start += size
    k.write_list("out", [y])
