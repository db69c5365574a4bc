"""Reference kernels of the GEMM variants: permuted batch matmuls, FRACTAL_NZ weights, GroupedMatmul V1.

The NZ versions read their weight back from its FRACTAL_NZ storage (:func:`acl_reference.kernels.layout.nz_values`)
and run their base's reference on those values; the permuted matmuls multiply the permuted views in
float64 and round once (the INT8 output of TransposeBatchMatMul: exact scaling, round half to even,
saturation), as :mod:`acl_core.spec.ops.matmul_variants` documents.
"""

from __future__ import annotations

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.kernels.layout import nz_values, read_nz
from acl_reference.kernels.matmul import grouped_matmul_with, reduce_precision
from acl_reference.kernels.quant import quant_matmul_v5_with, weight_quant_batch_matmul_with
from acl_reference.lowp_io import read_float

Array = np.ndarray


def _product(a: Array, b: Array) -> Array:
    with np.errstate(all="ignore"):
        return np.matmul(a, b)


def _logical(values: Array, perm: tuple[int, ...]) -> Array:
    """A 3-D operand as the product reads it: dim i is dim perm[i] of the stored tensor."""
    return np.transpose(values, perm)


@kernel("TransposeBatchMatMul")
def transpose_batch_matmul(k: RefCall) -> None:
    """out = permY(permX1(x1) @ permX2(x2)); with scale an INT8 (M, 1, B*N); batchSplitFactor cuts the columns."""
    precision = k.plan.get("precision")
    a = _logical(reduce_precision(k.read("x1"), precision), tuple(k.value("permX1")))
    b = _logical(reduce_precision(k.read("x2"), precision), tuple(k.value("permX2")))
    y = np.transpose(_product(a, b), (1, 0, 2))  # (M, B, N)
    m, batch, n = y.shape
    if k["scale"] is not None:
        scale = lowp.decode_packed_scale(k.read("scale"))
        with np.errstate(all="ignore"):
            scaled = y.reshape(m, 1, batch * n) * scale
        k.write("out", lowp.saturate_int(lowp.round_to_int(scaled), D.ACL_INT8))
        return
    split = int(k.value("batchSplitFactor"))
    if split == 1:
        k.write("out", y)
        return
    k.write("out", np.transpose(y.reshape(m, split, batch // split * n), (1, 0, 2)))


@kernel("TransposeQuantBatchMatMul")
def transpose_quant_batch_matmul(k: RefCall) -> None:
    """The K-C mode: out[m, b, n] = (x1[m, b] @ x2[b])[n] * x1Scale[m] * x2Scale[n]."""
    a = np.transpose(read_float(k, "x1"), (1, 0, 2))  # (B, M, K)
    b = read_float(k, "x2")  # (B, K, N)
    y = np.transpose(_product(a, b), (1, 0, 2))  # (M, B, N)
    with np.errstate(all="ignore"):
        y = y * k.read("x1Scale", np.float64)[:, None, None] * k.read("x2Scale", np.float64)
    k.write("out", y)


@kernel("QuantMatmulWeightNz")
def quant_matmul_weight_nz(k: RefCall) -> None:
    """QuantMatmulV5 on x2's values read from FRACTAL_NZ."""
    quant_matmul_v5_with(k, read_nz(k, "x2"))


@kernel("WeightQuantBatchMatmulNz")
def weight_quant_batch_matmul_nz(k: RefCall) -> None:
    """WeightQuantBatchMatmulV2 on the weight's values read from FRACTAL_NZ."""
    weight_quant_batch_matmul_with(k, read_nz(k, "weight"))


@kernel("GroupedMatmulWeightNz")
def grouped_matmul_weight_nz(k: RefCall) -> None:
    """GroupedMatmulV5 on the weights' values read from FRACTAL_NZ."""
    grouped_matmul_with(k, [nz_values(k, t) for t in k["weight"]])


@kernel("GroupedMatmul")
def grouped_matmul_v1(k: RefCall) -> None:
    """y_i = x_i @ weight_i (+ bias_i) in its four scenarios, the groups of a single x from the host list."""
    xs = k.read_list("x", np.float64)
    ws = k.read_list("weight", np.float64)
    biases = k.read_list("biasOptional", np.float64) if k["biasOptional"] is not None else [None] * len(ws)
    ranges = k.plan.get("row_groups")
    if len(xs) == 1 and ranges is not None:  # SMS / SMM: x's rows cut by the group list
        xs = [xs[0][s:e] for s, e in ranges]
    products = []
    for x, w, b in zip(xs, ws, biases):
        y = _product(x, w)
        products.append(y if b is None else y + b)
    if len(k["y"]) == 1 and len(products) > 1:  # SMS / MMS: the groups' rows concatenated into one y
        k.write_list("y", [np.concatenate(products, axis=0)])
    else:
        k.write_list("y", products)
