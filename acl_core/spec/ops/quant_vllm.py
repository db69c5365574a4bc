"""The quantisation operators vllm-ascend reaches (issue 16): Quantize, TransQuantParamV2,
DynamicBlockQuant(V2), ClippedSwiglu, DequantSwigluQuant(V2), RmsNormDynamicMxQuant,
AddRmsNormDynamicMxQuant and FlatQuant.

Semantics follow ops-nn's documents of each operator (formulas, dtype tables, shape rules) and,
where a document is terse, its test golden (``tests/assets/golden.py`` of the operator); the element
formats and their rounding are :mod:`acl_core.lowp`'s, as in the quant family (:mod:`.quant`).
Choices where the documents are silent, each consistent with the quant family's (TODO.md, "Low
precision"):

* Arithmetic. Quantisation arithmetic (scales, offsets, divisions) is FLOAT32, each operation
  rounded once; ``rint`` and ``round`` of an integer output both mean round half to even (the family's
  rule), integer outputs saturate and NaN becomes 0. Where a transcendental function or a reduction
  feeds a quantised output (SwiGLU's sigmoid, RmsNorm's statistics, FlatQuant's matrix products), it is
  computed in float64 and rounded once to FLOAT32 before the quantisation, as AddRmsNormQuant does; a
  backend doing the same agrees on integer outputs except for a value within float64 rounding of a tie.
* Quantize: ``out = round(x / scales + zeroPoints)`` as its golden (the zero point added before the
  rounding). FLOAT8_E4M3FN overflows to NaN (ml_dtypes, as AscendQuantV3); FLOAT8_E5M2 saturates to
  ±57344 and maps NaN to 0 and HIFLOAT8 rounds ties away and overflows to Inf, as the golden does.
  Scales of size 1 ignore ``axis`` (CANN checks it only for per-channel scales).
* TransQuantParamV2: ``(float32 bits & 0xFFFFE000) | 1 << 46``, and with an offset
  ``round(offset)`` (half to even) clipped to [-256, 255] in bits 37..45 (NaN offsets: 0). The packed
  scale is what QuantMatmulV3/V4/V5 and WeightQuantBatchMatmulV2 decode (their low 32 bits); the offset
  bits are not read by those ops (TODO.md).
* DynamicBlockQuant(V2): ``scale = min(amax / dtypeMax, 1 / minScale)`` in FLOAT32 (the clamp only for
  a finite ``amax / dtypeMax``, as the 950 kernel does), ``y = x / scale``; FLOAT8 and HIFLOAT8 outputs
  saturate (the kernel's SAT conversions), HIFLOAT8 rounds ties away (roundMode ``round``, the only one
  documented for it), INT8 and FLOAT8 round half to even (``rint``). A block of zeros gets scale 0 and
  y 0 (as DynamicQuant's zero rows); a block holding NaN gets a NaN scale and NaN (INT8: 0) elements.
  ``colBlockSize`` accepts 1 as well (V2's A2/A3 table); V2's ``dstTypeMax`` (0, 15, 56, 224, 32768) is
  for HIFLOAT8 only, 0 meaning the type's maximum.
* ClippedSwiglu and the SwiGLU of DequantSwigluQuant: ``alpha``, ``limit`` and ``bias`` are converted
  to FLOAT32 first (the activation family's rule for scalars). ClippedSwiglu's rows past
  ``sum(groupIndex)`` (CANN: not computed) are written with 0, negative counts count as 0 and an empty
  ``groupIndexOptional`` is refused (161002); with ``interleaved`` the even/odd split
  is over the merged ``[cut * after]`` axis, as the document's axis merge says.
* DequantSwigluQuant(V2), from its golden: INT32 ``x`` adds an INT32 bias in the integer domain, then
  ``float32(x) * weightScale * activationScale (+ float bias)``; FLOAT16 / BFLOAT16 ``x`` is used as it
  is. ``groupIndexOptional`` holds per-group row counts (not cumulative); rows past their sum are
  written with 0 (y and scale), a negative count counts as 0 and counts past the rows are cut.
  ``quantModeOptional`` null means ``static``: ``y / quantScale + quantOffset`` (a null offset is 0);
  ``dynamic``: ``y * quantScale`` (a smooth scale), ``scale = rowmax|y| / dtypeMax`` with an all-zero
  row getting scale 1 (the golden's choice), ``y / scale``; static mode writes ``scaleOut`` with 0.
  Per-group parameters resolve as the golden does: a 2-D one takes the group's row (row 0 if it has
  one row), a 1-D one with as many entries as groups is one value per group, any other 1-D one applies
  whole. FLOAT8 outputs convert as the golden (ml_dtypes: E4M3FN overflow NaN, E5M2 overflow Inf),
  HIFLOAT8 rounds ties away. swigluMode 3 (documented beside the formula of 0-2) is accepted.
  Implemented: ``activateDim`` the last dim, dstType 2 / 34 / 35 / 36, FLOAT4_E2M1 (40) with ``rint``;
  refused with 161002: another ``activateDim``, FLOAT4_E1M2 (no host type), other FLOAT4 rounding modes
  (not proven), a 2-D ``groupIndexOptional``.
* RmsNormDynamicMxQuant / AddRmsNormDynamicMxQuant: ``y = x * rstd * gamma + beta`` (float64
  statistics), rounded once to FLOAT32, then DynamicMxQuant's rules along the last axis with block 32
  (scaleAlg 0: OCP; 1: the amax / Amax exponent rounded up). A block whose scale is the NaN code 0xFF
  (it holds NaN or Inf) writes its elements as 0, as both documents' boundary notes say (unlike
  DynamicMxQuant, which writes NaN there). ``rstdOut`` is optional when ``outputRstd`` is false and then
  not written. Shape and attribute errors are 561103, the documents' code; FLOAT4_E1M2 is refused.
* FlatQuant: ``x'' = P1 @ x[m] @ P2`` in float64, rounded once to FLOAT32; ``quantScale =
  max|x''[m]| / (7 / clipRatio)`` in FLOAT32, ``out = round(x'' / quantScale)`` to INT4 (saturated; a
  zero slice gets scale 0 and out 0). The per-group FLOAT4_E2M1 mode is refused (161002): its
  document's shared-exponent formula is not definite enough to implement.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, composite, exact, reduction, trailing_elements, ulp, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    dtype_attr,
    float_attr,
    int_attr,
    invalid,
    nullptr,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, normalize_dim, same, tensor_arg
from acl_core.spec.version import version_of
from acl_core.tensor import AclTensor

declare_plan("rows", "int", "the number of rows (x's elements over its last dim, or over the split dim)", int)
declare_plan("swiglu", "int", "DequantSwigluQuant's swigluMode (0 SwiGLU, 1/2 clipped GPT-OSS, 3 clipped SiLU)", int)
declare_plan("left", "bool", "whether the activated (gate) half of a SwiGLU input is its first", bool)
declare_plan("block", "tuple", "DynamicBlockQuant's (rowBlockSize, colBlockSize)", tuple)
declare_plan("dst_max", "float", "the quantisation range's maximum (the output dtype's, or dstTypeMax)", float)

FAMILY = "quant"
Shape = tuple[int, ...]
_F32, _F16, _BF16, _I8, _I32, _I64 = D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8, D.ACL_INT32, D.ACL_INT64
HALF = frozenset({_F16, _BF16})
E4M3, E5M2, HIF8, FP4, E1M2, E8M0 = (
    D.ACL_FLOAT8_E4M3FN,
    D.ACL_FLOAT8_E5M2,
    D.ACL_HIFLOAT8,
    D.ACL_FLOAT4_E2M1,
    D.ACL_FLOAT4_E1M2,
    D.ACL_FLOAT8_E8M0,
)
FP8 = frozenset({E4M3, E5M2})
DST_MAX: dict[D, float] = {_I8: 127.0, E4M3: 448.0, E5M2: 57344.0, HIF8: 32768.0, FP4: 6.0}
"""The dtypeMax of each quantised output type (INT8 symmetric range, float formats' largest finite)."""
INNER_NULLPTR = int(AclnnStatus.ACLNN_ERR_INNER_NULLPTR)
"""561103: the code the MX norm documents give for their shape and attribute errors."""


def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _dst(code: int) -> D:
    try:
        return D(int(code))
    except ValueError:
        raise invalid(f"dstType={code} is not an aclDataType") from None


def _inner(message: str) -> AclnnError:
    """A 561103 error (the MX norm documents' code for shape and attribute errors)."""
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, message)


def _no_empty(*tensors: tuple[str, AclTensor | None]) -> None:
    for name, t in tensors:
        if t is not None and t.numel == 0:
            raise invalid(f"{name} is empty; empty tensors are not supported")


# ----------------------------------------------------------------------------- Quantize
QUANTIZE_OUT = frozenset({_I8, D.ACL_UINT8, _I32, HIF8, E4M3, E5M2})


def _quantize() -> OpSpec:
    params = (
        tensor("x", FLOATS, min_rank=1, c_type="const aclTensor*"),
        tensor("scales", FLOATS, min_rank=1, max_rank=1),
        tensor("zeroPoints", {_I32, _I8, D.ACL_UINT8, _F32, _BF16}, optional=True, min_rank=1, max_rank=1),
        dtype_attr("dtype", dtypes=QUANTIZE_OUT),
        int_attr("axis", c_type="int32_t"),
        out("out", QUANTIZE_OUT),
    )

    def infer(call: Call) -> Infos:
        x, scales, zp = tensor_arg(call, "x"), tensor_arg(call, "scales"), _opt(call, "zeroPoints")
        dst = D(call.args["dtype"])
        if x.dtype != _F32 and scales.dtype != x.dtype:
            raise invalid(f"scales must have x's dtype {x.dtype.short} when x is not float32")
        bf16 = scales.dtype == _BF16 or (zp is not None and zp.dtype == _BF16)
        if bf16 and (x.dtype != _BF16 or scales.dtype != _BF16 or (zp is not None and zp.dtype != _BF16)):
            raise invalid("a bfloat16 scales or zeroPoints needs x, scales and zeroPoints all bfloat16")
        n = scales.shape[0]
        if zp is not None and zp.shape[0] != n:
            raise invalid(f"zeroPoints has {zp.shape[0]} elements; it must have scales' {n}")
        axis: int | None = None
        if n != 1:
            axis = normalize_dim(int(call.args["axis"]), x.rank, "axis")
            if x.shape[axis] != n:
                raise invalid(f"scales has {n} elements; expected 1 or x's dim {axis} ({x.shape[axis]})")
        call.plan.update(axis=axis, dst=dst)
        return {"out": same(x.shape, dst)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt, zdt in ((_F32, _I32), (_F16, D.ACL_UINT8), (_BF16, _BF16), (_F32, _F32)):
            x = S.array(rng, (3, 40), dt, low=-6, high=6)
            scales = S.array(rng, (40,), dt, low=0.02, high=0.2)
            zp = S.array(rng, (40,), zdt, low=-4 if zdt != D.ACL_UINT8 else 0, high=8)
            for code in (_I8, D.ACL_UINT8, _I32):
                yield Sample(
                    {"x": x, "scales": scales, "zeroPoints": zp, "dtype": code, "axis": -1},
                    f"{dt.short} x, {zdt.short} zero points, to {code.short}",
                )
        x = S.array(rng, (5, 4, 3), _F16, low=-3, high=3)
        yield Sample(
            {"x": x, "scales": S.array(rng, (4,), _F16, low=0.01, high=0.1), "zeroPoints": None, "dtype": _I8}
            | {"axis": 1},
            "per-channel along axis 1, no zero points (saturating)",
        )
        for code in (E4M3, E5M2):
            big = S.array(rng, (4, 16), _F32, low=-600, high=600)
            big[0, :4] = [np.nan, np.inf, -np.inf, 1e30]
            yield Sample(
                {"x": big, "scales": np.array([0.5], np.float32), "zeroPoints": None, "dtype": code, "axis": 7},
                f"per-tensor to {code.short} with overflow, NaN and Inf (axis unused)",
            )
        sp = S.array(rng, (3, 8), _F32, special=True)
        yield Sample(
            {"x": sp, "scales": np.full(8, 0.25, np.float32), "zeroPoints": np.full(8, 3, np.int8), "dtype": _I32}
            | {"axis": -1},
            "NaN and Inf to int32",
        )
        yield Sample(
            {"x": S.array(rng, (0, 8), _F16), "scales": np.ones(1, np.float16), "zeroPoints": None, "dtype": _I8}
            | {"axis": 0},
            "empty",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 8), _F16)
        base = {"x": x, "scales": np.ones(8, np.float16), "zeroPoints": None, "dtype": _I8, "axis": -1}
        yield ErrorSample({**base, "scales": np.ones(5, np.float16)}, INVALID, "scales size")
        yield ErrorSample({**base, "scales": np.ones(8, np.float32)}, INVALID, "scales dtype differs from f16 x")
        yield ErrorSample({**base, "zeroPoints": np.ones(4, np.int32)}, INVALID, "zeroPoints size")
        yield ErrorSample({**base, "axis": 2}, INVALID, "axis out of range")
        yield ErrorSample({**base, "dtype": D.ACL_INT16}, INVALID, "dtype int16")
        yield ErrorSample({**base, "out": np.zeros((2, 8), np.uint8)}, INVALID, "out's dtype is not dtype")
        yield ErrorSample({**base, "zeroPoints": np.ones(8, ml_dtypes.bfloat16)}, INVALID, "bf16 zeroPoints, f16 x")

    return OpSpec(
        "Quantize",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="out = round(x / scales + zeroPoints) into dtype (per tensor or along axis)",
    )


# ----------------------------------------------------------------------------- TransQuantParamV2
def _trans_quant_param_v2() -> OpSpec:
    params = (
        tensor("scale", {_F32}, min_rank=1, max_rank=2),
        tensor("offset", {_F32}, optional=True, min_rank=1, max_rank=2),
        out("out", {D.ACL_UINT64, D.ACL_INT64}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        scale, offset = tensor_arg(call, "scale"), _opt(call, "offset")
        _no_empty(("scale", scale), ("offset", offset))
        shape: Shape = tuple(scale.shape)
        if offset is not None:
            n = max(scale.numel if scale.rank == 1 else scale.shape[-1], offset.shape[-1])
            for label, t in (("scale", scale), ("offset", offset)):
                if t.rank == 2 and t.shape[0] != 1:
                    raise invalid(f"with an offset, {label} must be (t,) or (1, n), not {list(t.shape)}")
                if t.shape[-1] not in (1, n):
                    raise invalid(f"{label} {list(t.shape)} and the other's size {n} do not broadcast")
            shape = (n,) if scale.rank == 1 else tuple(scale.shape)
            if scale.rank == 2 and scale.shape[-1] != n:
                raise invalid(f"a 2-D scale {list(scale.shape)} must have the offset's size {n}")
        out_t = _opt(call, "out")
        dtype = out_t.dtype if out_t is not None else D.ACL_UINT64
        return {"out": same(shape, dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        scale = rng.uniform(1e-4, 1e-1, 8).astype(np.float32)
        yield Sample({"scale": scale, "offset": None}, "per-channel, no offset")
        yield Sample({"scale": scale, "offset": None, "out": np.zeros(8, np.int64)}, "per-channel into int64")
        off = rng.uniform(-300, 300, 8).astype(np.float32)
        off[:3] = [2.5, -3.5, 0.49999997]
        yield Sample({"scale": scale, "offset": off}, "with offsets (ties and clipping)")
        yield Sample({"scale": scale[:1], "offset": off}, "one scale, per-channel offsets")
        yield Sample({"scale": scale.reshape(1, 8), "offset": off[:1]}, "2-D (1, n) scale, one offset")
        neg = -scale.reshape(2, 4)
        yield Sample({"scale": neg, "offset": None}, "(g, n) negative scales")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        scale = np.ones(8, np.float32)
        yield ErrorSample({"scale": scale, "offset": np.ones(5, np.float32)}, INVALID, "offset size")
        yield ErrorSample({"scale": np.ones((2, 8), np.float32), "offset": scale}, INVALID, "(g, n) with offset")
        yield ErrorSample({"scale": np.ones(0, np.float32), "offset": None}, INVALID, "empty scale")
        yield ErrorSample({"scale": scale, "offset": None, "out": np.zeros(8, np.int32)}, INVALID, "int32 out")

    return OpSpec(
        "TransQuantParamV2",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="pack float32 scales (and offsets) into the UINT64 quant-parameter format",
    )


# ----------------------------------------------------------------------------- DynamicBlockQuant(V2)
BLOCK_DST = {2: _I8, 34: HIF8, 35: E5M2, 36: E4M3}
HIF8_MAXES = (0.0, 15.0, 56.0, 224.0, 32768.0)


def _block_quant_v2() -> OpSpec:
    params = (
        tensor("x", {_F16, _BF16, _F32}, min_rank=2, max_rank=3),
        float_attr("minScale", bounds=(0.0, None)),
        string_attr("roundModeOptional", choices=("rint", "round"), optional=True),
        int_attr("dstType", choices=tuple(BLOCK_DST)),
        int_attr("rowBlockSize", choices=(1, 128, 256, 512)),
        int_attr("colBlockSize", choices=(1, 64, 128, 192, 256)),
        float_attr("dstTypeMax"),
        out("yOut", set(BLOCK_DST.values()), c_type="const aclTensor*"),
        out("scaleOut", {_F32}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "x")
        _no_empty(("x", x))
        dst = BLOCK_DST[int(call.args["dstType"])]
        mode = call.args.get("roundModeOptional") or "rint"
        want = "round" if dst == HIF8 else "rint"
        if mode != want:
            raise invalid(f"roundModeOptional {mode!r} is not supported for {dst.short}; only {want!r}")
        top = float(call.args["dstTypeMax"])
        if top not in HIF8_MAXES:
            raise invalid(f"dstTypeMax={top:g} is not one of {list(HIF8_MAXES)}")
        if top and dst != HIF8:
            raise invalid(f"dstTypeMax={top:g} applies to hifloat8 outputs only; {dst.short} needs 0")
        rb, cb = int(call.args["rowBlockSize"]), int(call.args["colBlockSize"])
        m, n = x.shape[-2], x.shape[-1]
        scale = (*x.shape[:-2], -(-m // rb), -(-n // cb))
        call.plan.update(block=(rb, cb), dst=dst, dst_max=top or DST_MAX[dst], mode=mode)
        return {"yOut": same(x.shape, dst), "scaleOut": same(scale, _F32)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        base = {"minScale": 0.0, "dstTypeMax": 0.0}
        for dt in (_F16, _BF16, _F32):
            x = S.array(rng, (3, 200), dt, low=-30, high=30)
            x[1, 128:] *= np.asarray(1e-3).astype(x.dtype)
            yield Sample(
                {"x": x, "dstType": 2, "rowBlockSize": 1, "colBlockSize": 128} | base,
                f"{dt.short} per-row blocks of 128 to int8 (a tail block)",
            )
        x = S.array(rng, (2, 130, 70), _BF16, low=-5, high=5)
        for code in (35, 36):
            yield Sample(
                {"x": x, "dstType": code, "rowBlockSize": 128, "colBlockSize": 64} | base,
                f"3-D 128x64 blocks to {D(code).short}",
            )
        x = S.array(rng, (4, 256), _F16, low=-2, high=2)
        x[0, :128] = 0
        x[2, 130] = np.nan
        x[3, 7] = np.inf
        yield Sample(
            {"x": x, "dstType": 36, "rowBlockSize": 1, "colBlockSize": 128, "roundModeOptional": "rint"} | base,
            "a zero block, a NaN block and an Inf block",
        )
        yield Sample(
            {"x": S.array(rng, (2, 192), _F32, low=-1, high=1), "dstType": 2, "rowBlockSize": 1}
            | {"colBlockSize": 192, "minScale": 200.0, "dstTypeMax": 0.0},
            "minScale clamps the scale (saturating)",
        )
        yield Sample(
            {"x": S.array(rng, (3, 256), _F16), "dstType": 35, "rowBlockSize": 256, "colBlockSize": 256} | base,
            "one block of 256x256 covering the tensor",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 128), _F16)
        base = {"x": x, "minScale": 0.0, "dstType": 2, "rowBlockSize": 1, "colBlockSize": 128, "dstTypeMax": 0.0}
        yield ErrorSample({**base, "rowBlockSize": 64}, INVALID, "rowBlockSize 64")
        yield ErrorSample({**base, "roundModeOptional": "round"}, INVALID, "round for int8")
        yield ErrorSample({**base, "dstType": 34}, INVALID, "hifloat8 with rint")
        yield ErrorSample({**base, "dstTypeMax": 15.0}, INVALID, "dstTypeMax for int8")
        yield ErrorSample({**base, "minScale": -1.0}, INVALID, "negative minScale")
        yield ErrorSample({**base, "x": S.array(rng, (0, 128), _F16)}, INVALID, "empty x")
        yield ErrorSample({**base, "x": S.array(rng, (128,), _F16)}, INVALID, "1-D x")
        yield ErrorSample({**base, "scaleOut": np.zeros((2, 2), np.float32)}, INVALID, "scaleOut shape")

    return OpSpec(
        "DynamicBlockQuantV2",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="per block of rowBlockSize x colBlockSize: scale = min(amax / dtypeMax, 1 / minScale); y = x / scale",
    )


_BLOCK_V2 = _block_quant_v2()


def _block_v1_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A V2 case V1 can take: FLOAT16 / BFLOAT16 x (V1's dtypes)."""
    x = args.get("x")
    return None if getattr(x, "dtype", None) == np.float32 else args


_BLOCK_V1 = version_of(
    _BLOCK_V2,
    "DynamicBlockQuant",
    (
        tensor("x", HALF, min_rank=2, max_rank=3),
        *(n for n in _BLOCK_V2.param_names if n not in ("x", "dstTypeMax")),
    ),
    fixed={"dstTypeMax": 0.0},
    adapt=_block_v1_case,
    summary="DynamicBlockQuantV2 without dstTypeMax (the output dtype's own maximum)",
)


# ----------------------------------------------------------------------------- ClippedSwiglu
def _clipped_swiglu() -> OpSpec:
    params = (
        tensor("x", FLOATS, min_rank=1),
        tensor("groupIndexOptional", {_I64}, optional=True, min_rank=1, max_rank=1),
        int_attr("dim"),
        float_attr("alpha"),
        float_attr("limit"),
        float_attr("bias"),
        bool_attr("interleaved"),
        out("out", FLOATS, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "x")
        _no_empty(("groupIndexOptional", _opt(call, "groupIndexOptional")))
        dim = normalize_dim(int(call.args["dim"]), x.rank, "dim")
        if x.shape[dim] % 2:
            raise invalid(f"x's dim {dim} has {x.shape[dim]} elements; it must be even")
        shape = list(x.shape)
        shape[dim] //= 2
        rows = 1
        for d in x.shape[:dim]:
            rows *= d
        call.plan.update(axis=dim, rows=rows)
        return {"out": same(shape, x.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        base = {"alpha": 1.702, "limit": 7.0, "bias": 1.0}
        for dt in (_F32, _F16, _BF16):
            x = S.array(rng, (6, 64), dt, low=-10, high=10)
            for inter in (False, True):
                yield Sample(
                    {"x": x, "groupIndexOptional": None, "dim": -1, "interleaved": inter} | base,
                    f"{dt.short} {'interleaved' if inter else 'halves'}",
                )
        x = S.array(rng, (2, 3, 4, 5), _F32, low=-9, high=9)
        for inter in (False, True):
            yield Sample(
                {"x": x, "groupIndexOptional": np.array([1, 0], np.int64), "dim": 2, "interleaved": inter} | base,
                f"dim 2 of 4-D, groups covering 1 of 6 rows{' interleaved' if inter else ''}",
            )
        x = S.array(rng, (8, 32), _BF16, low=-20, high=20)
        yield Sample(
            {"x": x, "groupIndexOptional": np.array([3, 2, 1], np.int64), "dim": 1, "interleaved": False}
            | {"alpha": 1.0, "limit": 2.5, "bias": -0.5},
            "groups of 3, 2, 1 rows of 8; other alpha, limit, bias",
        )
        sp = S.array(rng, (4, 16), _F32, special=True)
        yield Sample({"x": sp, "groupIndexOptional": None, "dim": 0, "interleaved": True} | base, "NaN / Inf, dim 0")
        yield Sample(
            {"x": S.array(rng, (0, 8), _F16), "groupIndexOptional": None, "dim": -1, "interleaved": False} | base,
            "empty",
        )

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4, 6), _F16)
        base = {"x": x, "groupIndexOptional": None, "dim": -1, "alpha": 1.7, "limit": 7.0, "bias": 1.0}
        yield ErrorSample({**base, "x": S.array(rng, (4, 5), _F16), "interleaved": False}, INVALID, "odd split dim")
        yield ErrorSample({**base, "dim": 2, "interleaved": False}, INVALID, "dim out of range")
        yield ErrorSample({**base, "interleaved": False, "out": np.zeros((4, 3), np.float32)}, INVALID, "out dtype")
        yield ErrorSample(
            {**base, "groupIndexOptional": np.array([1], np.int32), "interleaved": True}, INVALID, "int32 groupIndex"
        )
        yield ErrorSample(
            {**base, "groupIndexOptional": np.zeros(0, np.int64), "interleaved": True}, INVALID, "empty groupIndex"
        )

    return OpSpec(
        "ClippedSwiglu",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="A = min(A, limit), B = clamp(B, ±limit); out = A·sigmoid(alpha·A)·(B + bias) over dim's halves",
    )


# ----------------------------------------------------------------------------- DequantSwigluQuant(V2)
SWIGLU_DST = {2: _I8, 34: HIF8, 35: E5M2, 36: E4M3, 40: FP4, 41: E1M2}
SWIGLU_ROUND = ("rint", "round", "floor", "ceil", "trunc")


def group_param_rows(t: AclTensor | None, groups: int) -> str:
    """How a DequantSwigluQuant parameter resolves per group (the golden's rule): 'row', 'group' or 'whole'."""
    if t is None:
        return "whole"
    if t.rank == 2:
        return "row"
    return "group" if t.shape[0] == groups else "whole"


def _param_width(t: AclTensor, name: str, widths: Sequence[int], groups: int) -> None:
    """A per-column / per-group parameter's shape: [w] or [rows, w] with w in ``widths``, rows 1 or groups."""
    if t.rank == 2:
        if t.shape[0] not in (1, groups) or t.shape[1] not in widths:
            raise invalid(f"{name} {list(t.shape)} must be [1 or {groups}, {' or '.join(map(str, widths))}]")
        return
    if t.shape[0] not in (*widths, groups):
        raise invalid(f"{name} has {t.shape[0]} elements; expected {' or '.join(map(str, (*widths, groups)))}")


def _dequant_swiglu_quant_v2() -> OpSpec:
    params = (
        tensor("x", {_F16, _BF16, _I32}, min_rank=2),
        tensor("weightScaleOptional", {_F32}, optional=True, min_rank=1, max_rank=2),
        tensor("activationScaleOptional", {_F32}, optional=True, min_rank=1, max_rank=8),
        tensor("biasOptional", {_F32, _F16, _BF16, _I32}, optional=True, min_rank=1, max_rank=2),
        tensor("quantScaleOptional", {_F32}, optional=True, min_rank=1, max_rank=2),
        tensor("quantOffsetOptional", {_F32}, optional=True, min_rank=1, max_rank=2),
        tensor("groupIndexOptional", {_I64}, optional=True, min_rank=1, max_rank=2),
        bool_attr("activateLeft"),
        string_attr("quantModeOptional", choices=("static", "dynamic"), optional=True),
        int_attr("dstType", choices=tuple(SWIGLU_DST)),
        string_attr("roundModeOptional", choices=SWIGLU_ROUND, optional=True),
        int_attr("activateDim"),
        int_attr("swigluMode", choices=(0, 1, 2, 3)),
        float_attr("clampLimit"),
        float_attr("gluAlpha"),
        float_attr("gluBias"),
        out("yOut", set(SWIGLU_DST.values()), c_type="const aclTensor*"),
        out("scaleOut", {_F32}, c_type="const aclTensor*"),
    )

    def infer(call: Call) -> Infos:
        x = tensor_arg(call, "x")
        ws, act, bias = (_opt(call, n) for n in ("weightScaleOptional", "activationScaleOptional", "biasOptional"))
        qs, qo, group = (_opt(call, n) for n in ("quantScaleOptional", "quantOffsetOptional", "groupIndexOptional"))
        _no_empty(("x", x), ("weightScaleOptional", ws), ("activationScaleOptional", act), ("biasOptional", bias))
        _no_empty(("quantScaleOptional", qs), ("quantOffsetOptional", qo), ("groupIndexOptional", group))
        dim = normalize_dim(int(call.args["activateDim"]), x.rank, "activateDim")
        if dim != x.rank - 1:
            raise invalid("activateDim other than x's last dim is not implemented in acl-core")
        width = x.shape[-1]
        if width % 2:
            raise invalid(f"x's last dim {width} must be even")
        half = width // 2
        dst = SWIGLU_DST[int(call.args["dstType"])]
        mode = call.args.get("roundModeOptional") or "rint"
        if dst == E1M2:
            raise invalid("dstType 41 (FLOAT4_E1M2) is not implemented in acl-core (no host type for E1M2 yet)")
        want = {HIF8: ("round",), FP4: ("rint",)}.get(dst, ("rint",))
        if mode not in want:
            raise invalid(f"roundModeOptional {mode!r} is not supported for {dst.short} here; {list(want)}")
        if dst == FP4 and half % 2:
            raise invalid(f"a FLOAT4_E2M1 yOut needs an even last dim, not {half}")
        swiglu = int(call.args["swigluMode"])
        if swiglu == 1 and not call.args["activateLeft"]:
            raise invalid("swigluMode 1 needs activateLeft true")
        limit = float(call.args["clampLimit"])
        if swiglu and not 0.0 < limit < float("inf"):
            raise invalid(f"clampLimit={limit!r} must be in (0, inf)")
        if x.dtype == _I32:
            if ws is None:
                raise nullptr("weightScaleOptional is required for an int32 x")
        else:
            for name, t in (("weightScaleOptional", ws), ("activationScaleOptional", act), ("biasOptional", bias)):
                if t is not None:
                    raise invalid(f"{name} is for int32 x only; it must be null for {x.dtype.short} x")
        groups = 1
        if group is not None:
            if group.rank != 1:
                raise invalid("a 2-D groupIndexOptional ([groupNum, 2]) is not implemented in acl-core")
            groups = group.shape[0]
        rows = x.numel // width
        for name, t in (("weightScaleOptional", ws), ("biasOptional", bias)):
            if t is not None:
                _param_width(t, name, (width,), groups)
        if act is not None and tuple(act.shape) not in (tuple(x.shape[:-1]), (*x.shape[:-1], 1)):
            raise invalid(f"activationScaleOptional {list(act.shape)} must be x's leading dims {list(x.shape[:-1])}")
        dynamic = (call.args.get("quantModeOptional") or "static") == "dynamic"
        if not dynamic and qs is None:
            raise nullptr("quantScaleOptional is required in static mode")
        if dynamic and qo is not None:
            raise invalid("quantOffsetOptional must be null in dynamic mode")
        for name, t in (("quantScaleOptional", qs), ("quantOffsetOptional", qo)):
            if t is not None:
                _param_width(t, name, (1, half), groups)
        if qo is not None and qs is not None and tuple(qo.shape) != tuple(qs.shape):
            raise invalid("quantOffsetOptional must have quantScaleOptional's shape")
        call.plan.update(
            dst=dst,
            rows=rows,
            swiglu=swiglu,
            left=bool(call.args["activateLeft"]),
            mode="dynamic" if dynamic else "static",
            dst_max=DST_MAX[dst],
        )
        return {"yOut": same((*x.shape[:-1], half), dst), "scaleOut": same(x.shape[:-1], _F32)}

    return OpSpec(
        "DequantSwigluQuantV2",
        FAMILY,
        params,
        infer,
        samples=_dsq_samples,
        error_samples=_dsq_errors,
        summary="dequantise (int32 GEMM output), SwiGLU (or its clipped variants), quantise (static or dynamic)",
    )


_DSQ_NEUTRAL = {
    "dstType": 2,
    "roundModeOptional": None,
    "activateDim": -1,
    "swigluMode": 0,
    "clampLimit": 7.0,
    "gluAlpha": 1.702,
    "gluBias": 1.0,
}


def _dsq_case(rng: np.random.Generator, dt: D, shape: Sequence[int], **extra: Any) -> dict[str, Any]:
    width = shape[-1]
    args: dict[str, Any] = {
        "x": S.array(rng, shape, dt, low=-300 if dt == _I32 else -4, high=300 if dt == _I32 else 4),
        "weightScaleOptional": S.array(rng, (width,), _F32, low=1e-3, high=2e-2) if dt == _I32 else None,
        "activationScaleOptional": None,
        "biasOptional": None,
        "quantScaleOptional": S.array(rng, (1,), _F32, low=0.02, high=0.05),
        "quantOffsetOptional": S.array(rng, (1,), _F32, low=-2, high=2),
        "groupIndexOptional": None,
        "activateLeft": True,
        "quantModeOptional": "static",
    }
    return {**args, **_DSQ_NEUTRAL, **extra}


def _dsq_samples(rng: np.random.Generator) -> Iterable[Sample]:
    yield Sample(_dsq_case(rng, _I32, (4, 64)), "int32 x, static per-tensor")
    lead = (3, 2)
    act = S.array(rng, lead, _F32, low=0.5, high=1.5)
    for bias_dt in (_I32, _F32, _F16, _BF16):
        case = _dsq_case(rng, _I32, (*lead, 32), activationScaleOptional=act, quantModeOptional="dynamic")
        case |= {"biasOptional": S.array(rng, (32,), bias_dt, low=-50, high=50), "quantOffsetOptional": None}
        case["quantScaleOptional"] = S.array(rng, (16,), _F32, low=0.5, high=2)
        yield Sample(case, f"int32 x, {bias_dt.short} bias, activation scale, dynamic smoothed")
    for dt in (_F16, _BF16):
        yield Sample(
            _dsq_case(rng, dt, (5, 48), activateLeft=False, quantModeOptional=None), f"{dt.short} x, right half"
        )
    counts = np.array([3, 0, 4], np.int64)
    case = _dsq_case(rng, _I32, (9, 32), groupIndexOptional=counts, quantModeOptional="dynamic")
    case |= {"weightScaleOptional": S.array(rng, (3, 32), _F32, low=1e-3, high=1e-2), "quantOffsetOptional": None}
    case |= {"quantScaleOptional": S.array(rng, (3, 16), _F32, low=0.5, high=2)}
    case |= {"activationScaleOptional": S.array(rng, (9, 1), _F32, low=0.5, high=1.5)}
    yield Sample(case, "groups of 3, 0, 4 rows of 9 (two left over), per-group scales, dynamic")
    case = _dsq_case(rng, _I32, (6, 32), groupIndexOptional=np.array([2, 4], np.int64))
    case |= {"quantScaleOptional": np.array([0.03, 0.05], np.float32), "quantOffsetOptional": np.zeros(2, np.float32)}
    yield Sample(case, "static per-group scalars")
    for swiglu in (1, 2, 3):
        yield Sample(
            _dsq_case(rng, _BF16, (4, 32), swigluMode=swiglu, quantModeOptional="dynamic", quantOffsetOptional=None)
            | {"clampLimit": 2.0, "gluAlpha": 1.5, "gluBias": 0.5, "quantScaleOptional": None},
            f"swigluMode {swiglu}",
        )
    for code in (35, 36):
        yield Sample(
            _dsq_case(rng, _F16, (3, 64), dstType=code, quantModeOptional="dynamic", quantOffsetOptional=None)
            | {"quantScaleOptional": None},
            f"dynamic to {D(code).short}",
        )
    big = _dsq_case(rng, _F16, (2, 32), dstType=36)
    big["quantScaleOptional"] = np.array([1e-3], np.float32)
    yield Sample(big, "static to float8_e4m3fn overflowing (NaN)")
    zero = _dsq_case(rng, _F16, (2, 16), quantModeOptional="dynamic", quantOffsetOptional=None)
    zero["x"][0] = 0
    yield Sample(zero | {"quantScaleOptional": None}, "dynamic with an all-zero row (scale 1)")
    fp4 = _dsq_case(rng, _BF16, (2, 64), dstType=40, quantModeOptional="dynamic", quantOffsetOptional=None)
    yield Sample(fp4 | {"quantScaleOptional": None}, "dynamic to float4_e2m1")


def _dsq_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = _dsq_case(rng, _I32, (4, 32))
    yield ErrorSample({**good, "weightScaleOptional": None}, NULLPTR, "int32 x without weightScale")
    yield ErrorSample({**good, "quantScaleOptional": None}, NULLPTR, "static without quantScale")
    yield ErrorSample({**good, "x": S.array(rng, (4, 31), _I32)}, INVALID, "odd last dim")
    yield ErrorSample({**good, "activateDim": 0}, INVALID, "activateDim not last")
    yield ErrorSample({**good, "dstType": 41}, INVALID, "float4_e1m2")
    yield ErrorSample({**good, "dstType": 36, "roundModeOptional": "floor"}, INVALID, "fp8 with floor")
    yield ErrorSample({**good, "swigluMode": 1, "activateLeft": False}, INVALID, "swigluMode 1, right half")
    yield ErrorSample({**good, "swigluMode": 2, "clampLimit": -1.0}, INVALID, "negative clampLimit")
    f16 = _dsq_case(rng, _F16, (4, 32))
    yield ErrorSample({**f16, "weightScaleOptional": np.ones(32, np.float32)}, INVALID, "weightScale with f16 x")
    yield ErrorSample({**good, "quantModeOptional": "dynamic"}, INVALID, "quantOffset in dynamic mode")
    yield ErrorSample({**good, "weightScaleOptional": np.ones(16, np.float32)}, INVALID, "weightScale width")


_DSQ_V2 = _dequant_swiglu_quant_v2()


def _dsq_v1_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A V2 case V1 can take: every added parameter neutral."""
    if any(args.get(k, v) != v for k, v in _DSQ_NEUTRAL.items() if k != "roundModeOptional"):
        return None
    if args.get("roundModeOptional") not in (None, "rint"):
        return None
    return {k: v for k, v in args.items() if k not in _DSQ_NEUTRAL}


_DSQ_V1 = version_of(
    _DSQ_V2,
    "DequantSwigluQuant",
    (
        *(n for n in _DSQ_V2.param_names[:6]),
        tensor("groupIndexOptional", {_I32, _I64}, optional=True, min_rank=1, max_rank=2),
        "activateLeft",
        "quantModeOptional",
        out("yOut", {_I8}, c_type="const aclTensor*"),
        "scaleOut",
    ),
    fixed=dict(_DSQ_NEUTRAL),
    adapt=_dsq_v1_case,
    summary="DequantSwigluQuantV2 with INT8 output, SwiGLU mode 0 and the last dim activated",
)


# ----------------------------------------------------------------------------- (Add)RmsNormDynamicMxQuant
MX_DST = {35: E5M2, 36: E4M3, 40: FP4, 41: E1M2}
MX_BLOCK = 32


def mx_norm_scale_shape(shape: Sequence[int]) -> Shape:
    """mxscaleOut's shape: x's with the last dim -> ceil(ceil(n / 32) / 2), plus a trailing 2."""
    blocks = -(-shape[-1] // MX_BLOCK)
    return (*shape[:-1], -(-blocks // 2), 2)


def _mx_norm_infer(call: Call, add: bool) -> Infos:
    x = tensor_arg(call, "x1" if add else "x")
    gamma, beta = tensor_arg(call, "gamma"), _opt(call, "beta")
    alg = int(call.args["scaleAlg"])
    if alg not in (0, 1):
        raise _inner(f"scaleAlg={alg} must be 0 or 1")
    code = int(call.args["dstType"])
    if code not in MX_DST:
        raise _inner(f"dstType={code} must be one of {list(MX_DST)}")
    dst = MX_DST[code]
    mode = call.args.get("roundMode")
    if mode is None:
        raise nullptr("roundMode is null; it must be given")
    if mode not in ("rint", "floor", "round"):
        raise _inner(f"roundMode {mode!r} must be one of rint, floor, round")
    if dst == E1M2:
        raise invalid("dstType 41 (FLOAT4_E1M2) is not implemented in acl-core (no host type for E1M2 yet)")
    if dst in FP8 and mode != "rint":
        raise _inner(f"roundMode {mode!r} is not supported for {dst.short}; only 'rint'")
    if dst == FP4 and (alg != 0 or x.shape[-1] % 2):
        raise _inner("FLOAT4 output needs scaleAlg 0 and an even last dim of x")
    if add:
        x2 = tensor_arg(call, "x2")
        if tuple(x2.shape) != tuple(x.shape) or x2.dtype != x.dtype:
            raise _inner(f"x2 ({x2.dtype.short} {list(x2.shape)}) must have x1's dtype and shape")
    if gamma.rank != 1 or gamma.shape[0] != x.shape[-1]:
        raise _inner(f"gamma {list(gamma.shape)} must be 1-D of x's last dim {x.shape[-1]}")
    if gamma.dtype not in (x.dtype, _F32):
        raise _inner(f"gamma has dtype {gamma.dtype.short}; it must be x's {x.dtype.short} or float32")
    if beta is not None and (tuple(beta.shape) != tuple(gamma.shape) or beta.dtype != gamma.dtype):
        raise _inner("beta must have gamma's shape and dtype")
    want_rstd = bool(call.args["outputRstd"])
    if want_rstd and call.outputs_required and _opt(call, "rstdOut") is None:
        raise nullptr("rstdOut is null while outputRstd is true")
    call.plan.update(dst=dst, mode=mode, alg=alg, axes=(x.rank - 1,))
    infos: dict[str, Any] = {
        "yOut": same(x.shape, dst),
        "mxscaleOut": same(mx_norm_scale_shape(x.shape), E8M0),
        "rstdOut": same((*x.shape[:-1], 1), _F32) if want_rstd else None,
    }
    if add:
        infos["xOut"] = same(x.shape, x.dtype)
    return infos


def _mx_norm_case(rng: np.random.Generator, dt: D, shape: Sequence[int], add: bool, **extra: Any) -> dict[str, Any]:
    n = shape[-1]
    gdt = extra.pop("gamma_dtype", dt)
    xs = {"x1": S.array(rng, shape, dt), "x2": S.array(rng, shape, dt)} if add else {"x": S.array(rng, shape, dt)}
    args: dict[str, Any] = {
        **xs,
        "gamma": S.array(rng, (n,), gdt, low=0.5, high=1.5),
        "beta": None,
        "epsilon": 1e-6,
        "scaleAlg": 0,
        "roundMode": "rint",
        "dstType": 36,
        "outputRstd": True,
    }
    return {**args, **extra}


def _mx_norm_samples(add: bool) -> Any:
    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (_F16, _BF16):
            for code in (36, 35, 40):
                yield Sample(_mx_norm_case(rng, dt, (3, 96), add, dstType=code), f"{dt.short} to {D(code).short}")
            yield Sample(
                _mx_norm_case(rng, dt, (2, 3, 80), add, gamma_dtype=_F32, scaleAlg=1)
                | {"beta": S.array(rng, (80,), _F32)},
                f"{dt.short} with float32 gamma and beta, scaleAlg 1, a tail block",
            )
        for mode in ("floor", "round"):
            yield Sample(_mx_norm_case(rng, _F16, (2, 64), add, dstType=40, roundMode=mode), f"fp4 {mode}")
        yield Sample(_mx_norm_case(rng, _BF16, (4, 200), add, outputRstd=False), "outputRstd false")
        special = _mx_norm_case(rng, _F16, (3, 64), add)
        key = "x1" if add else "x"
        special[key][0, 3] = np.inf
        special[key][1, 40] = np.nan
        yield Sample(special, "rows with Inf and NaN (their blocks' elements are 0)")
        yield Sample(_mx_norm_case(rng, _BF16, (0, 64), add), "empty batch")
        yield Sample(_mx_norm_case(rng, _F16, (70,), add, dstType=35), "1-D x (one row)")

    return gen


def _mx_norm_errors(add: bool) -> Any:
    def gen(rng: np.random.Generator) -> Iterable[ErrorSample]:
        good = _mx_norm_case(rng, _F16, (2, 64), add)
        yield ErrorSample({**good, "scaleAlg": 2}, INNER_NULLPTR, "scaleAlg 2")
        yield ErrorSample({**good, "roundMode": "floor"}, INNER_NULLPTR, "fp8 with floor")
        yield ErrorSample({**good, "dstType": 40, "scaleAlg": 1}, INNER_NULLPTR, "fp4 with scaleAlg 1")
        yield ErrorSample({**good, "gamma": np.ones(32, np.float16)}, INNER_NULLPTR, "gamma size")
        yield ErrorSample({**good, "beta": np.ones(64, np.float32)}, INNER_NULLPTR, "beta dtype")
        yield ErrorSample({**good, "dstType": 2}, INNER_NULLPTR, "dstType int8")
        yield ErrorSample({**good, "dstType": 41}, INVALID, "float4_e1m2")
        yield ErrorSample({**good, "roundMode": None}, NULLPTR, "null roundMode")
        if add:
            yield ErrorSample({**good, "x2": S.array(rng, (2, 32), _F16)}, INNER_NULLPTR, "x2 shape")

    return gen


def _mx_norm(add: bool) -> OpSpec:
    inputs = (
        (tensor("x1", HALF, min_rank=1, max_rank=7), tensor("x2", HALF, min_rank=1, max_rank=7))
        if add
        else (tensor("x", HALF, min_rank=1, max_rank=7),)
    )
    params = (
        *inputs,
        tensor("gamma", {_F16, _BF16, _F32}, min_rank=1, max_rank=1),
        tensor("beta", {_F16, _BF16, _F32}, optional=True, min_rank=1, max_rank=1),
        float_attr("epsilon"),
        int_attr("scaleAlg"),
        string_attr("roundMode", optional=True),
        int_attr("dstType"),
        bool_attr("outputRstd"),
        out("yOut", {E5M2, E4M3, FP4, E1M2}),
        *((out("xOut", HALF),) if add else ()),
        out("mxscaleOut", {E8M0}),
        out("rstdOut", {_F32}, optional=True),
    )
    name = "AddRmsNormDynamicMxQuant" if add else "RmsNormDynamicMxQuant"
    summary = "x = x1 + x2; " if add else ""
    return OpSpec(
        name,
        "norm",
        params,
        lambda call: _mx_norm_infer(call, add),
        samples=_mx_norm_samples(add),
        error_samples=_mx_norm_errors(add),
        summary=summary + "y = RmsNorm(x)·gamma + beta; MX quantisation of y in blocks of 32 along the last dim",
    )


# ----------------------------------------------------------------------------- FlatQuant
def _flat_quant() -> OpSpec:
    params = (
        tensor("x", HALF, min_rank=3, max_rank=3),
        tensor("kroneckerP1", HALF, min_rank=2, max_rank=2),
        tensor("kroneckerP2", HALF, min_rank=2, max_rank=2),
        float_attr("clipRatio"),
        out("out", {D.ACL_INT4, _I32, FP4}),
        out("quantScale", {_F32, E8M0}),
    )

    def infer(call: Call) -> Infos:
        x, p1, p2 = (tensor_arg(call, n) for n in ("x", "kroneckerP1", "kroneckerP2"))
        _no_empty(("x", x), ("kroneckerP1", p1), ("kroneckerP2", p2))
        m, n1, n2 = x.shape
        if not (1 <= m <= 262144 and 1 <= n1 <= 256 and 1 <= n2 <= 256):
            raise invalid(f"x {list(x.shape)} must have M in [1, 262144] and N1, N2 in [1, 256]")
        for label, p in (("kroneckerP1", p1), ("kroneckerP2", p2)):
            if p.dtype != x.dtype:
                raise invalid(f"{label} has dtype {p.dtype.short}; it must be x's {x.dtype.short}")
        if tuple(p1.shape) != (n1, n1):
            raise invalid(f"kroneckerP1 {list(p1.shape)} must be [{n1}, {n1}]")
        if tuple(p2.shape) != (n2, n2):
            raise invalid(f"kroneckerP2 {list(p2.shape)} must be [{n2}, {n2}]")
        clip = float(call.args["clipRatio"])
        if not 0.0 < clip <= 1.0:
            raise invalid(f"clipRatio={clip!r} must be in (0, 1]")
        out_t = _opt(call, "out")
        dst = out_t.dtype if out_t is not None else _I32
        if dst == FP4:
            raise invalid("the per-group FLOAT4_E2M1 mode of FlatQuant is not implemented in acl-core")
        if dst == _I32:
            if n2 % 8:
                raise invalid(f"INT32 out (packed INT4) needs N2 a multiple of 8, not {n2}")
            shape: Shape = (m, n1, n2 // 8)
        else:
            if n2 % 2:
                raise invalid(f"INT4 out needs an even N2, not {n2}")
            shape = (m, n1, n2)
        call.plan.update(dst=dst, dst_max=7.0 / clip)
        return {"out": same(shape, dst), "quantScale": same((m,), _F32)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        for dt in (_F16, _BF16):
            x = S.array(rng, (5, 8, 16), dt, low=-3, high=3)
            p1 = S.array(rng, (8, 8), dt, low=-1, high=1)
            p2 = S.array(rng, (16, 16), dt, low=-1, high=1)
            yield Sample({"x": x, "kroneckerP1": p1, "kroneckerP2": p2, "clipRatio": 1.0}, f"{dt.short} to int32")
            yield Sample(
                {"x": x, "kroneckerP1": p1, "kroneckerP2": p2, "clipRatio": 0.75, "out": np.zeros(x.shape, "int4")}
                | {"quantScale": np.zeros(5, np.float32)},
                f"{dt.short} to int4, clipRatio 0.75",
            )
        x = S.array(rng, (3, 3, 24), _F16, low=-2, high=2)
        x[1] = 0
        p1 = np.eye(3, dtype=np.float16)
        p2 = S.array(rng, (24, 24), _F16, low=-0.5, high=0.5)
        yield Sample({"x": x, "kroneckerP1": p1, "kroneckerP2": p2, "clipRatio": 0.5}, "a zero slice, identity P1")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (2, 4, 8), _F16)
        base = {"x": x, "kroneckerP1": S.array(rng, (4, 4), _F16), "kroneckerP2": S.array(rng, (8, 8), _F16)}
        yield ErrorSample({**base, "clipRatio": 0.0}, INVALID, "clipRatio 0")
        yield ErrorSample({**base, "clipRatio": 1.0, "kroneckerP1": S.array(rng, (8, 8), _F16)}, INVALID, "P1 shape")
        yield ErrorSample({**base, "clipRatio": 1.0, "kroneckerP2": S.array(rng, (8, 8), _BF16)}, INVALID, "P2 dtype")
        yield ErrorSample(
            {**base, "clipRatio": 1.0, "out": np.zeros((2, 4, 4), np.uint8).view(ml_dtypes.float4_e2m1fn)}
            | {"quantScale": np.zeros((2, 1, 2), np.uint8).view(ml_dtypes.float8_e8m0fnu)},
            INVALID,
            "float4 per-group mode",
        )
        x6 = S.array(rng, (2, 4, 6), _F16)
        yield ErrorSample(
            {**base, "x": x6, "kroneckerP2": S.array(rng, (6, 6), _F16), "clipRatio": 1.0}, INVALID, "N2 % 8 for int32"
        )

    return OpSpec(
        "FlatQuant",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        summary="x'' = P1 @ x[m] @ P2; quantScale[m] = max|x''[m]| / (7 / clipRatio); out = int4(round(x'' / scale))",
    )


# ----------------------------------------------------------------------------- registry and accuracy
def _flat_length(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> int:
    """FlatQuant's reduction length: N2 + N1 products summed, plus the max and the division."""
    shape = tuple(getattr(args.get("x"), "shape", (1, 1, 1)))
    return int(shape[-1] + shape[-2] + 2) if len(shape) == 3 else 1


ACCURACY: dict[str, Accuracy] = {
    "Quantize": ulp(
        1,
        reason="x / scales + zeroPoints in float32 (two roundings), then one rounding into the output format;"
        " integer outputs compare exactly",
    ),
    "TransQuantParamV2": exact("bit packing: integer outputs"),
    "DynamicBlockQuantV2": ulp(
        1,
        reason="scale = amax / dtypeMax and x / scale, one float32 rounding each, then one rounding into the"
        " 8-bit output; integer outputs compare exactly",
    ),
    "ClippedSwiglu": ulp(
        8,
        reason="A·sigmoid(alpha·A)·(B + bias): a Silu-like 5 ulp, the add and one product; alpha·A must be formed"
        " wider than float32 (its float32 rounding reaches exp amplified by |alpha·A|)",
    ),
    "DequantSwigluQuantV2": ulp(
        8,
        reason="the dequantisation's float32 products, a SwiGLU (Silu's 5 ulp and a product) rounded to float32, then"
        " float32 quantisation; integer outputs compare exactly",
    ),
    "RmsNormDynamicMxQuant": composite(steps=9, length_of=trailing_elements("gamma")),
    "AddRmsNormDynamicMxQuant": composite(steps=9, length_of=trailing_elements("gamma")),
    "FlatQuant": reduction(
        length_of=_flat_length,
        reason="two matrix products (N2 then N1 terms) accumulated wide, then the row maximum and one division in"
        " float32 for quantScale; the INT4 outputs compare exactly",
    ),
}
"""Accuracy classes (the V1 forms take their V2's)."""

SPECS: list[OpSpec] = with_accuracy(
    [
        _quantize(),
        _trans_quant_param_v2(),
        _BLOCK_V2,
        _BLOCK_V1,
        _clipped_swiglu(),
        _DSQ_V2,
        _DSQ_V1,
        _mx_norm(add=False),
        _mx_norm(add=True),
        _flat_quant(),
    ],
    ACCURACY,
)
