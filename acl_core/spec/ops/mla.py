"""MLA family: DeepSeek's Multi-head Latent Attention pre-processing, MlaPrologV2WeightNz and MlaPrologV3WeightNz
(issue 16: vllm-ascend's MLA decode reaches them through torch_npu.npu_mla_prolog_v2 / _v3).

What the operator computes (the non-quantised path, the one implemented), each fact with where it was pinned.
Sources: CANN's documents ``attention/mla_prolog_v2/docs/aclnnMlaPrologV2WeightNz.md`` and
``attention/mla_prolog_v3/docs/aclnnMlaPrologV3WeightNz.md`` (prototype, shapes, dtype table, error codes),
the operator's design note ``attention/mla_prolog/docs/MlaProlog算子设计介绍.md`` and its kernels under
``attention/mla_prolog/op_kernel/`` in hicann/ops-transformer (the V2 / V3 kernels are MlaProlog's template);
torch_npu's ``npu_mla_prolog_v2`` page and vllm-ascend's / other callers' ``npu_mla_prolog_v2`` call sites.

With ``x`` the T = B*S token rows of tokenX (He wide), N heads, D nope and Dr rope dims per head:

1. ``cq = x @ Wdq`` (He -> Hcq) and ``ckvkr = x @ Wdkvkr`` (He -> Hckv + Dr): columns ``[0, Hckv)`` are
   W^DKV, ``[Hckv, Hckv + Dr)`` W^KR (design note eq. 7; kernel ``ropeKrOffset = headSizeCkv + ...``).
2. ``cqn = RmsNorm(cq) * qcQrScale`` with ``RmsNorm(v) = v / sqrt(mean(v^2) + eps) * gamma`` (documents'
   formula; kernel ``RmsNorm`` divides by ``sqrt(sum/H + eps)``, multiplies gamma, then the scale when it is
   not 1: ``isScaleEnable``). qcQrScale is V3's alpha_q, 1 in V2.
3. ``qcqr = cqn @ Wuqqr`` (Hcq -> N*(D+Dr)). *Column split*: head ``h`` owns columns
   ``[h*(D+Dr), (h+1)*(D+Dr))``, its first D are W^UQ (q^C, nope), the last Dr W^QR (kernel
   ``ComputeAivOffset``: ``ropeQrOffset = dimHeadSizeQc + numHeadSize*(dimHeadSizeQc+dimHeadRope)*token`` and
   ``ComputeAicOffset``: ``qcOffset = (dimHeadSizeQc + dimHeadRope) * head``).
4. ``queryOut[t, h] = qcqr[t, h, :D] @ Wuk[h]`` (Wuk is (N, D, Hckv); kernel ``weightUkOffset = D*Hckv*head``).
5. ``queryRopeOut[t, h] = ROPE(qcqr[t, h, D:])``, cos / sin rows of token t shared by the heads.
6. ``kvCacheRef[slot(t)] = RmsNorm(ckvkr[t, :Hckv]) * kcScale`` (gamma rmsnormGammaCkv, eps
   rmsnormEpsilonCkv; kcScale is V3's alpha_kv, 1 in V2; same kernel RmsNorm with its scale).
7. ``krCacheRef[slot(t)] = ROPE(ckvkr[t, Hckv:])``.

*ROPE* (design note eq. 15 and kernels ``GatherSinCos`` / ``RotaryPosEmb``): the input's even and odd
elements are split (de-interleaved), the output is in rotate-half order, and ropeCos / ropeSin are used
element by element over all Dr columns: ``out[p] = x[2p]*cos[p] - x[2p+1]*sin[p]`` and
``out[p + Dr/2] = x[2p+1]*cos[p + Dr/2] + x[2p]*sin[p + Dr/2]`` (``GatherSinCos`` negates the first half of
sin; ``RotaryPosEmb`` gathers x's even then odd elements and multiplies by cos, and by sin with the halves
swapped). This is RotaryPositionEmbedding's mode 3 and KvRmsNormRopeCache's rotation. Callers pass
"separately doubled" tables (``cos[p] = cos[p + Dr/2]``), but the operator reads all Dr values.

*Caches*: ``cacheIndex`` holds one slot per token in ``[0, BlockNum*BlockSize)``; a negative slot is skipped
(kernel ``ScatterCache``: ``if (paTokenIndex < 0) return``; vLLM's PAD_SLOT_ID is -1, so -1 is the accepted
padding value here and any other value outside the range is refused with 161002: by the reference at
launch, by rocm at synchronisation, nothing written; with an empty cache (BlockNum 0) the index is not
read, as CANN documents "not updated"). cacheModeOptional (null = "PA_BSND"):

* "PA_BSND": the caches are ND ``(BlockNum, BlockSize, 1, Hckv)`` / ``(BlockNum, BlockSize, 1, Dr)``; slot
  ``s`` is row ``s % BlockSize`` of block ``s // BlockSize``.
* "PA_NZ": each block is stored FRACTAL_NZ while the tensor stays ND-described (documents: format ND, the
  same 4-D shape; design note: "the whole block is stored as NZ", stride 32 B * BlockSize between a row's
  32-byte pieces; kernel ``ScatterCache``: cache ``[blockNum, ceil(col/col0), blockSize, col0]``, col0 = 32
  bytes of the element = 16 bf16). So the block's (BlockSize, W) values, read in the tensor's logical
  (row-major) order, are the NZ tiles: element ``j`` of slot ``s`` is logical element
  ``(j // 16) * BlockSize * 16 + (s % BlockSize) * 16 + j % 16`` of block ``s // BlockSize``. Hckv and Dr
  must be multiples of 16 here.

*Rounding* (kernel ``MLAPType``, the bf16 path): every matmul accumulates in float32 and stores bf16
(cq, ckvkr, qcqr, queryOut), RmsNorm and ROPE compute in float32 from bf16 and store bf16 (cqn, the
caches, queryRopeOut). The reference rounds to bf16 at exactly those points (computing each step in
float64), so its intermediates are the kernel's. Accuracy: the composite class with bf16's unit roundoff:
a backend that rounds at the same points differs from the reference only where an intermediate's float32
and float64 results straddle a bf16 rounding boundary; such an intermediate is then one bf16 ulp away,
and the output moves by at most that relative error of the terms it sums. ``S`` (:func:`error_scale`) is
each output's magnitude sum: ``|q^C| @ |Wuk|`` with ``|q^C| <= |cqn| @ |Wuqqr|`` for queryOut, the rotation
of ``|cqn| @ |W^QR|`` / ``|x| @ |W^KR|`` by ``|cos|, |sin|`` for the ropes, ``|y|`` for the kv cache rows
plus what RmsNorm carries of c^KV's float32 GEMM error (``γ_He`` of float32 times ``|x| @ |W^DKV|``, times
``|gamma|·kcScale·rstd``: a cancelled c^KV element is many bf16 ulps off before its store), 0 for cache rows not
written (exact); the length is the three bf16 roundings before the output's own.

*Choices where the documents are silent or stricter*: CANN fixes He (7168, 7680, ...), Hcq = 1536,
Hckv = 512, D = 128, Dr = 64, N in {1, 2, 4, ..., 128}, BlockSize 16 or 128 (V3: multiples of 16 up to
1024), S <= 16; this project takes any positive sizes with Dr even, BlockSize a multiple of 16 (and the
PA_NZ widths above), so smaller cases exercise the same code. Nkv must be 1. Shape errors are 161002
(the documents' row for unsupported shapes). Repeated slots: CANN gives no order; the reference keeps
the last token's row, rocm writes in parallel (samples use distinct slots). ``dequantScaleQNopeOutOptional``
is not written in the non-quantised scenario (CANN gives it shape (1) "in other scenarios" without a
value); it may be null.

*Refused with 161002* (declared so, not implemented): every quantised scenario. INT8 tokenX / weights /
caches are not declared dtypes, and dequantScaleXOptional, dequantScaleWDqOptional,
dequantScaleWUqQrOptional, dequantScaleWDkvKrOptional, quantScaleCkvOptional, quantScaleCkrOptional and
smoothScalesCqOptional must be null. What the kernel source pins for the partial-quantisation scenario
(INT8 weightUqQr, bf16 caches), for a later change: c^Q's RmsNorm stays float32 (no bf16 store), times
smoothScalesCq when given; per row ``scale = rowmax|v| / 127`` and ``v * (127 / rowmax|v|)`` (two float32
divisions, ``DynamicQuant``) goes to INT8 by ``CastFP32ToINT8`` (round half to even to int32, then exact);
the int32 product is dequantised ``float(acc) * scale_row * dequantScaleWUqQr[col]`` in that order
(``Dequant``); q^C is stored bf16 (round to nearest even, ``DequantPerTokenQc``) before the Wuk matmul, q^R is
rotated from the float32 dequantised values. Not implemented here because the rocm composition needs a
float32-output RmsNorm and a dynamic quantisation in exactly that float32 order (the quant family's
DynamicQuant is written as a division by the scale), and whether Ascend's float32 vector division is
correctly rounded (it decides the INT8 values at ties) is not documented. The full-quantisation scenarios
add INT8 tokenX / weights (per-token and per-channel dequantisation before each RmsNorm), the per-tensor
INT8 kv cache and queryOut's dynamic per-token-head INT8 with dequantScaleQNopeOutOptional: INT8 outputs
compared exactly, with the same open question about the division.

V3 (``version_of`` V2): qcQrScale and kcScale are implemented (passed to V2's kernels); the parameters
V3's document marks reserved take only their documented values (actualSeqLenOptional null, queryNormFlag
false, weightQuantMode / kvQuantMode / queryQuantMode / ckvkrRepoMode / quantScaleRepoMode 0, tileSize 128,
kNopeClipAlpha 1.0, queryNormOptional / dequantScaleQNormOptional null); cacheModeOptional "PA_BSND" /
"PA_NZ" as V2 (the later "PA_BLK_BSND", "PA_BLK_NZ", "BSND", "TND" modes of a newer document are refused).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.nz import NZ_FORMATS, NzArray, check_nz_tensor
from acl_core.spec import samples as S
from acl_core.spec.accuracy import composite, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    IndexOf,
    Infos,
    OpSpec,
    OutInfo,
    Sample,
    bool_attr,
    float_attr,
    int_attr,
    invalid,
    out,
    ref,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import same, tensor_arg
from acl_core.spec.version import Added, version_of

FAMILY = "mla"

declare_plan("mla_nz_cache", "bool", "MlaProlog: cacheMode PA_NZ (each cache block stored FRACTAL_NZ)", bool)

BF16 = frozenset({D.ACL_BF16})
NZ_C0 = 16
"""Elements of one 32-byte NZ piece of a bf16 cache row (PA_NZ)."""
CACHE_MODES = ("PA_BSND", "PA_NZ")
LATER_MODES = ("PA_BLK_BSND", "PA_BLK_NZ", "BSND", "TND")
"""Cache modes of a newer V3 document: refused (161002) as not implemented."""
QUANT_TENSORS = (
    "dequantScaleXOptional",
    "dequantScaleWDqOptional",
    "dequantScaleWUqQrOptional",
    "dequantScaleWDkvKrOptional",
    "quantScaleCkvOptional",
    "quantScaleCkrOptional",
    "smoothScalesCqOptional",
)
SLOT_MARK = IndexOf("kvCacheRef", negative="pad", span=2)
"""cacheIndex's values are slots of the caches' first two dims; -1 is padding."""
ROUNDINGS = 3
"""bf16 roundings of intermediates before an output's own (cq, cqn, qcqr for queryOut): the class's length."""


# ----------------------------------------------------------------------------- shared geometry
def nz_cache_position(slot_row: int, j: int, block_size: int, width: int) -> tuple[int, int]:
    """(row, column) in a PA_NZ block's logical (BlockSize, width) view of element ``j`` of block row ``slot_row``."""
    flat = (j // NZ_C0) * block_size * NZ_C0 + slot_row * NZ_C0 + j % NZ_C0
    return flat // width, flat % width


def place_rows(cache: np.ndarray, rows: np.ndarray, slots: np.ndarray, nz: bool) -> np.ndarray:
    """A copy of ``cache (BlockNum, BlockSize, 1, W)`` with ``rows[t]`` at slot ``slots[t]`` (negative: skipped).

    PA_NZ places a row's elements where the block's NZ tiles keep them (:func:`nz_cache_position`).
    """
    result = np.array(cache, copy=True)
    block_size, width = result.shape[1], result.shape[3]
    if nz:
        j = np.arange(width)
    for t, slot in enumerate(np.asarray(slots).reshape(-1)):
        if slot < 0:
            continue
        block, row = divmod(int(slot), block_size)
        if nz:
            flat = (j // NZ_C0) * block_size * NZ_C0 + row * NZ_C0 + j % NZ_C0
            result[block, flat // width, 0, flat % width] = rows[t]
        else:
            result[block, row, 0] = rows[t]
    return result


def rope_pairs(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """The operator's ROPE over the last dim: x's even / odd elements rotated into halves, cos / sin per column."""
    evens, odds = x[..., 0::2], x[..., 1::2]
    return np.concatenate([evens, odds], axis=-1) * cos + np.concatenate([-odds, evens], axis=-1) * sin


def rms_norm(v: np.ndarray, gamma: np.ndarray, eps: float, scale: float) -> np.ndarray:
    """``v / sqrt(mean(v^2) + eps) * gamma * scale`` over the last dim, in float64."""
    return v / np.sqrt(np.mean(v * v, axis=-1, keepdims=True) + eps) * gamma * scale


def _tokens(args: Mapping[str, Any]) -> int:
    x = np.asarray(args["tokenX"])
    return int(math.prod(x.shape[:-1]))


def error_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The composite class's ``S`` per output (see the module docstring), from the arguments in float64."""
    f = np.float64
    x = np.asarray(args["tokenX"], f)
    x = x.reshape(_tokens(args), x.shape[-1])
    wdq, wuqqr = np.asarray(args["weightDq"], f), np.asarray(args["weightUqQr"], f)
    wuk, wdkvkr = np.asarray(args["weightUk"], f), np.asarray(args["weightDkvKr"], f)
    n, d, hckv = wuk.shape
    dr = wdkvkr.shape[1] - hckv
    t = x.shape[0]
    cos = np.abs(np.asarray(args["ropeCos"], f).reshape(t, dr))
    sin = np.abs(np.asarray(args["ropeSin"], f).reshape(t, dr))
    alpha = float(args.get("qcQrScale", 1.0))
    cqn = rms_norm(x @ wdq, np.asarray(args["rmsnormGammaCq"], f), float(args.get("rmsnormEpsilonCq", 1e-5)), alpha)
    mag_qcqr = (np.abs(cqn) @ np.abs(wuqqr)).reshape(t, n, d + dr)
    mag_query = np.einsum("thd,hdk->thk", mag_qcqr[..., :d], np.abs(wuk))

    def rope_mag(m: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
        evens, odds = m[..., 0::2], m[..., 1::2]
        return np.concatenate([evens, odds], axis=-1) * c + np.concatenate([odds, evens], axis=-1) * s

    mag_qrope = rope_mag(mag_qcqr[..., d:], cos[:, None, :], sin[:, None, :])
    ckv, gamma_kv = x @ wdkvkr[:, :hckv], np.asarray(args["rmsnormGammaCkv"], f)
    eps_kv, kc_scale = float(args.get("rmsnormEpsilonCkv", 1e-5)), float(args.get("kcScale", 1.0))
    kv = rms_norm(ckv, gamma_kv, eps_kv, kc_scale)
    # c^KV's float32 GEMM may miss float64's by γ_He(float32)·(|x| @ |W|) before its bf16 store: many bf16 ulps
    # of an element the sum cancels (the H100 run of 2026-12-06 saw 9 at -2e-5). RmsNorm carries that error
    # times |gamma·kcScale|·rstd; in the class's units (γ_(n+k) of bf16) it is this fraction of the sum.
    he = x.shape[1]
    carried = (he * 2.0**-24 / (1 - he * 2.0**-24)) / ((ROUNDINGS + 1) * 2.0**-8 / (1 - (ROUNDINGS + 1) * 2.0**-8))
    rstd = 1 / np.sqrt(np.mean(ckv * ckv, axis=-1, keepdims=True) + eps_kv)
    kv_scale = np.abs(kv) + carried * np.abs(gamma_kv * kc_scale) * rstd * (np.abs(x) @ np.abs(wdkvkr[:, :hckv]))
    mag_kr = rope_mag(np.abs(x) @ np.abs(wdkvkr[:, hckv:]), cos, sin)
    lead = tuple(np.asarray(args["tokenX"]).shape[:-1])
    nz = args.get("cacheModeOptional") == "PA_NZ"
    kvc, krc = np.asarray(outputs["kvCacheRef"]), np.asarray(outputs["krCacheRef"])
    slots = np.asarray(args["cacheIndex"]).reshape(-1) if kvc.shape[0] * kvc.shape[1] else np.zeros(0, np.int64)
    return {
        "queryOut": mag_query.reshape(*lead, n, hckv),
        "queryRopeOut": mag_qrope.reshape(*lead, n, dr),
        "kvCacheRef": place_rows(np.zeros(kvc.shape), kv_scale, slots, nz),
        "krCacheRef": place_rows(np.zeros(krc.shape), mag_kr, slots, nz),
    }


# ----------------------------------------------------------------------------- MlaPrologV2WeightNz
def _infer(call: Call) -> Infos:
    names = ("tokenX", "weightDq", "weightUqQr", "weightUk", "weightDkvKr", "rmsnormGammaCq", "rmsnormGammaCkv")
    x, wdq, wuqqr, wuk, wdkvkr, gq, gkv = (tensor_arg(call, n) for n in names)
    sin, cos, index = (tensor_arg(call, n) for n in ("ropeSin", "ropeCos", "cacheIndex"))
    kvc, krc = tensor_arg(call, "kvCacheRef"), tensor_arg(call, "krCacheRef")
    for name in QUANT_TENSORS:
        if call.args.get(name) is not None:
            raise invalid(f"{name} must be null: the quantised scenarios are not implemented (bf16 path only)")
    mode = call.args.get("cacheModeOptional")
    mode = "PA_BSND" if mode is None else mode
    if mode not in CACHE_MODES:
        if mode in LATER_MODES:
            raise invalid(f"cacheMode {mode!r} is not implemented (implemented: 'PA_BSND', 'PA_NZ')")
        raise invalid(f"cacheMode {mode!r} is unknown (CANN documents 'PA_BSND', 'PA_NZ')")
    for name, w in (("weightDq", wdq), ("weightUqQr", wuqqr), ("weightDkvKr", wdkvkr)):
        check_nz_tensor(w, name)
    for name, t in zip(names[1:], (wdq, wuqqr, wuk, wdkvkr, gq, gkv), strict=True):
        if t.numel == 0:
            raise invalid(f"{name} is empty; empty tensors are not supported for it")
    if x.rank not in (2, 3):
        raise invalid(f"tokenX must be (T, He) or (B, S, He), got shape {list(x.shape)}")
    lead = tuple(x.shape[:-1])
    he = x.shape[-1]
    if wuk.rank != 3:
        raise invalid(f"weightUk must be (N, D, Hckv), got shape {list(wuk.shape)}")
    n, d, hckv = wuk.shape
    if wdq.rank != 2 or wdq.shape[0] != he:
        raise invalid(f"weightDq has shape {list(wdq.shape)}; expected ({he}, Hcq)")
    hcq = wdq.shape[1]
    if wuqqr.rank != 2 or wuqqr.shape[0] != hcq or wuqqr.shape[1] % n:
        raise invalid(f"weightUqQr has shape {list(wuqqr.shape)}; expected ({hcq}, N*(D+Dr)) with N={n}")
    dr = wuqqr.shape[1] // n - d
    if dr <= 0 or dr % 2:
        per = wuqqr.shape[1] // n
        raise invalid(f"weightUqQr gives each of the {n} heads {per} columns: D={d} plus an even Dr > 0")
    if wdkvkr.rank != 2 or tuple(wdkvkr.shape) != (he, hckv + dr):
        raise invalid(f"weightDkvKr has shape {list(wdkvkr.shape)}; expected ({he}, Hckv+Dr) = ({he}, {hckv + dr})")
    for name, g, width in (("rmsnormGammaCq", gq, hcq), ("rmsnormGammaCkv", gkv, hckv)):
        if g.rank != 1 or g.shape[0] != width:
            raise invalid(f"{name} has shape {list(g.shape)}; expected ({width},)")
    for name, t in (("ropeSin", sin), ("ropeCos", cos)):
        if tuple(t.shape) != (*lead, dr):
            raise invalid(f"{name} has shape {list(t.shape)}; expected {[*lead, dr]}")
    if tuple(index.shape) != lead:
        raise invalid(f"cacheIndex has shape {list(index.shape)}; expected {list(lead)} (one slot per token)")
    for name, c, width in (("kvCacheRef", kvc, hckv), ("krCacheRef", krc, dr)):
        if c.rank != 4 or c.shape[2] != 1 or c.shape[3] != width:
            raise invalid(f"{name} has shape {list(c.shape)}; expected (BlockNum, BlockSize, 1, {width})")
    if tuple(kvc.shape[:2]) != tuple(krc.shape[:2]):
        raise invalid(f"kvCacheRef {list(kvc.shape)} and krCacheRef {list(krc.shape)} must share BlockNum, BlockSize")
    if kvc.shape[1] % 16:
        raise invalid(f"BlockSize {kvc.shape[1]} must be a multiple of 16")
    if mode == "PA_NZ" and (hckv % NZ_C0 or dr % NZ_C0):
        raise invalid(f"PA_NZ caches need Hckv ({hckv}) and Dr ({dr}) to be multiples of {NZ_C0} (32-byte pieces)")
    call.plan["mla_nz_cache"] = mode == "PA_NZ"
    infos: dict[str, OutInfo | None] = {
        "kvCacheRef": same(kvc.shape, kvc.dtype),
        "krCacheRef": same(krc.shape, krc.dtype),
        "queryOut": same((*lead, n, hckv), D.ACL_BF16),
        "queryRopeOut": same((*lead, n, dr), D.ACL_BF16),
        "dequantScaleQNopeOutOptional": None,
    }
    return infos


def mla_case(
    rng: np.random.Generator,
    lead: tuple[int, ...],
    *,
    he: int = 64,
    hcq: int = 48,
    heads: int = 2,
    d: int = 16,
    dr: int = 16,
    hckv: int = 32,
    blocks: int = 3,
    block_size: int = 16,
    mode: str | None = "PA_BSND",
    pad: bool = True,
) -> dict[str, Any]:
    """One bf16 MlaProlog call: weights scaled by 1/sqrt(fan-in) (outputs of order 1), distinct slots, one -1."""
    bf = D.ACL_BF16

    def weight(rows: int, cols: int) -> np.ndarray:
        limit = math.sqrt(3.0 / rows)
        return S.array(rng, (rows, cols), bf, low=-limit, high=limit)

    tokens = int(math.prod(lead))
    angles = rng.uniform(0, 2 * np.pi, size=(*lead, dr // 2))
    slots = rng.permutation(blocks * block_size)[:tokens].astype(np.int64)
    if slots.size < tokens:  # an empty cache (Skv = 0): the index is not read
        slots = np.full(tokens, -1, np.int64)
    if pad and tokens > 2:
        slots[1] = -1
    limit_uk = math.sqrt(3.0 / d)
    args: dict[str, Any] = {
        "tokenX": S.array(rng, (*lead, he), bf, low=-1.0, high=1.0),
        "weightDq": NzArray(weight(he, hcq)),
        "weightUqQr": NzArray(weight(hcq, heads * (d + dr))),
        "weightUk": S.array(rng, (heads, d, hckv), bf, low=-limit_uk, high=limit_uk),
        "weightDkvKr": NzArray(weight(he, hckv + dr)),
        "rmsnormGammaCq": S.array(rng, (hcq,), bf, low=0.5, high=1.5),
        "rmsnormGammaCkv": S.array(rng, (hckv,), bf, low=0.5, high=1.5),
        "ropeSin": np.sin(np.concatenate([angles, angles], axis=-1)).astype(bf.numpy),
        "ropeCos": np.cos(np.concatenate([angles, angles], axis=-1)).astype(bf.numpy),
        "cacheIndex": slots.reshape(lead),
        "kvCacheRef": S.array(rng, (blocks, block_size, 1, hckv), bf, low=-1.0, high=1.0),
        "krCacheRef": S.array(rng, (blocks, block_size, 1, dr), bf, low=-1.0, high=1.0),
        "rmsnormEpsilonCq": 1e-5,
        "rmsnormEpsilonCkv": 1e-5,
    }
    if mode is not None:
        args["cacheModeOptional"] = mode
    return args


def _samples(rng: np.random.Generator) -> Iterable[Sample]:
    yield Sample(mla_case(rng, (5,)), "bf16 T=5 PA_BSND (one padding slot)")
    yield Sample(mla_case(rng, (2, 3), mode="PA_NZ"), "bf16 B=2 S=3 PA_NZ")
    yield Sample(mla_case(rng, (4,), mode=None, pad=False), "bf16 cacheMode null (PA_BSND)")
    big = mla_case(rng, (3,), he=64, hcq=320, heads=3, d=16, dr=32, hckv=272, blocks=2, block_size=32, mode="PA_NZ")
    yield Sample(big, "bf16 rows past a 256-thread block, 3 heads, PA_NZ blocks of 32")
    yield Sample(mla_case(rng, (0,), blocks=2), "bf16 no tokens")
    yield Sample(mla_case(rng, (3,), blocks=0, pad=False), "bf16 empty caches (Skv=0): queries only")
    deep = mla_case(rng, (2, 1), he=128, hcq=192, heads=1, d=128, dr=64, hckv=512, blocks=2, mode="PA_NZ", pad=False)
    yield Sample(deep, "bf16 DeepSeek head dims (D 128, Dr 64, Hckv 512) PA_NZ")


def _errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = mla_case(rng, (3,))
    for mode in ("PA_BLK_NZ", "TND", "ND"):
        yield ErrorSample({**base, "cacheModeOptional": mode}, INVALID, f"cacheMode {mode}")
    scale = np.ones((1, 48), np.float32)
    yield ErrorSample({**base, "smoothScalesCqOptional": scale}, INVALID, "a quantisation scale (smoothScalesCq)")
    yield ErrorSample({**base, "dequantScaleWUqQrOptional": np.ones((1, 64), np.float32)}, INVALID, "dequantScaleWUqQr")
    yield ErrorSample({**base, "weightDq": np.asarray(base["weightDq"])}, INVALID, "weightDq in ND")
    yield ErrorSample({**base, "tokenX": base["tokenX"][0]}, INVALID, "1-d tokenX")
    yield ErrorSample({**base, "tokenX": base["tokenX"][:, :32].copy()}, INVALID, "tokenX's He against weightDq")
    yield ErrorSample({**base, "weightUk": base["weightUk"][:, :8].copy()}, INVALID, "weightUk's D against weightUqQr")
    odd = NzArray(np.asarray(base["weightUqQr"])[:, :62].copy())
    yield ErrorSample({**base, "weightUqQr": odd}, INVALID, "weightUqQr not whole heads")
    yield ErrorSample({**base, "rmsnormGammaCq": base["rmsnormGammaCq"][:40].copy()}, INVALID, "gamma Cq width")
    yield ErrorSample({**base, "ropeCos": base["ropeCos"][:, :8].copy()}, INVALID, "ropeCos width")
    yield ErrorSample({**base, "cacheIndex": base["cacheIndex"][:2].copy()}, INVALID, "cacheIndex length")
    yield ErrorSample({**base, "kvCacheRef": base["kvCacheRef"][:, :, :, :16].copy()}, INVALID, "kv cache width")
    two = np.concatenate([base["kvCacheRef"], base["kvCacheRef"]], axis=2)
    yield ErrorSample({**base, "kvCacheRef": two}, INVALID, "Nkv 2")
    yield ErrorSample({**base, "krCacheRef": base["krCacheRef"][:2].copy()}, INVALID, "kr cache blocks")
    small = {**base, "kvCacheRef": base["kvCacheRef"][:, :8].copy(), "krCacheRef": base["krCacheRef"][:, :8].copy()}
    yield ErrorSample(small, INVALID, "BlockSize 8")
    narrow = mla_case(rng, (3,), hckv=24, mode="PA_NZ")
    yield ErrorSample(narrow, INVALID, "PA_NZ with Hckv not a multiple of 16")
    yield ErrorSample({**base, "cacheIndex": np.array([0, 48, 3], np.int64)}, INVALID, "slot past the cache")
    yield ErrorSample({**base, "cacheIndex": np.array([0, -2, 3], np.int64)}, INVALID, "slot -2")


MLA_PROLOG_V2_WEIGHT_NZ = OpSpec(
    "MlaPrologV2WeightNz",
    FAMILY,
    (
        tensor("tokenX", BF16, min_rank=2, max_rank=3),
        tensor("weightDq", BF16, formats=NZ_FORMATS, min_rank=2, max_rank=2),
        tensor("weightUqQr", BF16, formats=NZ_FORMATS, min_rank=2, max_rank=2),
        tensor("weightUk", BF16, min_rank=3, max_rank=3),
        tensor("weightDkvKr", BF16, formats=NZ_FORMATS, min_rank=2, max_rank=2),
        tensor("rmsnormGammaCq", BF16, min_rank=1, max_rank=1),
        tensor("rmsnormGammaCkv", BF16, min_rank=1, max_rank=1),
        tensor("ropeSin", BF16, min_rank=2, max_rank=3),
        tensor("ropeCos", BF16, min_rank=2, max_rank=3),
        tensor("cacheIndex", {D.ACL_INT64}, min_rank=1, max_rank=2, index_of=SLOT_MARK),
        ref("kvCacheRef", BF16, max_rank=4),
        ref("krCacheRef", BF16, max_rank=4),
        # the quantised scenarios' FLOAT scales: they must stay null here, so they declare no dtype set (no value
        # case could prove a FLOAT claim for them), as KvRmsNormRopeCache's
        *(tensor(name, None, optional=True) for name in QUANT_TENSORS),
        float_attr("rmsnormEpsilonCq", default=1e-5),
        float_attr("rmsnormEpsilonCkv", default=1e-5),
        string_attr("cacheModeOptional", optional=True),
        out("queryOut", BF16),
        out("queryRopeOut", BF16),
        out("dequantScaleQNopeOutOptional", None, optional=True),
    ),
    _infer,
    samples=_samples,
    error_samples=_errors,
    summary="MLA pre-processing: q/kv down-projections, RmsNorm, q up-projection and Wuk, RoPE, paged-cache writes",
)


# ----------------------------------------------------------------------------- MlaPrologV3WeightNz
def _reserved(name: str, param: Any, value: Any) -> Added:
    return Added(param, f"is reserved (CANN's V3 document: pass {value!r}); other values are not implemented", (value,))


def _v3_samples(rng: np.random.Generator) -> Iterable[Sample]:
    """V2's samples (the same names), then the scale factors."""
    yield from _samples(rng)
    yield Sample({**mla_case(rng, (4,)), "qcQrScale": 0.5, "kcScale": 1.75}, "bf16 qcQrScale 0.5, kcScale 1.75")
    yield Sample({**mla_case(rng, (2, 2), mode="PA_NZ"), "qcQrScale": 2.0, "kcScale": 0.25}, "bf16 PA_NZ scaled")


MLA_PROLOG_V3_WEIGHT_NZ = version_of(
    MLA_PROLOG_V2_WEIGHT_NZ,
    "MlaPrologV3WeightNz",
    (
        "tokenX",
        "weightDq",
        "weightUqQr",
        "weightUk",
        "weightDkvKr",
        "rmsnormGammaCq",
        "rmsnormGammaCkv",
        "ropeSin",
        "ropeCos",
        "cacheIndex",
        "kvCacheRef",
        "krCacheRef",
        *QUANT_TENSORS,
        "actualSeqLenOptional",
        "rmsnormEpsilonCq",
        "rmsnormEpsilonCkv",
        "cacheModeOptional",
        "queryNormFlag",
        "weightQuantMode",
        "kvQuantMode",
        "queryQuantMode",
        "ckvkrRepoMode",
        "quantScaleRepoMode",
        "tileSize",
        "kNopeClipAlpha",
        "qcQrScale",
        "kcScale",
        "queryOut",
        "queryRopeOut",
        "dequantScaleQNopeOutOptional",
        "queryNormOptional",
        "dequantScaleQNormOptional",
    ),
    added={
        "actualSeqLenOptional": Added(
            tensor("actualSeqLenOptional", None, optional=True), "is reserved (CANN's V3 document: pass null)"
        ),
        "queryNormFlag": _reserved("queryNormFlag", bool_attr("queryNormFlag", default=False), False),
        "weightQuantMode": _reserved("weightQuantMode", int_attr("weightQuantMode", default=0), 0),
        "kvQuantMode": _reserved("kvQuantMode", int_attr("kvQuantMode", default=0), 0),
        "queryQuantMode": _reserved("queryQuantMode", int_attr("queryQuantMode", default=0), 0),
        "ckvkrRepoMode": _reserved("ckvkrRepoMode", int_attr("ckvkrRepoMode", default=0), 0),
        "quantScaleRepoMode": _reserved("quantScaleRepoMode", int_attr("quantScaleRepoMode", default=0), 0),
        "tileSize": _reserved("tileSize", int_attr("tileSize", default=128), 128),
        "kNopeClipAlpha": Added(
            float_attr("kNopeClipAlpha", default=1.0),
            "is reserved (CANN's V3 document: pass 1.0); other values are not implemented",
            (1.0,),
            refused=0.5,
        ),
        "qcQrScale": Added(float_attr("qcQrScale", default=1.0), "scales RmsNorm(cq) (alpha_q)", None),
        "kcScale": Added(float_attr("kcScale", default=1.0), "scales RmsNorm(ckv) (alpha_kv)", None),
        "queryNormOptional": Added(
            out("queryNormOptional", None, optional=True), "is reserved (CANN's V3 document: pass null)"
        ),
        "dequantScaleQNormOptional": Added(
            out("dequantScaleQNormOptional", None, optional=True), "is reserved (CANN's V3 document: pass null)"
        ),
    },
    passthrough={"qcQrScale": "qcQrScale", "kcScale": "kcScale"},
    samples=_v3_samples,
    summary="MlaPrologV2WeightNz with the query / key scale factors qcQrScale and kcScale (V3's reserved modes 0)",
)


SPECS: list[OpSpec] = with_accuracy(
    [MLA_PROLOG_V2_WEIGHT_NZ, MLA_PROLOG_V3_WEIGHT_NZ],
    {
        "MlaPrologV2WeightNz": composite(
            steps=1,
            length_of=lambda args, outputs: ROUNDINGS,
            scale_of=error_scale,
            accumulate=D.ACL_BF16,
            reason="GEMMs and RmsNorm chained through bf16 intermediates (CANN's kernel stores them bf16): an"
            " intermediate one bf16 ulp off moves an output by u_bf16 of the magnitudes it sums",
        ),
    },
)
