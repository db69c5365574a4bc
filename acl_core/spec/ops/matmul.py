"""Matrix products: Matmul, Mm, BatchMatMul, Addmm, Baddbmm (and in-place twins), GroupedMatmulV5.

Inputs are BFLOAT16, FLOAT16 or FLOAT32. Two operands must share a dtype, except FLOAT16 with FLOAT32
(computed as FLOAT32); BFLOAT16 mixes with nothing (CANN's matmul deduction rules).

``cubeMathType`` (``int8_t``) accepts the five documented values and is emulated as follows. Only the
two *matrix operands* are affected (self/mat2, mat1/mat2, batch1/batch2), never the added ``self`` of
Addmm/Baddbmm; the product and sum are always formed in float64 and rounded once to ``out``'s dtype.

* 0 KEEP_DTYPE: operands exactly as given.
* 1 ALLOW_FP32_DOWN_PRECISION: FLOAT32 operands are rounded to HF32 (as Atlas A2/A3 do); FLOAT16 and
  BFLOAT16 operands are unchanged.
* 2 USE_FP16: FLOAT32 operands are rounded to FLOAT16 (round to nearest even, overflow to ±inf);
  FLOAT16 operands are unchanged. BFLOAT16 inputs are refused with 161002 by Matmul, Mm and Addmm and
  left unchanged by BatchMatMul and Baddbmm, as their documents say.
* 3 USE_HF32: FLOAT32 operands are rounded to HF32. Other dtypes are refused with 161002 by Matmul, Mm
  and Addmm and left unchanged by BatchMatMul and Baddbmm.
* 4 USE_FP32_ADD: operands unchanged (float64 accumulation is already at least as exact). For FLOAT16 or
  BFLOAT16 Addmm/Baddbmm, ``self`` must then have the result's full shape (no broadcasting), as on A2/A3.

HF32 as emulated here (:func:`round_to_hf32`): the FLOAT32 value rounded to 10 explicit mantissa bits,
round to nearest with ties to even, keeping FLOAT32's 8-bit exponent. It is done on the bit pattern by
rounding away the low 13 bits, so FLOAT32 subnormals are rounded at the same bit position, values that
round past the largest HF32 finite number become ±inf, and NaN and ±inf pass through unchanged. This is
TF32's format; CANN does not publish HF32's bit layout, so treat it as the reference's definition.

When both Matmul operands are 1-D the op is a dot product and, as documented, ``cubeMathType`` has no
effect (its value is still checked).

GroupedMatmulV5 implements the non-quantised float paths: groupType -1 (independent products,
multi-tensor out), 0 (M-axis groups: single x with a 3-D weight or a weight list, or an x list; single
out) and 2 (K-axis groups); groupListType 0 (cumulative) and 1 (counts); actType 0. Its one
quantised path is the MX mode of Ascend 950 for M-axis groups: FLOAT8 (E4M3FN / E5M2) or FLOAT4_E2M1 x
[M, K] and weight [g, K, N], FLOAT8_E8M0 block scales over 32 elements of K packed in pairs
(``scaleOptional`` [g, ceil(K/64), N, 2], or [g, N, ceil(K/64), 2] for a transposed weight view;
``perTokenScaleOptional`` [M, ceil(K/64), 2]), a float32 bias [g, N] for FLOAT4 only, and a float16,
bfloat16 or float32 output. The other quantised and fake-quantised modes, MX with K-axis groups,
activations, groupListType 2 and N-axis grouping are refused with 161002. The
values inside ``groupListOptional`` live in device memory, which phase 1 cannot read: they are checked
when the operator runs (non-negative, non-decreasing for cumulative lists, total within the grouped
axis, equal to the x list's row counts when both are given). Which operand may be transposed (strided)
per groupType is not checked: every backend computes on the logical views.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

import ml_dtypes
import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import last_dim, reduction, table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Param,
    Role,
    Sample,
    inplace_twin,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    scalar,
    tensor,
    tensor_list,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, broadcast_shapes, castable, same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor, AclTensorList

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan(
    "gmm", "dict[str, object]", "GroupedMatmul's decoded grouping: group_type, single_out, weight_split, mx", dict
)

FAMILY = "matmul"
Shape = tuple[int, ...]

KEEP_DTYPE = 0
ALLOW_FP32_DOWN_PRECISION = 1
USE_FP16 = 2
USE_HF32 = 3
USE_FP32_ADD = 4
CUBE_MATH_TYPES = (KEEP_DTYPE, ALLOW_FP32_DOWN_PRECISION, USE_FP16, USE_HF32, USE_FP32_ADD)
"""The documented cubeMathType values; any other is refused with 161002."""

ADD_SCALAR_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_DOUBLE, D.ACL_INT8, D.ACL_INT16, D.ACL_INT32})
ADDMM_SCALARS = ADD_SCALAR_DTYPES | {D.ACL_INT64, D.ACL_UINT8}
BADDBMM_SCALARS = ADDMM_SCALARS | {D.ACL_BOOL}


# ----------------------------------------------------------------------------- precision helpers
def round_to_hf32(values: np.ndarray) -> np.ndarray:
    """FLOAT32 values rounded to HF32 (10 mantissa bits, nearest-even), returned as FLOAT32."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
    result = (rounded & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), result, x)


def operand_precision(compute: D, cube: int, op: str, *, strict: bool) -> str | None:
    """What ``cubeMathType`` does to the matrix operands: "hf32", "fp16" or None; 161002 where refused."""
    if compute == D.ACL_FLOAT:
        if cube in (ALLOW_FP32_DOWN_PRECISION, USE_HF32):
            return "hf32"
        if cube == USE_FP16:
            return "fp16"
        return None
    if strict and cube == USE_FP16 and compute == D.ACL_BF16:
        raise invalid(f"{op}: cubeMathType=2 (USE_FP16) does not support bfloat16 inputs")
    if strict and cube == USE_HF32:
        raise invalid(f"{op}: cubeMathType=3 (USE_HF32) supports only float32 inputs, not {compute.short}")
    return None


def matmul_dtype(a: D, b: D, names: tuple[str, str]) -> D:
    """The dtype two matmul operands compute in; bfloat16 combines only with itself (161002)."""
    if a == b:
        return a
    if {a, b} == {D.ACL_FLOAT16, D.ACL_FLOAT}:
        return D.ACL_FLOAT
    raise invalid(f"the dtypes of {names[0]} ({a.short}) and {names[1]} ({b.short}) cannot be deduced together")


def matmul_shape(a: Sequence[int], b: Sequence[int], names: tuple[str, str] = ("self", "mat2")) -> Shape:
    """torch.matmul's result shape: 1-D operands promoted and dropped, batch dims broadcast."""
    a, b = tuple(a), tuple(b)
    if not a or not b:
        raise invalid(f"{names[0]} and {names[1]} must be at least 1-D")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise invalid(
            f"inner dimensions disagree: {names[0]} {list(a)} has k={a2[-1]}, {names[1]} {list(b)} has k={b2[-2]}"
        )
    batch = broadcast_shapes(a2[:-2], b2[:-2], names=(f"{names[0]} batch", f"{names[1]} batch"))
    rows = () if len(a) == 1 else (a2[-2],)
    cols = () if len(b) == 1 else (b2[-1],)
    return (*batch, *rows, *cols)


def _cube(call: Call) -> int:
    return int(call.args["cubeMathType"])


def _cube_param() -> Param:
    return int_attr("cubeMathType", c_type="int8_t", choices=CUBE_MATH_TYPES)


# ----------------------------------------------------------------------------- samples
_DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
_LOOSE = (1e-2, 1e-3)
"""Tolerance for ALLOW_FP32_DOWN_PRECISION cases: HF32 may be used or not (|err| <= 2^-10 Σ|a||b|)."""


def _pair(rng: np.random.Generator, sa: Shape, sb: Shape, dt: D, db: D | None = None) -> tuple[Any, Any]:
    return S.array(rng, sa, dt, low=-1, high=1), S.array(rng, sb, db or dt, low=-1, high=1)


def _cube_cases(dt: D, strict: bool) -> Iterable[int]:
    """The cubeMathType values an op accepts for dtype ``dt``."""
    for cube in CUBE_MATH_TYPES:
        if strict and dt != D.ACL_FLOAT and (cube == USE_HF32 or (cube == USE_FP16 and dt == D.ACL_BF16)):
            continue
        yield cube


def _tolerance(dt: D, cube: int) -> tuple[float, float] | None:
    return _LOOSE if dt == D.ACL_FLOAT and cube == ALLOW_FP32_DOWN_PRECISION else None


def _binary_samples(
    pairs: Sequence[tuple[Shape, Shape]], strict: bool
) -> Callable[[np.random.Generator], Iterable[Sample]]:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in _DTYPES:
            for sa, sb in pairs:
                a, b = _pair(rng, sa, sb, dt)
                yield Sample({"self": a, "mat2": b, "cubeMathType": 0}, f"{dt.short} {list(sa)}@{list(sb)}")
        sa, sb = pairs[0]
        for dt in _DTYPES:
            for cube in _cube_cases(dt, strict):
                a, b = _pair(rng, sa, sb, dt)
                yield Sample(
                    {"self": a, "mat2": b, "cubeMathType": cube},
                    f"{dt.short} cubeMathType={cube}",
                    _tolerance(dt, cube),
                )
        a, b = _pair(rng, sa, sb, D.ACL_FLOAT16, D.ACL_FLOAT)
        yield Sample({"self": a, "mat2": b, "cubeMathType": USE_FP16}, "float16@float32 with USE_FP16")

    return gen


def _binary_errors(
    sa: Shape, sb: Shape, bad_inner: tuple[Shape, Shape], bad_rank: Shape, strict: bool
) -> Callable[[np.random.Generator], Iterable[ErrorSample]]:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a, b = _pair(rng, sa, sb, D.ACL_FLOAT)
        x, y = _pair(rng, *bad_inner, D.ACL_FLOAT)
        yield ErrorSample({"self": x, "mat2": y, "cubeMathType": 0}, INVALID, "inner dimensions disagree")
        yield ErrorSample({"self": S.array(rng, bad_rank, D.ACL_FLOAT), "mat2": b, "cubeMathType": 0}, INVALID, "rank")
        yield ErrorSample({"self": a, "mat2": b, "cubeMathType": 5}, INVALID, "undocumented cubeMathType")
        yield ErrorSample({"self": a, "mat2": b, "cubeMathType": -1}, INVALID, "negative cubeMathType")
        c, d = _pair(rng, sa, sb, D.ACL_BF16, D.ACL_FLOAT16)
        yield ErrorSample({"self": c, "mat2": d, "cubeMathType": 0}, INVALID, "bfloat16 with float16")
        ai, bi = S.array(rng, sa, D.ACL_INT32), S.array(rng, sb, D.ACL_INT32)
        yield ErrorSample({"self": ai, "mat2": bi, "cubeMathType": 0}, INVALID, "int32 inputs")
        if strict:
            c, d = _pair(rng, sa, sb, D.ACL_BF16)
            yield ErrorSample({"self": c, "mat2": d, "cubeMathType": USE_FP16}, INVALID, "USE_FP16 with bfloat16")
            c, d = _pair(rng, sa, sb, D.ACL_FLOAT16)
            yield ErrorSample({"self": c, "mat2": d, "cubeMathType": USE_HF32}, INVALID, "USE_HF32 with float16")

    return gen


# ----------------------------------------------------------------------------- Matmul, Mm, BatchMatMul
def _binary(
    name: str,
    rank: tuple[int, int],
    strict: bool,
    pairs: Sequence[tuple[Shape, Shape]],
    errors: Callable[[np.random.Generator], Iterable[ErrorSample]],
) -> OpSpec:
    lo, hi = rank
    params = (
        tensor("self", FLOATS, min_rank=lo, max_rank=hi),
        tensor("mat2", FLOATS, min_rank=lo, max_rank=hi),
        out("out", FLOATS, max_rank=hi),
        _cube_param(),
    )

    def infer(call: Call) -> Infos:
        a, b = tensor_arg(call, "self"), tensor_arg(call, "mat2")
        compute = matmul_dtype(a.dtype, b.dtype, ("self", "mat2"))
        shape = matmul_shape(a.shape, b.shape)
        dot = a.rank == 1 and b.rank == 1
        call.plan["compute"] = compute
        call.plan["precision"] = None if dot else operand_precision(compute, _cube(call), name, strict=strict)
        return {"out": castable(shape, compute)}

    return OpSpec(
        name,
        FAMILY,
        params,
        infer,
        samples=_binary_samples(pairs, strict),
        error_samples=errors,
        summary=f"out = self @ mat2 ({'torch.matmul semantics' if lo == 1 else f'{lo}-D only'})",
    )


def _matmul_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    yield from _binary_errors((3, 4), (4, 5), ((2, 3, 4), (2, 5, 6)), (1, 1, 1, 1, 1, 2, 2), True)(rng)
    a, b = _pair(rng, (2, 3, 4), (3, 4, 5), D.ACL_FLOAT)
    yield ErrorSample({"self": a, "mat2": b, "cubeMathType": 0}, INVALID, "batch dims that do not broadcast")
    yield ErrorSample(
        {"self": S.array(rng, (), D.ACL_FLOAT), "mat2": S.array(rng, (3,), D.ACL_FLOAT), "cubeMathType": 0},
        INVALID,
        "0-d operand",
    )


def _bmm_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    yield from _binary_errors((2, 3, 4), (2, 4, 5), ((2, 3, 4), (2, 5, 6)), (3, 4), False)(rng)
    a, b = _pair(rng, (2, 3, 4), (3, 4, 5), D.ACL_FLOAT)
    yield ErrorSample({"self": a, "mat2": b, "cubeMathType": 0}, INVALID, "batch dims 2 and 3 do not broadcast")


_MATMUL_PAIRS: tuple[tuple[Shape, Shape], ...] = (
    ((5, 7), (7, 3)),
    ((7,), (7,)),
    ((4, 6), (6,)),
    ((6,), (6, 3)),
    ((2, 4, 5), (5, 3)),
    ((2, 1, 3, 4), (3, 4, 2)),
    ((3, 0), (0, 4)),
    ((0, 5), (5, 2)),
)
_MM_PAIRS: tuple[tuple[Shape, Shape], ...] = (((5, 7), (7, 3)), ((1, 9), (9, 1)), ((4, 0), (0, 3)), ((0, 3), (3, 2)))
_BMM_PAIRS: tuple[tuple[Shape, Shape], ...] = (
    ((3, 4, 5), (3, 5, 2)),
    ((1, 4, 5), (3, 5, 2)),
    ((3, 4, 5), (1, 5, 2)),
    ((2, 0, 3), (2, 3, 4)),
    ((0, 2, 3), (0, 3, 1)),
)
_Matmul = _binary("Matmul", (1, 6), True, _MATMUL_PAIRS, _matmul_errors)
_Mm = _binary("Mm", (2, 2), True, _MM_PAIRS, _binary_errors((3, 4), (4, 5), ((3, 4), (5, 6)), (2, 3, 4), True))
_BatchMatMul = _binary("BatchMatMul", (3, 3), False, _BMM_PAIRS, _bmm_errors)


# ----------------------------------------------------------------------------- Addmm, Baddbmm
def _scaled_add(
    name: str,
    mats: tuple[str, str],
    mat_rank: int,
    self_rank: tuple[int, int],
    scalar_dtypes: frozenset[D],
    strict: bool,
    out_follows_self: bool,
) -> OpSpec:
    """out = beta*self + alpha*(m1 @ m2); self broadcasts one way to the product's shape."""
    m1, m2 = mats
    params = (
        tensor("self", FLOATS, min_rank=self_rank[0], max_rank=self_rank[1]),
        tensor(m1, FLOATS, min_rank=mat_rank, max_rank=mat_rank),
        tensor(m2, FLOATS, min_rank=mat_rank, max_rank=mat_rank),
        scalar("beta", scalar_dtypes),
        scalar("alpha", scalar_dtypes),
        out("out", FLOATS, max_rank=mat_rank),
        _cube_param(),
    )

    def infer(call: Call) -> Infos:
        s, a, b = tensor_arg(call, "self"), tensor_arg(call, m1), tensor_arg(call, m2)
        product = matmul_dtype(a.dtype, b.dtype, (m1, m2))
        compute = matmul_dtype(s.dtype, product, ("self", f"{m1}@{m2}"))
        shape = matmul_shape(a.shape, b.shape, (m1, m2))
        if broadcast_shapes(s.shape, shape, names=("self", f"{m1}@{m2}")) != shape:
            raise invalid(f"self {list(s.shape)} must broadcast to the product's shape {list(shape)}")
        cube = _cube(call)
        if cube == USE_FP32_ADD and compute in (D.ACL_FLOAT16, D.ACL_BF16) and tuple(s.shape) != shape:
            raise invalid(f"cubeMathType=4 with {compute.short} needs self of the full shape {list(shape)}")
        if mat_rank == 3 and (s.numel == 0) != (math.prod(shape) == 0):
            raise invalid("self and the product must both be empty or both be non-empty")
        call.plan["compute"] = compute
        call.plan["precision"] = operand_precision(product, cube, name, strict=strict)
        if out_follows_self:
            return {"out": same(shape, s.dtype)}
        return {"out": castable(shape, compute)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        m, k, n = 4, 6, 3
        lead = (2,) if mat_rank == 3 else ()
        for dt in _DTYPES:
            for self_shape in ((*lead, m, n), (n,), (m, 1)):
                a, b = _pair(rng, (*lead, m, k), (*lead, k, n), dt)
                args = {"self": S.array(rng, self_shape, dt), m1: a, m2: b, "beta": 0.5, "alpha": 2, "cubeMathType": 0}
                yield Sample(args, f"{dt.short} self {list(self_shape)}")
            for cube in _cube_cases(dt, strict):
                a, b = _pair(rng, (*lead, m, k), (*lead, k, n), dt)
                args = {"self": S.array(rng, (*lead, m, n), dt), m1: a, m2: b, "beta": 1, "alpha": 1.5}
                yield Sample({**args, "cubeMathType": cube}, f"{dt.short} cubeMathType={cube}", _tolerance(dt, cube))
        poisoned = S.array(rng, (*lead, m, n), D.ACL_FLOAT)
        poisoned.reshape(-1)[:2] = (np.nan, np.inf)
        a, b = _pair(rng, (*lead, m, k), (*lead, k, n), D.ACL_FLOAT)
        yield Sample({"self": poisoned, m1: a, m2: b, "beta": 0, "alpha": 1, "cubeMathType": 0}, "beta=0 ignores self")
        a, b = _pair(rng, (*lead, m, 0), (*lead, 0, n), D.ACL_FLOAT)
        yield Sample(
            {"self": S.array(rng, (*lead, m, n), D.ACL_FLOAT), m1: a, m2: b, "beta": 2, "alpha": 3, "cubeMathType": 0},
            "empty k",
        )
        if mat_rank == 3:
            a, b = _pair(rng, (1, m, k), (3, k, n), D.ACL_FLOAT)
            yield Sample(
                {"self": S.array(rng, (m, n), D.ACL_FLOAT), m1: a, m2: b, "beta": 1, "alpha": 1, "cubeMathType": 0},
                "batch broadcast",
            )
            a, b = _pair(rng, (0, m, k), (0, k, n), D.ACL_FLOAT16)
            yield Sample(
                {
                    "self": S.array(rng, (0, m, n), D.ACL_FLOAT16),
                    m1: a,
                    m2: b,
                    "beta": 1,
                    "alpha": 1,
                    "cubeMathType": 0,
                },
                "empty batch",
            )
        a, b = _pair(rng, (*lead, m, k), (*lead, k, n), D.ACL_FLOAT16)
        yield Sample(
            {"self": S.array(rng, (*lead, m, n), D.ACL_FLOAT), m1: a, m2: b, "beta": 1, "alpha": 1, "cubeMathType": 0},
            "float32 self with float16 matrices",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        lead = (2,) if mat_rank == 3 else ()
        a, b = _pair(rng, (*lead, 3, 4), (*lead, 4, 5), D.ACL_FLOAT)
        base = {
            "self": S.array(rng, (*lead, 3, 5), D.ACL_FLOAT),
            m1: a,
            m2: b,
            "beta": 1,
            "alpha": 1,
            "cubeMathType": 0,
        }
        x, y = _pair(rng, (*lead, 3, 4), (*lead, 3, 5), D.ACL_FLOAT)
        yield ErrorSample({**base, m1: x, m2: y}, INVALID, "inner dimensions disagree")
        yield ErrorSample(
            {**base, "self": S.array(rng, (*lead, 4, 5), D.ACL_FLOAT)}, INVALID, "self does not broadcast"
        )
        yield ErrorSample({**base, m1: S.array(rng, (3, 4, 1, 1), D.ACL_FLOAT)}, INVALID, f"{m1} of the wrong rank")
        yield ErrorSample({**base, "cubeMathType": 9}, INVALID, "undocumented cubeMathType")
        yield ErrorSample({**base, "beta": (1.0, D.ACL_BF16)}, INVALID, "bfloat16 beta")
        h = {k: v.astype(np.float16) if isinstance(v, np.ndarray) else v for k, v in base.items()}
        yield ErrorSample(
            {**h, "self": S.array(rng, (5,), D.ACL_FLOAT16), "cubeMathType": USE_FP32_ADD},
            INVALID,
            "USE_FP32_ADD with float16 and a broadcast self",
        )
        if strict:
            c, d = _pair(rng, (*lead, 3, 4), (*lead, 4, 5), D.ACL_BF16)
            yield ErrorSample({**base, m1: c, m2: d, "cubeMathType": USE_FP16}, INVALID, "USE_FP16 with bfloat16")

    return OpSpec(
        name,
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary=f"out = beta*self + alpha*({m1} @ {m2})",
    )


_Addmm = _scaled_add("Addmm", ("mat1", "mat2"), 2, (1, 2), ADDMM_SCALARS, True, False)
_Baddbmm = _scaled_add("Baddbmm", ("batch1", "batch2"), 3, (1, 3), BADDBMM_SCALARS, False, True)


def _inplace(base: OpSpec, mats: tuple[str, str], lead: Shape) -> OpSpec:
    m1, m2 = mats

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in _DTYPES:
            a, b = _pair(rng, (*lead, 4, 6), (*lead, 6, 3), dt)
            args = {"selfRef": S.array(rng, (*lead, 4, 3), dt), m1: a, m2: b, "beta": 0.5, "alpha": 2}
            yield Sample({**args, "cubeMathType": 0}, f"{dt.short}")
        a, b = _pair(rng, (*lead, 4, 6), (*lead, 6, 3), D.ACL_FLOAT)
        args = {"selfRef": S.array(rng, (*lead, 4, 3), D.ACL_FLOAT), m1: a, m2: b, "beta": 1, "alpha": 1}
        yield Sample({**args, "cubeMathType": USE_FP16}, "float32 USE_FP16")

    twin = inplace_twin(base, samples=gen)
    twin_infer = twin.infer

    def infer(call: Call) -> Infos:
        a, b = tensor_arg(call, m1), tensor_arg(call, m2)
        if a.rank == 3 and b.rank == 3 and a.shape[0] != b.shape[0]:
            raise invalid(f"{twin.name} does not broadcast batch dims: {m1} {list(a.shape)}, {m2} {list(b.shape)}")
        return twin_infer(call)

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        a, b = _pair(rng, (*lead, 3, 4), (*lead, 4, 5), D.ACL_FLOAT)
        base_args = {m1: a, m2: b, "beta": 1, "alpha": 1, "cubeMathType": 0}
        yield ErrorSample(
            {**base_args, "selfRef": S.array(rng, (5,), D.ACL_FLOAT)}, INVALID, "selfRef of the wrong shape"
        )
        if lead:
            c, d = _pair(rng, (1, 3, 4), (2, 4, 5), D.ACL_FLOAT)
            yield ErrorSample(
                {**base_args, m1: c, m2: d, "selfRef": S.array(rng, (2, 3, 5), D.ACL_FLOAT)},
                INVALID,
                "batch broadcast in place",
            )

    return replace(twin, infer=infer, error_samples=errors)


_InplaceAddmm = _inplace(_Addmm, ("mat1", "mat2"), ())
_InplaceBaddbmm = _inplace(_Baddbmm, ("batch1", "batch2"), (2,))


# ----------------------------------------------------------------------------- GroupedMatmulV5
GMM_MAX_LIST = 128
GMM_MAX_GROUPS = 1024
GMM_X_DTYPES = frozenset(
    {
        D.ACL_FLOAT,
        D.ACL_FLOAT16,
        D.ACL_INT16,
        D.ACL_INT8,
        D.ACL_INT4,
        D.ACL_BF16,
        D.ACL_FLOAT8_E5M2,
        D.ACL_FLOAT8_E4M3FN,
        D.ACL_HIFLOAT8,
        D.ACL_FLOAT4_E2M1,
    }
)
GMM_W_DTYPES = GMM_X_DTYPES | {D.ACL_INT32}
GMM_BIAS_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32, D.ACL_BF16})
GMM_OUT_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_INT32, D.ACL_INT8, D.ACL_BF16})
_GMM_BIAS_FOR = {D.ACL_FLOAT: D.ACL_FLOAT, D.ACL_FLOAT16: D.ACL_FLOAT16, D.ACL_BF16: D.ACL_FLOAT}
_QUANT_PARAMS = (
    "scaleOptional",
    "offsetOptional",
    "antiquantScaleOptional",
    "antiquantOffsetOptional",
    "perTokenScaleOptional",
)
_ACTIVATION_PARAMS = ("activationInputOptional", "activationQuantScaleOptional", "activationQuantOffsetOptional")
_ACT_NAMES = {1: "relu", 2: "gelu_tanh", 3: "gelu_erf", 4: "fast_gelu", 5: "silu"}
MX_FP8 = frozenset({D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2})
MX_OPERANDS = MX_FP8 | {D.ACL_FLOAT4_E2M1}
"""x / weight dtypes that select GroupedMatmulV5's MX mode (its only quantised mode in acl-core)."""


def _gmm_params() -> tuple[Param, ...]:
    return (
        tensor_list("x", GMM_X_DTYPES),
        tensor_list("weight", GMM_W_DTYPES),
        tensor_list("biasOptional", GMM_BIAS_DTYPES, optional=True),
        tensor_list("scaleOptional", optional=True),
        tensor_list("offsetOptional", optional=True),
        tensor_list("antiquantScaleOptional", optional=True),
        tensor_list("antiquantOffsetOptional", optional=True),
        tensor_list("perTokenScaleOptional", optional=True),
        tensor("groupListOptional", {D.ACL_INT64}, optional=True, max_rank=2, group_list_type="groupListType"),
        tensor_list("activationInputOptional", optional=True),
        tensor_list("activationQuantScaleOptional", optional=True),
        tensor_list("activationQuantOffsetOptional", optional=True),
        int_attr("splitItem", choices=(0, 1, 2, 3)),
        int_attr("groupType", choices=(-1, 0, 1, 2)),
        int_attr("groupListType", choices=(0, 1, 2)),
        int_attr("actType", bounds=(0, 5)),
        int_array("tuningConfigOptional", optional=True, c_type="aclIntArray*"),
        tensor_list("out", GMM_OUT_DTYPES, role=Role.OUT),
        tensor_list("activationFeatureOutOptional", role=Role.OUT, optional=True),
        tensor_list("dynQuantScaleOutOptional", role=Role.OUT, optional=True),
    )


def _members(call: Call, name: str) -> tuple[AclTensor, ...]:
    value = call.args.get(name)
    return value.tensors if isinstance(value, AclTensorList) else ()


def _gmm_refuse_unsupported(call: Call, xs: Sequence[AclTensor], ws: Sequence[AclTensor]) -> D:
    """Refuse everything but the non-quantised float paths; return the compute dtype."""
    dtype = xs[0].dtype
    for label, t in [*(("x", t) for t in xs), *(("weight", t) for t in ws)]:
        if t.dtype not in FLOATS:
            raise invalid(
                f"GroupedMatmulV5 with {label} {t.dtype.short} is a quantised path, not implemented in acl-core yet; "
                "only float32/float16/bfloat16 x and weight are supported"
            )
        if t.dtype != dtype:
            raise invalid(f"x and weight must share one dtype; found {dtype.short} and {t.dtype.short}")
    for name in _QUANT_PARAMS:
        if call.args.get(name) is not None:
            raise invalid(f"{name} belongs to quantised GroupedMatmulV5, which acl-core does not implement yet")
    for name in (*_ACTIVATION_PARAMS, "activationFeatureOutOptional", "dynQuantScaleOutOptional"):
        if call.args.get(name) is not None:
            raise invalid(f"{name} must be null")
    act = int(call.args["actType"])
    if act:
        raise invalid(
            f"actType={act} ({_ACT_NAMES[act]}) is not supported without quantisation; only actType=0 is implemented"
        )
    if call.args["groupType"] == 1:
        raise invalid("groupType=1 (N-axis grouping) is not supported")
    if call.args["groupListType"] == 2:
        raise invalid("groupListType=2 ([E, 2] index/count pairs) is not supported without quantisation")
    return dtype


def _gmm_bias(call: Call, dtype: D, widths: Sequence[int], single_weight: bool, n_weights: int) -> None:
    bias = _members(call, "biasOptional")
    if call.args.get("biasOptional") is None:
        return
    if len(bias) != n_weights:
        raise invalid(f"biasOptional holds {len(bias)} tensors; weight holds {n_weights}")
    want = _GMM_BIAS_FOR[dtype]
    for i, b in enumerate(bias):
        if b.dtype != want:
            raise invalid(f"biasOptional[{i}] has dtype {b.dtype.short}; {dtype.short} inputs need {want.short} bias")
    if single_weight:
        expected: list[Shape] = [(len(widths), widths[0])]
    else:
        expected = [(w,) for w in widths]
    for i, (b, shape) in enumerate(zip(bias, expected)):
        if tuple(b.shape) != shape:
            raise invalid(f"biasOptional[{i}] has shape {list(b.shape)}; expected {list(shape)}")


def _gmm_group_list(call: Call, groups: int, limit: int, required: bool) -> AclTensor | None:
    gl = call.args.get("groupListOptional")
    if gl is None:
        if required:
            raise nullptr("groupListOptional is required for this groupType")
        return None
    assert isinstance(gl, AclTensor)
    if gl.rank != 1:
        raise invalid(f"groupListOptional must be 1-D for groupListType 0/1, not rank {gl.rank}")
    if gl.shape[0] != groups:
        raise invalid(f"groupListOptional has {gl.shape[0]} entries; the weights define {groups} groups")
    if groups > limit:
        raise invalid(f"{groups} groups exceed the limit of {limit}")
    return gl


def gmm_weight_transposed(w: AclTensor) -> bool:
    """Whether a [.., K, N] weight view is stored N-major (K contiguous): CANN's "transposed" weight."""
    return w.rank >= 2 and w.strides[-2] == 1 and w.strides[-1] != 1


def _gmm_mx_infer(call: Call, xs: Sequence[AclTensor], ws: Sequence[AclTensor]) -> Infos:
    """MX mode (gsM = gsN = 1, gsK = 32, E8M0 scales): one x [M, K], one weight [g, K, N], M-axis groups."""
    x_dt, w_dt = xs[0].dtype, ws[0].dtype
    fp8 = x_dt in MX_FP8 and w_dt in MX_FP8
    if not (fp8 or x_dt == w_dt == D.ACL_FLOAT4_E2M1):
        raise invalid(f"MX GroupedMatmulV5 takes FLOAT8 or FLOAT4_E2M1 x and weight, not {x_dt.short} @ {w_dt.short}")
    scales, tokens = _members(call, "scaleOptional"), _members(call, "perTokenScaleOptional")
    if len(scales) != 1 or len(tokens) != 1 or {scales[0].dtype, tokens[0].dtype} != {D.ACL_FLOAT8_E8M0}:
        raise invalid(
            f"{x_dt.short} x takes the MX mode only: one FLOAT8_E8M0 scaleOptional (weight) and one FLOAT8_E8M0 "
            "perTokenScaleOptional (x); per-tensor / per-channel fp8 GroupedMatmulV5 is not implemented"
        )
    if int(call.args["groupType"]) != 0:
        raise invalid("MX GroupedMatmulV5 is implemented for groupType=0 (M-axis groups) only")
    if int(call.args["splitItem"]) not in (2, 3):
        raise invalid("MX GroupedMatmulV5 needs splitItem 2 or 3 (one output tensor)")
    if len(xs) != 1 or xs[0].rank != 2 or len(ws) != 1 or ws[0].rank != 3:
        raise invalid("MX GroupedMatmulV5 needs a single 2-D x [M, K] and a single 3-D weight [g, K, N]")
    for name in ("offsetOptional", "antiquantScaleOptional", "antiquantOffsetOptional", *_ACTIVATION_PARAMS):
        if call.args.get(name) is not None:
            raise invalid(f"{name} must be null in MX mode")
    if int(call.args["actType"]):
        raise invalid("MX GroupedMatmulV5 takes actType=0 only")
    if int(call.args["groupListType"]) == 2:
        raise invalid("groupListType=2 ([E, 2] index/count pairs) is not implemented")
    (m, k), (groups, k_w, n) = xs[0].shape, ws[0].shape
    if k_w != k:
        raise invalid(f"inner dimensions disagree: x[0] {list(xs[0].shape)}, weight[0] {list(ws[0].shape)}")
    transposed = gmm_weight_transposed(ws[0])
    if not fp8 and (k % 2 or k == 2 or (not transposed and n % 2)):
        raise invalid(
            f"FLOAT4 operands need an even K other than 2 and, unless weight is transposed, an even N (K={k}, N={n})"
        )
    _gmm_group_list(call, groups, GMM_MAX_GROUPS, required=True)
    kb = -(-k // 64)
    want_w = (groups, n, kb, 2) if transposed else (groups, kb, n, 2)
    if tuple(scales[0].shape) != want_w or tuple(tokens[0].shape) != (m, kb, 2):
        raise invalid(
            f"MX scales must be scaleOptional {list(want_w)} and perTokenScaleOptional {[m, kb, 2]}, "
            f"got {list(scales[0].shape)} and {list(tokens[0].shape)}"
        )
    bias = _members(call, "biasOptional")
    if bias and (fp8 or len(bias) != 1 or bias[0].dtype != D.ACL_FLOAT or tuple(bias[0].shape) != (groups, n)):
        raise invalid(f"MX bias must be null for FLOAT8 operands and one float32 [{groups}, {n}] for FLOAT4 ones")
    given = _members(call, "out")
    out_dtype = given[0].dtype if given else D.ACL_BF16
    if out_dtype not in (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT):
        raise invalid(f"MX GroupedMatmulV5 outputs float16, bfloat16 or float32, not {out_dtype.short}")
    tuning = call.args.get("tuningConfigOptional")
    if isinstance(tuning, AclIntArray) and len(tuning) and not 0 <= tuning.values[0] <= m:
        raise invalid(f"tuningConfigOptional[0]={tuning.values[0]} must lie in [0, {m}] (rows of x)")
    call.plan["gmm"] = {"group_type": 0, "single_out": True, "weight_split": False, "mx": True}
    call.plan["compute"] = out_dtype
    return {"out": [same((m, n), out_dtype)], "activationFeatureOutOptional": None, "dynQuantScaleOutOptional": None}


def _gmm_infer(call: Call) -> Infos:
    xs, ws = _members(call, "x"), _members(call, "weight")
    if not xs or not ws:
        raise invalid("x and weight must each hold at least one tensor")
    for name, items in (("x", xs), ("weight", ws), ("out", _members(call, "out"))):
        if len(items) > GMM_MAX_LIST:
            raise invalid(f"{name} holds {len(items)} tensors; at most {GMM_MAX_LIST} are supported")
    if xs[0].dtype in MX_OPERANDS or ws[0].dtype in MX_OPERANDS:
        return _gmm_mx_infer(call, xs, ws)
    dtype = _gmm_refuse_unsupported(call, xs, ws)
    split, group_type = int(call.args["splitItem"]), int(call.args["groupType"])
    single_out = split in (2, 3)
    plan: dict[str, Any] = {"group_type": group_type, "single_out": single_out}
    outs: list[OutInfo]
    tuning_limit: int
    if group_type == -1:
        if single_out:
            raise invalid("groupType=-1 needs splitItem 0 or 1 (one output per group)")
        if len(xs) != len(ws):
            raise invalid(f"x holds {len(xs)} tensors and weight {len(ws)}; groupType=-1 pairs them one to one")
        if call.args.get("groupListOptional") is not None:
            raise invalid("groupListOptional must be null for groupType=-1")
        ranks = {x.rank for x in xs}
        if len(ranks) != 1 or not 2 <= xs[0].rank <= 6:
            raise invalid(f"the tensors of x must share one rank between 2 and 6; found {sorted(ranks)}")
        outs = []
        for i, (x, w) in enumerate(zip(xs, ws)):
            if w.rank != 2:
                raise invalid(f"weight[{i}] must be 2-D for groupType=-1, not {list(w.shape)}")
            if x.shape[-1] != w.shape[0]:
                raise invalid(f"inner dimensions disagree: x[{i}] {list(x.shape)}, weight[{i}] {list(w.shape)}")
            outs.append(same((*x.shape[:-1], w.shape[1]), dtype))
        _gmm_bias(call, dtype, [w.shape[1] for w in ws], False, len(ws))
        tuning_limit = max(math.prod(x.shape[:-1]) for x in xs)
    elif group_type == 0:
        if not single_out:
            raise invalid("groupType=0 needs splitItem 2 or 3 (one output tensor)")
        for i, x in enumerate(xs):
            if x.rank != 2:
                raise invalid(f"x[{i}] must be 2-D for groupType=0, not {list(x.shape)}")
        k = xs[0].shape[1]
        if len(ws) == 1 and ws[0].rank == 3:
            if len(xs) != 1:
                raise invalid("a single 3-D weight needs a single x")
            groups, n = ws[0].shape[0], ws[0].shape[2]
            if ws[0].shape[1] != k:
                raise invalid(f"inner dimensions disagree: x[0] {list(xs[0].shape)}, weight[0] {list(ws[0].shape)}")
            _gmm_group_list(call, groups, GMM_MAX_GROUPS, required=True)
            _gmm_bias(call, dtype, [n] * groups, True, 1)
            plan["weight_split"] = False
        else:
            groups = len(ws)
            for i, w in enumerate(ws):
                if w.rank != 2:
                    raise invalid(f"weight[{i}] must be 2-D when weight holds several tensors, not {list(w.shape)}")
                if w.shape[0] != k:
                    raise invalid(f"inner dimensions disagree: x has k={k}, weight[{i}] {list(w.shape)}")
            widths = {w.shape[1] for w in ws}
            if len(widths) != 1:
                raise invalid(f"every weight must have the same N for groupType=0; found {sorted(widths)}")
            n = ws[0].shape[1]
            if len(xs) > 1:
                if len(xs) != groups:
                    raise invalid(f"x holds {len(xs)} tensors and weight {groups}; they must pair one to one")
                for i, x in enumerate(xs):
                    if x.shape[1] != k:
                        raise invalid(f"x[{i}] has k={x.shape[1]}; x[0] has k={k}")
            _gmm_group_list(call, groups, GMM_MAX_LIST, required=len(xs) == 1)
            _gmm_bias(call, dtype, [n] * groups, False, groups)
            plan["weight_split"] = True
        m = sum(x.shape[0] for x in xs)
        outs = [same((m, n), dtype)]
        tuning_limit = m
    else:  # K-axis groups
        if len(xs) != 1 or xs[0].rank != 2:
            raise invalid("groupType=2 needs a single 2-D x")
        if call.args.get("biasOptional") is not None:
            raise invalid("biasOptional must be null for groupType=2")
        m, k = xs[0].shape
        if single_out:
            if len(ws) != 1 or ws[0].rank != 2:
                raise invalid("groupType=2 with splitItem 2/3 needs a single 2-D weight [K, N]")
            if ws[0].shape[0] != k:
                raise invalid(f"inner dimensions disagree: x[0] {list(xs[0].shape)}, weight[0] {list(ws[0].shape)}")
            gl = call.args.get("groupListOptional")
            if gl is None:
                raise nullptr("groupListOptional is required for groupType=2 with splitItem 2/3")
            assert isinstance(gl, AclTensor)
            groups = gl.shape[0] if gl.rank == 1 else 0
            _gmm_group_list(call, groups, GMM_MAX_GROUPS, required=True)
            outs = [same((groups, m, ws[0].shape[1]), dtype)]
        else:
            if call.args.get("groupListOptional") is not None:
                raise invalid("groupListOptional must be null for groupType=2 with splitItem 0/1")
            for i, w in enumerate(ws):
                if w.rank != 2:
                    raise invalid(f"weight[{i}] must be 2-D, not {list(w.shape)}")
            total = sum(w.shape[0] for w in ws)
            if total > k:
                raise invalid(f"the weights' K sizes add up to {total}, more than x's K={k}")
            outs = [same((m, w.shape[1]), dtype) for w in ws]
        tuning_limit = m
    tuning = call.args.get("tuningConfigOptional")
    if isinstance(tuning, AclIntArray) and len(tuning) and not 0 <= tuning.values[0] <= tuning_limit:
        raise invalid(f"tuningConfigOptional[0]={tuning.values[0]} must lie in [0, {tuning_limit}] (rows of x)")
    call.plan["gmm"] = plan
    call.plan["compute"] = dtype
    return {"out": outs, "activationFeatureOutOptional": None, "dynQuantScaleOutOptional": None}


def _gmm_base(**extra: Any) -> dict[str, Any]:
    return {"splitItem": 0, "groupType": -1, "groupListType": 0, "actType": 0, **extra}


def _gmm_samples(rng: np.random.Generator) -> Iterable[Sample]:
    def arr(shape: Shape, dt: D) -> np.ndarray:
        return S.array(rng, shape, dt, low=-1, high=1)

    for dt in _DTYPES:
        bias_dt = _GMM_BIAS_FOR[dt]
        xs = [arr((3, 4), dt), arr((5, 6), dt), arr((0, 2), dt)]
        ws = [arr((4, 2), dt), arr((6, 7), dt), arr((2, 3), dt)]
        yield Sample(_gmm_base(x=xs, weight=ws), f"{dt.short} groupType=-1")
        yield Sample(
            _gmm_base(x=xs, weight=ws, biasOptional=[arr((2,), bias_dt), arr((7,), bias_dt), arr((3,), bias_dt)]),
            f"{dt.short} groupType=-1 with bias",
        )
        yield Sample(
            _gmm_base(
                x=[arr((10, 4), dt)],
                weight=[arr((3, 4, 5), dt)],
                biasOptional=[arr((3, 5), bias_dt)],
                groupListOptional=np.array([2, 2, 10], np.int64),
                splitItem=2,
                groupType=0,
            ),
            f"{dt.short} groupType=0 3-D weight, cumulative list with an empty group",
        )
    yield Sample(
        _gmm_base(x=[arr((2, 3, 4), D.ACL_FLOAT)], weight=[arr((4, 5), D.ACL_FLOAT)], tuningConfigOptional=[2]),
        "groupType=-1 with a 3-D x and a tuning hint",
    )
    yield Sample(
        _gmm_base(
            x=[arr((9, 4), D.ACL_FLOAT16)],
            weight=[arr((4, 3), D.ACL_FLOAT16) for _ in range(3)],
            groupListOptional=np.array([4, 0, 5], np.int64),
            splitItem=3,
            groupType=0,
            groupListType=1,
        ),
        "float16 groupType=0 weight list, counts",
    )
    yield Sample(
        _gmm_base(
            x=[arr((2, 4), D.ACL_BF16), arr((3, 4), D.ACL_BF16)],
            weight=[arr((4, 5), D.ACL_BF16), arr((4, 5), D.ACL_BF16)],
            splitItem=2,
            groupType=0,
        ),
        "bfloat16 groupType=0 x list without group list",
    )
    yield Sample(
        _gmm_base(
            x=[arr((3, 8), D.ACL_FLOAT)],
            weight=[arr((8, 2), D.ACL_FLOAT)],
            groupListOptional=np.array([3, 3, 8], np.int64),
            splitItem=2,
            groupType=2,
        ),
        "float32 groupType=2 (K groups) single tensors",
    )
    yield Sample(
        _gmm_base(
            x=[arr((3, 8), D.ACL_FLOAT16)],
            weight=[arr((5, 2), D.ACL_FLOAT16), arr((3, 4), D.ACL_FLOAT16)],
            groupType=2,
        ),
        "float16 groupType=2 weight list",
    )
    yield from _gmm_mx_samples(rng)


def _gmm_mx_base(rng: np.random.Generator, x_dt: Any, w_dt: Any, m: int, k: int, n: int, groups: int) -> dict[str, Any]:
    """An MX call: x [m, k], weight [groups, k, n], E8M0 scales near 1, every row in some group."""
    kb = -(-k // 64)
    cuts = np.sort(rng.integers(0, m + 1, groups - 1))
    return _gmm_base(
        x=[rng.uniform(-6, 6, (m, k)).astype(x_dt)],
        weight=[rng.uniform(-6, 6, (groups, k, n)).astype(w_dt)],
        scaleOptional=[lowp.e8m0_array(rng.integers(123, 131, (groups, kb, n, 2)))],
        perTokenScaleOptional=[lowp.e8m0_array(rng.integers(123, 131, (m, kb, 2)))],
        groupListOptional=np.array([*cuts, m], np.int64),
        splitItem=2,
        groupType=0,
    )


def _gmm_mx_samples(rng: np.random.Generator) -> Iterable[Sample]:
    e4, e5, fp4 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float4_e2m1fn
    yield Sample(_gmm_mx_base(rng, e4, e4, 10, 96, 8, 3), "MX float8_e4m3fn, K not a multiple of 64, bf16 out")
    counts = _gmm_mx_base(rng, e5, e4, 7, 64, 5, 2)
    counts.update(groupListOptional=np.array([4, 3], np.int64), groupListType=1, out=[np.zeros((7, 5), np.float32)])
    yield Sample(counts, "MX float8_e5m2 x float8_e4m3fn weight, counts, float32 out")
    four = _gmm_mx_base(rng, fp4, fp4, 6, 128, 4, 2)
    four.update(biasOptional=[rng.standard_normal((2, 4)).astype(np.float32)], out=[np.zeros((6, 4), np.float16)])
    yield Sample(four, "MX float4_e2m1 with float32 bias, float16 out")


def _gmm_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    def arr(shape: Shape, dt: D = D.ACL_FLOAT) -> np.ndarray:
        return S.array(rng, shape, dt, low=-1, high=1)

    single = _gmm_base(
        x=[arr((6, 4))], weight=[arr((2, 4, 3))], groupListOptional=np.array([3, 6], np.int64), splitItem=2, groupType=0
    )
    yield ErrorSample({**single, "groupListOptional": np.array([1, 2, 6], np.int64)}, INVALID, "group list too long")
    yield ErrorSample({**single, "groupListOptional": np.array([[3], [6]], np.int64)}, INVALID, "2-D group list")
    yield ErrorSample({**single, "groupListOptional": np.array([3, 6], np.int32)}, INVALID, "int32 group list")
    yield ErrorSample({**single, "groupListOptional": None}, NULLPTR, "missing group list")
    yield ErrorSample({**single, "splitItem": 0}, INVALID, "groupType=0 with multi-tensor out")
    yield ErrorSample({**single, "groupListType": 2}, INVALID, "groupListType=2")
    yield ErrorSample({**single, "actType": 1}, INVALID, "relu activation")
    yield ErrorSample({**single, "actType": 6}, INVALID, "actType out of range")
    yield ErrorSample({**single, "groupType": 1}, INVALID, "N-axis grouping")
    yield ErrorSample({**single, "weight": [arr((2, 5, 3))]}, INVALID, "inner dimensions disagree")
    yield ErrorSample({**single, "biasOptional": [arr((2, 4))]}, INVALID, "bias of the wrong width")
    yield ErrorSample({**single, "scaleOptional": [arr((2, 3))]}, INVALID, "quantisation scale given")
    yield ErrorSample(
        {**single, "x": [S.array(rng, (6, 4), D.ACL_INT8)], "weight": [S.array(rng, (2, 4, 3), D.ACL_INT8)]},
        INVALID,
        "int8 quantised inputs",
    )
    yield ErrorSample({**single, "weight": [arr((2, 4, 3), D.ACL_FLOAT16)]}, INVALID, "x and weight dtypes differ")
    pairs = _gmm_base(x=[arr((3, 4)), arr((2, 5))], weight=[arr((4, 2))])
    yield ErrorSample(pairs, INVALID, "groupType=-1 lists of different lengths")
    yield ErrorSample(
        {**pairs, "weight": [arr((4, 2)), arr((5, 3))], "groupListOptional": np.array([1, 2], np.int64)},
        INVALID,
        "group list with groupType=-1",
    )
    yield ErrorSample(
        {**pairs, "weight": [arr((4, 2)), arr((5, 3))], "out": [np.zeros((3, 2), np.float32)]},
        INVALID,
        "out holds too few tensors",
    )
    kw = _gmm_base(x=[arr((3, 4))], weight=[arr((3, 2)), arr((3, 2))], groupType=2)
    yield ErrorSample(kw, INVALID, "K groups larger than x's K")
    mx = _gmm_mx_base(rng, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn, 6, 64, 4, 2)
    yield ErrorSample({**mx, "scaleOptional": None}, INVALID, "fp8 without MX scales")
    yield ErrorSample({**mx, "perTokenScaleOptional": [np.ones((6, 1), np.float32)]}, INVALID, "float32 token scale")
    yield ErrorSample({**mx, "scaleOptional": [lowp.e8m0_array(np.full((2, 4, 1, 2), 127))]}, INVALID, "MX scale shape")
    yield ErrorSample({**mx, "biasOptional": [arr((2, 4))]}, INVALID, "bias with fp8 MX operands")
    yield ErrorSample({**mx, "groupType": 2}, INVALID, "MX with K-axis groups")
    yield ErrorSample({**mx, "out": [np.zeros((6, 4), np.int32)]}, INVALID, "MX into int32")
    yield ErrorSample({**mx, "actType": 5}, INVALID, "MX with silu")


_GroupedMatmulV5 = OpSpec(
    "GroupedMatmulV5",
    FAMILY,
    _gmm_params(),
    _gmm_infer,
    samples=_gmm_samples,
    error_samples=_gmm_errors,
    summary="grouped GEMM y_i = x_i @ weight_i (+ bias_i): float paths and the MX mode",
)

SPECS: list[OpSpec] = [
    _Matmul,
    _Mm,
    _BatchMatMul,
    _Addmm,
    _InplaceAddmm,
    _Baddbmm,
    _InplaceBaddbmm,
    _GroupedMatmulV5,
]
GEMM_REASON = "K products summed in float32 (or wider), then the epilogue: the standard γ_K·Σ|a·b| bound"
ACCURACY = {
    **{op: reduction(length_of=last_dim("self"), reason=GEMM_REASON) for op in ("Matmul", "Mm", "BatchMatMul")},
    **{op: reduction(length_of=last_dim("mat1", 2), reason=GEMM_REASON) for op in ("Addmm", "InplaceAddmm")},
    **{op: reduction(length_of=last_dim("batch1", 2), reason=GEMM_REASON) for op in ("Baddbmm", "InplaceBaddbmm")},
    "GroupedMatmulV5": table(
        "its float path is a GEMM, but its quantised paths take int8 operands with per-channel scales, whose"
        " M = |x|·|w|·|scale| the magnitudes run (absolute values of float inputs only) cannot form"
    ),
}
"""GEMMs: γ_K·(|β||self| + |α||A|·|B|) plus 1 ulp (GroupedMatmulV5 keeps the table, for its quantised paths)."""
SPECS = with_accuracy(SPECS, ACCURACY)
