"""QkvRmsNormRopeCache: a fused attention prologue (split qkv, RmsNorm q and k, rotate them, quantise and
scatter k and v into PA_NZ caches) — what one decode layer of Qwen3 does in four launches.

``qkv [T = B*S, (Nq + Nk + Nv) * D]`` is split per token into Nq query, Nk key and Nv value heads of D
elements. ``y = x / sqrt(mean(x^2) + epsilon) * gamma`` over each head's D (qGamma for q, kGamma for k),
then rotated half-and-half: ``y * cos + cat(-y[D/2:], y[:D/2]) * sin`` with ``cos, sin [T, D]``. q goes
to ``qOut [T, Nq * D]``; k (normalised and rotated) and v (as it is) go to token ``t``'s slot
``index[t]`` of ``kCache`` / ``vCache``: slot ``s`` is row ``s % BlockSize`` of block ``s // BlockSize``
in CANN's PA_NZ layout ``[BlockNum, N * D // P, BlockSize, P]`` (``P`` = 16 for 16-bit caches, 32 for
INT8), so element ``c`` of the token's ``N * D`` row sits at ``[block, c // P, row, c % P]``. An INT8
cache is quantised ``round(x / scale (+ offset))`` with ``scale``/``offset [N, D]`` FLOAT32.

Choices where CANN's documents are silent (or contradict themselves):

* D: the documents say "currently only 128 is supported"; other head dims are refused (161002).
* Arithmetic: the reference computes in float64 and rounds once into each 16-bit output. The quantised
  value is formed as AddRmsNormQuant does: ``x`` (k after RmsNorm + RoPE, or v as read) is rounded once
  to FLOAT32, then ``x / scale`` and ``+ offset`` are FLOAT32 operations, rounded half to even and
  saturated to [-128, 127] (NaN to 0). A zero scale (the documents forbid it; values are device data and
  not checked) divides by zero as IEEE does, saturating.
* index: INT64 ``[T]``, each value in [-1, BlockNum * BlockSize); -1 skips the token (its k and v are
  written nowhere; qOut and the BeforeQuant outputs are still written). Any other value is refused with
  161002 by the kernel (at launch on the reference, at synchronisation on rocm) and nothing is written.
  Repeated slots: the documents require unique values; the reference keeps the last token's row, rocm
  writes them in parallel (which lands is unspecified; samples use unique slots).
* The BeforeQuant outputs: the documents give all three the shape ``[T, Nq * D]`` (a copy slip: kOut and
  vOut hold k and v); here ``qOutBeforeQuant [T, Nq * D]`` (= qOut), ``kOutBeforeQuant [T, Nk * D]`` (k after
  RmsNorm + RoPE, before quantisation) and ``vOutBeforeQuant [T, Nv * D]`` (= v), qkv's dtype, each written
  when given (null: not written; the Pythonic layer allocates them).
* Caches: kCache and vCache share BlockNum and BlockSize (one index addresses both); each is qkv's dtype
  (not quantised) or INT8 (quantised); BlockSize must be a multiple of 16 for a 16-bit cache and of 32
  for an INT8 one (both caches' rules apply, as the documents say for mixed dtypes); BlockNum must be at
  least ``ceil(S / BlockSize) * B``. kScaleOptional is required (161001 when null) exactly when kCache is
  INT8 and refused (161002) otherwise; kOffsetOptional (asymmetric) is accepted only beside kScaleOptional.
  Likewise vScale / vOffset with vCache.
* headNums ``[Nq, Nk, Nv]``: positive, Nk = Nv, summing to qkvSize's N; qkvSize ``[B, S, N, D]``: four
  positive values with ``B * S`` and ``N * D`` qkv's two dims. Non-contiguous views are accepted for every tensor.
* cacheModeOptional: null or "PA_NZ" (the mode documented, and the default), or "PA" / "PA_BNSD": an extension
  taken from KvRmsNormRopeCache's modes of the same names, for the ND paged caches ScatterPaKvCache writes (the
  Qwen3 runner's): ``[BlockNum, BlockSize, N, D]``, slot ``s`` at ``[s // BlockSize, s % BlockSize]``, no
  BlockSize alignment (CANN states it for PA_NZ). Any other mode is refused (161002).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec import samples as S
from acl_core.spec.accuracy import table, with_accuracy
from acl_core.spec.opspec import (
    INVALID,
    NULLPTR,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    OutInfo,
    Sample,
    float_attr,
    int_array,
    invalid,
    nullptr,
    out,
    ref,
    string_attr,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import same, tensor_arg
from acl_core.tensor import AclIntArray, AclTensor

FAMILY = "norm_rope_cache"

declare_plan(
    "qkv_cache_layout",
    "'nz' | 'nd'",
    "QkvRmsNormRopeCache's caches: PA_NZ [BlockNum, N*D/P, BlockSize, P] or ND [BlockNum, BlockSize, N, D]"
    " (PA, PA_BNSD)",
    str,
    ("nz", "nd"),
)
MODES = {"PA_NZ": "nz", "PA": "nd", "PA_BNSD": "nd"}
"""cacheModeOptional's accepted values and the cache layout each names (PA / PA_BNSD: this project's extension)."""

HALF = frozenset({D.ACL_FLOAT16, D.ACL_BF16})
CACHE = HALF | {D.ACL_INT8}
HEAD_DIM = 128
"""The only head dim CANN's documents support."""
PAD = -1
"""The index value of a token whose k and v are not written."""


def piece(dtype: D) -> int:
    """The NZ fractal width of a cache of ``dtype``: 32 bytes of elements (16 for 16-bit, 32 for INT8)."""
    return 32 if dtype == D.ACL_INT8 else 16


def _ints(call: Call, name: str, count: int) -> tuple[int, ...]:
    arr = call.args[name]
    values = tuple(int(v) for v in (arr.values if isinstance(arr, AclIntArray) else arr))
    if len(values) != count or any(v <= 0 for v in values):
        raise invalid(f"{name} must hold {count} positive values, got {list(values)}")
    return values


def _opt(call: Call, name: str) -> AclTensor | None:
    t = call.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _shape(t: AclTensor, name: str, want: tuple[int, ...]) -> None:
    if tuple(t.shape) != want:
        raise invalid(f"{name} has shape {list(t.shape)}; it must be {list(want)}")


def _quant_args(call: Call, cache: AclTensor, which: str, heads: int, d: int) -> None:
    scale, offset = _opt(call, f"{which}ScaleOptional"), _opt(call, f"{which}OffsetOptional")
    cname = f"{which}Cache"
    if cache.dtype == D.ACL_INT8:
        if scale is None:
            raise nullptr(f"{which}ScaleOptional is null but {cname} is INT8 (a quantised cache needs its scale)")
    elif scale is not None or offset is not None:
        raise invalid(f"{which}ScaleOptional / {which}OffsetOptional are given but {cname} is not INT8")
    for pname, t in ((f"{which}ScaleOptional", scale), (f"{which}OffsetOptional", offset)):
        if t is not None:
            if t.dtype != D.ACL_FLOAT:
                raise invalid(f"{pname} has dtype {t.dtype.short}; it must be FLOAT32")
            _shape(t, pname, (heads, d))


def _infer(call: Call) -> Infos:
    qkv, qg, kg, cos, sin, index = (tensor_arg(call, n) for n in ("qkv", "qGamma", "kGamma", "cos", "sin", "index"))
    kc, vc = tensor_arg(call, "kCache"), tensor_arg(call, "vCache")
    mode = call.args.get("cacheModeOptional") or "PA_NZ"
    if mode not in MODES:
        raise invalid(f"cacheModeOptional {mode!r} is unknown (CANN documents 'PA_NZ'; 'PA' / 'PA_BNSD' are ND caches)")
    layout = MODES[mode]
    b, s, n, d = _ints(call, "qkvSize", 4)
    nq, nk, nv = _ints(call, "headNums", 3)
    if d != HEAD_DIM:
        raise invalid(f"qkvSize's D={d}: only D={HEAD_DIM} is supported")
    if nq + nk + nv != n or nk != nv:
        raise invalid(f"headNums {[nq, nk, nv]} must sum to qkvSize's N={n}, with Nk = Nv")
    tokens = b * s
    if qkv.rank != 2 or tuple(qkv.shape) != (tokens, n * d):
        raise invalid(f"qkv has shape {list(qkv.shape)}; qkvSize gives [{tokens}, {n * d}]")
    for pname, t in (("qGamma", qg), ("kGamma", kg), ("cos", cos), ("sin", sin)):
        if t.dtype != qkv.dtype:
            raise invalid(f"{pname} has dtype {t.dtype.short}; it must match qkv's {qkv.dtype.short}")
    _shape(qg, "qGamma", (d,))
    _shape(kg, "kGamma", (d,))
    _shape(cos, "cos", (tokens, d))
    _shape(sin, "sin", (tokens, d))
    _shape(index, "index", (tokens,))
    if kc.rank != 4 or vc.rank != 4:
        raise invalid(f"kCache {list(kc.shape)} and vCache {list(vc.shape)} must have rank 4 (PA_NZ)")
    blocks, block_size = kc.shape[0], kc.shape[2 if layout == "nz" else 1]
    for cname, c, heads in (("kCache", kc, nk), ("vCache", vc, nv)):
        if c.dtype not in (qkv.dtype, D.ACL_INT8):
            raise invalid(f"{cname} has dtype {c.dtype.short}; it must be qkv's {qkv.dtype.short} or INT8")
        if layout == "nd":
            _shape(c, cname, (blocks, block_size, heads, d))
            continue
        p = piece(c.dtype)
        _shape(c, cname, (blocks, heads * d // p, block_size, p))
        if block_size % p:
            raise invalid(f"BlockSize {block_size} must be a multiple of {p} for a {c.dtype.short} {cname}")
    if blocks < -(-s // block_size) * b:
        raise invalid(f"BlockNum {blocks} must be at least ceil(S / BlockSize) * B = {-(-s // block_size) * b}")
    _quant_args(call, kc, "k", nk, d)
    _quant_args(call, vc, "v", nv, d)
    call.plan["qkv_cache_layout"] = layout
    infos: dict[str, OutInfo | None] = {
        "qOut": same((tokens, nq * d), qkv.dtype),
        "kCache": same(kc.shape, kc.dtype),
        "vCache": same(vc.shape, vc.dtype),
    }
    for oname, heads in (("qOutBeforeQuant", nq), ("kOutBeforeQuant", nk), ("vOutBeforeQuant", nv)):
        given = call.args.get(oname) is not None or not call.outputs_required
        infos[oname] = same((tokens, heads * d), qkv.dtype) if given else None
    return infos


# ----------------------------------------------------------------------------- samples
def case(
    rng: np.random.Generator,
    dt: D,
    b: int,
    s: int,
    heads: tuple[int, int, int],
    *,
    block_size: int = 16,
    blocks: int | None = None,
    k_int8: bool = False,
    v_int8: bool = False,
    asym: bool = False,
    pad: int = 1,
    mode: str = "PA_NZ",
) -> dict[str, Any]:
    """One call's arguments: ``b * s`` tokens, distinct slots in shuffled order, the first ``pad`` of them -1."""
    nq, nk, nv = heads
    d, tokens = HEAD_DIM, b * s
    blocks = blocks if blocks is not None else -(-s // block_size) * b + 1
    angles = rng.uniform(0, 2 * np.pi, size=(tokens, d // 2))
    angles = np.concatenate([angles, angles], axis=1)
    index = rng.permutation(blocks * block_size)[:tokens].astype(np.int64)
    index[: min(pad, tokens)] = PAD

    def cache(heads_n: int, int8: bool) -> np.ndarray:
        p = 32 if int8 else 16
        nd = MODES[mode] == "nd"
        shape = (blocks, block_size, heads_n, d) if nd else (blocks, heads_n * d // p, block_size, p)
        return rng.integers(-100, 100, shape).astype(np.int8) if int8 else S.array(rng, shape, dt)

    args: dict[str, Any] = {
        "qkv": S.array(rng, (tokens, (nq + nk + nv) * d), dt, low=-3, high=3),
        "qGamma": S.array(rng, (d,), dt, low=0.5, high=1.5),
        "kGamma": S.array(rng, (d,), dt, low=0.5, high=1.5),
        "cos": np.cos(angles).astype(dt.numpy),
        "sin": np.sin(angles).astype(dt.numpy),
        "index": index,
        "kCache": cache(nk, k_int8),
        "vCache": cache(nv, v_int8),
        "qkvSize": [b, s, nq + nk + nv, d],
        "headNums": [nq, nk, nv],
        "epsilon": 1e-6,
        "cacheModeOptional": mode,
    }
    for which, heads_n, on in (("k", nk, k_int8), ("v", nv, v_int8)):
        if on:
            args[f"{which}ScaleOptional"] = rng.uniform(0.01, 0.05, (heads_n, d)).astype(np.float32)
            if asym:
                args[f"{which}OffsetOptional"] = rng.uniform(-20, 20, (heads_n, d)).astype(np.float32)
    return args


def _samples(rng: np.random.Generator) -> Iterable[Sample]:
    f16, bf16 = D.ACL_FLOAT16, D.ACL_BF16
    for dt in (f16, bf16):
        yield Sample(case(rng, dt, 2, 3, (2, 1, 1)), f"{dt.short} 16-bit caches, 6 tokens, one padded")
        yield Sample(case(rng, dt, 1, 5, (3, 2, 2), block_size=32, pad=0), f"{dt.short} BlockSize 32, 2 kv heads")
        yield Sample(case(rng, dt, 2, 2, (2, 1, 1), block_size=32, k_int8=True, v_int8=True), f"{dt.short} int8 sym")
        yield Sample(
            case(rng, dt, 3, 1, (1, 2, 2), block_size=32, k_int8=True, v_int8=True, asym=True, pad=2),
            f"{dt.short} int8 asymmetric",
        )
    yield Sample(case(rng, bf16, 4, 1, (2, 1, 1), block_size=32, k_int8=True), "bf16 int8 k, bf16 v")
    yield Sample(case(rng, f16, 2, 1, (2, 1, 1), block_size=32, v_int8=True, asym=True), "fp16 fp16 k, int8 v")
    yield Sample(case(rng, bf16, 1, 1, (16, 8, 8), pad=0), "bf16 Qwen3-0.6B decode, one token")
    yield Sample(case(rng, bf16, 8, 1, (16, 8, 8), blocks=9), "bf16 Qwen3-0.6B decode, batch 8")
    yield Sample(case(rng, f16, 1, 37, (1, 1, 1), blocks=3, pad=3), "fp16 37 tokens over 3 blocks")
    yield Sample(case(rng, bf16, 2, 130, (1, 1, 1), pad=4), "bf16 260 tokens (more than a block checks inline)")
    yield Sample(
        case(rng, bf16, 8, 1, (16, 8, 8), blocks=8, block_size=5, mode="PA_BNSD"), "bf16 PA_BNSD Qwen3 batch 8"
    )
    nd8 = case(rng, f16, 2, 3, (2, 1, 1), block_size=7, k_int8=True, v_int8=True, asym=True, mode="PA")
    yield Sample(nd8, "fp16 PA (ND) int8 asymmetric, BlockSize 7")
    big = case(rng, f16, 1, 4, (1, 1, 1))
    big["qkv"][1, :64] = 300.0  # a large row: x^2 leaves float16's range, the mean must not overflow
    yield Sample(big, "fp16 large values")


def _errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
    base = case(rng, D.ACL_FLOAT16, 2, 1, (2, 1, 1))
    q8 = case(rng, D.ACL_FLOAT16, 2, 1, (2, 1, 1), block_size=32, k_int8=True, v_int8=True)
    yield ErrorSample({**base, "qkv": None}, NULLPTR, "null qkv")
    yield ErrorSample({**base, "qGamma": base["qGamma"].astype(np.float32)}, INVALID, "FLOAT32 qGamma")
    yield ErrorSample({**base, "kGamma": base["kGamma"].astype(D.ACL_BF16.numpy)}, INVALID, "kGamma dtype unlike qkv")
    half = {**base, "qkv": base["qkv"][:, : 4 * 64].copy(), "qkvSize": [2, 1, 4, 64]}
    half |= {"qGamma": base["qGamma"][:64].copy(), "kGamma": base["kGamma"][:64].copy()}
    yield ErrorSample(half, INVALID, "D 64")
    yield ErrorSample({**base, "qkvSize": [2, 1, 4]}, INVALID, "qkvSize of 3 values")
    yield ErrorSample({**base, "qkvSize": [1, 1, 4, 128]}, INVALID, "qkvSize unlike qkv")
    yield ErrorSample({**base, "headNums": [1, 2, 1]}, INVALID, "Nk != Nv")
    yield ErrorSample({**base, "headNums": [2, 1, 2]}, INVALID, "headNums not summing to N")
    yield ErrorSample({**base, "headNums": [4, 0, 0]}, INVALID, "no kv heads")
    yield ErrorSample({**base, "cos": base["cos"][:1].copy()}, INVALID, "cos rows")
    yield ErrorSample({**base, "sin": base["sin"][:, :64].copy()}, INVALID, "sin width")
    yield ErrorSample({**base, "index": base["index"].astype(np.int32)}, INVALID, "INT32 index")
    yield ErrorSample({**base, "index": base["index"][:1].copy()}, INVALID, "index length")
    yield ErrorSample({**base, "qOut": np.zeros((2, 128), np.float16)}, INVALID, "qOut shape")
    yield ErrorSample({**base, "kCache": base["kCache"].reshape(3, 4, 16, 32)}, INVALID, "16-bit cache of P=32")
    yield ErrorSample({**base, "vCache": base["vCache"].astype(D.ACL_BF16.numpy)}, INVALID, "bf16 vCache, fp16 qkv")
    yield ErrorSample({**base, "kCache": base["kCache"][:, :, :8].copy()}, INVALID, "BlockSize 8")
    yield ErrorSample({**base, "vCache": base["vCache"][:2].copy()}, INVALID, "vCache's BlockNum unlike kCache's")
    few = {**base, "kCache": base["kCache"][:1].copy(), "vCache": base["vCache"][:1].copy()}
    yield ErrorSample({**few, "index": np.array([-1, 3], np.int64)}, INVALID, "BlockNum below ceil(S/BS)*B")
    small = case(rng, D.ACL_FLOAT16, 2, 1, (2, 1, 1), block_size=16, k_int8=True)
    yield ErrorSample(small, INVALID, "int8 cache with BlockSize 16")
    yield ErrorSample({**q8, "kScaleOptional": None}, NULLPTR, "int8 kCache without kScale")
    yield ErrorSample({**q8, "vScaleOptional": None}, NULLPTR, "int8 vCache without vScale")
    yield ErrorSample({**base, "kScaleOptional": np.ones((1, 128), np.float32)}, INVALID, "kScale beside fp16 cache")
    yield ErrorSample({**base, "vOffsetOptional": np.ones((1, 128), np.float32)}, INVALID, "vOffset, fp16 cache")
    yield ErrorSample({**q8, "kScaleOptional": np.ones((2, 128), np.float32)}, INVALID, "kScale shape")
    yield ErrorSample({**q8, "vScaleOptional": np.ones((1, 128), np.float16)}, INVALID, "FLOAT16 vScale")
    yield ErrorSample({**base, "cacheModeOptional": "PA_BLK_NZ"}, INVALID, "cacheMode PA_BLK_NZ")
    yield ErrorSample({**base, "cacheModeOptional": "PA_BNSD"}, INVALID, "PA_BNSD with NZ-shaped caches")
    yield ErrorSample({**base, "kOutBeforeQuant": np.zeros((2, 256), np.float16)}, INVALID, "kOutBeforeQuant shape")
    slots = base["kCache"].shape[0] * base["kCache"].shape[2]
    yield ErrorSample({**base, "index": np.array([0, slots], np.int64)}, INVALID, "slot past the cache")
    yield ErrorSample({**base, "index": np.array([-2, 3], np.int64)}, INVALID, "slot -2")


QKV_RMS_NORM_ROPE_CACHE = OpSpec(
    "QkvRmsNormRopeCache",
    FAMILY,
    (
        tensor("qkv", HALF, max_rank=2, min_rank=2),
        tensor("qGamma", HALF, max_rank=1, min_rank=1),
        tensor("kGamma", HALF, max_rank=1, min_rank=1),
        tensor("cos", HALF, max_rank=2, min_rank=2),
        tensor("sin", HALF, max_rank=2, min_rank=2),
        tensor("index", {D.ACL_INT64}, max_rank=1, min_rank=1),
        out("qOut", HALF, max_rank=2),
        ref("kCache", CACHE, max_rank=4),
        ref("vCache", CACHE, max_rank=4),
        tensor("kScaleOptional", {D.ACL_FLOAT}, optional=True, max_rank=2),
        tensor("vScaleOptional", {D.ACL_FLOAT}, optional=True, max_rank=2),
        tensor("kOffsetOptional", {D.ACL_FLOAT}, optional=True, max_rank=2),
        tensor("vOffsetOptional", {D.ACL_FLOAT}, optional=True, max_rank=2),
        int_array("qkvSize"),
        int_array("headNums"),
        float_attr("epsilon", default=1e-6),
        string_attr("cacheModeOptional", optional=True),
        out("qOutBeforeQuant", HALF, optional=True, max_rank=2, c_type="const aclTensor*"),
        out("kOutBeforeQuant", HALF, optional=True, max_rank=2, c_type="const aclTensor*"),
        out("vOutBeforeQuant", HALF, optional=True, max_rank=2, c_type="const aclTensor*"),
    ),
    _infer,
    samples=_samples,
    error_samples=_errors,
    summary="Split qkv, RmsNorm + half-and-half RoPE of q and k, q to qOut, k and v (optionally INT8) to PA_NZ caches",
)

SPECS: list[OpSpec] = with_accuracy(
    [QKV_RMS_NORM_ROPE_CACHE],
    {
        "QkvRmsNormRopeCache": table(
            "RmsNorm followed by a rotation that negates half of its input (the magnitudes run cannot form its scale)"
            " beside copies and INT8 quantisation in one call: one class would have to cover every output"
        ),
    },
)
