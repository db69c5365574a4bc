"""Reference kernels of the random family (acl_core.spec.ops.random): Philox4x32-10 in NumPy, then the transforms.

:func:`philox4x32_10` is the generator, vectorised over counters, in uint64 arrays holding 32-bit
words (a 32 x 32-bit product fits in 64 bits). :func:`block_words` lays out the counters as the
family's docstring fixes: element ``i`` gets the block of counter ``(lo(i), hi(i), lo(offset),
hi(offset))`` under key ``(lo(seed), hi(seed))``. The transforms are written in float64 steps that
each round once, so the rocm kernels, doing the same steps, produce the same bits.
"""

from __future__ import annotations

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus
from acl_core.spec.ops.random import fill_layout, mask_bytes
from acl_reference.call import RefCall
from acl_reference.kernels import kernel
from acl_reference.tensor_io import cast

Array = np.ndarray
WORD = 0xFFFFFFFF
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
"""Philox4x32's round multipliers."""
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
"""Philox4x32's key increments (the golden ratio and sqrt(3) - 1, in 32 bits)."""
ROUNDS = 10
TWO_PI = 6.283185307179586
"""2π in double (the kernels' literal)."""
DIGITS: dict[D, int] = {D.ACL_FLOAT: 24, D.ACL_FLOAT16: 11, D.ACL_BF16: 8, D.ACL_DOUBLE: 53}
"""Significand digits of each float output: the bits a uniform value of that dtype is made of."""


def philox4x32_10(counter: tuple[Array, Array, Array, Array], key: tuple[int, int]) -> tuple[Array, ...]:
    """Philox4x32-10 of each counter (four arrays of 32-bit words, any integer dtype) under ``key``; uint64 words."""
    c0, c1, c2, c3 = (np.asarray(c).astype(np.uint64) for c in counter)
    k0, k1 = np.uint64(key[0] & WORD), np.uint64(key[1] & WORD)
    m0, m1, mask, shift = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1), np.uint64(WORD), np.uint64(32)
    for r in range(ROUNDS):
        if r:
            k0 = np.uint64((int(k0) + PHILOX_W0) & WORD)
            k1 = np.uint64((int(k1) + PHILOX_W1) & WORD)
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> shift) ^ c1 ^ k0, p1 & mask, (p0 >> shift) ^ c3 ^ k1, p0 & mask
    return c0, c1, c2, c3


def split64(value: int) -> tuple[int, int]:
    """(low, high) 32-bit halves of a 64-bit value (two's complement for a negative one)."""
    v = int(value) % 2**64
    return v & WORD, v >> 32


def block_words(seed: int, offset: int, index: Array) -> tuple[Array, ...]:
    """The four Philox words of each element index in ``index`` (uint64 arrays of 32-bit values)."""
    i = np.asarray(index, dtype=np.uint64)
    lo, hi = i & np.uint64(WORD), i >> np.uint64(32)
    off_lo, off_hi = split64(offset)
    shape = i.shape
    counter = (lo, hi, np.full(shape, off_lo, np.uint64), np.full(shape, off_hi, np.uint64))
    return philox4x32_10(counter, split64(seed))


def words_of(seed: int, offset: int, n: int) -> tuple[Array, ...]:
    """The words of elements 0 .. n-1."""
    return block_words(seed, offset, np.arange(n, dtype=np.uint64))


def uniform_bits(w0: Array, w1: Array, digits: int) -> Array:
    """The top ``digits`` bits of an element's words (``w1:w0`` for more than 32) as uint64."""
    if digits > 32:
        return ((w1 << np.uint64(32)) | w0) >> np.uint64(64 - digits)
    return w0 >> np.uint64(32 - digits)


def unit53(w_lo: Array, w_hi: Array) -> Array:
    """k·2^-53 in [0, 1) from the top 53 bits of ``w_hi:w_lo`` (exact in double)."""
    return uniform_bits(w_lo, w_hi, 53).astype(np.float64) * 2.0**-53


def packed_words(seed: int, offset: int, n: int, per_block: int) -> tuple[Array, ...]:
    """The ``packed`` layout's words of elements 0 .. n-1 (``i``: part ``i % per_block`` of block ``i // per_block``).

    ``per_block`` 4: one word each (returned as ``(w, w)``, low and high alike); 2: ``(w(2t), w(2t+1))``.
    """
    blocks = -(-n // per_block)
    words = np.stack(words_of(seed, offset, blocks), axis=1)  # (blocks, 4)
    if per_block == 4:
        flat = words.reshape(-1)[:n]
        return flat, flat
    pairs = words.reshape(-1, 2)[:n]
    return pairs[:, 0], pairs[:, 1]


def uniform_values(seed: int, offset: int, n: int, low: float, high: float, dtype: D) -> Array:
    """InplaceUniform's ``n`` values of ``dtype`` (as an array of that dtype's NumPy type)."""
    digits = DIGITS[dtype]
    if fill_layout() == "packed":
        w0, w1 = packed_words(seed, offset, n, 2 if digits > 32 else 4)
    else:
        w0, w1, _, _ = words_of(seed, offset, n)
    u = uniform_bits(w0, w1, digits).astype(np.float64) * 2.0**-digits
    value = low + u * (high - low)  # two float64 steps, each rounded once
    rounded = cast(value, dtype)
    back = cast(rounded, D.ACL_DOUBLE)
    return np.where(back >= high, cast(np.asarray(low), dtype), rounded)


def normal_values(seed: int, offset: int, n: int, mean: float, std: float) -> Array:
    """InplaceNormal's ``n`` values in float64 (Box–Muller; ``packed``: cos then sin of a block), before rounding."""
    packed = fill_layout() == "packed"
    w0, w1, w2, w3 = words_of(seed, offset, -(-n // 2) if packed else n)
    u1 = unit53(w0, w1) + 2.0**-53  # (0, 1]: exact, the 53-bit integer plus one scaled
    u2 = unit53(w2, w3)
    r, theta = np.sqrt(-2.0 * np.log(u1)), TWO_PI * u2
    z = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1).reshape(-1)[:n] if packed else r * np.cos(theta)
    return np.float64(mean) + np.float64(std) * z


def successes(w0: Array, p: float) -> Array:
    """``w0 < p·2^32``: Bernoulli successes (and dropped elements) with probability ``p`` (exact in double)."""
    return w0.astype(np.float64) < p * 4294967296.0


def gen_mask(seed: int, offset: int, numel: int, drop: float) -> Array:
    """The DropoutGenMask bytes: bit i (least significant first) is 1 when element i is kept; padding 0."""
    w0, _, _, _ = words_of(seed, offset, numel)
    bits = np.zeros(mask_bytes(numel) * 8, dtype=np.uint8)
    bits[:numel] = ~successes(w0, drop)
    return np.packbits(bits, bitorder="little")


def _refuse(message: str) -> AclnnError:
    return AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, message)


def multinomial(weights: Array, k: int, replacement: bool, seed: int, offset: int) -> Array:
    """Multinomial's (rows, k) int64 draws from (rows, n) float64 weights (inverse CDF on running double sums)."""
    rows, n = weights.shape
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise _refuse("Multinomial: self holds a negative, infinite or NaN weight")
    if rows and not (weights > 0).any(axis=1).all():
        raise _refuse("Multinomial: a row of self sums to 0")
    if not replacement and rows and int(np.count_nonzero(weights > 0, axis=1).min()) < k:
        raise _refuse(f"Multinomial: a row has fewer than numsamples={k} positive weights (without replacement)")
    w0, w1, _, _ = words_of(seed, offset, rows * k)
    u = unit53(w0, w1).reshape(rows, k)
    result = np.zeros((rows, k), dtype=np.int64)
    chosen = np.zeros((rows, n), dtype=bool)
    every = np.arange(n)
    for s in range(k):
        live = weights if replacement else np.where(chosen, 0.0, weights)
        cdf = np.cumsum(live, axis=1)  # sequential: the kernels' running sum, in the same order
        target = u[:, s] * cdf[:, -1]
        above = cdf > target[:, None]
        last_positive = np.where(live > 0, every, -1).max(axis=1)
        pick = np.where(above.any(axis=1), above.argmax(axis=1), last_positive)
        result[:, s] = pick
        chosen[np.arange(rows), pick] = True
    return result


# ----------------------------------------------------------------------------- kernels
@kernel("InplaceUniform")
def inplace_uniform(k: RefCall) -> None:
    """selfRef = uniform values in [from, to) from the shared Philox stream."""
    t = k["selfRef"]
    values = uniform_values(k["seed"], k["offset"], t.numel, k["from"], k["to"], t.dtype)
    k.write("selfRef", values.reshape(t.view_dims))


@kernel("InplaceNormal")
def inplace_normal(k: RefCall) -> None:
    """selfRef = mean + std·z, z standard normal (Box–Muller) from the shared Philox stream."""
    t = k["selfRef"]
    mean, std = float(np.float32(k["mean"])), float(np.float32(k["std"]))
    k.write("selfRef", normal_values(k["seed"], k["offset"], t.numel, mean, std).reshape(t.view_dims))


@kernel("Bernoulli")
def bernoulli(k: RefCall) -> None:
    """out = 1 where the element's first word is below prob·2^32, else 0."""
    t = k["out"]
    w0, _, _, _ = words_of(k["seed"], k["offset"], t.numel)
    k.write("out", successes(w0, float(k.value("prob"))).reshape(t.view_dims))


@kernel("DropoutGenMask", "DropoutGenMaskV2")
def dropout_gen_mask(k: RefCall) -> None:
    """out = the keep bits of align(numel, 128) elements, dropped with probability prob (in probDataType)."""
    numel = int(np.prod(k["shape"], dtype=np.int64))
    k.write("out", gen_mask(k["seed"], k["offset"], numel, k.plan["drop"]))


@kernel("DropoutDoMask")
def dropout_do_mask(k: RefCall) -> None:
    """out = self · (bit ? 1/(1 - prob) : 0), one float32 product rounded to the output."""
    x = k.read("self", np.float32)
    bits = np.unpackbits(k.read("mask"), bitorder="little")[: x.size].reshape(x.shape).astype(bool)
    factor = np.where(bits, np.float32(k.plan["scale"]), np.float32(0.0))
    with np.errstate(all="ignore"):
        k.write("out", (x * factor).astype(np.float32))


@kernel("Multinomial")
def multinomial_kernel(k: RefCall) -> None:
    """out = numsamples draws per row of self's weights (refusing invalid weights with 161002)."""
    w = k.read("self", np.float64)
    rows = w.reshape(-1, w.shape[-1])
    drawn = multinomial(rows, int(k["numsamples"]), bool(k["replacement"]), k["seed"], k["offset"])
    k.write("out", drawn.reshape(k["out"].view_dims))
