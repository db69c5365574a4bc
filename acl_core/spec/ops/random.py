"""Random-number operators (issue 16): fills, Bernoulli, dropout masks and multinomial sampling.

CANN's contract is stateless: every op takes ``seed`` and ``offset`` and draws from Philox4x32-10;
the same (seed, offset) must give the same numbers. CANN does not publish how its kernels lay out
the Philox counter or turn words into values, so acl-core fixes one layout here and every backend
implements it bit for bit (the reference in NumPy, rocm in HIP source), which lets the conformance
suite compare a backend with the reference by value. The choices:

* **generator**: Philox4x32-10 (Salmon et al., Random123), key ``(k0, k1)`` = the low and high 32
  bits of ``seed`` (two's complement for a negative int64), checked against Random123's published
  known-answer vectors in tests/ops/test_random.py;
* **counter**: output element ``i`` (its position in C order of the view written, strides
  ignored) is computed from the four words of one Philox block, counter ``(lo(i), hi(i), lo(offset),
  hi(offset))``. The element index takes the low 64 bits (curand's in-sequence position) and the
  offset the high 64 bits (curand's subsequence), so every offset is its own stream of 2^64 blocks
  and any change of offset gives fresh numbers. A block per element wastes three words for most
  ops, but no element's value depends on how a kernel is launched;
* **fill layout** (InplaceUniform and InplaceNormal only; ``ACL_RANDOM_LAYOUT``, read by every
  backend at each call, so a backend and the reference always agree): ``packed`` (the default)
  feeds several elements from one block, still indexed by C-order position alone: a uniform of at
  most 32 digits takes word ``i % 4`` of block ``i // 4`` (its top ``p`` bits), a float64 uniform
  takes ``w(2t+1):w(2t)``, ``t = i % 2``, of block ``i // 2``; a normal pair ``2j, 2j + 1`` takes
  block ``j`` and both Box–Muller branches, ``r·cos θ`` then ``r·sin θ`` (``r``, ``θ`` as below);
  a normal count that is odd leaves the last block's ``r·sin θ`` unused. ``block`` is the counter
  layout above, a block per element. ``packed`` draws a quarter (uniform) or half (normal) of the
  Philox blocks and half of the logarithms and square roots, the arithmetic that (by count: ten
  Philox rounds an element) exceeds a float32 store's memory time on an H100; measured there
  (2026-12-06, 256 MiB of float32 beside torch's ``uniform_`` / ``normal_`` in the same run, acl
  time / torch time): InplaceUniform ``packed`` 0.81, ``block`` 1.96; InplaceNormal ``packed``
  2.56, ``block`` 4.06, hence the default. CANN documents only seed/offset determinism, which both
  layouts keep (issue 16);
* **uniform**: ``k`` = the top ``p`` bits of the element's words, ``p`` the output's significand
  digits (24 float32, 11 float16, 8 bfloat16, 53 float64 from ``w1:w0``), ``u = k·2^-p`` in [0, 1)
  (torch's CPU convention: a 16-bit result of [0, 1) is exact). The value is ``from + u·(to -
  from)`` in double, each step rounded once (no fused multiply-add), rounded once to the output; a
  value that rounds to ``to`` becomes ``from`` (torch's CUDA rule), so results lie in [from, to);
* **normal**: Box–Muller, cosine branch only (``packed``: both branches): ``u1 = (k1 + 1)·2^-53``
  in (0, 1] from ``w1:w0``, ``u2 = k2·2^-53`` from ``w3:w2``, ``z = sqrt(-2·ln u1)·cos(2π·u2)``,
  out = ``mean + std·z`` in double (mean and std first rounded to float, their C type), rounded once. The transcendental
  functions differ by a few double ulps between libm and the GPU's, so results agree to the float32
  ulp except in rare rounding ties. CANN documents Philox for the bits, not how the transform rounds,
  so a backend may also compute it in float32 for float32 and 16-bit outputs (rocm's
  ``ACL_RANDOM_NORMAL=float32``): the same uniforms, ``1 - u1`` and the quarter turn of
  ``2π·u2`` reduced exactly in integers, then ``logf`` / ``log1pf``, ``sqrtf``, ``sincospif`` and one
  fused ``mean + std·z``; its ``z`` lies within 6.75·2^-24 of the double one relative to ``|z|`` (by
  count with 1-ulp library calls; 4.02 measured over 2^23 draws of a NumPy model of its arithmetic);
  ``ACL_RANDOM_NORMAL=float32p`` (rocm's default since 2026-12-06) replaces those calls by minimax polynomials on
  the same reductions, within 5.0·2^-24 (4.80 measured over 2^23 draws of a bit-exact model,
  tests/rocm/test_random_float32p_cpu.py); rocm's ``split`` keeps the double transform.
  The accuracy class is therefore relative to ``std·|z| = |out - mean|`` (composite: ``γ_16·|out -
  mean| + 1 ulp``), not an ulp bound: where ``mean + std·z`` cancels, the output's ulp shrinks but
  ``z``'s error does not;
* **Bernoulli, dropout**: ``w0 < p·2^32`` (exact in double) is a success / a dropped element;
  DropoutGenMask(V2) compares with ``prob`` rounded to ``probDataType`` (float32 for V1), so a mask
  bit is 1 (keep) with probability 1 - prob. Mask bit ``i`` is bit ``i % 8`` (least significant
  first) of byte ``i // 8``; the mask has ``align(numel, 128) / 8`` bytes, CANN's size, and its
  padding bits are 0;
* **DropoutDoMask**: ``out = self · (bit ? 1/(1 - prob) : 0)`` in float32 (CANN's compute type):
  the scale is ``1/(1 - prob)`` in double rounded to float32 (0 when prob is 1), one float32 product
  rounded to the output, so a dropped NaN stays NaN (as torch's ``x * mask * scale``);
* **Multinomial**: sample ``s`` of row ``r`` uses element index ``r·numsamples + s``, ``u`` from
  53 bits of ``w1:w0``; the row's weights (not normalised) are summed in double in index order and
  the first category whose running sum exceeds ``u·total`` is chosen (inverse CDF, so a zero weight
  is never chosen; if rounding reaches the end, the last positive weight). Without replacement the
  draws are sequential: each draw repeats this over the categories not yet chosen. Negative,
  infinite or NaN weights, a row summing to 0, or (without replacement) fewer positive weights than
  ``numsamples`` are refused with 161002 when the kernel runs (the values live on the device).

Not declared yet: the ``...Tensor`` variants (seed and offset in device tensors), BernoulliTensor,
Normal{Float,Tensor}{Float,Tensor}, InplaceRandom, Randperm, DropoutV3 and Dropout.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import ml_dtypes
import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec import samples as S
from acl_core.spec.accuracy import composite, exact
from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    Infos,
    OpSpec,
    Sample,
    bool_attr,
    dtype_attr,
    float_attr,
    inplace_twin,
    int_array,
    int_attr,
    invalid,
    out,
    ref,
    scalar,
    tensor,
)
from acl_core.spec.plan import declare as declare_plan
from acl_core.spec.rules import FLOATS, FLOATS64, REAL_BOOL, listed, same, tensor_arg
from acl_core.tensor import AclIntArray, AclScalar

LAYOUT_ENV = "ACL_RANDOM_LAYOUT"
"""The environment variable choosing the fills' counter layout (the module docstring's "fill layout")."""
LAYOUTS = ("packed", "block")
"""The fill layouts, the default first (``packed``: the measured faster one, the module docstring's figures)."""


def fill_layout() -> str:
    """InplaceUniform's and InplaceNormal's counter layout now (``ACL_RANDOM_LAYOUT``; unset: ``packed``)."""
    value = os.environ.get(LAYOUT_ENV, "") or LAYOUTS[0]
    if value not in LAYOUTS:
        raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{LAYOUT_ENV}={value!r}: not one of {LAYOUTS}")
    return value


declare_plan("drop", "float", "the drop probability as the mask kernel compares it (rounded to probDataType)", float)
declare_plan("scale", "float", "DropoutDoMask's 1/(1 - prob) rounded to float32 (0 when prob is 1)", float)

FAMILY = "random"
MASK_ALIGN = 128
"""DropoutGenMask pads the element count to a multiple of 128 bits."""
PROB_DTYPES = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16})
"""DropoutGenMaskV2's probDataType: the dtype of the tensor the mask will drop from."""

_EXACT = exact("integer arithmetic on the shared Philox stream, and exactly rounded double steps: bit-identical")
_UNIFORM = exact("from + u·(to - from) in double on the shared stream, each step rounded once: bit-identical")
NORMAL_STEPS = 15
"""InplaceNormal's composite class: ``|y - ref| <= γ_(1+15)·|ref - mean| + 1 ulp``, ``γ`` in float32 (float64 for
float64 results); the module docstring's "normal" says why."""


def _normal_scale(args: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """InplaceNormal's error scale ``S = |y - mean| = std·|z|``: the transform's error is relative to ``z``."""
    mean = float(np.float32(args["mean"]))
    found = {}
    for name, value in outputs.items():
        y = np.asarray(value).astype(np.float64)
        with np.errstate(all="ignore"):
            found[name] = np.abs(y - mean)
    return found


_NORMAL = composite(
    steps=NORMAL_STEPS,
    length_of=lambda args, outputs: 1,
    scale_of=_normal_scale,
    signed_zero=False,
    reason="Box–Muller on the shared stream, its error relative to z: the double transform (libm's and the"
    " device's log and cos a few double ulps apart) or rocm's float32 one (ACL_RANDOM_NORMAL=float32: within"
    " 6.75·2^-24 of |z| by count, 4.02·2^-24 measured over 2^23 draws; float32p's polynomials within 5.0·2^-24),"
    " then mean + std·z rounded once: within"
    " γ_16·std·|z| + 1 ulp of the reference. An ulp bound would not hold for the float32 transform where"
    " mean + std·z cancels (its ulp shrinks, z's error does not)",
)
_DO_MASK = exact("one float32 product of the element and the kept scale, rounded once to the output")


def mask_bytes(numel: int) -> int:
    """Bytes of a DropoutGenMask mask for ``numel`` elements: align(numel, 128) / 8."""
    return -(-numel // MASK_ALIGN) * MASK_ALIGN // 8


def round_to(value: float, dtype: D) -> float:
    """``value`` rounded to float ``dtype`` (float32, float16 or bfloat16) and back to a Python float."""
    np_dtype = {D.ACL_FLOAT: np.float32, D.ACL_FLOAT16: np.float16, D.ACL_BF16: ml_dtypes.bfloat16}[dtype]
    return float(np.asarray(value, dtype=np.float64).astype(np_dtype).astype(np.float64))


def do_mask_scale(prob: float) -> float:
    """DropoutDoMask's scale of kept elements: 1/(1 - prob) in double rounded to float32, 0 when prob is 1."""
    return 0.0 if prob >= 1.0 else float(np.float32(1.0 / (1.0 - prob)))


def _seeds() -> tuple[tuple[int, int], ...]:
    """(seed, offset) pairs the samples use: zero, typical, negative (two's complement) and large."""
    return ((0, 0), (2024, 7), (-1, 2**40 + 3), (0x123456789ABCDEF, 1))


_FILL_SHAPES: tuple[tuple[int, ...], ...] = ((), (0,), (7,), (2, 3, 4), (257,), (33, 65))
"""Shapes the fills run at: 0-d, empty, odd, 3-d, a block (256) plus one, and 2,145 elements."""


# ----------------------------------------------------------------------------- InplaceUniform
def _inplace_uniform() -> OpSpec:
    params = (
        ref("selfRef", FLOATS64),
        float_attr("from"),
        float_attr("to"),
        int_attr("seed", c_type="uint64_t"),
        int_attr("offset", c_type="uint64_t"),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "selfRef")
        low, high = float(call.args["from"]), float(call.args["to"])
        if not (np.isfinite(low) and np.isfinite(high)):
            raise invalid(f"from={low} and to={high} must be finite")
        if low > high:
            raise invalid(f"from={low} must not exceed to={high}")
        return {"selfRef": same(t.view_dims, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        seeds = _seeds()
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE):
            for k, shape in enumerate(_FILL_SHAPES):
                seed, offset = seeds[k % len(seeds)]
                seed = seed % 2**64  # uint64_t here
                low, high = ((0.0, 1.0), (-3.0, 5.5), (2.0, 2.0), (-1e-3, 1e-3))[k % 4]
                args = {"selfRef": S.array(rng, shape, dt), "from": low, "to": high, "seed": seed, "offset": offset}
                yield Sample(args, f"{dt.short} {list(shape)} [{low}, {high}) seed {seed} offset {offset}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4,), D.ACL_FLOAT)
        yield ErrorSample({"selfRef": x, "from": 1.0, "to": 0.0, "seed": 1, "offset": 0}, INVALID, "from > to")
        yield ErrorSample({"selfRef": x, "from": 0.0, "to": np.inf, "seed": 1, "offset": 0}, INVALID, "to infinite")
        yield ErrorSample(
            {"selfRef": np.zeros(4, np.int32), "from": 0.0, "to": 1.0, "seed": 1, "offset": 0}, INVALID, "int32 selfRef"
        )
        yield ErrorSample({"selfRef": x, "from": 0.0, "to": 1.0, "seed": -1, "offset": 0}, INVALID, "negative seed")

    return OpSpec(
        "InplaceUniform",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=gen,
        error_samples=errors,
        accuracy=_UNIFORM,
        summary="selfRef filled with uniform values in [from, to)",
    )


# ----------------------------------------------------------------------------- InplaceNormal
def _inplace_normal() -> OpSpec:
    params = (
        ref("selfRef", FLOATS64),
        float_attr("mean", c_type="float"),
        float_attr("std", c_type="float"),
        int_attr("seed"),
        int_attr("offset"),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "selfRef")
        mean, std = float(np.float32(call.args["mean"])), float(np.float32(call.args["std"]))
        if not (np.isfinite(mean) and np.isfinite(std)):
            raise invalid(f"mean={mean} and std={std} must be finite (as float)")
        if std < 0:
            raise invalid(f"std={std} must be non-negative")
        return {"selfRef": same(t.view_dims, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        seeds = _seeds()
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE):
            for k, shape in enumerate(_FILL_SHAPES):
                seed, offset = seeds[k % len(seeds)]
                # float64 results: mean 0 keeps mean + std·z away from cancellation (see the accuracy class)
                mean, std = ((0.0, 1.0), (2.5, 0.5), (0.0, 0.0), (-1.0, 3.0))[k % 4]
                if dt == D.ACL_DOUBLE:
                    mean = 0.0
                args = {"selfRef": S.array(rng, shape, dt), "mean": mean, "std": std, "seed": seed, "offset": offset}
                yield Sample(args, f"{dt.short} {list(shape)} N({mean}, {std}) seed {seed} offset {offset}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4,), D.ACL_FLOAT)
        yield ErrorSample({"selfRef": x, "mean": 0.0, "std": -1.0, "seed": 1, "offset": 0}, INVALID, "negative std")
        yield ErrorSample({"selfRef": x, "mean": np.nan, "std": 1.0, "seed": 1, "offset": 0}, INVALID, "NaN mean")
        yield ErrorSample(
            {"selfRef": np.zeros(4, np.int64), "mean": 0.0, "std": 1.0, "seed": 1, "offset": 0}, INVALID, "int selfRef"
        )

    return OpSpec(
        "InplaceNormal",
        FAMILY,
        params,
        infer,
        alias_ok=True,
        samples=gen,
        error_samples=errors,
        accuracy=_NORMAL,
        summary="selfRef filled with normal values N(mean, std²)",
    )


# ----------------------------------------------------------------------------- Bernoulli
def _prob(call: Call) -> float:
    prob = call.args["prob"]
    assert isinstance(prob, AclScalar)
    value = prob.value
    p = float(value.real if isinstance(value, complex) else value)
    if not 0.0 <= p <= 1.0:
        raise invalid(f"prob={p} must lie in [0, 1]")
    return p


def _bernoulli() -> OpSpec:
    params = (
        tensor("self", REAL_BOOL),
        scalar("prob"),
        int_attr("seed"),
        int_attr("offset"),
        out("out", REAL_BOOL),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        _prob(call)
        return {"out": listed(t.view_dims, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        seeds = _seeds()
        dts = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE, D.ACL_INT64, D.ACL_INT8, D.ACL_BOOL)
        for j, dt in enumerate(dts):
            for k, shape in enumerate(_FILL_SHAPES):
                seed, offset = seeds[(j + k) % len(seeds)]
                p = (0.5, 0.1, 0.0, 1.0, 0.9)[(j + k) % 5]
                args = {"self": S.array(rng, shape, dt), "prob": p, "seed": seed, "offset": offset}
                yield Sample(args, f"{dt.short} {list(shape)} p={p} seed {seed} offset {offset}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (4,), D.ACL_FLOAT)
        yield ErrorSample({"self": x, "prob": 1.5, "seed": 0, "offset": 0}, INVALID, "prob above 1")
        yield ErrorSample({"self": x, "prob": -0.25, "seed": 0, "offset": 0}, INVALID, "negative prob")
        yield ErrorSample(
            {"self": x, "prob": 0.5, "seed": 0, "offset": 0, "out": np.zeros(5, np.float32)}, INVALID, "out shape"
        )

    return OpSpec(
        "Bernoulli",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        accuracy=_EXACT,
        summary="out = 1 with probability prob, else 0 (self gives only the shape)",
    )


# ----------------------------------------------------------------------------- dropout masks
def _gen_mask(v2: bool) -> OpSpec:
    params = [int_array("shape"), float_attr("prob"), int_attr("seed"), int_attr("offset")]
    if v2:
        params.append(dtype_attr("probDataType", dtypes=PROB_DTYPES))
    params.append(out("out", (D.ACL_UINT8,)))

    def infer(call: Call) -> Infos:
        shape = call.args["shape"]
        assert isinstance(shape, AclIntArray)
        dims = tuple(int(d) for d in shape.values)
        if any(d < 0 for d in dims):
            raise invalid(f"shape {list(dims)} has a negative dimension")
        prob = float(call.args["prob"])
        if not 0.0 <= prob <= 1.0:
            raise invalid(f"prob={prob} must lie in [0, 1]")
        dtype = D(call.args["probDataType"]) if v2 else D.ACL_FLOAT
        call.plan["drop"] = round_to(prob, dtype)
        return {"out": same((mask_bytes(int(np.prod(dims, dtype=object))),), D.ACL_UINT8)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        seeds = _seeds()
        cases: list[tuple[tuple[int, ...], float]] = [((7,), 0.5), ((2, 3, 4), 0.1), ((128,), 0.3), ((0,), 0.5)]
        cases += [((33, 65), 0.25), ((4099,), 0.9), ((5,), 0.0), ((300,), 1.0), ((), 0.5)]
        for k, (shape, prob) in enumerate(cases):
            seed, offset = seeds[k % len(seeds)]
            args: dict[str, object] = {"shape": list(shape), "prob": prob, "seed": seed, "offset": offset}
            if v2:
                for dt in sorted(PROB_DTYPES):
                    yield Sample({**args, "probDataType": dt}, f"{list(shape)} p={prob} {dt.short}")
            else:
                yield Sample(args, f"{list(shape)} p={prob} seed {seed}")
        if v2:  # 0.1 is not a float16 value: the comparison uses its float16 rounding
            args = {"shape": [1000], "prob": 0.1, "seed": 5, "offset": 9, "probDataType": D.ACL_FLOAT16}
            yield Sample(args, "p=0.1 as float16")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        base: dict[str, object] = {"shape": [8], "prob": 0.5, "seed": 0, "offset": 0}
        if v2:
            base["probDataType"] = D.ACL_FLOAT
        yield ErrorSample({**base, "prob": 1.5}, INVALID, "prob above 1")
        yield ErrorSample({**base, "shape": [2, -1]}, INVALID, "negative dimension")
        yield ErrorSample({**base, "out": np.zeros(1, np.uint8)}, INVALID, "mask too short")
        yield ErrorSample({**base, "out": np.zeros(16, np.int8)}, INVALID, "int8 mask")
        if v2:
            yield ErrorSample({**base, "probDataType": D.ACL_INT32}, INVALID, "int32 probDataType")

    return OpSpec(
        "DropoutGenMaskV2" if v2 else "DropoutGenMask",
        FAMILY,
        tuple(params),
        infer,
        samples=gen,
        error_samples=errors,
        accuracy=_EXACT,
        summary="a bit mask of align(numel, 128) bits, 1 (keep) with probability 1 - prob",
    )


def _do_mask() -> OpSpec:
    mask = tensor("mask", (D.ACL_UINT8,), max_rank=1)
    params = (tensor("self", FLOATS), mask, float_attr("prob"), out("out", FLOATS))

    def infer(call: Call) -> Infos:
        t, mask = tensor_arg(call, "self"), tensor_arg(call, "mask")
        prob = float(call.args["prob"])
        if not 0.0 <= prob <= 1.0:
            raise invalid(f"prob={prob} must lie in [0, 1]")
        need = mask_bytes(t.numel)
        if mask.rank != 1 or mask.numel != need:
            have = list(mask.view_dims)
            raise invalid(f"mask has shape {have}; {t.numel} elements need [{need}] (align(n, 128) / 8)")
        call.plan["scale"] = do_mask_scale(prob)
        return {"out": same(t.view_dims, t.dtype)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        shapes = ((7,), (2, 3, 4), (257,), (33, 65), (0,), ())
        for dt in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16):
            for k, shape in enumerate(shapes):
                n = int(np.prod(shape, dtype=np.int64))
                mask = rng.integers(0, 256, size=mask_bytes(n), dtype=np.uint8)
                prob = (0.5, 0.1, 0.0, 1.0, 0.3, 0.25)[k]
                x = S.array(rng, shape, dt, special=True)
                yield Sample({"self": x, "mask": mask, "prob": prob}, f"{dt.short} {list(shape)} p={prob}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        x = S.array(rng, (200,), D.ACL_FLOAT)
        good = np.zeros(mask_bytes(200), np.uint8)
        yield ErrorSample({"self": x, "mask": good[:-1], "prob": 0.5}, INVALID, "mask too short")
        yield ErrorSample({"self": x, "mask": good.astype(np.int8), "prob": 0.5}, INVALID, "int8 mask")
        yield ErrorSample({"self": x, "mask": good, "prob": -0.5}, INVALID, "negative prob")
        yield ErrorSample({"self": x.astype(np.int32), "mask": good, "prob": 0.5}, INVALID, "int32 self")

    return OpSpec(
        "DropoutDoMask",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        accuracy=_DO_MASK,
        summary="out = self · mask bit / (1 - prob)",
    )


# ----------------------------------------------------------------------------- Multinomial
def _multinomial() -> OpSpec:
    params = (
        tensor("self", FLOATS64, max_rank=2, min_rank=1),
        int_attr("numsamples"),
        bool_attr("replacement"),
        int_attr("seed"),
        int_attr("offset"),
        out("out", (D.ACL_INT64,), max_rank=2),
    )

    def infer(call: Call) -> Infos:
        t = tensor_arg(call, "self")
        k = int(call.args["numsamples"])
        categories = t.view_dims[-1]
        if k <= 0:
            raise invalid(f"numsamples={k} must be positive")
        if categories == 0:
            raise invalid("self has no categories")
        if not call.args["replacement"] and k > categories:
            raise invalid(f"numsamples={k} exceeds the {categories} categories (sampling without replacement)")
        return {"out": same((*t.view_dims[:-1], k), D.ACL_INT64)}

    def gen(rng: np.random.Generator) -> Iterable[Sample]:
        seeds = _seeds()
        cases = (((5,), 3), ((4, 10), 1), ((3, 7), 7), ((300,), 20), ((2, 1000), 5), ((257, 6), 2), ((1,), 4))
        for j, dt in enumerate((D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_DOUBLE)):
            for k, (shape, n) in enumerate(cases):
                seed, offset = seeds[(j + k) % len(seeds)]
                weights = S.positive(rng, shape, dt, low=0.0, high=3.0)
                rows = weights.reshape(-1, shape[-1])
                rows[:, 1::3] = 0  # zero weights must never be drawn
                rows[:, 0] = 1  # every row keeps a positive first weight (the stride-0 variant repeats it)
                for replacement in (True, False):
                    positive = int(np.min(np.count_nonzero(weights.reshape(-1, shape[-1]), axis=1)))
                    if not replacement and n > positive:
                        continue
                    args = {"self": weights, "numsamples": n, "replacement": replacement}
                    args |= {"seed": seed, "offset": offset}
                    yield Sample(args, f"{dt.short} {list(shape)} n={n} replacement={replacement}")

    def errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        w = S.positive(rng, (2, 4), D.ACL_FLOAT)
        base = {"self": w, "numsamples": 2, "replacement": True, "seed": 0, "offset": 0}
        yield ErrorSample({**base, "numsamples": 0}, INVALID, "numsamples 0")
        yield ErrorSample({**base, "numsamples": 5, "replacement": False}, INVALID, "more samples than categories")
        yield ErrorSample({**base, "self": S.positive(rng, (2, 2, 2), D.ACL_FLOAT)}, INVALID, "3-d self")
        yield ErrorSample({**base, "out": np.zeros((2, 2), np.int32)}, INVALID, "int32 out")
        negative = w.copy()
        negative[1, 2] = -1.0
        yield ErrorSample({**base, "self": negative}, INVALID, "a negative weight (refused when the kernel runs)")
        zero = w.copy()
        zero[0] = 0.0
        yield ErrorSample({**base, "self": zero}, INVALID, "a row of zero weights (refused when the kernel runs)")

    return OpSpec(
        "Multinomial",
        FAMILY,
        params,
        infer,
        samples=gen,
        error_samples=errors,
        accuracy=_EXACT,
        summary="numsamples category indices per row of weights, with or without replacement",
    )


_Bernoulli = _bernoulli()

SPECS: list[OpSpec] = [
    _inplace_uniform(),
    _inplace_normal(),
    _Bernoulli,
    inplace_twin(_Bernoulli, ref_name="selfRef"),
    _gen_mask(False),
    _gen_mask(True),
    _do_mask(),
    _multinomial(),
]
