"""Quantisation: AscendQuant(V3), AscendAntiQuant, DynamicQuant(V2), DynamicMxQuant, QuantMatmulV3/V4/V5,
WeightQuantBatchMatmulV2.

Semantics follow the ops-nn documentation of each operator (formulas, dtype tables, shape rules);
the element formats and their rounding live in :mod:`acl_core.lowp`. Choices the documents leave
open are made here and listed in TODO.md (issue 6):

* Quantisation arithmetic (scale, offset, division) is done in FLOAT32, as the documented kernels and
  CANN's own test goldens do; ``round`` means round-half-to-even, integer results saturate.
* 8 INT4 values per INT32 are packed little-nibble first (element ``8k+i`` in bits ``4i..4i+3``).
* FLOAT8 outputs of AscendQuantV3 convert as CANN's golden converts (ml_dtypes: E4M3FN overflow is
  NaN, E5M2 overflow is Inf); DynamicQuant never overflows by construction.
* DynamicQuant(V2): a row whose scale is 0 (all zeros) quantises to 0; V2's asymmetric mode (chosen
  by passing ``offsetOut``) is implemented for the integer outputs only; ``groupIndexOptional``
  holds cumulative row counts per group (rows past the last count use the last group).
* DynamicMxQuant follows OCP Microscaling v1.0 for ``scaleAlg`` 0 and the documented amax/Amax
  rounding-up rule for ``scaleAlg`` 1; a block holding NaN or Inf gets the NaN scale 0xFF.
* QuantMatmulV5 implements the per-tensor / per-channel / per-token modes (int8, int4, fp8, HiFloat8)
  and MX ([gsM, gsN, gsK] = [1, 1, 32], E8M0 scales); the G-B, B-B, T-CG and K-G modes and
  ``yScale`` / ``x1Offset`` / ``yOffset`` are refused with 161002.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, by_call, reduction, table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorGen,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Param,
    Sample,
    SampleGen,
    bool_attr,
    int_attr,
    invalid,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, broadcast_shapes, listed, normalize_dim, same, tensor_arg
from acl_core.tensor import AclTensor

# the plan keys this family's rules write (acl_core.spec.plan; docs/KERNELS.md)
declare_plan("dst", "DataType", "the quantised output dtype", D)
declare_plan("symmetric", "bool", "whether dynamic quantisation is symmetric (no offset output)", bool)
declare_plan("blocksize", "int", "the MX block size along `axis`", int)
declare_plan("alg", "int", "scaleAlg: how an MX block's shared exponent is chosen", int)
declare_plan("group", "int", "the weight's per-group quantisation size along K (0: per-channel)", int)

FAMILY = "quant"
Shape = tuple[int, ...]

FP8 = frozenset({D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2})
HIF8 = D.ACL_HIFLOAT8
FP4 = D.ACL_FLOAT4_E2M1
E8M0 = D.ACL_FLOAT8_E8M0
PACKED_SCALE = frozenset({D.ACL_UINT64, D.ACL_INT64})
"""Scales in aclnnTransQuantParam's UINT64 format (a FLOAT32 in the low 32 bits)."""
QUANT_OUT_INT = frozenset({D.ACL_INT8, D.ACL_INT32, D.ACL_INT4})
ROUND_MODES = ("round", "ceil", "trunc", "floor")


def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _int4_dims(shape: Sequence[int], dst: D, what: str = "x") -> Shape:
    """The output shape of a quantisation to ``dst``: INT32 packs 8 INT4 along the last dim."""
    shape = tuple(shape)
    if dst == D.ACL_INT32:
        if not shape or shape[-1] % 8:
            raise invalid(f"the last dim of {what} must be a multiple of 8 for INT32 (packed INT4) output")
        return (*shape[:-1], shape[-1] // 8)
    if dst == D.ACL_INT4 and (not shape or shape[-1] % 2):
        raise invalid(f"the last dim of {what} must be even for INT4 output")
    return shape


def _dst(value: int, name: str = "dstType") -> D:
    try:
        return D(int(value))
    except ValueError:
        raise invalid(f"{name}={value} is not an aclDataType") from None


# ----------------------------------------------------------------------------- AscendQuant / V3
def _quant_scale_shape(x: AclTensor, scale: AclTensor, axis: int, name: str) -> None:
    """scale (and offset) shapes of AscendQuant: 1-D of x[axis] or 1, or x's rank with only ``axis`` non-1."""
    n = x.shape[axis]
    if scale.rank == 1:
        if scale.shape[0] not in (n, 1):
            raise invalid(f"{name} has {scale.shape[0]} elements; expected {n} (x dim {axis}) or 1")
        return
    if scale.rank != x.rank:
        raise invalid(f"{name} must be 1-D or have x's rank {x.rank}, got {list(scale.shape)}")
    for i, d in enumerate(scale.shape):
        if i == axis and d not in (n, 1):
            raise invalid(f"{name} dim {i} is {d}; expected {n} or 1")
        if i != axis and d != 1:
            raise invalid(f"{name} dim {i} is {d}; every dim but {axis} must be 1")


def _ascend_quant(name: str, v3: bool) -> OpSpec:
    dst_codes = (2, 3, 29, 34, 35, 36) if v3 else (2, 3, 29)
    out_types = QUANT_OUT_INT | (FP8 | {HIF8} if v3 else frozenset())
    params: list[Param] = [
        tensor("x", FLOATS, min_rank=1),
        tensor("scale", FLOATS, min_rank=1),
        tensor("offset", FLOATS, optional=True, min_rank=1),
        bool_attr("sqrtMode"),
        string_attr("roundMode", choices=(*ROUND_MODES, "hybrid") if v3 else ROUND_MODES, c_type="const char*"),
        int_attr("dstType", c_type="int32_t", choices=dst_codes),
    ]
    if v3:
        params.append(int_attr("axis", c_type="int32_t"))
    params.append(out("y", out_types))

    def infer(call: Call) -> Infos:
        x, scale, offset = tensor_arg(call, "x"), tensor_arg(call, "scale"), _opt(call, "offset")
        dst = _dst(call.args["dstType"])
        mode = call.args["roundMode"]
        axis = normalize_dim(int(call.args["axis"]), x.rank, "axis") if v3 else x.rank - 1
        if v3:
            if axis < x.rank - 2:
                raise invalid(f"axis must name one of x's last two dims, got {call.args['axis']}")
            if scale.dtype != x.dtype:
                raise invalid(f"scale must have x's dtype {x.dtype.short}, not {scale.dtype.short}")
        elif x.dtype != D.ACL_FLOAT and scale.dtype != x.dtype:
            raise invalid(f"scale must have x's dtype {x.dtype.short} when x is not float32")
        if dst in FP8 and mode != "round":
            raise invalid(f"roundMode {mode!r} is not supported for {dst.short}; only 'round'")
        if dst == HIF8 and mode == "hybrid":
            raise invalid("roundMode 'hybrid' (HiFloat8 hybrid rounding) is not implemented in acl-core")
        if dst == HIF8 and mode != "round":
            raise invalid(f"roundMode {mode!r} is not supported for hifloat8; only 'round' or 'hybrid'")
        if dst in QUANT_OUT_INT and mode == "hybrid":
            raise invalid("roundMode 'hybrid' applies to hifloat8 only")
        _quant_scale_shape(x, scale, axis, "scale")
        if offset is not None:
            if offset.dtype != scale.dtype or offset.shape != scale.shape:
                raise invalid("offset must have scale's dtype and shape")
        call.plan["axis"] = axis
        return {"y": same(_int4_dims(x.shape, dst), dst)}

    return OpSpec(
        name,
        FAMILY,
        tuple(params),
        infer,
        samples=_ascend_quant_samples(v3),
        error_samples=_ascend_quant_errors(v3),
        summary="y = round(x*scale (*scale) + offset) to dstType",
    )


def _ascend_quant_samples(v3: bool) -> SampleGen:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        extra = {"axis": -1} if v3 else {}
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            x = S.array(rng, (3, 16), dt, low=-3, high=3)
            scale = S.array(rng, (16,), dt, low=5, high=40)
            offset = S.array(rng, (16,), dt, low=-2, high=2)
            for code, mode in ((2, "round"), (2, "floor"), (29, "ceil"), (3, "trunc")):
                yield Sample(
                    {"x": x, "scale": scale, "offset": offset, "sqrtMode": False, "roundMode": mode, "dstType": code}
                    | extra,
                    f"{dt.short} dstType={code} {mode}",
                )
        x = S.array(rng, (2, 8), D.ACL_FLOAT, low=-3, high=3)
        one = np.array([3.0], np.float32)
        yield Sample(
            {"x": x, "scale": one, "offset": None, "sqrtMode": True, "roundMode": "round", "dstType": 2} | extra,
            "sqrtMode, per-tensor scale, no offset",
        )
        yield Sample(
            {"x": S.array(rng, (0, 8), D.ACL_FLOAT), "scale": one, "sqrtMode": False, "roundMode": "round"}
            | {"dstType": 2, "offset": None}
            | extra,
            "empty",
        )
        if v3:
            x = S.array(rng, (4, 6), D.ACL_FLOAT16, low=-3, high=3)
            col = S.array(rng, (4, 1), D.ACL_FLOAT16, low=1, high=9)
            yield Sample(
                {"x": x, "scale": col, "offset": None, "sqrtMode": False, "roundMode": "round", "dstType": 2}
                | {"axis": -2},
                "axis=-2 scale (4, 1)",
            )
            for code in (35, 36):
                big = S.array(rng, (2, 8), D.ACL_FLOAT, low=-100, high=100)
                yield Sample(
                    {"x": big, "scale": np.full(8, 2.5, np.float32), "offset": None, "sqrtMode": False}
                    | {"roundMode": "round", "dstType": code, "axis": -1},
                    f"to {D(code).short}",
                )

    return gen


def _ascend_quant_errors(v3: bool) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        extra = {"axis": -1} if v3 else {}
        x = S.array(rng, (2, 6), D.ACL_FLOAT, low=-3, high=3)
        base = {"x": x, "scale": np.ones(6, np.float32), "offset": None, "sqrtMode": False, "roundMode": "round"}
        yield ErrorSample({**base, "dstType": 2, "scale": np.ones(5, np.float32)} | extra, INVALID, "scale size")
        yield ErrorSample({**base, "dstType": 3} | extra, INVALID, "INT32 output needs a last dim multiple of 8")
        yield ErrorSample({**base, "dstType": 2, "roundMode": "nearest"} | extra, INVALID, "unknown roundMode")
        yield ErrorSample({**base, "dstType": 9} | extra, INVALID, "dstType int64")
        if v3:
            yield ErrorSample({**base, "dstType": 36, "roundMode": "floor", "axis": -1}, INVALID, "fp8 with floor")
            yield ErrorSample({**base, "dstType": 2, "axis": 2}, INVALID, "axis out of range")

    return gen


# ----------------------------------------------------------------------------- AscendAntiQuant
_ANTI_X = frozenset({D.ACL_INT4, D.ACL_INT8, D.ACL_INT32, HIF8, D.ACL_FLOAT8_E4M3FN, D.ACL_FLOAT8_E5M2})


def _anti_axis(xs: Shape, scale: AclTensor) -> int | None:
    """The axis a dequant scale runs along (-1 or -2), or None for a per-tensor scale; 161002 otherwise."""
    rank = len(xs)
    if scale.rank == 1:
        n = scale.shape[0]
        if n == 1:
            return None
        if rank >= 1 and n == xs[-1]:
            return -1
        if rank >= 2 and n == xs[-2]:
            return -2
        raise invalid(f"scale has {n} elements; expected 1, x[-1] or x[-2]")
    if scale.rank != rank:
        raise invalid(f"scale must be 1-D or have x's rank {rank}, got {list(scale.shape)}")
    big = [i - rank for i, d in enumerate(scale.shape) if d != 1]
    if not big:
        return None
    if len(big) > 1 or big[0] not in (-1, -2) or scale.shape[big[0]] != xs[big[0]]:
        raise invalid(f"scale {list(scale.shape)} may have one non-1 dim, at -1 or -2, equal to x's")
    return big[0]


def _anti_quant() -> OpSpec:
    params = (
        tensor("x", _ANTI_X),
        tensor("scale", {D.ACL_FLOAT, D.ACL_BF16}, min_rank=1),
        tensor("offset", {D.ACL_FLOAT, D.ACL_BF16}, optional=True, min_rank=1),
        int_attr("dstType", choices=(1, 27)),
        bool_attr("sqrtMode"),
        out("y", {D.ACL_FLOAT16, D.ACL_BF16}),
    )

    def infer(call: Call) -> Infos:
        x, scale, offset = tensor_arg(call, "x"), tensor_arg(call, "scale"), _opt(call, "offset")
        xs = tuple(x.shape)
        if x.dtype == D.ACL_INT32:
            if not xs:
                raise invalid("an INT32 x (packed INT4) must be at least 1-D")
            xs = (*xs[:-1], xs[-1] * 8)
        if x.dtype == D.ACL_INT4 and (not xs or xs[-1] % 2):
            raise invalid("the last dim of an INT4 x must be even")
        if x.dtype in FP8 | {HIF8}:
            if scale.dtype != D.ACL_FLOAT:
                raise invalid(f"scale must be float32 for {x.dtype.short} x")
            if call.args["sqrtMode"]:
                raise invalid(f"sqrtMode must be false for {x.dtype.short} x")
        if scale.numel == 0:
            raise invalid("scale cannot be empty")
        call.plan["axis"] = _anti_axis(xs, scale)
        if offset is not None and (offset.dtype != scale.dtype or offset.shape != scale.shape):
            raise invalid("offset must have scale's dtype and shape")
        dst = _dst(call.args["dstType"])
        return {"y": same(xs, dst)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        x8 = rng.integers(-128, 128, size=(3, 8)).astype(np.int8)
        x4 = rng.integers(-8, 8, size=(3, 8)).astype(ml_dtypes.int4)
        x32 = lowp.pack_int4_to_int32(rng.integers(-8, 8, size=(2, 16)))
        for dt, x in (("int8", x8), ("int4", x4), ("int32", x32)):
            cols = x.shape[-1] * (8 if dt == "int32" else 1)
            scale = S.array(rng, (cols,), D.ACL_FLOAT, low=0.01, high=0.5)
            offset = S.array(rng, (cols,), D.ACL_FLOAT, low=-2, high=2)
            for code in (1, 27):
                yield Sample(
                    {"x": x, "scale": scale, "offset": offset, "dstType": code, "sqrtMode": False},
                    f"{dt} to {D(code).short}",
                )
        yield Sample(
            {"x": x8, "scale": np.array([0.5], ml_dtypes.bfloat16), "offset": None, "dstType": 27, "sqrtMode": True},
            "int8 per-tensor bf16 scale sqrtMode",
        )
        yield Sample(
            {"x": x8, "scale": S.array(rng, (3, 1), D.ACL_FLOAT, low=0.1, high=1), "dstType": 1, "sqrtMode": False}
            | {"offset": None},
            "int8 scale along -2",
        )
        fp8 = S.array(rng, (2, 8), D.ACL_FLOAT, low=-10, high=10).astype(ml_dtypes.float8_e4m3fn)
        yield Sample(
            {"x": fp8, "scale": np.full(8, 0.25, np.float32), "offset": None, "dstType": 1, "sqrtMode": False},
            "float8_e4m3fn",
        )
        yield Sample(
            {"x": np.zeros((0, 8), np.int8), "scale": np.ones(8, np.float32), "offset": None, "dstType": 1}
            | {"sqrtMode": False},
            "empty",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = rng.integers(-128, 128, size=(3, 8)).astype(np.int8)
        base = {"x": x, "offset": None, "dstType": 1, "sqrtMode": False}
        yield ErrorSample({**base, "scale": np.ones(5, np.float32)}, INVALID, "scale size")
        yield ErrorSample({**base, "scale": np.ones((3, 8), np.float32)}, INVALID, "two non-1 scale dims")
        yield ErrorSample({**base, "scale": np.ones(8, np.float32), "dstType": 0}, INVALID, "dstType float32")
        fp8 = np.zeros((2, 8), ml_dtypes.float8_e5m2)
        yield ErrorSample(
            {**base, "x": fp8, "scale": np.ones(8, np.float32), "sqrtMode": True}, INVALID, "fp8 with sqrtMode"
        )

    return OpSpec("AscendAntiQuant", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- DynamicQuant / V2
_DYN_OUT = frozenset({D.ACL_INT4, D.ACL_INT8, D.ACL_INT32}) | FP8 | {HIF8}


def _dynamic_common(call: Call, dst: D, grouped: bool) -> Infos:
    x = tensor_arg(call, "x")
    smooth = _opt(call, "smoothScalesOptional")
    if smooth is not None:
        if smooth.dtype != x.dtype:
            raise invalid(f"smoothScalesOptional must have x's dtype {x.dtype.short}")
        want = 2 if grouped else 1
        if smooth.rank != want or smooth.shape[-1] != x.shape[-1]:
            shape = "(groups, x[-1])" if grouped else "(x[-1],)"
            raise invalid(f"smoothScalesOptional must have shape {shape}, got {list(smooth.shape)}")
    y = _int4_dims(x.shape, dst)
    return {"yOut": same(y, dst), "scaleOut": same(x.shape[:-1], D.ACL_FLOAT)}


def _dynamic_quant() -> OpSpec:
    params = (
        tensor("x", {D.ACL_FLOAT16, D.ACL_BF16}, min_rank=2),
        tensor("smoothScalesOptional", {D.ACL_FLOAT16, D.ACL_BF16}, optional=True),
        out("yOut", _DYN_OUT, c_type="const aclTensor*"),
        out("scaleOut", {D.ACL_FLOAT}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        y = _opt(call, "yOut")
        dst = y.dtype if y is not None else D.ACL_INT8
        infos = dict(_dynamic_common(call, dst, grouped=False))
        info = infos["yOut"]
        assert isinstance(info, OutInfo)
        infos["yOut"] = listed(info.shape, dst)
        call.plan.update(dst=dst, symmetric=True)
        return infos

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (D.ACL_FLOAT16, D.ACL_BF16):
            x = S.array(rng, (4, 16), dt, low=-5, high=5)
            yield Sample({"x": x, "smoothScalesOptional": None}, f"{dt.short} to int8")
            smooth = S.array(rng, (16,), dt, low=0.5, high=2)
            yield Sample({"x": x, "smoothScalesOptional": smooth}, f"{dt.short} smoothed to int8")
        x = S.array(rng, (2, 3, 16), D.ACL_FLOAT16, low=-5, high=5)
        x[0, 0] = 0
        yield Sample({"x": x, "smoothScalesOptional": None}, "3-D with a zero row")
        for dst, shape in ((D.ACL_INT4, (2, 16)), (D.ACL_INT32, (2, 2)), (D.ACL_FLOAT8_E4M3FN, (2, 16))):
            y = np.zeros(shape, dst.numpy)
            yield Sample(
                {"x": x[0, :2], "smoothScalesOptional": None, "yOut": y, "scaleOut": np.zeros(2, np.float32)},
                f"to {dst.short}",
            )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4, 16), D.ACL_FLOAT16)
        yield ErrorSample({"x": x, "smoothScalesOptional": S.array(rng, (8,), D.ACL_FLOAT16)}, INVALID, "smooth size")
        yield ErrorSample({"x": S.array(rng, (16,), D.ACL_FLOAT16), "smoothScalesOptional": None}, INVALID, "1-D x")
        yield ErrorSample(
            {"x": x, "smoothScalesOptional": S.array(rng, (16,), D.ACL_BF16)}, INVALID, "smooth of another dtype"
        )

    return OpSpec("DynamicQuant", FAMILY, params, infer, samples=gen, error_samples=errors)


def _dynamic_quant_v2() -> OpSpec:
    params = (
        tensor("x", {D.ACL_FLOAT16, D.ACL_BF16}, min_rank=2),
        tensor("smoothScalesOptional", {D.ACL_FLOAT16, D.ACL_BF16}, optional=True),
        tensor("groupIndexOptional", {D.ACL_INT32}, optional=True),
        int_attr("dstType", choices=(2, 3, 29, 34, 35, 36)),
        out("yOut", _DYN_OUT, c_type="const aclTensor*"),
        out("scaleOut", {D.ACL_FLOAT}, c_type="const aclTensor*"),
        out("offsetOut", {D.ACL_FLOAT}, optional=True, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        dst = _dst(call.args["dstType"])
        group = _opt(call, "groupIndexOptional")
        smooth = _opt(call, "smoothScalesOptional")
        if group is not None:
            if smooth is None:
                raise invalid("groupIndexOptional needs smoothScalesOptional")
            if group.rank != 1 or smooth.rank != 2 or group.shape[0] != smooth.shape[0]:
                raise invalid("groupIndexOptional must be 1-D with smoothScalesOptional's first dim")
            if smooth.shape[0] > 1024:
                raise invalid("at most 1024 groups are supported")
        infos = dict(_dynamic_common(call, dst, grouped=group is not None))
        asymmetric = _opt(call, "offsetOut") is not None
        if asymmetric and dst not in QUANT_OUT_INT:
            raise invalid(f"asymmetric quantisation (offsetOut) is implemented for integer outputs, not {dst.short}")
        infos["offsetOut"] = same(tensor_arg(call, "x").shape[:-1], D.ACL_FLOAT) if asymmetric else None
        call.plan.update(dst=dst, symmetric=not asymmetric)
        return infos

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        x = S.array(rng, (6, 16), D.ACL_FLOAT16, low=-4, high=4)
        for code in (2, 29, 3, 35, 36):
            yield Sample({"x": x, "dstType": code}, f"symmetric to {D(code).short}")
        yield Sample(
            {"x": x, "dstType": 2, "offsetOut": np.zeros(6, np.float32)},
            "asymmetric int8",
        )
        smooth = S.array(rng, (3, 16), D.ACL_FLOAT16, low=0.5, high=2)
        group = np.array([2, 4, 6], np.int32)
        yield Sample(
            {"x": x, "smoothScalesOptional": smooth, "groupIndexOptional": group, "dstType": 2},
            "grouped smooth scales",
        )
        yield Sample(
            {"x": x, "smoothScalesOptional": smooth[0], "dstType": 29, "offsetOut": np.zeros(6, np.float32)},
            "asymmetric int4 smoothed",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (6, 16), D.ACL_FLOAT16)
        yield ErrorSample(
            {"x": x, "groupIndexOptional": np.array([6], np.int32), "dstType": 2}, INVALID, "groups without smooth"
        )
        yield ErrorSample({"x": x, "dstType": 4}, INVALID, "dstType uint8")
        yield ErrorSample({"x": x, "dstType": 36, "offsetOut": np.zeros(6, np.float32)}, INVALID, "asymmetric fp8")

    return OpSpec("DynamicQuantV2", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- DynamicMxQuant
MX_DST = {35: D.ACL_FLOAT8_E5M2, 36: D.ACL_FLOAT8_E4M3FN, 40: D.ACL_FLOAT4_E2M1, 41: D.ACL_FLOAT4_E1M2}


def mx_scale_shape(shape: Sequence[int], axis: int, blocksize: int) -> Shape:
    """mxscaleOut's shape: x's with dim ``axis`` -> ceil(ceil(n / blocksize) / 2), plus a trailing 2."""
    dims = list(shape)
    blocks = -(-dims[axis] // blocksize)
    dims[axis] = -(-blocks // 2)
    return (*dims, 2)


def _dynamic_mx_quant() -> OpSpec:
    params = (
        tensor("x", {D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT}, min_rank=1, max_rank=7),
        int_attr("axis"),
        string_attr("roundModeOptional", choices=("rint", "floor", "round"), optional=True),
        int_attr("dstType", choices=tuple(MX_DST)),
        int_attr("blocksize"),
        int_attr("scaleAlg", choices=(0, 1)),
        out("yOut", {D.ACL_FLOAT8_E5M2, D.ACL_FLOAT8_E4M3FN, FP4, D.ACL_FLOAT4_E1M2}, c_type="const aclTensor*"),
        out("mxscaleOut", {E8M0}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "x")
        axis = normalize_dim(int(call.args["axis"]), x.rank, "axis")
        dst = MX_DST[int(call.args["dstType"])]
        if dst == D.ACL_FLOAT4_E1M2:
            raise invalid("dstType 41 (FLOAT4_E1M2) is not implemented in acl-core (no host type for E1M2 yet)")
        bs = int(call.args["blocksize"])
        if bs <= 0 or bs % 32 or bs > 1024:
            raise invalid(f"blocksize={bs} must be a positive multiple of 32, at most 1024")
        if x.dtype == D.ACL_FLOAT and (bs != 32 or x.shape[axis] < 32):
            raise invalid("a float32 x supports blocksize 32 only, with at least 32 elements along axis")
        mode = call.args.get("roundModeOptional") or "rint"
        alg = int(call.args["scaleAlg"])
        if dst in FP8 and mode != "rint":
            raise invalid(f"roundModeOptional {mode!r} is not supported for {dst.short}; only 'rint'")
        if dst == FP4:
            if alg != 0:
                raise invalid("scaleAlg 1 supports FLOAT8 outputs only")
            if x.shape[-1] % 2:
                raise invalid("the last dim of x must be even for FLOAT4 output")
        call.plan.update(axis=axis, dst=dst, blocksize=bs, mode=mode, alg=alg)
        return {"yOut": same(x.shape, dst), "mxscaleOut": same(mx_scale_shape(x.shape, axis, bs), E8M0)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for code in (36, 35, 40):
            for dt in (D.ACL_BF16, D.ACL_FLOAT16):
                x = S.array(rng, (2, 64), dt, low=-20, high=20)
                yield Sample(
                    {"x": x, "axis": -1, "dstType": code, "blocksize": 32, "scaleAlg": 0},
                    f"{dt.short} to {D(code).short} along the last axis",
                )
        x = S.array(rng, (96, 4), D.ACL_FLOAT, low=-3, high=3)
        x[:32, 0] = 0.0
        yield Sample({"x": x, "axis": 0, "dstType": 36, "blocksize": 32, "scaleAlg": 0}, "axis 0, a zero block")
        x = S.array(rng, (3, 40), D.ACL_BF16, low=-1000, high=1000)
        yield Sample({"x": x, "axis": 1, "dstType": 35, "blocksize": 32, "scaleAlg": 1}, "scaleAlg 1, tail block")
        for mode in ("floor", "round"):
            yield Sample(
                {"x": S.array(rng, (2, 32), D.ACL_FLOAT16, low=-7, high=7), "axis": -1, "roundModeOptional": mode}
                | {"dstType": 40, "blocksize": 32, "scaleAlg": 0},
                f"fp4 {mode}",
            )
        yield Sample(
            {"x": S.array(rng, (4, 128), D.ACL_BF16), "axis": -1, "dstType": 36, "blocksize": 64, "scaleAlg": 0},
            "blocksize 64",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 64), D.ACL_BF16)
        base = {"x": x, "axis": -1, "dstType": 36, "blocksize": 32, "scaleAlg": 0}
        yield ErrorSample({**base, "blocksize": 48}, INVALID, "blocksize not a multiple of 32")
        yield ErrorSample({**base, "roundModeOptional": "floor"}, INVALID, "floor for fp8")
        yield ErrorSample({**base, "dstType": 40, "scaleAlg": 1}, INVALID, "scaleAlg 1 for fp4")
        yield ErrorSample({**base, "axis": 2}, INVALID, "axis out of range")
        yield ErrorSample({**base, "dstType": 2}, INVALID, "dstType int8")

    return OpSpec("DynamicMxQuant", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- quantised matmuls
_QMM_X = frozenset({D.ACL_INT8, D.ACL_INT4})
_QMM_SCALE = PACKED_SCALE | {D.ACL_FLOAT, D.ACL_BF16}
_QMM_BIAS = frozenset({D.ACL_INT32, D.ACL_BF16, D.ACL_FLOAT16, D.ACL_FLOAT})
_QMM_OUT = frozenset({D.ACL_FLOAT16, D.ACL_INT8, D.ACL_BF16, D.ACL_INT32})


def _mkn(x1: AclTensor, x2: AclTensor, t1: bool, t2: bool) -> tuple[Shape, int, int, int]:
    """(batch, m, k, n) of a quantised matmul with shape-level transposes; 161002 when k disagrees."""
    for label, t in (("x1", x1), ("x2", x2)):
        if not 2 <= t.rank <= 6:
            raise invalid(f"{label} must have rank 2 to 6, got {t.rank}")
    m, k1 = (x1.shape[-1], x1.shape[-2]) if t1 else (x1.shape[-2], x1.shape[-1])
    k2, n = (x2.shape[-1], x2.shape[-2]) if t2 else (x2.shape[-2], x2.shape[-1])
    if k1 != k2:
        raise invalid(f"k of x1 ({k1}) and x2 ({k2}) disagree")
    batch = broadcast_shapes(x1.shape[:-2], x2.shape[:-2], names=("x1 batch", "x2 batch"))
    return batch, m, k1, n


def _vector(t: AclTensor | None, label: str, sizes: Sequence[int]) -> None:
    if t is None:
        return
    if t.rank != 1 or t.shape[0] not in sizes:
        raise invalid(f"{label} must be 1-D with {' or '.join(str(s) for s in sorted(set(sizes)))} elements")


def _bias_shape(bias: AclTensor | None, batch: Shape, n: int) -> None:
    if bias is None:
        return
    if bias.shape == (n,):
        return
    if bias.rank == 3 and len(batch) == 1 and bias.shape == (batch[0], 1, n):
        return
    raise invalid(f"bias must be (n,) = ({n},) or (batch, 1, n) for a 3-D output, got {list(bias.shape)}")


def _check_int_combo(x: D, scale: D, offset: bool, bias: D | None, pertoken: bool, out_dtype: D) -> None:
    """The documented dtype combinations of QuantMatmulV3/V4 (A2/A3 and 950 tables, their union)."""
    packed = scale in PACKED_SCALE
    if offset and out_dtype != D.ACL_INT8:
        raise invalid("offset is only supported when out is INT8")
    if out_dtype == D.ACL_INT8:
        ok = packed and not pertoken and bias in (None, D.ACL_INT32) and x == D.ACL_INT8
    elif out_dtype == D.ACL_INT32:
        ok = not packed and not pertoken and bias in (None, D.ACL_INT32) and x == D.ACL_INT8
    elif out_dtype == D.ACL_FLOAT16:
        ok = (packed and not pertoken and bias in (None, D.ACL_INT32)) or (
            scale == D.ACL_FLOAT and pertoken and bias in (None, D.ACL_INT32, D.ACL_FLOAT16, D.ACL_FLOAT)
        )
    else:  # BF16
        ok = (not packed and bias in (None, D.ACL_INT32, D.ACL_BF16, D.ACL_FLOAT)) or (
            packed and not pertoken and bias in (None, D.ACL_INT32) and x == D.ACL_INT8
        )
    if not ok:
        raise invalid(
            f"unsupported combination: x {x.short}, scale {scale.short}, bias {bias.short if bias else 'null'}, "
            f"pertokenScale {'given' if pertoken else 'null'}, out {out_dtype.short}"
        )


def _qmm_default_out(scale: D) -> D:
    return D.ACL_FLOAT16 if scale in PACKED_SCALE else D.ACL_BF16


def _quant_matmul(name: str, v4: bool) -> OpSpec:
    params: list[Param] = [
        tensor("x1", _QMM_X, min_rank=2, max_rank=6),
        tensor("x2", _QMM_X, min_rank=2, max_rank=6),
        tensor("scale", _QMM_SCALE, min_rank=1),
        tensor("offset", {D.ACL_FLOAT}, optional=True),
    ]
    if v4:
        params.append(tensor("pertokenScaleOptional", {D.ACL_FLOAT}, optional=True))
    params += [
        tensor("bias", _QMM_BIAS, optional=True),
        bool_attr("transposeX1"),
        bool_attr("transposeX2"),
        out("out", _QMM_OUT, c_type="const aclTensor*"),
    ]

    def infer(call: Call) -> Infos:
        x1, x2, scale = tensor_arg(call, "x1"), tensor_arg(call, "x2"), tensor_arg(call, "scale")
        offset, bias = _opt(call, "offset"), _opt(call, "bias")
        pertoken = _opt(call, "pertokenScaleOptional") if v4 else None
        if x1.dtype != x2.dtype:
            raise invalid(f"x1 ({x1.dtype.short}) and x2 ({x2.dtype.short}) must have the same dtype")
        batch, m, k, n = _mkn(x1, x2, bool(call.args["transposeX1"]), bool(call.args["transposeX2"]))
        if x1.dtype == D.ACL_INT4 and k % 2:
            raise invalid("k must be even for INT4 operands")
        _vector(scale, "scale", (1, n))
        _vector(offset, "offset", (1, n))
        _vector(pertoken, "pertokenScaleOptional", (m,))
        _bias_shape(bias, batch, n)
        given = _opt(call, "out")
        out_dtype = given.dtype if given is not None else _qmm_default_out(scale.dtype)
        _check_int_combo(
            x1.dtype, scale.dtype, offset is not None, bias.dtype if bias else None, pertoken is not None, out_dtype
        )
        return {"out": listed((*batch, m, n), out_dtype)}

    return OpSpec(
        name,
        FAMILY,
        tuple(params),
        infer,
        samples=_qmm_samples(v4),
        error_samples=_qmm_errors(v4),
        summary="out = (x1 @ x2 (+ int32 bias)) * scale (* pertokenScale) + offset / bias",
    )


def _int8(rng: np.random.Generator, shape: Shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def _qmm_samples(v4: bool) -> SampleGen:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        tok = {"pertokenScaleOptional": None} if v4 else {}
        x1, x2 = _int8(rng, (4, 32)), _int8(rng, (32, 8))
        packed = lowp.encode_packed_scale(rng.uniform(1e-3, 1e-2, size=8)).view(np.int64)
        f32 = rng.uniform(1e-3, 1e-2, size=8).astype(np.float32)
        t = {"transposeX1": False, "transposeX2": False}
        yield Sample({"x1": x1, "x2": x2, "scale": packed, "offset": None, "bias": None} | tok | t, "int64 scale fp16")
        yield Sample(
            {"x1": x1, "x2": x2, "scale": packed, "offset": rng.uniform(-3, 3, 8).astype(np.float32)}
            | {"bias": rng.integers(-500, 500, 8).astype(np.int32), "out": np.zeros((4, 8), np.int8)}
            | tok
            | t,
            "int8 out with offset and int32 bias",
        )
        yield Sample(
            {"x1": x1, "x2": x2, "scale": f32, "offset": None, "bias": rng.standard_normal(8).astype(np.float32)}
            | tok
            | t,
            "float32 scale, float32 bias, bf16",
        )
        yield Sample(
            {"x1": x1.T.copy(), "x2": x2.T.copy(), "scale": f32[:1], "offset": None, "bias": None}
            | tok
            | {"transposeX1": True, "transposeX2": True},
            "both transposed, per-tensor scale",
        )
        yield Sample(
            {"x1": _int8(rng, (2, 3, 16)), "x2": _int8(rng, (16, 5)), "scale": f32[:5], "offset": None}
            | {"bias": rng.integers(-99, 99, (2, 1, 5)).astype(np.int32), "out": np.zeros((2, 3, 5), np.int32)}
            | tok
            | t,
            "batched, (batch, 1, n) bias, int32 out",
        )
        q1 = rng.integers(-8, 8, (4, 16)).astype(ml_dtypes.int4)
        q2 = rng.integers(-8, 8, (16, 8)).astype(ml_dtypes.int4)
        yield Sample({"x1": q1, "x2": q2, "scale": packed, "offset": None, "bias": None} | tok | t, "int4 operands")
        if v4:
            pt = rng.uniform(0.5, 2, 4).astype(np.float32)
            yield Sample(
                {"x1": x1, "x2": x2, "scale": f32, "offset": None, "pertokenScaleOptional": pt}
                | {"bias": rng.standard_normal(8).astype(np.float16), "out": np.zeros((4, 8), np.float16)}
                | t,
                "per-token scale, fp16 bias, fp16 out",
            )
            yield Sample(
                {"x1": x1, "x2": x2, "scale": f32, "offset": None, "pertokenScaleOptional": pt, "bias": None} | t,
                "per-token scale, bf16 out",
            )

    return gen


def _qmm_errors(v4: bool) -> ErrorGen:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        tok = {"pertokenScaleOptional": None} if v4 else {}
        t = {"transposeX1": False, "transposeX2": False}
        x1, x2 = _int8(rng, (4, 32)), _int8(rng, (16, 8))
        f32 = np.ones(8, np.float32)
        yield ErrorSample({"x1": x1, "x2": x2, "scale": f32, "offset": None, "bias": None} | tok | t, INVALID, "k")
        x2 = _int8(rng, (32, 8))
        yield ErrorSample(
            {"x1": x1, "x2": x2, "scale": np.ones(3, np.float32), "offset": None, "bias": None} | tok | t,
            INVALID,
            "scale size",
        )
        yield ErrorSample(
            {"x1": x1, "x2": x2, "scale": f32, "offset": f32, "bias": None} | tok | t,
            INVALID,
            "offset without int8 out",
        )
        yield ErrorSample(
            {"x1": x1, "x2": x2, "scale": f32, "offset": None, "bias": None, "out": np.zeros((4, 8), np.int8)}
            | tok
            | t,
            INVALID,
            "int8 out with a float32 scale",
        )

    return gen


# ----------------------------------------------------------------------------- QuantMatmulV5
_V5_X = _QMM_X | FP8 | {HIF8, FP4}
_V5_OUT = _QMM_OUT | {D.ACL_FLOAT}
MX_GROUP = (1 << 32) | (1 << 16) | 32
"""groupSize [gsM, gsN, gsK] = [1, 1, 32] packed as gsK | gsN << 16 | gsM << 32."""


def decode_group_size(value: int) -> tuple[int, int, int]:
    """(gsM, gsN, gsK) from QuantMatmulV5's packed groupSize."""
    return (value >> 32) & 0xFFFF, (value >> 16) & 0xFFFF, value & 0xFFFF


def _mx_scale_shapes(batch: Shape, m: int, k: int, n: int, t1: bool, t2: bool) -> tuple[Shape, Shape]:
    kb = -(-k // 64)
    s1 = (*batch, kb, m, 2) if t1 else (*batch, m, kb, 2)
    s2 = (*batch, n, kb, 2) if t2 else (*batch, kb, n, 2)
    return s1, s2


def _quant_matmul_v5() -> OpSpec:
    params = (
        tensor("x1", _V5_X, min_rank=2, max_rank=6),
        tensor("x2", _V5_X, min_rank=2, max_rank=6),
        tensor("x1Scale", {D.ACL_FLOAT, E8M0}, optional=True),
        tensor("x2Scale", _QMM_SCALE | {E8M0}),
        tensor("yScale", {D.ACL_INT64, D.ACL_UINT64, D.ACL_FLOAT}, optional=True),
        tensor("x1Offset", {D.ACL_FLOAT, D.ACL_FLOAT16}, optional=True),
        tensor("x2Offset", {D.ACL_FLOAT, D.ACL_FLOAT16}, optional=True),
        tensor("yOffset", {D.ACL_FLOAT}, optional=True),
        tensor("bias", _QMM_BIAS, optional=True),
        bool_attr("transposeX1"),
        bool_attr("transposeX2"),
        int_attr("groupSize"),
        out("out", _V5_OUT),
    )

    def infer(call: Call) -> Infos:
        x1, x2 = tensor_arg(call, "x1"), tensor_arg(call, "x2")
        s1, s2 = _opt(call, "x1Scale"), tensor_arg(call, "x2Scale")
        bias, offset = _opt(call, "bias"), _opt(call, "x2Offset")
        for label in ("yScale", "x1Offset", "yOffset"):
            if _opt(call, label) is not None:
                raise invalid(f"{label} belongs to the G-B / B-B / T-CG / K-G modes, which acl-core does not implement")
        t1, t2 = bool(call.args["transposeX1"]), bool(call.args["transposeX2"])
        batch, m, k, n = _mkn(x1, x2, t1, t2)
        given = _opt(call, "out")
        group = int(call.args["groupSize"])
        if s2.dtype == E8M0:
            if s1 is None or s1.dtype != E8M0:
                raise invalid("MX mode needs x1Scale and x2Scale both FLOAT8_E8M0")
            if decode_group_size(group) != (1, 1, 32):
                raise invalid(f"MX mode needs groupSize [1, 1, 32] ({MX_GROUP}), got {list(decode_group_size(group))}")
            fp8 = x1.dtype in FP8 and x2.dtype in FP8
            if not (fp8 or (x1.dtype == FP4 and x2.dtype == FP4)):
                raise invalid(f"MX mode takes FLOAT8 or FLOAT4_E2M1 operands, not {x1.dtype.short} @ {x2.dtype.short}")
            if x1.dtype == FP4 and k % 2:
                raise invalid("k must be even for FLOAT4 operands")
            want1, want2 = _mx_scale_shapes(batch, m, k, n, t1, t2)
            if tuple(s1.shape) != want1 or tuple(s2.shape) != want2:
                raise invalid(
                    f"MX scales must be x1Scale {list(want1)} and x2Scale {list(want2)}, "
                    f"got {list(s1.shape)} and {list(s2.shape)}"
                )
            if offset is not None:
                raise invalid("x2Offset is not supported in MX mode")
            if bias is not None and bias.dtype != D.ACL_FLOAT:
                raise invalid("bias must be float32 in MX mode")
            _bias_shape(bias, batch, n)
            out_dtype = given.dtype if given is not None else D.ACL_BF16
            if out_dtype not in (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT):
                raise invalid(f"MX mode outputs float16, bfloat16 or float32, not {out_dtype.short}")
            call.plan["mode"] = "mx"
            return {"out": listed((*batch, m, n), out_dtype)}
        if any(decode_group_size(group)):
            raise invalid(
                f"groupSize {list(decode_group_size(group))} selects a grouped mode acl-core does not implement"
            )
        if x1.dtype != x2.dtype:
            raise invalid(f"x1 ({x1.dtype.short}) and x2 ({x2.dtype.short}) must have the same dtype")
        if s1 is not None:
            if s1.dtype != D.ACL_FLOAT or s1.shape not in ((m,), (m, 1)):
                raise invalid(f"x1Scale must be float32 of shape (m,) or (m, 1) with m={m}")
        _vector(s2, "x2Scale", (1, n))
        _vector(offset, "x2Offset", (1, n))
        _bias_shape(bias, batch, n)
        if x1.dtype in FP8 | {HIF8}:
            out_dtype = given.dtype if given is not None else D.ACL_BF16
            ok_scale = (s1 is None and s2.dtype in PACKED_SCALE) or (s1 is not None and s2.dtype == D.ACL_FLOAT)
            if not ok_scale or (bias is not None and bias.dtype != D.ACL_FLOAT) or offset is not None:
                raise invalid(
                    f"{x1.dtype.short} operands take x2Scale INT64/UINT64 alone or x1Scale and x2Scale float32, "
                    "an optional float32 bias and no x2Offset"
                )
            if out_dtype not in (D.ACL_FLOAT16, D.ACL_BF16, D.ACL_FLOAT):
                raise invalid(f"{x1.dtype.short} operands output float16, bfloat16 or float32, not {out_dtype.short}")
        elif x1.dtype == FP4:
            raise invalid("FLOAT4_E2M1 operands are supported in MX mode only")
        else:
            out_dtype = given.dtype if given is not None else _qmm_default_out(s2.dtype)
            if out_dtype == D.ACL_FLOAT:
                raise invalid("integer operands cannot output float32")
            _check_int_combo(
                x1.dtype, s2.dtype, offset is not None, bias.dtype if bias else None, s1 is not None, out_dtype
            )
        call.plan["mode"] = "tensor"
        return {"out": listed((*batch, m, n), out_dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        none = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None}
        t = {"transposeX1": False, "transposeX2": False}
        for x_dt in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
            x1 = rng.uniform(-8, 8, (4, 64)).astype(x_dt)
            x2 = rng.uniform(-8, 8, (64, 8)).astype(x_dt)
            s1 = lowp.e8m0_array(rng.integers(120, 134, (4, 1, 2)))
            s2 = lowp.e8m0_array(rng.integers(120, 134, (1, 8, 2)))
            yield Sample(
                {"x1": x1, "x2": x2, "x1Scale": s1, "x2Scale": s2, "bias": None, "groupSize": MX_GROUP} | none | t,
                f"MX {np.dtype(x_dt).name}",
            )
        fp4a = rng.uniform(-6, 6, (2, 96)).astype(ml_dtypes.float4_e2m1fn)
        fp4b = rng.uniform(-6, 6, (5, 96)).astype(ml_dtypes.float4_e2m1fn)
        yield Sample(
            {"x1": fp4a, "x2": fp4b, "x1Scale": lowp.e8m0_array(rng.integers(125, 130, (2, 2, 2)))}
            | {"x2Scale": lowp.e8m0_array(rng.integers(125, 130, (5, 2, 2))), "groupSize": MX_GROUP}
            | {"bias": rng.standard_normal(5).astype(np.float32), "out": np.zeros((2, 5), np.float32)}
            | none
            | {"transposeX1": False, "transposeX2": True},
            "MX fp4, x2 transposed, k not a multiple of 64, float32 bias",
        )
        e4 = rng.uniform(-8, 8, (3, 16)).astype(ml_dtypes.float8_e4m3fn)
        e4b = rng.uniform(-8, 8, (16, 6)).astype(ml_dtypes.float8_e4m3fn)
        yield Sample(
            {"x1": e4, "x2": e4b, "x1Scale": rng.uniform(0.5, 2, 3).astype(np.float32)}
            | {"x2Scale": rng.uniform(0.5, 2, 6).astype(np.float32), "bias": None, "groupSize": 0}
            | none
            | t,
            "fp8 per-token and per-channel float32 scales",
        )
        yield Sample(
            {"x1": e4, "x2": e4b, "x1Scale": None, "x2Scale": lowp.encode_packed_scale([0.125]).view(np.int64)}
            | {"bias": None, "groupSize": 0, "out": np.zeros((3, 6), np.float16)}
            | none
            | t,
            "fp8 per-tensor packed scale",
        )
        x1, x2 = _int8(rng, (3, 16)), _int8(rng, (16, 6))
        yield Sample(
            {"x1": x1, "x2": x2, "x1Scale": rng.uniform(0.5, 2, 3).astype(np.float32)}
            | {"x2Scale": rng.uniform(1e-3, 1e-2, 6).astype(np.float32), "bias": None, "groupSize": 0}
            | none
            | t,
            "int8 K-C",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        none = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None}
        t = {"transposeX1": False, "transposeX2": False}
        x1 = rng.uniform(-8, 8, (4, 64)).astype(ml_dtypes.float8_e4m3fn)
        x2 = rng.uniform(-8, 8, (64, 8)).astype(ml_dtypes.float8_e4m3fn)
        s1 = lowp.e8m0_array(np.full((4, 1, 2), 127))
        s2 = lowp.e8m0_array(np.full((1, 8, 2), 127))
        base = {"x1": x1, "x2": x2, "x1Scale": s1, "x2Scale": s2, "bias": None} | none | t
        yield ErrorSample({**base, "groupSize": 32}, INVALID, "MX with groupSize [0, 0, 32]")
        yield ErrorSample(
            {**base, "groupSize": MX_GROUP, "x1Scale": lowp.e8m0_array(np.full((4, 2, 2), 127))},
            INVALID,
            "MX x1Scale shape",
        )
        yield ErrorSample({**base, "groupSize": MX_GROUP, "x1Scale": None}, INVALID, "MX without x1Scale")
        yield ErrorSample(
            {**base, "groupSize": MX_GROUP, "yOffset": np.zeros(8, np.float32)}, INVALID, "yOffset (K-G mode)"
        )

    return OpSpec("QuantMatmulV5", FAMILY, params, infer, samples=gen, error_samples=errors)


# ----------------------------------------------------------------------------- WeightQuantBatchMatmulV2
_WQ_W = frozenset({D.ACL_INT8, D.ACL_INT4, D.ACL_FLOAT8_E4M3FN, HIF8})


def _weight_quant_batch_matmul_v2() -> OpSpec:
    params = (
        tensor("x", {D.ACL_FLOAT16, D.ACL_BF16}, min_rank=2, max_rank=2),
        tensor("weight", _WQ_W, min_rank=2, max_rank=2),
        tensor("antiquantScale", {D.ACL_FLOAT16, D.ACL_BF16}, min_rank=1, max_rank=2),
        tensor("antiquantOffsetOptional", {D.ACL_FLOAT16, D.ACL_BF16}, optional=True, max_rank=2),
        tensor("quantScaleOptional", {D.ACL_UINT64}, optional=True, max_rank=2),
        tensor("quantOffsetOptional", {D.ACL_FLOAT}, optional=True, max_rank=2),
        tensor("biasOptional", {D.ACL_FLOAT16, D.ACL_FLOAT, D.ACL_BF16}, optional=True, max_rank=2),
        int_attr("antiquantGroupSize", c_type="int"),
        out("y", {D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x, w = tensor_arg(call, "x"), tensor_arg(call, "weight")
        scale, offset = tensor_arg(call, "antiquantScale"), _opt(call, "antiquantOffsetOptional")
        qscale, qoffset, bias = (_opt(call, n) for n in ("quantScaleOptional", "quantOffsetOptional", "biasOptional"))
        m, k = x.shape
        k2, n = w.shape
        if k != k2:
            raise invalid(f"k of x ({k}) and weight ({k2}) disagree")
        if min(m, k, n) == 0:
            raise invalid("empty tensors are not supported")
        if not (1 <= k <= 65535 and 1 <= n <= 65535):
            raise invalid(f"k={k} and n={n} must lie in [1, 65535]")
        if w.dtype == D.ACL_INT4 and n % 2:
            raise invalid("n must be even for an INT4 weight")
        if scale.dtype != x.dtype:
            raise invalid(f"antiquantScale must have x's dtype {x.dtype.short}")
        gs = int(call.args["antiquantGroupSize"])
        if gs:
            if gs % 32 or not 32 <= gs <= k - 1:
                raise invalid(f"antiquantGroupSize={gs} must be a multiple of 32 in [32, k-1] (k={k})")
            if scale.shape != (-(-k // gs), n):
                raise invalid(f"per-group antiquantScale must be ({-(-k // gs)}, {n}), got {list(scale.shape)}")
        elif scale.shape not in ((1,), (n,), (1, n)):
            raise invalid(f"antiquantScale must be (1,), ({n},) or (1, {n}), got {list(scale.shape)}")
        if offset is not None and (offset.shape != scale.shape or offset.dtype != scale.dtype):
            raise invalid("antiquantOffsetOptional must have antiquantScale's shape and dtype")
        if qoffset is not None and qscale is None:
            raise invalid("quantOffsetOptional needs quantScaleOptional")
        for label, t in (("quantScaleOptional", qscale), ("quantOffsetOptional", qoffset)):
            if t is not None and t.shape not in ((1,), (n,), (1, n)):
                raise invalid(f"{label} must be (1,), ({n},) or (1, {n})")
        if qoffset is not None and qscale is not None and qoffset.shape != qscale.shape:
            raise invalid("quantOffsetOptional must have quantScaleOptional's shape")
        if bias is not None and bias.shape not in ((n,), (1, n)):
            raise invalid(f"biasOptional must be ({n},) or (1, {n})")
        if bias is not None and x.dtype == D.ACL_FLOAT16 and bias.dtype == D.ACL_BF16:
            raise invalid("a bfloat16 bias needs bfloat16 x")
        out_dtype = D.ACL_INT8 if qscale is not None else x.dtype
        call.plan["group"] = gs
        return {"y": same((m, n), out_dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        none = {"antiquantOffsetOptional": None, "quantScaleOptional": None, "quantOffsetOptional": None}
        x = S.array(rng, (3, 64), D.ACL_FLOAT16, low=-1, high=1)
        w8 = _int8(rng, (64, 8))
        sc = S.array(rng, (8,), D.ACL_FLOAT16, low=0.001, high=0.01)
        yield Sample(
            {"x": x, "weight": w8, "antiquantScale": sc, "biasOptional": None, "antiquantGroupSize": 0} | none,
            "int8 per-channel",
        )
        off = S.array(rng, (8,), D.ACL_FLOAT16, low=-4, high=4)
        yield Sample(
            {**none, "x": x, "weight": w8, "antiquantScale": sc, "antiquantOffsetOptional": off}
            | {"biasOptional": S.array(rng, (8,), D.ACL_FLOAT), "antiquantGroupSize": 0},
            "int8 per-channel with offset and float32 bias",
        )
        w4 = rng.integers(-8, 8, (64, 8)).astype(ml_dtypes.int4)
        gsc = S.array(rng, (2, 8), D.ACL_FLOAT16, low=0.01, high=0.1)
        goff = S.array(rng, (2, 8), D.ACL_FLOAT16, low=-1, high=1)
        yield Sample(
            {**none, "x": x, "weight": w4, "antiquantScale": gsc, "antiquantOffsetOptional": goff}
            | {"biasOptional": None, "antiquantGroupSize": 32},
            "int4 per-group 32",
        )
        xb = S.array(rng, (2, 64), D.ACL_BF16, low=-1, high=1)
        yield Sample(
            {**none, "x": xb, "weight": w8, "antiquantScale": S.array(rng, (1,), D.ACL_BF16, low=0.01, high=0.02)}
            | {"biasOptional": S.array(rng, (1, 8), D.ACL_BF16), "antiquantGroupSize": 0},
            "bf16 per-tensor",
        )
        yield Sample(
            {"x": x, "weight": w8, "antiquantScale": sc, "antiquantOffsetOptional": None, "biasOptional": None}
            | {"quantScaleOptional": lowp.encode_packed_scale(np.full(8, 4.0)), "antiquantGroupSize": 0}
            | {"quantOffsetOptional": S.array(rng, (8,), D.ACL_FLOAT, low=-3, high=3)},
            "int8 output",
        )
        fp8 = rng.uniform(-100, 100, (64, 8)).astype(ml_dtypes.float8_e4m3fn)
        yield Sample(
            {"x": x, "weight": fp8, "antiquantScale": sc, "biasOptional": None, "antiquantGroupSize": 0} | none,
            "float8_e4m3fn weight",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        none = {"antiquantOffsetOptional": None, "quantScaleOptional": None, "quantOffsetOptional": None}
        x = S.array(rng, (3, 64), D.ACL_FLOAT16)
        w = _int8(rng, (64, 8))
        base = {"x": x, "weight": w, "biasOptional": None} | none
        yield ErrorSample(
            {**base, "antiquantScale": S.array(rng, (5,), D.ACL_FLOAT16), "antiquantGroupSize": 0},
            INVALID,
            "scale size",
        )
        yield ErrorSample(
            {**base, "antiquantScale": S.array(rng, (2, 8), D.ACL_FLOAT16), "antiquantGroupSize": 48},
            INVALID,
            "group size not a multiple of 32",
        )
        yield ErrorSample(
            {**base, "antiquantScale": S.array(rng, (8,), D.ACL_BF16), "antiquantGroupSize": 0}, INVALID, "scale dtype"
        )
        yield ErrorSample(
            {**base, "weight": _int8(rng, (32, 8)), "antiquantScale": S.array(rng, (8,), D.ACL_FLOAT16)}
            | {"antiquantGroupSize": 0},
            INVALID,
            "k disagrees",
        )

    return OpSpec("WeightQuantBatchMatmulV2", FAMILY, params, infer, samples=gen, error_samples=errors)


SPECS: list[OpSpec] = [
    _ascend_quant("AscendQuant", v3=False),
    _ascend_quant("AscendQuantV3", v3=True),
    _anti_quant(),
    _dynamic_quant(),
    _dynamic_quant_v2(),
    _dynamic_mx_quant(),
    _quant_matmul("QuantMatmulV3", v4=False),
    _quant_matmul("QuantMatmulV4", v4=True),
    _quant_matmul_v5(),
    _weight_quant_batch_matmul_v2(),
]

_SIGNED_INTEGER_OPERANDS = (
    "int8 / int4 operands with dequantisation scales: the magnitudes run (absolute values of float inputs"
    " only) leaves integer operands signed, so it cannot form the GEMM's M = |x|·|w|·|scale|"
)
_WEIGHT_DEQUANTISED = (
    "the weight is dequantised, (w + offset)·scale with a 16-bit antiquantScale, before the GEMM: where CANN"
    " rounds that product (x's 16-bit dtype or float32) is not documented, and a 16-bit rounding of every"
    " term is far beyond γ_K·M; integer weights are also signed, which the magnitudes run leaves as they are"
)


def _v5_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """QuantMatmulV5's reduction length: K (x1's last dim, or its second-to-last when transposed) + 3.

    The three are the float32 epilogue's roundings: the x1Scale and x2Scale products and the bias add.
    """
    shape: tuple[int, ...] = tuple(getattr(args.get("x1"), "shape", ()))
    if len(shape) < 2:
        return 1
    return int(shape[-2] if args.get("transposeX1") else shape[-1]) + 3


V5_FP8_REDUCTION = reduction(
    length_of=_v5_length,
    reason=(
        "FLOAT8 operands: each product of two fp8 values is exact in float32 and CANN's cube unit accumulates"
        " in float32 (K additions), then the float32 epilogue applies the scales and the bias (3 roundings);"
        " the magnitudes run takes the absolute value of the fp8 operands, the float32 / E8M0 scales and the"
        " float32 bias, so M = |x1|·|x2|·|x1Scale|·|x2Scale| + |bias|"
    ),
)
"""QuantMatmulV5's class for fp8 x fp8 calls (per-token / per-channel, per-tensor packed, MX)."""
V5_INTEGER_TABLE = table(_SIGNED_INTEGER_OPERANDS)
V5_FP4_TABLE = table(
    "FLOAT4_E2M1 operands (MX mode) are packed two to a byte in device memory; no backend's fp4 path has been"
    " measured against the reduction class, so fp4 calls stay on the per-dtype table"
)
V5_HIF8_TABLE = table(
    "HiFloat8 operands have no NumPy float type: the host holds their codes as bytes, which the magnitudes"
    " run leaves as they are, so it cannot form the GEMM's M"
)
V5_SIGNED_SCALE_TABLE = table(
    "a packed INT64/UINT64 scale holding a negative float32: the magnitudes run leaves integer arrays as"
    " they are, so M would take the scale's sign and a bias would cancel against it"
)
V5_OFFSET_TABLE = table(
    "an offset tensor is given (the validator refuses each one with fp8 operands today): with x + offset as"
    " the operand, the absolute values of x and offset taken apart are not the magnitudes of the GEMM's terms"
)


def _dtype(value: Any) -> D | None:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    if isinstance(dtype, D):
        return dtype
    try:
        return from_numpy(np.dtype(dtype))
    except (TypeError, ValueError):
        return None


def _v5_class(args: Mapping[str, Any]) -> Accuracy:
    """QuantMatmulV5's class for one call: ``reduction`` for fp8 x fp8 without offsets, else the table's reason."""
    x1, x2 = _dtype(args.get("x1")), _dtype(args.get("x2"))
    if x1 not in FP8 or x2 not in FP8:
        if FP4 in (x1, x2):
            return V5_FP4_TABLE
        if HIF8 in (x1, x2) or x1 is None or x2 is None:
            return V5_HIF8_TABLE
        return V5_INTEGER_TABLE
    if any(args.get(name) is not None for name in ("x1Offset", "x2Offset", "yOffset")):
        return V5_OFFSET_TABLE
    for name in ("x1Scale", "x2Scale"):
        value = args.get(name)
        if value is not None and _dtype(value) in PACKED_SCALE:
            with np.errstate(invalid="ignore"):
                if bool(np.any(lowp.decode_packed_scale(np.asarray(value)) < 0)):
                    return V5_SIGNED_SCALE_TABLE
    return V5_FP8_REDUCTION


_QUANT_TABLE: dict[str, Accuracy] = {
    **{
        op: table(
            "integer outputs compare exactly under any class; its 8-bit float outputs round x·scale + offset in"
            " float32 and then to the 8-bit format, a double rounding the exact class allows only for 16-bit types"
        )
        for op in ("AscendQuant", "AscendQuantV3")
    },
    "AscendAntiQuant": table("(x + offset)·scale with an integer x: " + _SIGNED_INTEGER_OPERANDS),
    **{
        op: table(
            "quantised outputs with a float scale from the row's absolute maximum: how CANN rounds the scale"
            " (max/127 or max·(1/127)) is not documented, and the quantised values follow it"
        )
        for op in ("DynamicQuant", "DynamicQuantV2", "DynamicMxQuant")
    },
    **{op: table(_SIGNED_INTEGER_OPERANDS) for op in ("QuantMatmulV3", "QuantMatmulV4")},  # int8 / int4 only
    "QuantMatmulV5": by_call(
        _v5_class,
        (V5_FP8_REDUCTION, V5_INTEGER_TABLE, V5_FP4_TABLE, V5_HIF8_TABLE, V5_SIGNED_SCALE_TABLE, V5_OFFSET_TABLE),
        "the reduction class for FLOAT8 x FLOAT8 calls (float32 accumulation, M from the magnitudes run); the"
        " per-dtype table for integer, HiFloat8 and FLOAT4 operands, a negative packed scale or an offset",
    ),
    "WeightQuantBatchMatmulV2": table(_WEIGHT_DEQUANTISED),
}
SPECS = with_accuracy(SPECS, _QUANT_TABLE)
