"""Later versions of declared operators that vllm-ascend reaches, mapped onto their base ops (issue 16).

Each version runs its base's rules and kernels (:func:`acl_core.spec.version.version_of`); what it adds
is listed beside it with the values that keep the base's behaviour. Choices recorded here:

* PromptFlashAttentionV2/V3 run on FusedInferAttentionScore's rules (CANN: FIA is PFA and IFA fused),
  which give them sparseMode 0-4, actualSeqLengthsKv and innerPrecise; key/value stay plain tensors.
  A query of S=1 takes FIA's decode branch (its masks are [B,S], [B,1,S] or [B|1,N|1,1,S]).
* IncreFlashAttentionV2/V3/V4 run on IncreFlashAttention's: quantisation (dequantScale1 …
  quantOffset2), KV antiquantisation and left padding (kvPaddingSize) are refused with 161002; paged
  KV (V3/V4's blocktable with blockSize) is implemented (the attention family's docstring gives its
  rules; actualSeqLengths are the key lengths and required there); innerPrecise 0 (high precision) and
  1 (high performance) compute the same here, other values are refused.
* FusedInferAttentionScoreV2/V3/V4 run on FusedInferAttentionScore's: per-key/value antiquantisation
  (key/valueAntiquantScale/Offset, their modes other than 0), the shared prefix
  (key/valueSharedPrefix, actualSharedPrefixLen), MLA's split rope (queryRope, keyRope,
  keyRopeAntiquantScale) and query quantisation (dequantScaleQuery, queryQuantMode other than 0) are
  refused with 161002; V3's extra layouts (BNSD_NBSD, BSND_NBSD, BSH_NBSD, TND, TND_NTD, NTD_TND)
  are refused by inputLayout's choices (the base's BSH, BSND, BNSD, BNSD_BSND).
* FlashAttentionScoreV2 / FlashAttentionVarLenScoreV2 add ``pseType`` (CANN: 1, the default, is the
  base's pse before the scale; other values add it after the scale; 2/3 generate ALiBi inside the op)
  and the ALiBi start indices: pseType 1 runs as the base, 0 only without realShiftOptional (nothing
  to add, so the same), 2/3 and qStartIdx/kvStartIdx are refused with 161002.
* FlashAttentionScoreV3 is V2 with ``sinkOptional`` (implemented: the attention family's docstring
  says how a sink enters the softmax). FlashAttentionScoreV4 is V2's rules with V4's parameters:
  queryRope/keyRope (MLA's split rope), dScaleQ/K/V (FP8), the TND lengths (actualSeqQLen/KvLen: the
  TND layout is refused by inputLayout's choices) and sinkOptional (reserved in V4) must be null;
  outDtype 0 or 1 (it names the FP8 mode's output); seed and offset only seed dropout, which must be
  off (keepProb 1), so any value runs; softmaxOutLayout is reserved there and ignored.
* FlashAttentionVarLenScoreV4 adds softmaxOutLayout ('same_as_input': [T,N,8] statistics);
  VarLenV5 is V2 with sinkOptional and softmaxOutLayout; its queryRope/keyRope must be null.
* FusedInferAttentionScoreV5 is V4 with learnableSinkOptional (implemented), qStartIdx/kvStartIdx
  (refused: they position generated ALiBi) and pseType (0 only: 2/3 generate ALiBi inside the op).
* DivV3 is DivMod with an int64_t ``mode`` (0 true division, 1 toward zero, 2 toward -inf).
* DynamicMxQuantV2 adds ``dstTypeMax``: 0 only (the output dtype's own maximum); a custom range is
  refused. WeightQuantBatchMatmulV3 adds ``innerPrecise``: 0 (high precision) and 1 (high
  performance) compute the same here, other values are refused.
* DynamicQuantV3/V4 run on DynamicQuantV2's: ``isSymmetrical`` must agree with ``offsetOut`` (true:
  offsetOut null, 161002 otherwise; false: offsetOut given, 161001 otherwise; asymmetric is integer
  outputs only, as in V2); ``quantMode`` is 'pertoken' only (per-tensor / per-channel are refused);
  V4's ``dstTypeMax`` is 0 only, meaning the output dtype's own maximum (a custom range is refused).
* GroupedMatmulV4 is GroupedMatmulV5 without ``tuningConfigOptional`` and without the MX mode V5
  added (FLOAT8 / FLOAT4 x or weight are refused with 161002).
* ApplyRotaryPosEmbV2 adds ``rotaryMode``: 'half' (the base's rotate-half) only; 'interleave' and
  'quarter' are refused with 161002.
* RotaryPositionEmbeddingV2 adds ``rotate``, a [D, D] matrix giving ``x_rotate = x @ rotate``: null only
  (the mode's own rotation); a matrix is refused with 161002.
* InterleaveRope is RotaryPositionEmbedding's mode 3 (interleave-half: x de-interleaved, then rotated by
  half), CANN's own mapping on Ascend 950; its documented limits are checked first, with 561002 (CANN's
  code for its shape errors): x, cos, sin and out 4-d (B, N, S, D), D = 64, cos/sin with N = 1 and S of 1
  or x's (B broadcasts as in the base).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import ml_dtypes
import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.ops import attention as A
from acl_core.spec.ops import elementwise as E
from acl_core.spec.ops import matmul as M
from acl_core.spec.ops import mc2 as MC2
from acl_core.spec.ops import quant as Q
from acl_core.spec.opspec import (
    INVALID,
    TILING,
    Call,
    ErrorSample,
    OpSpec,
    Sample,
    bool_attr,
    float_attr,
    int_array,
    int_attr,
    invalid,
    nullptr,
    out,
    string_attr,
    tensor,
)
from acl_core.spec.rules import FLOATS
from acl_core.spec.version import Added, version_of
from acl_core.tensor import AclTensorList

_BY_NAME = {s.name: s for s in A.SPECS}
_FIA, _IFA = _BY_NAME["FusedInferAttentionScore"], _BY_NAME["IncreFlashAttention"]

_QUANT = "quantisation is not implemented"
_ANTIQUANT = "KV antiquantisation is not implemented"


def _absent(name: str, why: str, make: Any = tensor) -> Added:
    """An added optional handle that must stay null."""
    return Added(make(name, None, optional=True) if make is tensor else make(name, optional=True), why)


def _mode(name: str, why: str) -> Added:
    """An added int mode whose only value here is 0 (its documented default)."""
    return Added(int_attr(name, default=0), why, neutral=(0,))


# ----------------------------------------------------------------------------- FusedInferAttentionScore V2-V4
_FIA_HEAD = (
    "query",
    "key",
    "value",
    "pseShiftOptional",
    "attenMaskOptional",
    "actualSeqLengthsOptional",
    "actualSeqLengthsKvOptional",
    "deqScale1Optional",
    "quantScale1Optional",
    "deqScale2Optional",
    "quantScale2Optional",
    "quantOffset2Optional",
    "antiquantScaleOptional",
    "antiquantOffsetOptional",
    "blockTableOptional",
    "queryPaddingSizeOptional",
    "kvPaddingSizeOptional",
    "keyAntiquantScaleOptional",
    "keyAntiquantOffsetOptional",
    "valueAntiquantScaleOptional",
    "valueAntiquantOffsetOptional",
    "keySharedPrefixOptional",
    "valueSharedPrefixOptional",
    "actualSharedPrefixLenOptional",
)
_FIA_ATTRS = (
    "numHeads",
    "scaleValue",
    "preTokens",
    "nextTokens",
    "inputLayout",
    "numKeyValueHeads",
    "sparseMode",
    "innerPrecise",
    "blockSize",
    "antiquantMode",
    "softmaxLseFlag",
    "keyAntiquantMode",
    "valueAntiquantMode",
)
_FIA_OUTS = ("attentionOut", "softmaxLse")
_PREFIX = "a shared-prefix KV is not implemented"
_ROPE = "MLA's split rope (queryRope/keyRope) is not implemented"
_FIA_V2_ADDED = {
    **{
        f"{kv}Antiquant{part}Optional": _absent(f"{kv}Antiquant{part}Optional", _ANTIQUANT)
        for kv in ("key", "value")
        for part in ("Scale", "Offset")
    },
    "keySharedPrefixOptional": _absent("keySharedPrefixOptional", _PREFIX),
    "valueSharedPrefixOptional": _absent("valueSharedPrefixOptional", _PREFIX),
    "actualSharedPrefixLenOptional": _absent("actualSharedPrefixLenOptional", _PREFIX, int_array),
    "keyAntiquantMode": _mode("keyAntiquantMode", f"other than 0: {_ANTIQUANT}"),
    "valueAntiquantMode": _mode("valueAntiquantMode", f"other than 0: {_ANTIQUANT}"),
}
_FIA_V3_ADDED = {
    **_FIA_V2_ADDED,
    "queryRopeOptional": _absent("queryRopeOptional", _ROPE),
    "keyRopeOptional": _absent("keyRopeOptional", _ROPE),
    "keyRopeAntiquantScaleOptional": _absent("keyRopeAntiquantScaleOptional", _ROPE),
}
_FIA_V4_ADDED = {
    **_FIA_V3_ADDED,
    "dequantScaleQueryOptional": _absent("dequantScaleQueryOptional", "query quantisation is not implemented"),
    "queryQuantMode": _mode("queryQuantMode", "other than 0: query quantisation is not implemented"),
}
_ROPE_NAMES = ("queryRopeOptional", "keyRopeOptional", "keyRopeAntiquantScaleOptional")


def _fia_version(name: str, tensors: tuple[str, ...], attrs: tuple[str, ...], added: dict[str, Added]) -> OpSpec:
    return version_of(
        _FIA,
        name,
        (*_FIA_HEAD, *tensors, *attrs, *_FIA_OUTS),
        added=added,
        summary=f"FusedInferAttentionScore with {name[-2:]}'s parameters (only their base-preserving values)",
    )


_FIA_VERSIONS = [
    _fia_version("FusedInferAttentionScoreV2", (), _FIA_ATTRS, _FIA_V2_ADDED),
    _fia_version("FusedInferAttentionScoreV3", _ROPE_NAMES, _FIA_ATTRS, _FIA_V3_ADDED),
    _fia_version(
        "FusedInferAttentionScoreV4",
        (*_ROPE_NAMES, "dequantScaleQueryOptional"),
        (*_FIA_ATTRS, "queryQuantMode"),
        _FIA_V4_ADDED,
    ),
]

# ----------------------------------------------------------------------------- PromptFlashAttention V2, V3
_PFA_FIXED: dict[str, Any] = {
    "antiquantScale": None,
    "antiquantOffset": None,
    "blockTable": None,
    "queryPaddingSize": None,
    "kvPaddingSize": None,
    "blockSize": 0,
    "antiquantMode": 0,
    "softmaxLseFlag": False,
    "softmaxLse": None,
}


def _pfa_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """Prefill cases over plain key/value tensors: every layout, GQA, the sparse modes and actual lengths."""
    plain: dict[str, Any] = {"preTokens": A.UNBOUNDED, "nextTokens": A.UNBOUNDED, "sparseMode": 0}
    for dt in (D.ACL_FLOAT16, D.ACL_BF16):
        for layout in A.PFA_LAYOUTS:
            yield Sample(A._infer_case(rng, dt, layout, 2, 4, 2, 5, 7, 8, **plain), f"{dt.short} {layout} GQA no mask")
    f16 = D.ACL_FLOAT16
    for mode, sq, skv, extra in ((2, 5, 8, {}), (3, 7, 5, {"nextTokens": 0}), (4, 6, 6, {"preTokens": 1})):
        args = A._infer_case(rng, f16, "BSH", 1, 2, 2, sq, skv, 8, **{**plain, **extra})
        yield Sample({**args, "attenMask": A.compressed_mask(), "sparseMode": mode}, f"sparse {mode} Sq={sq} Skv={skv}")
    args = A._infer_case(rng, f16, "BNSD", 2, 2, 2, 4, 6, 8, **plain)
    causal = np.triu(np.ones((4, 6), bool), k=3)
    yield Sample(
        {**args, "attenMask": causal, "actualSeqLengths": [4, 2], "actualSeqLengthsKv": [6, 3]},
        "full mask, actual query and key lengths",
    )


def _plain_kv(args: dict[str, Any]) -> dict[str, Any] | None:
    """A FusedInferAttentionScore case with one cache tensor, its key/value unwrapped (PFA takes tensors)."""
    for name in ("key", "value"):
        if isinstance(args[name], list):
            if len(args[name]) != 1:
                return None
            args = {**args, name: args[name][0]}
    return args


def _pfa_version(name: str, inner_precise: bool) -> OpSpec:
    head = (
        "query",
        tensor("key", A.HALF),
        tensor("value", A.HALF),
        "pseShift",
        "attenMask",
        "actualSeqLengths",
        "actualSeqLengthsKv",
        "deqScale1",
        "quantScale1",
        "deqScale2",
        "quantScale2",
        "quantOffset2",
        "numHeads",
        "scaleValue",
        "preTokens",
        int_attr("nextTokens", default=0),
        "inputLayout",
        "numKeyValueHeads",
        "sparseMode",
    )
    return version_of(
        _FIA,
        name,
        (*head, *(("innerPrecise",) if inner_precise else ()), "attentionOut"),
        fixed=_PFA_FIXED if inner_precise else {**_PFA_FIXED, "innerPrecise": 0},
        adapt=_plain_kv,
        as_list=("key", "value"),
        samples=_pfa_samples,
        summary="inference prefill attention on FusedInferAttentionScore's rules (sparse modes 0-4, KV lengths)",
    )


# ----------------------------------------------------------------------------- IncreFlashAttention V2-V4
_IFA_QUANT = {
    n: _absent(n, _QUANT) for n in ("dequantScale1", "quantScale1", "dequantScale2", "quantScale2", "quantOffset2")
}
_IFA_V3_ADDED = {
    **_IFA_QUANT,
    "antiquantScale": _absent("antiquantScale", _ANTIQUANT),
    "antiquantOffset": _absent("antiquantOffset", _ANTIQUANT),
    "blocktable": Added(
        tensor("blocktable", frozenset({D.ACL_INT32}), optional=True),
        "paged KV (page attention): implemented, see the attention family's docstring",
        neutral=None,
    ),
    "blockSize": Added(int_attr("blockSize", default=0), "", neutral=None),
    "innerPrecise": Added(
        int_attr("innerPrecise", default=1),
        "must be 0 (high precision) or 1 (high performance)",
        neutral=(0, 1),
        refused=2,
    ),
}
_IFA_V4_ADDED = {**_IFA_V3_ADDED, "kvPaddingSize": _absent("kvPaddingSize", "left padding is not implemented")}
_IFA_HEAD = ("query", "key", "value", "pseShift", "attenMask", "actualSeqLengths")
_IFA_ATTRS = ("numHeads", "scaleValue", "inputLayout", "numKeyValueHeads")
_QUANT_NAMES = tuple(_IFA_QUANT)
_ANTI_NAMES = ("antiquantScale", "antiquantOffset", "blocktable")


_PAGED = {"blocktable": "blockTable", "blockSize": "blockSize"}


def _ifa_paged(spec: OpSpec) -> OpSpec:
    """An IncreFlashAttention version with blocktable: its derived cases plus paged-KV cases and refusals."""
    derived, derived_errors = spec.samples, spec.error_samples
    assert derived is not None and derived_errors is not None

    def samples(rng: np.random.Generator) -> Iterable[Sample]:
        yield from derived(rng)
        yield from A.ifa_paged_samples(rng)

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        yield from derived_errors(rng)
        yield from A.ifa_paged_errors(rng)

    return replace(spec, samples=samples, error_samples=errors)


_IFA_VERSIONS = [
    version_of(
        _IFA, "IncreFlashAttentionV2", (*_IFA_HEAD, *_QUANT_NAMES, *_IFA_ATTRS, "attentionOut"), added=_IFA_QUANT
    ),
    _ifa_paged(
        version_of(
            _IFA,
            "IncreFlashAttentionV3",
            (*_IFA_HEAD, *_QUANT_NAMES, *_ANTI_NAMES, *_IFA_ATTRS, "blockSize", "innerPrecise", "attentionOut"),
            added=_IFA_V3_ADDED,
            passthrough=_PAGED,
        )
    ),
    _ifa_paged(
        version_of(
            _IFA,
            "IncreFlashAttentionV4",
            (
                *_IFA_HEAD,
                *_QUANT_NAMES,
                *_ANTI_NAMES,
                "kvPaddingSize",
                *_IFA_ATTRS,
                "blockSize",
                "innerPrecise",
                "attentionOut",
            ),
            added=_IFA_V4_ADDED,
            passthrough=_PAGED,
        )
    ),
]

# ----------------------------------------------------------------------------- FlashAttentionScoreV2, VarLenV2
_ALIBI = "(it positions the ALiBi bias generated inside the op, pseType 2/3) is not implemented"


def _pse_type(call: Call) -> None:
    """pseType 1 adds realShift before the scale, as the base does; 0 adds it after; 2/3 generate ALiBi."""
    kind = call.args["pseType"]
    if kind not in (0, 1):
        raise invalid(f"{call.spec.name}: pseType={kind} (ALiBi generated inside the op) is not implemented")
    if kind == 0 and call.args["realShiftOptional"] is not None:
        raise invalid(f"{call.spec.name}: pseType=0 adds realShiftOptional after the scale, which is not implemented")


def _pse_errors(base: OpSpec) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        for s in base.samples(rng) if base.samples else ():
            if s.args.get("realShiftOptional") is not None:
                yield ErrorSample({**s.args, "pseType": 0}, INVALID, "pseType 0 with realShiftOptional")
                break
        for s in base.samples(rng) if base.samples else ():
            yield ErrorSample({**s.args, "pseType": 2}, INVALID, "pseType 2: generated ALiBi")
            break

    return errors


def _fa_v2(base: OpSpec, name: str, lengths: tuple[str, ...]) -> OpSpec:
    head = ("query", "key", "value", "realShiftOptional", "dropMaskOptional", "paddingMaskOptional")
    attrs = ("scaleValue", "keepProb", "preTokens", "nextTokens", "headNum", "inputLayout", "innerPrecise")
    outs = ("softmaxMaxOut", "softmaxSumOut", "softmaxOutOut", "attentionOutOut")
    starts = ("qStartIdxOptional", "kvStartIdxOptional")
    return version_of(
        base,
        name,
        (*head, "attenMaskOptional", "prefixOptional", *lengths, *starts, *attrs, "sparseMode", "pseType", *outs),
        added={
            "qStartIdxOptional": _absent("qStartIdxOptional", _ALIBI, int_array),
            "kvStartIdxOptional": _absent("kvStartIdxOptional", _ALIBI, int_array),
            "pseType": Added(int_attr("pseType", default=1), "", neutral=None),
        },
        check=_pse_type,
        more_errors=_pse_errors(base),
        summary=f"{base.name} with pseType 1 (pse before the scale, the base's) or 0 without realShiftOptional",
    )


_FA_VERSIONS = [
    _fa_v2(_BY_NAME["FlashAttentionScore"], "FlashAttentionScoreV2", ()),
    _fa_v2(
        _BY_NAME["FlashAttentionVarLenScore"],
        "FlashAttentionVarLenScoreV2",
        ("actualSeqQLenOptional", "actualSeqKvLenOptional"),
    ),
]

# ----------------------------------------------------------------------------- FlashAttentionScoreV3/V4, VarLenV4/V5
_SINK_WHY = "the per-head sink logit (gpt-oss): implemented, see the attention family's docstring"


def _sink_param(name: str, dtypes: frozenset[D]) -> Added:
    """An added sink tensor the versions implement: passed to the base's kernels as ``sink``."""
    return Added(tensor(name, dtypes, optional=True, max_rank=1), _SINK_WHY, neutral=None)


def _heads(call: Call) -> int:
    heads = call.args["headNum"] if "headNum" in call.args else call.args["numHeads"]
    return int(heads)


def _with_sink(name: str, extra: Any = None) -> Any:
    """A check: ``extra``'s rules, then the sink's shape ([query heads])."""

    def check(call: Call) -> None:
        if extra is not None:
            extra(call)
        A.check_sink(call, name, _heads(call))

    return check


def _sinks(rng: np.random.Generator, heads: int, dtype: Any = np.float32) -> np.ndarray:
    """Sink logits around the scaled scores' range (some dominate a row, some barely count)."""
    return rng.uniform(-3.0, 3.0, size=heads).astype(dtype)


def _sink_samples(base: OpSpec, name: str, heads_of: Any, dtype: Any = np.float32, every: int = 3) -> Any:
    """``base``'s samples (the version's derived ones) plus every ``every``-th again with a sink."""

    def samples(rng: np.random.Generator) -> Iterable[Sample]:
        derived = list(base.samples(rng)) if base.samples else []
        yield from derived
        for i, s in enumerate(derived):
            if i % every == 0:
                yield Sample({**s.args, name: _sinks(rng, heads_of(s.args), dtype)}, f"{s.note}, sink")

    return samples


def _sink_errors(base: OpSpec, name: str, heads_of: Any, dtype: Any = np.float32) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        first = next(iter(base.samples(rng))) if base.samples else None
        if first is not None:
            wrong = _sinks(rng, heads_of(first.args) + 1, dtype)
            yield ErrorSample({**first.args, name: wrong}, INVALID, f"{name} not [query heads]")

    return errors


def _fa_heads(args: dict[str, Any]) -> int:
    return int(args["headNum"])


_FA_HEAD = ("query", "key", "value", "realShiftOptional", "dropMaskOptional", "paddingMaskOptional")
_FA_ATTRS = ("scaleValue", "keepProb", "preTokens", "nextTokens", "headNum", "inputLayout", "innerPrecise")
_FA_OUTS = ("softmaxMaxOut", "softmaxSumOut", "softmaxOutOut", "attentionOutOut")
_STARTS = {
    "qStartIdxOptional": _absent("qStartIdxOptional", _ALIBI, int_array),
    "kvStartIdxOptional": _absent("kvStartIdxOptional", _ALIBI, int_array),
}
_PSE_TYPE = Added(int_attr("pseType", default=1), "", neutral=None)
_FA_FLOAT_SINK = frozenset({D.ACL_FLOAT})
_FA_V2 = next(s for s in _FA_VERSIONS if s.name == "FlashAttentionScoreV2")
_VARLEN_V2 = next(s for s in _FA_VERSIONS if s.name == "FlashAttentionVarLenScoreV2")


def _fa_v3() -> OpSpec:
    base = _BY_NAME["FlashAttentionScore"]
    spec = version_of(
        base,
        "FlashAttentionScoreV3",
        (*_FA_HEAD, "attenMaskOptional", "sinkOptional", "prefixOptional", *_STARTS, *_FA_ATTRS, "sparseMode",
         "pseType", *_FA_OUTS),
        added={**_STARTS, "pseType": _PSE_TYPE, "sinkOptional": _sink_param("sinkOptional", _FA_FLOAT_SINK)},
        passthrough={"sinkOptional": "sink"},
        check=_with_sink("sinkOptional", _pse_type),
        more_errors=_chain_errors(_pse_errors(base), _sink_errors(_FA_V2, "sinkOptional", _fa_heads)),
        summary="FlashAttentionScoreV2 with sinkOptional (gpt-oss attention sinks, one logit per head)",
    )  # fmt: skip
    return replace(spec, samples=_sink_samples(_FA_V2, "sinkOptional", _fa_heads))


_QUANT_FA = "FP8 attention (dScaleQ/K/V) is not implemented"
_FA_V4_ADDED = {
    "queryRopeOptional": _absent("queryRopeOptional", _ROPE),
    "keyRopeOptional": _absent("keyRopeOptional", _ROPE),
    "dScaleQOptional": _absent("dScaleQOptional", _QUANT_FA),
    "dScaleKOptional": _absent("dScaleKOptional", _QUANT_FA),
    "dScaleVOptional": _absent("dScaleVOptional", _QUANT_FA),
    "sinkOptional": _absent("sinkOptional", "is reserved in FlashAttentionScoreV4 (CANN: not used currently)"),
    "actualSeqQLenOptional": _absent(
        "actualSeqQLenOptional", "is for inputLayout TND, which FlashAttentionScoreV4 does not run here", int_array
    ),
    "actualSeqKvLenOptional": _absent(
        "actualSeqKvLenOptional", "is for inputLayout TND, which FlashAttentionScoreV4 does not run here", int_array
    ),
    **_STARTS,
    "outDtype": Added(
        int_attr("outDtype", default=0),
        "must be 0 (fp16) or 1 (bf16): it only names the output of the FP8 mode, which is not implemented",
        neutral=(0, 1),
        refused=2,
    ),
    "pseType": _PSE_TYPE,
    "softmaxOutLayout": Added(string_attr("softmaxOutLayout", optional=True), "", neutral=None),
    "seed": Added(int_attr("seed", default=0), "", neutral=None),
    "offset": Added(int_attr("offset", default=0), "", neutral=None),
}


def _fa_v4() -> OpSpec:
    return version_of(
        _BY_NAME["FlashAttentionScore"],
        "FlashAttentionScoreV4",
        (*_FA_HEAD, "attenMaskOptional", "queryRopeOptional", "keyRopeOptional", "dScaleQOptional",
         "dScaleKOptional", "dScaleVOptional", "sinkOptional", "prefixOptional", "actualSeqQLenOptional",
         "actualSeqKvLenOptional", *_STARTS, *_FA_ATTRS, "sparseMode", "outDtype", "pseType", "softmaxOutLayout",
         "seed", "offset", *_FA_OUTS),
        added=_FA_V4_ADDED,
        check=_pse_type,
        more_errors=_pse_errors(_BY_NAME["FlashAttentionScore"]),
        summary="FlashAttentionScoreV2's rules with V4's parameters (seed/offset only seed dropout, which must be off)",
    )  # fmt: skip


_STATS_LAYOUTS = ("", "same_as_input")


def _stats_layout(call: Call) -> None:
    """softmaxOutLayout: '' (or null) keeps [N,T,8]; 'same_as_input' writes [T,N,8]."""
    layout = call.args.get("softmaxOutLayout")
    if layout not in (None, *_STATS_LAYOUTS):
        raise invalid(f"{call.spec.name}: softmaxOutLayout={layout!r} is not supported; expected '' or 'same_as_input'")
    call.plan["stats"] = "TND" if layout == "same_as_input" else "NTD"


def _stats_outputs(call: Call, infos: Any) -> Any:
    """softmaxMaxOut / softmaxSumOut as [T,N,8] when softmaxOutLayout says 'same_as_input'."""
    if call.plan.get("stats") != "TND":
        return infos
    n, t, eight = infos["softmaxMaxOut"].shape
    stats = replace(infos["softmaxMaxOut"], shape=(t, n, eight))
    return {**infos, "softmaxMaxOut": stats, "softmaxSumOut": stats}


def _tnd_stats_samples(base_samples: Any) -> Any:
    """The samples given, plus each third again with softmaxOutLayout 'same_as_input'."""

    def samples(rng: np.random.Generator) -> Iterable[Sample]:
        derived = list(base_samples(rng))
        yield from derived
        for i, s in enumerate(derived):
            if i % 3 == 1:
                yield Sample({**s.args, "softmaxOutLayout": "same_as_input"}, f"{s.note}, TND statistics")

    return samples


def _stats_errors(base: OpSpec) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        first = next(iter(base.samples(rng))) if base.samples else None
        if first is not None:
            yield ErrorSample({**first.args, "softmaxOutLayout": "NTD"}, INVALID, "softmaxOutLayout unknown")

    return errors


_VARLEN_LENGTHS = ("actualSeqQLenOptional", "actualSeqKvLenOptional")
_STATS_ADDED = {"softmaxOutLayout": Added(string_attr("softmaxOutLayout", optional=True), "", neutral=None)}


def _varlen_v4() -> OpSpec:
    base = _BY_NAME["FlashAttentionVarLenScore"]
    spec = version_of(
        base,
        "FlashAttentionVarLenScoreV4",
        (*_FA_HEAD, "attenMaskOptional", "prefixOptional", *_VARLEN_LENGTHS, *_FA_ATTRS, "sparseMode",
         "softmaxOutLayout", *_FA_OUTS),
        added=_STATS_ADDED,
        check=_stats_layout,
        outputs=_stats_outputs,
        more_errors=_stats_errors(base),
        summary="FlashAttentionVarLenScore with softmaxOutLayout ('same_as_input': [T,N,8] statistics)",
    )  # fmt: skip
    assert spec.samples is not None
    return replace(spec, samples=_tnd_stats_samples(spec.samples))


def _varlen_v5() -> OpSpec:
    base = _BY_NAME["FlashAttentionVarLenScore"]
    ropes = {
        "queryRope": _absent("queryRope", _ROPE),
        "keyRope": _absent("keyRope", _ROPE),
    }

    def check(call: Call) -> None:
        _pse_type(call)
        _stats_layout(call)
        A.check_sink(call, "sinkOptional", _heads(call))

    spec = version_of(
        base,
        "FlashAttentionVarLenScoreV5",
        ("query", "queryRope", "key", "keyRope", "value", "realShiftOptional", "dropMaskOptional",
         "paddingMaskOptional", "attenMaskOptional", "sinkOptional", "prefixOptional", *_VARLEN_LENGTHS, *_STARTS,
         *_FA_ATTRS, "sparseMode", "pseType", "softmaxOutLayout", *_FA_OUTS),
        added={**ropes, **_STARTS, "pseType": _PSE_TYPE, **_STATS_ADDED,
               "sinkOptional": _sink_param("sinkOptional", _FA_FLOAT_SINK)},
        passthrough={"sinkOptional": "sink"},
        check=check,
        outputs=_stats_outputs,
        more_errors=_chain_errors(
            _pse_errors(base), _stats_errors(base), _sink_errors(_VARLEN_V2, "sinkOptional", _fa_heads)
        ),
        summary="FlashAttentionVarLenScoreV2 with sinkOptional and softmaxOutLayout (V4's)",
    )  # fmt: skip
    return replace(spec, samples=_tnd_stats_samples(_sink_samples(_VARLEN_V2, "sinkOptional", _fa_heads)))


def _chain_errors(*makers: Any) -> Any:
    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        for make in makers:
            yield from make(rng)

    return errors


_FIA_V5_ADDED = {
    **_FIA_V4_ADDED,
    "learnableSinkOptional": Added(
        tensor("learnableSinkOptional", {D.ACL_BF16}, optional=True, max_rank=1),
        "the per-head sink logit: implemented, see the attention family's docstring",
        neutral=None,
    ),
    "qStartIdxOptional": _absent(
        "qStartIdxOptional",
        "(it positions the ALiBi bias generated inside the op, pseType 2/3) is not implemented",
        int_array,
    ),
    "kvStartIdxOptional": _absent(
        "kvStartIdxOptional",
        "(it positions the ALiBi bias generated inside the op, pseType 2/3) is not implemented",
        int_array,
    ),
    "pseType": Added(
        int_attr("pseType", default=0),
        "other than 0: 2/3 generate ALiBi inside the op (not implemented), and no other value is documented",
        neutral=(0,),
        refused=2,
    ),
}


def _fia_heads(args: dict[str, Any]) -> int:
    return int(args["numHeads"])


def _fia_v5() -> OpSpec:
    v4 = _FIA_VERSIONS[-1]
    spec = version_of(
        _FIA,
        "FusedInferAttentionScoreV5",
        (*_FIA_HEAD, *_ROPE_NAMES, "dequantScaleQueryOptional", "learnableSinkOptional", "qStartIdxOptional",
         "kvStartIdxOptional", *_FIA_ATTRS, "queryQuantMode", "pseType", *_FIA_OUTS),
        added=_FIA_V5_ADDED,
        passthrough={"learnableSinkOptional": "sink"},
        check=_with_sink("learnableSinkOptional"),
        more_errors=_sink_errors(v4, "learnableSinkOptional", _fia_heads, ml_dtypes.bfloat16),
        summary="FusedInferAttentionScoreV4 with learnableSinkOptional (attention sinks), qStart/kvStartIdx, pseType",
    )  # fmt: skip
    return replace(spec, samples=_sink_samples(v4, "learnableSinkOptional", _fia_heads, ml_dtypes.bfloat16, every=2))


_FA_NEW_VERSIONS = [_fa_v3(), _fa_v4(), _varlen_v4(), _varlen_v5()]

# ----------------------------------------------------------------------------- DynamicQuant V3, V4
_DQ2 = next(s for s in Q.SPECS if s.name == "DynamicQuantV2")


def _symmetry(call: Call) -> None:
    """isSymmetrical says what DynamicQuantV2 reads from whether offsetOut is given: they must agree."""
    offset = call.args.get("offsetOut")
    if call.args["isSymmetrical"] and offset is not None:
        raise invalid(f"{call.spec.name}: offsetOut is only written when isSymmetrical is false")
    # outputs are null only while eager.run is still allocating them from this answer
    if not call.args["isSymmetrical"] and offset is None and call.args.get("yOut") is not None:
        raise nullptr(f"{call.spec.name}: isSymmetrical is false but offsetOut is null")


def _symmetric_flag(args: dict[str, Any]) -> dict[str, Any]:
    """A DynamicQuantV2 case says asymmetric by passing offsetOut; V3 says it with isSymmetrical."""
    return {**args, "isSymmetrical": args.get("offsetOut") is None}


def _dq_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for sample in _DQ2.samples(rng) if _DQ2.samples else ():
        yield replace(sample, args=_symmetric_flag(sample.args))
    x = S.array(rng, (4, 16), D.ACL_BF16, low=-4, high=4)
    yield Sample(
        {"x": x, "dstType": 2, "isSymmetrical": False, "offsetOut": np.zeros(4, np.float32)}, "asymmetric bf16"
    )


_DQ_ADDED = {
    "isSymmetrical": Added(bool_attr("isSymmetrical", default=True), "", neutral=None),
    "quantMode": Added(
        string_attr("quantMode", default="pertoken", c_type="const char*"),
        "other than 'pertoken': the per-tensor and per-channel modes are not implemented",
        neutral=("pertoken",),
        refused="pertensor",
    ),
}
_DQ_V4_ADDED = {
    **_DQ_ADDED,
    "dstTypeMax": Added(
        float_attr("dstTypeMax", c_type="float", default=0.0),
        "other than 0 (the output dtype's own maximum): a custom quantisation range is not implemented",
        neutral=(0.0,),
        refused=100.0,
    ),
}
_DQ_HEAD = ("x", "smoothScalesOptional", "groupIndexOptional", "dstType", "isSymmetrical", "quantMode")
_DQ_OUTS = ("yOut", "scaleOut", "offsetOut")
_DQ_VERSIONS = [
    version_of(
        _DQ2,
        "DynamicQuantV3",
        (*_DQ_HEAD, *_DQ_OUTS),
        added=_DQ_ADDED,
        check=_symmetry,
        adapt=_symmetric_flag,
        samples=_dq_samples,
        summary="per-token dynamic quantisation, symmetric or asymmetric as isSymmetrical says",
    ),
    version_of(
        _DQ2,
        "DynamicQuantV4",
        (*_DQ_HEAD, "dstTypeMax", *_DQ_OUTS),
        added=_DQ_V4_ADDED,
        check=_symmetry,
        adapt=_symmetric_flag,
        samples=_dq_samples,
        summary="DynamicQuantV3 with dstTypeMax (0: the output dtype's maximum)",
    ),
]

# ----------------------------------------------------------------------------- GroupedMatmulV4
_GMM5 = next(s for s in M.SPECS if s.name == "GroupedMatmulV5")


def _tensors_of(value: Any) -> list[Any]:
    """The tensors of a tensor-list argument (validated handles or a case's NumPy arrays)."""
    if value is None:
        return []
    return list(value.tensors) if isinstance(value, AclTensorList) else list(value)


def _no_mx(call: Call) -> None:
    """GroupedMatmulV5 added the MX mode: V4 refuses its operands."""
    for name in ("x", "weight"):
        for t in _tensors_of(call.args[name]):
            if t.dtype in M.MX_OPERANDS:
                raise invalid(
                    f"GroupedMatmulV4: {name} of {t.dtype.short} selects the MX mode, which GroupedMatmulV5 added"
                )


def _float_case(args: dict[str, Any]) -> dict[str, Any] | None:
    """A GroupedMatmulV5 case V4 can take (not the MX mode)."""
    mx = {d.numpy for d in M.MX_OPERANDS}
    return None if any(a.dtype in mx for n in ("x", "weight") for a in _tensors_of(args.get(n))) else args


_GMM_VERSIONS = [
    version_of(
        _GMM5,
        "GroupedMatmulV4",
        tuple(n for n in _GMM5.param_names if n != "tuningConfigOptional"),
        fixed={"tuningConfigOptional": None},
        check=_no_mx,
        adapt=_float_case,
        summary="grouped GEMM y_i = x_i @ weight_i (+ bias_i), float paths (V5 less tuningConfig and the MX mode)",
    )
]

# ----------------------------------------------------------------------------- ApplyRotaryPosEmbV2
_ROPE_V2 = version_of(
    _BY_NAME["ApplyRotaryPosEmb"],
    "ApplyRotaryPosEmbV2",
    ("queryRef", "keyRef", "cos", "sin", "layout", "rotaryMode"),
    added={
        "rotaryMode": Added(
            string_attr("rotaryMode", default="half"),
            "other than 'half': ApplyRotaryPosEmb's rotate-half is the only rotation implemented for it",
            neutral=("half",),
            refused="interleave",
        )
    },
    summary="ApplyRotaryPosEmb with rotaryMode ('half' only)",
)

# ------------------------------------------------------------------------- RotaryPositionEmbeddingV2 / InterleaveRope
_RPE = _BY_NAME["RotaryPositionEmbedding"]

_RPE_V2 = version_of(
    _RPE,
    "RotaryPositionEmbeddingV2",
    ("x", "cos", "sin", "mode", "rotate", "out"),
    added={
        "rotate": Added(
            tensor("rotate", FLOATS, optional=True),
            "must be null: a rotation matrix (x_rotate = x @ rotate) is not implemented; mode gives the rotation",
        )
    },
    summary="RotaryPositionEmbedding with an optional rotation matrix (null only)",
)


def _interleave_check(call: Call) -> None:
    x, cos, sin = (call.args[n] for n in ("x", "cos", "sin"))
    if x.rank != 4 or cos.rank != 4 or sin.rank != 4:
        raise A.tiling(
            f"x, cos and sin must be 4-d (B, N, S, D), got {list(x.shape)}, {list(cos.shape)}, {list(sin.shape)}"
        )
    if x.shape[3] != 64:
        raise A.tiling(f"the head dim D={x.shape[3]} must be 64")
    if cos.shape[1] != 1 or cos.shape[2] not in (1, x.shape[2]):
        raise A.tiling(f"cos {list(cos.shape)} must have N = 1 and S of 1 or x's {x.shape[2]}")


def _interleave_samples(rng: np.random.Generator) -> Iterable[Sample]:
    for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
        for xs, cs in (((2, 3, 5, 64), (2, 1, 5, 64)), ((4, 1, 1, 64), (4, 1, 1, 64)), ((2, 8, 6, 64), (1, 1, 1, 64))):
            angles = rng.uniform(0, 2 * np.pi, size=cs)
            args = {"x": S.array(rng, xs, dt), "cos": np.cos(angles).astype(dt.numpy)}
            args["sin"] = np.sin(angles).astype(dt.numpy)
            yield Sample(args, f"{dt.short} x {list(xs)} cos {list(cs)}")


def _interleave_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    x = S.array(rng, (1, 2, 3, 64), D.ACL_FLOAT16)
    c = S.array(rng, (1, 1, 3, 64), D.ACL_FLOAT16)
    yield ErrorSample({"x": x[..., :32].copy(), "cos": c[..., :32].copy(), "sin": c[..., :32].copy()}, TILING, "D=32")
    yield ErrorSample({"x": x[0], "cos": c[0], "sin": c[0]}, TILING, "3-d x")
    c2 = S.array(rng, (1, 2, 3, 64), D.ACL_FLOAT16)
    yield ErrorSample({"x": x, "cos": c2, "sin": c2.copy()}, TILING, "cos with N=2")
    yield ErrorSample({"x": x, "cos": c, "sin": c.astype(np.float32)}, INVALID, "sin dtype")


_INTERLEAVE = version_of(
    _RPE,
    "InterleaveRope",
    ("x", "cos", "sin", "out"),
    fixed={"mode": 3},
    check=_interleave_check,
    samples=_interleave_samples,
    error_samples=_interleave_errors,
    summary="x de-interleaved then rotated by half: RotaryPositionEmbedding mode 3, B x N x S x 64",
)

# ----------------------------------------------------------------------------- DivV3, DynamicMxQuantV2, WQBMM V3
_DIV_MOD = next(s for s in E.SPECS if s.name == "DivMod")
_MX = next(s for s in Q.SPECS if s.name == "DynamicMxQuant")
_WQBMM = next(s for s in Q.SPECS if s.name == "WeightQuantBatchMatmulV2")

_SMALL_VERSIONS = [
    version_of(
        _DIV_MOD,
        "DivV3",
        ("self", "other", int_attr("mode", choices=(0, 1, 2)), "out"),
        summary="self / other rounded as mode says: 0 true division, 1 toward zero, 2 toward -inf (DivMod's rules)",
    ),
    version_of(
        _MX,
        "DynamicMxQuantV2",
        (*_MX.param_names[:-2], "dstTypeMax", *_MX.param_names[-2:]),
        added={
            "dstTypeMax": Added(
                float_attr("dstTypeMax", default=0.0),
                "other than 0 (the output dtype's own maximum): a custom range is not implemented",
                neutral=(0.0,),
                refused=100.0,
            )
        },
    ),
    version_of(
        _WQBMM,
        "WeightQuantBatchMatmulV3",
        (*_WQBMM.param_names[:-1], "innerPrecise", _WQBMM.param_names[-1]),
        added={
            "innerPrecise": Added(
                int_attr("innerPrecise", c_type="int", default=0),
                "must be 0 (high precision) or 1 (high performance): both compute the same here",
                neutral=(0, 1),
                refused=2,
            )
        },
    ),
]


# ----------------------------------------------------------------------------- MatmulReduceScatterV2
_MRS = next(s for s in MC2.SPECS if s.name == "MatmulReduceScatter")
_MRS_QUANT = "quantised inputs (fp8/int8/HiF8/MX scales) are not implemented"
_MRS_V2 = version_of(
    _MRS,
    "MatmulReduceScatterV2",
    (
        "x1",
        "x2",
        "bias",
        "x1Scale",
        "x2Scale",
        "quantScale",
        "blockSize",
        "group",
        "reduceOp",
        "commTurn",
        "streamMode",
        "groupSize",
        "commMode",
        "output",
        "amaxOutOptional",
    ),
    added={
        "x1Scale": _absent("x1Scale", _MRS_QUANT),
        "x2Scale": _absent("x2Scale", _MRS_QUANT),
        "quantScale": _absent("quantScale", _MRS_QUANT),
        "blockSize": _mode("blockSize", "block-wise dequantisation is not implemented"),
        "groupSize": _mode("groupSize", "grouped dequantisation is not implemented"),
        "commMode": Added(
            string_attr("commMode", default="aicpu"),
            "must be aicpu or aiv (the two engines that drive the communication; both compute the same)",
            neutral=("aicpu", "aiv"),
            refused="ccu",
        ),
        "amaxOutOptional": Added(
            out("amaxOutOptional", {D.ACL_FLOAT}, optional=True),
            "(the output's absolute maximum, for fp8 outputs) is not implemented",
        ),
    },
    summary="MatmulReduceScatter with quantisation scales and the communication engine named (non-quantised only)",
)


# ----------------------------------------------------------------------------- MoeDistributeDispatch / Combine V3, V4
_DISPATCH_V2 = next(s for s in MC2.SPECS if s.name == "MoeDistributeDispatchV2")
_COMBINE_V2 = next(s for s in MC2.SPECS if s.name == "MoeDistributeCombineV2")
_SPECIAL_EXPERTS = "(zero, copy and constant experts) are not implemented"
_EP_ADDED = {
    "elasticInfoOptional": _absent("elasticInfoOptional", "(dynamic scale-in of the EP domain) is not implemented"),
    "performanceInfoOptional": _absent("performanceInfoOptional", "(per-rank communication timings) is not recorded"),
    "zeroExpertNum": _mode("zeroExpertNum", _SPECIAL_EXPERTS),
    "copyExpertNum": _mode("copyExpertNum", _SPECIAL_EXPERTS),
    "constExpertNum": _mode("constExpertNum", _SPECIAL_EXPERTS),
    **{
        name: _absent(name, _SPECIAL_EXPERTS)
        for name in ("oriXOptional", "constExpertAlpha1Optional", "constExpertAlpha2Optional", "constExpertVOptional")
    },
}
_EP_ATTRS = (
    "groupEp",
    "epWorldSize",
    "epRankId",
    "moeExpertNum",
    "groupTp",
    "tpWorldSize",
    "tpRankId",
    "expertShardType",
    "sharedExpertNum",
    "sharedExpertRankNum",
)
_DISPATCH_OUTS = (
    "expandXOut",
    "dynamicScalesOut",
    "assistInfoForCombineOut",
    "expertTokenNumsOut",
    "epRecvCountsOut",
    "tpRecvCountsOut",
    "expandScalesOut",
)
_COMBINE_INPUTS = (
    "expandX",
    "expertIds",
    "assistInfoForCombine",
    "epSendCounts",
    "expertScales",
    "tpSendCountsOptional",
    "xActiveMaskOptional",
    "activationScaleOptional",
    "weightScaleOptional",
    "groupListOptional",
    "expandScalesOptional",
    "sharedExpertXOptional",
    "elasticInfoOptional",
    "oriXOptional",
    "constExpertAlpha1Optional",
    "constExpertAlpha2Optional",
    "constExpertVOptional",
)
_COMBINE_ATTRS = ("globalBs", "outDtype", "commQuantMode", "groupListType", "commAlg")
_SPECIAL = ("zeroExpertNum", "copyExpertNum", "constExpertNum")


def _ep_added(order: tuple[str, ...]) -> dict[str, Added]:
    return {name: _EP_ADDED[name] for name in order if name in _EP_ADDED}


def _dispatch_version(name: str, extra: tuple[str, ...]) -> OpSpec:
    order = (
        "x",
        "expertIds",
        "scalesOptional",
        "xActiveMaskOptional",
        "expertScalesOptional",
        *extra,
        *_EP_ATTRS,
        "quantMode",
        "globalBs",
        "expertTokenNumsType",
        "commAlg",
        *_SPECIAL,
        *_DISPATCH_OUTS,
    )
    return version_of(_DISPATCH_V2, name, order, added=_ep_added(order), summary=_DISPATCH_V2.summary)


def _combine_version(name: str, extra: tuple[str, ...]) -> OpSpec:
    order = (*_COMBINE_INPUTS, *extra, *_EP_ATTRS, *_COMBINE_ATTRS, *_SPECIAL, "xOut")
    return version_of(_COMBINE_V2, name, order, added=_ep_added(order), summary=_COMBINE_V2.summary)


_EP_VERSIONS = [
    _dispatch_version("MoeDistributeDispatchV3", ("elasticInfoOptional",)),
    _dispatch_version("MoeDistributeDispatchV4", ("elasticInfoOptional", "performanceInfoOptional")),
    _combine_version("MoeDistributeCombineV3", ()),
    _combine_version("MoeDistributeCombineV4", ("performanceInfoOptional",)),
]

SPECS: list[OpSpec] = [
    *_SMALL_VERSIONS,
    *_FA_VERSIONS,
    *_FA_NEW_VERSIONS,
    *_DQ_VERSIONS,
    *_GMM_VERSIONS,
    _ROPE_V2,
    _RPE_V2,
    _INTERLEAVE,
    *_FIA_VERSIONS,
    _fia_v5(),
    _pfa_version("PromptFlashAttentionV2", inner_precise=False),
    _pfa_version("PromptFlashAttentionV3", inner_precise=True),
    *_IFA_VERSIONS,
    _MRS_V2,
    *_EP_VERSIONS,
]
