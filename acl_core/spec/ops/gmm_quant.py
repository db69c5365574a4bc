"""Grouped quantised GEMMs vllm-ascend reaches (issue 16): GroupedMatmulSwigluQuantV2 and its FRACTAL_NZ
forms GroupedMatmulSwigluQuantWeightNZ / WeightNzV2, and QuantGroupedMatmulDequant(WeightNZ).

Semantics follow ops-transformer's documents of each operator (``gmm/grouped_matmul_swiglu_quant*`` and
``gmm/quant_grouped_matmul_dequant``). The GEMMs multiply INT8 by INT8 into an exact integer sum (the
documents' Z_32 intermediate; K < 65536 keeps it inside int32). What follows the GEMM is FLOAT32
arithmetic, each operation rounded once, in the order the formulas write it; where a transcendental
function feeds an integer output (SwiGLU's sigmoid) it is computed in float64 and rounded once to
FLOAT32 before the quantisation, as DequantSwigluQuant does (:mod:`.quant_vllm`), so a backend doing
the same agrees on every integer output. Choices where the documents are silent are marked *choice*.

* **GroupedMatmulSwigluQuantV2** (the A8W8 / per-token INT8 scenario): x INT8 [M, K], weight INT8
  (one [E, K, N] tensor, or E tensors [K, N]) in ND or FRACTAL_NZ, weightScale FLOAT / FLOAT16 /
  BFLOAT16 per channel (one [E, N], or E of [N]), xScale FLOAT [M], groupList INT64 [E] (groupListType
  0 cumulative ends, 1 counts). Row r of group i: ``C = float32(x[r] · W_i) * w_scale[i] * x_scale[r]``
  (left to right, the scales converted to FLOAT32 first, exactly), ``S = silu(C[:N/2]) * C[N/2:]``
  in float64 rounded once to FLOAT32, ``outputScale[r] = max|S| / 127`` and ``output[r] =
  round(S / outputScale[r])`` (half to even, saturated). *choice*: a row whose S is all zero gets
  outputScale 1 and output 0, as DequantSwigluQuant (the same epilogue) does. *choice*: rows past the
  groups' end (CANN leaves them as they were) are written with 0, output and outputScale.
  ``dequantDtype`` 0 and 28 (FLOAT / undefined: a FLOAT32 intermediate) are implemented; 1 and 27 (a
  FLOAT16 / BFLOAT16 intermediate, Ascend 950) are refused with 161002, as are dequantMode 1 and 2
  (per-group weight scales, MX), quantMode 1 and 2, ``weightAssistMatrix`` (A8W4), ``smoothScale``
  (A4W4) and ``bias`` (reserved). Not declared dtypes (refused with 161002 by the validator): INT4 /
  INT32-packed / FLOAT8 / HIFLOAT8 / FLOAT4 operands and their UINT64 / FLOAT8_E8M0 scales (the A8W4,
  A4W4, MX and FP8 per-token scenarios). As the A2/A3 rules say: N even and at most 10240, K below
  65536, K and N not empty, a transposed NZ weight view refused; *choice*: M = 0 is accepted (Ascend
  950 accepts it), groupList must hold exactly E entries, tuningConfig (a tiling hint) is accepted
  when null, empty, or its first value lies in [0, M].
* **GroupedMatmulSwigluQuantWeightNzV2**: V2 with every weight in FRACTAL_NZ.
* **GroupedMatmulSwigluQuantWeightNZ** (V1): one NZ weight tensor [E, K, N], weightScale one [E, N]
  tensor, cumulative groupList; its ``bias`` is the A8W4 weightAssistMatrix and must be null (A8W8),
  ``offset`` and ``outputOffset`` are reserved and must be null.
* **QuantGroupedMatmulDequant** (Atlas inference products): x FLOAT16 [m, k]; with
  ``smoothScaleOptional`` (FLOAT16 [k]) x = x * smooth, the product kept in FLOAT32 (*choice*, exact:
  a float16 product fits a float32); ``scale_x`` is ``xScaleOptional`` (FLOAT32 or FLOAT16, [1] for
  pertensor, [m] for pertoken) or, when null, per row ``max|x| / 127`` (dynamic, pertoken only;
  a zero row gets scale 0 and quantises to 0, as DynamicQuant); ``x_q = round(x / scale_x)`` (half to
  even, saturated to INT8, NaN to 0). weight INT8 [g, n, k] (``transposeWeight`` true, the only value
  documented as supported; false is refused with 161002) in ND or FRACTAL_NZ; groupList INT64 [g]
  cumulative row ends. Group i: ``out = float32(x_q · weight_i^T) * weightScale[i] * scale_x``
  (FLOAT32 weightScale [g, n]) or ``* weightScale[i]`` alone (INT64 weightScale: a FLOAT32 in the low
  32 bits, pre-multiplied by a FLOAT16 pertensor xScale, as documented), rounded once to FLOAT16.
  *choice*: rows past the last group are written with 0 (CANN does not write them; a defined value keeps
  backends comparable, as GroupedMatmulSwigluQuant's rows past the end). n and k must be
  multiples of 16 (161002); shape mismatches are 561002, the documents' code; ``biasOptional`` and
  ``xOffsetOptional`` (documented as null only) are refused when given.
* **QuantGroupedMatmulDequantWeightNZ**: the same with the weight in FRACTAL_NZ.

The values of a device ``groupList`` are checked when the operator runs (non-negative, non-decreasing
when cumulative, within M), raising 161002 at synchronisation, as GroupedMatmulV5's are; nothing is
written then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.formats import PLAIN_FORMATS
from acl_core.nz import NZ_FORMATS, NzArray, check_nz_tensor, is_nz, nz_transposed
from acl_core.spec import samples as S
from acl_core.spec.accuracy import Accuracy, ulp, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    int_array,
    int_attr,
    invalid,
    out,
    string_attr,
    tensor,
    tensor_list,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import same, tensor_arg
from acl_core.spec.version import Added, version_of
from acl_core.tensor import AclIntArray, AclTensor, AclTensorList

declare_plan(
    "gmm_quant",
    "dict[str, object]",
    "a grouped quantised GEMM's decoded call: groups, weight_split, list_type (and x_mode, packed for"
    " QuantGroupedMatmulDequant)",
    dict,
)

FAMILY = "gmm_quant"
Shape = tuple[int, ...]
_I8, _I32, _I64, _F32, _F16, _BF16 = D.ACL_INT8, D.ACL_INT32, D.ACL_INT64, D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16
WEIGHT_SCALES = frozenset({_F32, _F16, _BF16})
"""The A8W8 weightScale dtypes (converted to FLOAT32 exactly before use)."""
ND_OR_NZ = frozenset(PLAIN_FORMATS | NZ_FORMATS)
N_MAX = 10240
K_LIMIT = 65536
MAX_GROUPS = 1024
QUANT_MAX = 127.0
TILING = int(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR)
"""561002: the code QuantGroupedMatmulDequant's document gives for shape mismatches."""


def _tiling(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR, message)


def members(value: Any) -> tuple[AclTensor, ...]:
    """The tensors of a tensor-list argument (a plain tensor counts as a list of one; null: none)."""
    if isinstance(value, AclTensorList):
        return tuple(value.tensors)
    if isinstance(value, AclTensor):
        return (value,)
    if isinstance(value, tuple):
        return tuple(t for t in value if isinstance(t, AclTensor))
    return ()


def _check_nz(ws: Sequence[AclTensor], label: str) -> None:
    for i, w in enumerate(ws):
        if is_nz(w.format):
            check_nz_tensor(w, f"{label}[{i}]")
            if nz_transposed(w):
                raise invalid(f"{label}[{i}] is a transposed FRACTAL_NZ view; the A8W8 scenario takes it untransposed")


# ----------------------------------------------------------------------------- GroupedMatmulSwigluQuantV2
def _gmmsq_infer(call: Call) -> Infos:
    x = tensor_arg(call, "x")
    ws, scales = members(call.args.get("weight")), members(call.args.get("weightScale"))
    for name, why in (
        ("weightAssistMatrix", "belongs to the A8W4 scenario, which is not implemented"),
        ("bias", "is reserved and must be null"),
        ("smoothScale", "belongs to the A4W4 scenario, which is not implemented"),
    ):
        if call.args.get(name) is not None:
            raise invalid(f"{name} {why}")
    if int(call.args["dequantMode"]) != 0:
        raise invalid("dequantMode 1 (per-group weight scales) and 2 (MX) are not implemented; A8W8 takes 0")
    if int(call.args["quantMode"]) != 0:
        raise invalid("quantMode 1 (per-group) and 2 (MX) are not implemented; the per-token mode is 0")
    if int(call.args["dequantDtype"]) in (1, 27):
        raise invalid("dequantDtype 1 / 27 (a FLOAT16 / BFLOAT16 intermediate) is not implemented; use 0 or 28")
    if not ws or not scales:
        raise invalid("weight and weightScale must each hold at least one tensor")
    if len(ws) != len(scales):
        raise invalid(f"weight holds {len(ws)} tensors and weightScale {len(scales)}; they pair one to one")
    if len(ws) > MAX_GROUPS:
        raise invalid(f"weight holds {len(ws)} tensors; at most {MAX_GROUPS} groups are supported")
    m, k = x.shape
    split = not (len(ws) == 1 and ws[0].rank == 3)
    if split:
        for i, (w, s) in enumerate(zip(ws, scales)):
            if w.rank != 2:
                raise invalid(f"weight[{i}] must be 2-D [K, N] in a list of several tensors, not {list(w.shape)}")
            if s.rank != 1:
                raise invalid(f"weightScale[{i}] must be 1-D [N], not {list(s.shape)}")
        groups, n = len(ws), ws[0].shape[1]
        shapes = [(tuple(w.shape), tuple(s.shape)) for w, s in zip(ws, scales)]
        if any(shape != ((k, n), (n,)) for shape in shapes):
            raise invalid(f"every weight must be [K={k}, N={n}] and every weightScale [{n}]; got {shapes}")
    else:
        groups, kw, n = ws[0].shape
        if kw != k:
            raise invalid(f"inner dimensions disagree: x {list(x.shape)}, weight[0] {list(ws[0].shape)}")
        if tuple(scales[0].shape) != (groups, n):
            raise invalid(f"weightScale[0] must be [E, N] = [{groups}, {n}], not {list(scales[0].shape)}")
    _check_nz(ws, "weight")
    if groups > MAX_GROUPS:
        raise invalid(f"{groups} groups exceed the limit of {MAX_GROUPS}")
    if n % 2 or n == 0 or n > N_MAX:
        raise invalid(f"N={n} must be even, non-zero and at most {N_MAX}")
    if k == 0 or k >= K_LIMIT:
        raise invalid(f"K={k} must be non-zero and below {K_LIMIT}")
    xs = tensor_arg(call, "xScale")
    if tuple(xs.shape) != (m,):
        raise invalid(f"xScale must be [M] = [{m}], not {list(xs.shape)}")
    gl = tensor_arg(call, "groupList")
    if tuple(gl.shape) != (groups,):
        raise invalid(f"groupList must hold E = {groups} entries, not {list(gl.shape)}")
    tuning = call.args.get("tuningConfig")
    if isinstance(tuning, AclIntArray) and len(tuning) and not 0 <= tuning.values[0] <= m:
        raise invalid(f"tuningConfig[0]={tuning.values[0]} must lie in [0, {m}] (rows of x)")
    call.plan["gmm_quant"] = {"groups": groups, "weight_split": split, "list_type": int(call.args["groupListType"])}
    call.plan["rows"] = m
    return {"output": same((m, n // 2), _I8), "outputScale": same((m,), _F32)}


def _gmmsq_case(
    rng: np.random.Generator,
    m: int,
    k: int,
    n: int,
    counts: Sequence[int],
    *,
    scale_dtype: D = _F32,
    split: bool = False,
    nz: bool = False,
    list_type: int = 0,
    **extra: Any,
) -> dict[str, Any]:
    """A V2 call: INT8 operands over the whole range, scales that keep C of order 1 (SiLU's curved part)."""
    groups = len(counts)
    x = rng.integers(-127, 128, (m, k)).astype(np.int8)
    w = rng.integers(-127, 128, (groups, k, n)).astype(np.int8)
    wscale = S.array(rng, (groups, n), scale_dtype, low=0.5 / k, high=2.0 / k)
    weights: list[Any] = [NzArray(v) if nz else v for v in w] if split else [NzArray(w) if nz else w]
    scales = list(wscale) if split else [wscale]
    ends = np.cumsum(counts)
    return {
        "x": x,
        "weight": weights,
        "weightScale": scales,
        "weightAssistMatrix": None,
        "bias": None,
        "xScale": S.array(rng, (m,), _F32, low=1.0 / 128, high=4.0 / 128),
        "smoothScale": None,
        "groupList": np.asarray(ends if list_type == 0 else counts, np.int64),
        "dequantMode": 0,
        "dequantDtype": 28,
        "quantMode": 0,
        "groupListType": list_type,
        "tuningConfig": None,
        **extra,
    }


def _gmmsq_samples(rng: np.random.Generator) -> Iterable[Sample]:
    yield Sample(_gmmsq_case(rng, 11, 32, 16, [3, 0, 6]), "one [E, K, N] weight, cumulative, two rows past the end")
    yield Sample(
        _gmmsq_case(rng, 9, 48, 32, [4, 5], scale_dtype=_F16, nz=True, list_type=1, dequantDtype=0),
        "FRACTAL_NZ weight, float16 weightScale, counts",
    )
    yield Sample(
        _gmmsq_case(rng, 10, 32, 24, [2, 5, 3], scale_dtype=_BF16, split=True, list_type=1, tuningConfig=[3]),
        "three [K, N] weights, bfloat16 weightScales, counts",
    )
    yield Sample(
        _gmmsq_case(rng, 7, 32, 16, [3, 4], split=True, nz=True, tuningConfig=[]),
        "two FRACTAL_NZ [K, N] weights",
    )
    big = _gmmsq_case(rng, 70, 40, 144, [66, 4])
    yield Sample(big, "70 rows, N 144, K 40: partial GEMM tiles and a group across a tile edge")
    zero = _gmmsq_case(rng, 6, 32, 16, [6])
    zero["x"][2] = 0
    yield Sample(zero, "a zero row (outputScale 1)")
    yield Sample(_gmmsq_case(rng, 0, 32, 16, [0, 0]), "M = 0")


def _gmmsq_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = _gmmsq_case(rng, 6, 32, 16, [2, 4])
    yield ErrorSample({**good, "dequantMode": 1}, INVALID, "dequantMode 1 (per-group)")
    yield ErrorSample({**good, "quantMode": 2}, INVALID, "quantMode 2 (MX)")
    yield ErrorSample({**good, "dequantDtype": 27}, INVALID, "dequantDtype 27 (bfloat16 intermediate)")
    yield ErrorSample({**good, "dequantDtype": 5}, INVALID, "dequantDtype 5")
    yield ErrorSample({**good, "bias": np.ones(16, np.float32)}, INVALID, "bias (reserved)")
    yield ErrorSample({**good, "smoothScale": np.ones((2, 8), np.float32)}, INVALID, "smoothScale (A4W4)")
    yield ErrorSample({**good, "weightAssistMatrix": [np.ones((2, 16), np.float32)]}, INVALID, "weightAssistMatrix")
    yield ErrorSample({**good, "xScale": np.ones(5, np.float32)}, INVALID, "xScale of the wrong length")
    yield ErrorSample({**good, "groupList": np.array([6], np.int64)}, INVALID, "groupList shorter than E")
    yield ErrorSample({**good, "groupList": None}, NULLPTR, "null groupList")
    yield ErrorSample({**good, "xScale": None}, NULLPTR, "null xScale")
    yield ErrorSample({**good, "weightScale": [np.ones((2, 8), np.float32)]}, INVALID, "weightScale of the wrong N")
    odd = _gmmsq_case(rng, 4, 32, 15, [4])
    yield ErrorSample(odd, INVALID, "odd N")
    yield ErrorSample({**good, "x": good["x"][:, :16]}, INVALID, "K disagrees")
    wide = _gmmsq_case(rng, 1, 16, N_MAX + 2, [1])
    yield ErrorSample(wide, INVALID, f"N above {N_MAX}")
    split = _gmmsq_case(rng, 6, 32, 16, [2, 4], split=True)
    yield ErrorSample(
        {**split, "weightScale": split["weightScale"][:1]}, INVALID, "weight and weightScale lists differ"
    )
    yield ErrorSample({**good, "x": good["x"].astype(np.int32)}, INVALID, "int32 x")
    yield ErrorSample({**good, "weightScale": [np.ones((2, 16), np.uint64)]}, INVALID, "UINT64 weightScale (A8W4)")
    yield ErrorSample({**good, "tuningConfig": [7]}, INVALID, "tuningConfig beyond M")


def _gmmsq_v2() -> OpSpec:
    params = (
        tensor("x", {_I8}, min_rank=2, max_rank=2),
        replace(tensor_list("weight", {_I8}), formats=ND_OR_NZ),
        tensor_list("weightScale", WEIGHT_SCALES),
        tensor_list("weightAssistMatrix", {_F32}, optional=True),
        tensor("bias", None, optional=True),
        tensor("xScale", {_F32}, min_rank=1, max_rank=1),
        tensor("smoothScale", {_F32}, optional=True, max_rank=2),
        tensor("groupList", {_I64}, min_rank=1, max_rank=1, group_list_type="groupListType"),
        int_attr("dequantMode", choices=(0, 1, 2)),
        int_attr("dequantDtype", choices=(0, 1, 27, 28)),
        int_attr("quantMode", choices=(0, 1, 2)),
        int_attr("groupListType", choices=(0, 1)),
        int_array("tuningConfig", optional=True),
        out("output", {_I8}),
        out("outputScale", {_F32}),
    )
    return OpSpec(
        "GroupedMatmulSwigluQuantV2",
        FAMILY,
        params,
        _gmmsq_infer,
        samples=_gmmsq_samples,
        error_samples=_gmmsq_errors,
        summary="INT8 grouped GEMM, per-channel x per-token dequantisation, SwiGLU, dynamic per-row INT8 quantisation",
    )


_GMMSQ_V2 = _gmmsq_v2()


def _all_nz(value: Any) -> Any:
    if isinstance(value, list):
        return [v if isinstance(v, NzArray) else NzArray(v) for v in value]
    return value if isinstance(value, NzArray) else NzArray(value)


def _nz_v2_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A V2 case with every weight placed as FRACTAL_NZ."""
    return {**args, "weight": _all_nz(args["weight"])}


def _nz_v2_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    case = _gmmsq_case(rng, 6, 32, 16, [2, 4], nz=False)
    yield ErrorSample(case, INVALID, "weight in ND")


_GMMSQ_NZ_V2 = version_of(
    _GMMSQ_V2,
    "GroupedMatmulSwigluQuantWeightNzV2",
    (
        "x",
        replace(tensor_list("weight", {_I8}), formats=frozenset(NZ_FORMATS)),
        *_GMMSQ_V2.param_names[2:],
    ),
    adapt=_nz_v2_case,
    more_errors=_nz_v2_errors,
    summary="GroupedMatmulSwigluQuantV2 with every weight in FRACTAL_NZ",
)


def _nz_v1_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A V2 case V1 takes: one [E, K, N] weight (placed as NZ), one [E, N] weightScale, cumulative list."""
    ws, scales = args["weight"], args["weightScale"]
    if len(ws) != 1 or np.ndim(ws[0]) != 3 or len(scales) != 1:
        return None
    return {**args, "weight": _all_nz(ws[0]), "weightScale": scales[0], "offset": None, "outputOffset": None}


def _nz_v1_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    case = _gmmsq_case(rng, 6, 32, 16, [2, 4])
    base = {**case, "weight": NzArray(case["weight"][0]), "weightScale": case["weightScale"][0]}
    base = {k: v for k, v in base.items() if k not in ("weightAssistMatrix", "smoothScale", "dequantMode")}
    base = {k: v for k, v in base.items() if k not in ("dequantDtype", "quantMode", "groupListType", "tuningConfig")}
    base |= {"offset": None, "outputOffset": None}
    yield ErrorSample({**base, "weight": case["weight"][0]}, INVALID, "weight in ND")
    yield ErrorSample({**base, "bias": np.ones((2, 16), np.float32)}, INVALID, "bias (A8W4's weightAssistMatrix)")


_GMMSQ_NZ_V1 = version_of(
    _GMMSQ_V2,
    "GroupedMatmulSwigluQuantWeightNZ",
    (
        "x",
        tensor("weight", {_I8}, formats=NZ_FORMATS, min_rank=3, max_rank=3),
        tensor("bias", {_F32}, optional=True, max_rank=2),
        "offset",
        tensor("weightScale", WEIGHT_SCALES, min_rank=2, max_rank=2),
        "xScale",
        tensor("groupList", {_I64}, min_rank=1, max_rank=1),
        "output",
        "outputScale",
        "outputOffset",
    ),
    added={
        "offset": Added(tensor("offset", None, optional=True), "is reserved and must be null"),
        "outputOffset": Added(
            out("outputOffset", None, optional=True), "is reserved and must be null", refused=np.ones(2, np.float32)
        ),
    },
    rename={"bias": "weightAssistMatrix"},
    fixed={
        "bias": None,
        "smoothScale": None,
        "dequantMode": 0,
        "dequantDtype": 28,
        "quantMode": 0,
        "groupListType": 0,
        "tuningConfig": None,
    },
    as_list=("weight", "weightScale", "bias"),
    outputs=lambda call, infos: {**infos, "outputOffset": None},
    adapt=_nz_v1_case,
    more_errors=_nz_v1_errors,
    summary="GroupedMatmulSwigluQuantV2's A8W8 scenario with one FRACTAL_NZ weight tensor and a cumulative group list",
)


# ----------------------------------------------------------------------------- QuantGroupedMatmulDequant
def _qgmmd_infer(call: Call) -> Infos:
    x, w = tensor_arg(call, "x"), tensor_arg(call, "weight")
    ws, gl = tensor_arg(call, "weightScale"), tensor_arg(call, "groupList")
    xs, smooth = call.args.get("xScaleOptional"), call.args.get("smoothScaleOptional")
    for name in ("biasOptional", "xOffsetOptional"):
        if call.args.get(name) is not None:
            raise invalid(f"{name} must be null (the only value documented as supported)")
    if not call.args["transposeWeight"]:
        raise invalid("transposeWeight=false is not supported (documented: only true)")
    if x.numel == 0 or w.numel == 0:
        raise invalid("x and weight must not be empty")
    if is_nz(w.format):
        check_nz_tensor(w, "weight")
    m, k = x.shape
    groups, n, kw = w.shape
    if n % 16 or kw % 16:
        raise invalid(f"n ({n}) and k ({kw}) of weight must be multiples of 16")
    if kw != k:
        raise _tiling(f"weight [g, n, k] = {list(w.shape)} does not match x's k = {k}")
    if tuple(ws.shape) != (groups, n):
        raise _tiling(f"weightScale must be [g, n] = [{groups}, {n}], not {list(ws.shape)}")
    if tuple(gl.shape) != (groups,):
        raise _tiling(f"groupList must be [g] = [{groups}], not {list(gl.shape)}")
    if groups > MAX_GROUPS:
        raise invalid(f"{groups} groups exceed the limit of {MAX_GROUPS}")
    mode = str(call.args["xQuantMode"])
    packed = ws.dtype == _I64
    if not isinstance(xs, AclTensor):
        if mode != "pertoken":
            raise invalid("dynamic quantisation (xScaleOptional null) supports xQuantMode pertoken only")
        if packed:
            raise invalid("an INT64 weightScale needs a FLOAT16 pertensor xScaleOptional")
    else:
        want = (1,) if mode == "pertensor" else (m,)
        if tuple(xs.shape) != want:
            raise _tiling(f"xScaleOptional must be {list(want)} for {mode}, not {list(xs.shape)}")
        if packed != (xs.dtype == _F16) or (packed and mode != "pertensor"):
            raise invalid(
                "an INT64 weightScale goes with a FLOAT16 pertensor xScaleOptional, a FLOAT32 one with FLOAT32 xScale"
            )
    if isinstance(smooth, AclTensor) and tuple(smooth.shape) != (k,):
        raise _tiling(f"smoothScaleOptional must be [k] = [{k}], not {list(smooth.shape)}")
    call.plan["gmm_quant"] = {
        "groups": groups,
        "x_mode": "dynamic" if xs is None else mode,
        "packed": packed,
        "list_type": 0,
    }
    call.plan["rows"] = m
    return {"out": same((m, n), _F16)}


def qgmmd_case(
    rng: np.random.Generator,
    m: int,
    k: int,
    n: int,
    ends: Sequence[int],
    *,
    mode: str = "pertoken",
    x_scale: str | None = None,
    smooth: bool = False,
    nz: bool = False,
) -> dict[str, Any]:
    """x of order 1 (smoothed by about 1), scales that keep the float16 output of order 1."""
    groups = len(ends)
    w = rng.integers(-127, 128, (groups, n, k)).astype(np.int8)
    ws = rng.uniform(0.2 / k, 1.0 / k, (groups, n)).astype(np.float32)
    xs: np.ndarray | None = None
    if x_scale == "f32":
        xs = rng.uniform(0.01, 0.03, (1,) if mode == "pertensor" else (m,)).astype(np.float32)
    elif x_scale == "packed":
        xs = np.array([0.02], np.float16)
        ws = (ws * np.float32(xs[0])).astype(np.float32).view(np.int32).astype(np.int64)
    return {
        "x": S.array(rng, (m, k), _F16, low=-2, high=2),
        "weight": NzArray(w) if nz else w,
        "weightScale": ws,
        "groupList": np.asarray(ends, np.int64),
        "biasOptional": None,
        "xScaleOptional": xs,
        "xOffsetOptional": None,
        "smoothScaleOptional": S.array(rng, (k,), _F16, low=0.5, high=1.5) if smooth else None,
        "xQuantMode": mode,
        "transposeWeight": True,
    }


def _qgmmd_samples(rng: np.random.Generator) -> Iterable[Sample]:
    yield Sample(qgmmd_case(rng, 20, 32, 48, [5, 5, 17]), "dynamic pertoken, an empty group, three rows past the end")
    yield Sample(qgmmd_case(rng, 12, 48, 32, [7, 12], smooth=True, nz=True), "dynamic with smoothing, NZ weight")
    yield Sample(qgmmd_case(rng, 9, 32, 16, [4, 9], x_scale="f32"), "static pertoken FLOAT32 xScale")
    yield Sample(
        qgmmd_case(rng, 9, 32, 32, [9, 9], mode="pertensor", x_scale="f32", smooth=True),
        "static pertensor FLOAT32 xScale, smoothed",
    )
    yield Sample(
        qgmmd_case(rng, 8, 16, 16, [3, 8], mode="pertensor", x_scale="packed"),
        "INT64 weightScale (pre-multiplied) with a FLOAT16 pertensor xScale",
    )
    big = qgmmd_case(rng, 70, 48, 80, [1, 69])
    big["x"][3] = 0
    yield Sample(big, "70 rows, n 80: partial GEMM tiles, a zero row")


def _qgmmd_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    good = qgmmd_case(rng, 6, 32, 16, [2, 6])
    tiling = TILING
    yield ErrorSample({**good, "transposeWeight": False}, INVALID, "transposeWeight false")
    yield ErrorSample({**good, "biasOptional": np.ones((2, 16), np.int32)}, INVALID, "bias given")
    yield ErrorSample({**good, "xOffsetOptional": np.ones(6, np.float32)}, INVALID, "xOffset given")
    yield ErrorSample({**good, "xQuantMode": "pertensor"}, INVALID, "dynamic pertensor")
    yield ErrorSample({**good, "xQuantMode": "perchannel"}, INVALID, "unknown xQuantMode")
    w = good["weight"]
    yield ErrorSample({**good, "weight": w[:, :8]}, INVALID, "n not a multiple of 16")
    yield ErrorSample({**good, "weight": w[:, :, :24], "x": good["x"][:, :24]}, INVALID, "k not a multiple of 16")
    yield ErrorSample({**good, "x": good["x"][:, :16]}, tiling, "k disagrees")
    yield ErrorSample({**good, "weightScale": good["weightScale"][:, :8]}, tiling, "weightScale shape")
    yield ErrorSample({**good, "groupList": np.array([6], np.int64)}, tiling, "groupList shape")
    yield ErrorSample({**good, "xScaleOptional": np.ones(5, np.float32)}, tiling, "pertoken xScale length")
    yield ErrorSample({**good, "smoothScaleOptional": np.ones(8, np.float16)}, tiling, "smooth length")
    packed = np.ones((2, 16), np.int64)
    yield ErrorSample({**good, "weightScale": packed}, INVALID, "INT64 weightScale in dynamic mode")
    f32 = {**good, "xScaleOptional": np.ones(1, np.float32), "xQuantMode": "pertensor"}
    yield ErrorSample({**f32, "weightScale": packed}, INVALID, "INT64 weightScale with a FLOAT32 xScale")
    yield ErrorSample({**f32, "xScaleOptional": np.ones(1, np.float16)}, INVALID, "FLOAT16 xScale, FLOAT32 scale")
    yield ErrorSample({**good, "groupList": None}, NULLPTR, "null groupList")
    yield ErrorSample({**good, "x": good["x"][:0]}, INVALID, "empty x")


def _qgmmd(name: str, weight_formats: Iterable[Any], out_c_type: str) -> OpSpec:
    params = (
        tensor("x", {_F16}, min_rank=2, max_rank=2),
        tensor("weight", {_I8}, formats=weight_formats, min_rank=3, max_rank=3),
        tensor("weightScale", {_F32, _I64}, min_rank=2, max_rank=2),
        tensor("groupList", {_I64}, min_rank=1, max_rank=1),
        tensor("biasOptional", None, optional=True),
        tensor("xScaleOptional", {_F32, _F16}, optional=True, min_rank=1, max_rank=1),
        tensor("xOffsetOptional", None, optional=True),
        tensor("smoothScaleOptional", {_F16}, optional=True, min_rank=1, max_rank=1),
        string_attr("xQuantMode", choices=("pertoken", "pertensor")),
        bool_attr("transposeWeight"),
        out("out", {_F16}, c_type=out_c_type),
    )
    return OpSpec(
        name,
        FAMILY,
        params,
        _qgmmd_infer,
        samples=_qgmmd_samples,
        error_samples=_qgmmd_errors,
        summary="quantise x to INT8 (static or dynamic per row), INT8 grouped GEMM, dequantise to FLOAT16",
    )


_QGMMD = _qgmmd("QuantGroupedMatmulDequant", ND_OR_NZ, "const aclTensor*")


def _qgmmd_nz_case(args: dict[str, Any]) -> dict[str, Any] | None:
    return {**args, "weight": _all_nz(args["weight"])}


def _qgmmd_nz_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    yield ErrorSample(qgmmd_case(rng, 6, 32, 16, [2, 6]), INVALID, "weight in ND")


_QGMMD_NZ = version_of(
    _QGMMD,
    "QuantGroupedMatmulDequantWeightNZ",
    (
        "x",
        tensor("weight", {_I8}, formats=NZ_FORMATS, min_rank=3, max_rank=3),
        *_QGMMD.param_names[2:-1],
        out("out", {_F16}),
    ),
    adapt=_qgmmd_nz_case,
    more_errors=_qgmmd_nz_errors,
    summary="QuantGroupedMatmulDequant with the weight in FRACTAL_NZ",
)

ACCURACY: dict[str, Accuracy] = {
    "GroupedMatmulSwigluQuantV2": ulp(
        8,
        reason="an exact integer GEMM, two float32 scale products, a SwiGLU (Silu's 5 ulp and a product) rounded to"
        " float32, then float32 quantisation (DequantSwigluQuant's epilogue); integer outputs compare exactly",
    ),
    "QuantGroupedMatmulDequant": ulp(
        1,
        reason="float32 quantisation of x (integer x_q compared through the output), an exact integer GEMM, two"
        " float32 scale products and one rounding to float16",
    ),
}
"""Accuracy classes (the NZ forms take their base's)."""

SPECS: list[OpSpec] = with_accuracy([_GMMSQ_V2, _GMMSQ_NZ_V2, _GMMSQ_NZ_V1, _QGMMD, _QGMMD_NZ], ACCURACY)

__all__ = ["K_LIMIT", "MAX_GROUPS", "N_MAX", "QUANT_MAX", "SPECS", "members"]
