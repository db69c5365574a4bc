"""The reference's random family: Philox4x32-10 against Random123's vectors, and each op's distribution.

Statistical tests run at significance level α = 1e-3 each (a correct sampler fails one in a thousand
runs per test; the seeds are fixed, so a pass is reproducible). Their power, stated per test, is
for the smallest departure worth catching. Without SciPy the critical values come from closed forms:
Kolmogorov's asymptotic ``c(α) = sqrt(-ln(α/2) / 2)`` (1.949 for α = 1e-3, accurate for n ≥ 1e4) and
the Wilson–Hilferty approximation of the chi-square quantile (within 1% for 4+ degrees of freedom).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclnnError
from acl_core.spec.ops.random import LAYOUT_ENV, LAYOUTS, fill_layout, mask_bytes
from acl_reference.kernels.random import block_words, philox4x32_10, words_of

ALPHA = 1e-3
Z_ALPHA = 3.090232  # the standard normal's upper 1e-3 quantile
KS_C = math.sqrt(-math.log(ALPHA / 2) / 2)  # 1.949

KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
"""Random123's published known-answer vectors of philox4x32-10: (counter, key, result)."""


def chi2_critical(dof: int, z: float = Z_ALPHA) -> float:
    """The chi-square upper quantile for ``dof`` degrees of freedom (Wilson–Hilferty)."""
    a = 2.0 / (9.0 * dof)
    return dof * (1.0 - a + z * math.sqrt(a)) ** 3


def ks_statistic(sample: np.ndarray, cdf: np.ndarray) -> float:
    """Kolmogorov–Smirnov distance of a sorted-by-us sample from ``cdf`` (the model CDF at each sorted value)."""
    n = sample.size
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.frompyfunc(math.erf, 1, 1)(x / math.sqrt(2.0)).astype(np.float64))


# ----------------------------------------------------------------------------- the generator
@pytest.mark.parametrize("counter,key,expected", KATS)
def test_philox_matches_random123_known_answers(
    counter: tuple[int, ...], key: tuple[int, int], expected: tuple[int, ...]
) -> None:
    words = philox4x32_10(tuple(np.array([c], np.uint64) for c in counter), key)  # type: ignore[arg-type]
    assert tuple(int(w[0]) for w in words) == expected


def test_counter_layout_puts_the_element_low_and_the_offset_high() -> None:
    # element 0 of seed 0, offset 0 is Random123's all-zero vector; seed and offset feed key and counter
    assert tuple(int(w[0]) for w in words_of(0, 0, 1)) == KATS[0][2]
    seed = 0x299F31D0A4093822
    offset = 0x0370734413198A2E
    index = np.array([0x85A308D3243F6A88], np.uint64)
    assert tuple(int(w[0]) for w in block_words(seed, offset, index)) == KATS[2][2]
    assert tuple(int(w[0]) for w in block_words(-1, -1, np.array([2**64 - 1], np.uint64))) == KATS[1][2]


def test_uniform_of_element_zero_is_the_top_bits_of_the_first_word() -> None:
    out = eager.run("InplaceUniform", "reference", selfRef=np.zeros(1, np.float32), seed=0, offset=0, **_range(0, 1))
    assert out["selfRef"][0] == np.float32((0x6627E8D5 >> 8) * 2.0**-24)


def _range(low: float, high: float) -> dict[str, float]:
    return {"from": float(low), "to": float(high)}


def test_seed_and_offset_change_the_stream_and_repeat_it() -> None:
    def draw(seed: int, offset: int) -> np.ndarray:
        x = np.zeros(1000, np.float32)
        return eager.run("InplaceUniform", "reference", selfRef=x, seed=seed, offset=offset, **_range(0, 1))["selfRef"]

    a = draw(5, 0)
    np.testing.assert_array_equal(a, draw(5, 0))
    assert (a != draw(6, 0)).mean() > 0.99 and (a != draw(5, 1)).mean() > 0.99


# ----------------------------------------------------------------------------- fills
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("np_dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_uniform_is_uniform(np_dtype: type, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KS on 1e5 values: power > 0.99 against any CDF error of 0.01 (sqrt(n)·0.01 = 3.16 beside c = 1.95)."""
    monkeypatch.setenv(LAYOUT_ENV, layout)
    n, low, high = 100_000, -2.0, 3.0
    x = eager.run("InplaceUniform", "reference", selfRef=np.zeros(n, np_dtype), seed=11, offset=3, **_range(low, high))
    v = np.sort(x["selfRef"].astype(np.float64))
    assert v.min() >= low and v.max() < high
    # a 16-bit result is discrete: compare with the CDF just above each value's grid step
    step = {np.float16: 2.0**-11, ml_dtypes.bfloat16: 2.0**-8}.get(np_dtype, 0.0) * (high - low) * 2
    cdf = np.clip((v - low) / (high - low), 0, 1)
    stat = ks_statistic(v, cdf)
    assert stat < KS_C / math.sqrt(n) + step, stat


def test_uniform_of_an_empty_range_is_from() -> None:
    x = eager.run("InplaceUniform", "reference", selfRef=np.zeros(9, np.float32), seed=1, offset=0, **_range(2, 2))
    assert (x["selfRef"] == 2).all()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (3.0, 0.25), (-1.0, 4.0)])
def test_normal_is_normal(mean: float, std: float, layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KS on 1e5 float64 values: power > 0.99 against a CDF error of 0.01 (e.g. a mean off by 0.025·std)."""
    monkeypatch.setenv(LAYOUT_ENV, layout)
    n = 100_000
    x = eager.run("InplaceNormal", "reference", selfRef=np.zeros(n, np.float64), mean=mean, std=std, seed=7, offset=1)
    v = np.sort(x["selfRef"])
    stat = ks_statistic(v, _normal_cdf((v - mean) / std))
    assert stat < KS_C / math.sqrt(n), stat
    # mean and variance too: 4.9 standard errors (two-sided 1e-6) for the moments
    assert abs(v.mean() - mean) < 4.9 * std / math.sqrt(n)
    assert abs(v.var() / std**2 - 1) < 4.9 * math.sqrt(2.0 / n)


def test_normal_with_std_zero_is_the_mean_and_negative_std_is_refused() -> None:
    x = eager.run("InplaceNormal", "reference", selfRef=np.zeros(5, np.float32), mean=1.5, std=0.0, seed=1, offset=0)
    assert (x["selfRef"] == 1.5).all()
    with pytest.raises(AclnnError) as info:
        eager.run("InplaceNormal", "reference", selfRef=np.zeros(5, np.float32), mean=0.0, std=-1.0, seed=1, offset=0)
    assert info.value.code == 161002


def test_normal_float16_tracks_float64_of_the_same_stream() -> None:
    args = {"mean": 0.5, "std": 2.0, "seed": 3, "offset": 4}
    wide = eager.run("InplaceNormal", "reference", selfRef=np.zeros(4000, np.float64), **args)["selfRef"]
    half = eager.run("InplaceNormal", "reference", selfRef=np.zeros(4000, np.float16), **args)["selfRef"]
    np.testing.assert_array_equal(half, wide.astype(np.float16))


# ----------------------------------------------------------------------------- the packed fill layout
def test_packed_uniform_takes_word_i_mod_4_of_block_i_div_4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LAYOUT_ENV, "packed")
    n = 11
    w = np.stack(words_of(4, 9, 3), axis=1).reshape(-1)[:n]  # blocks 0..2, words in order
    single = eager.run("InplaceUniform", "reference", selfRef=np.zeros(n, np.float32), seed=4, offset=9, **_range(0, 1))
    np.testing.assert_array_equal(single["selfRef"], (w >> np.uint64(8)).astype(np.float64) * 2.0**-24)
    wide = eager.run("InplaceUniform", "reference", selfRef=np.zeros(5, np.float64), seed=4, offset=9, **_range(0, 1))
    pairs = np.stack(words_of(4, 9, 3), axis=1).reshape(-1, 2)[:5]  # element i: w(2t+1):w(2t) of block i // 2
    k = ((pairs[:, 1] << np.uint64(32)) | pairs[:, 0]) >> np.uint64(11)
    np.testing.assert_array_equal(wide["selfRef"], k.astype(np.float64) * 2.0**-53)


def test_packed_normal_pairs_share_a_radius_and_an_angle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Elements 2j and 2j + 1 are r·cos θ and r·sin θ of block j: their squares sum to -2 ln u1, their angle is θ."""
    monkeypatch.setenv(LAYOUT_ENV, "packed")
    n = 9
    z = eager.run("InplaceNormal", "reference", selfRef=np.zeros(n, np.float64), mean=0.0, std=1.0, seed=2, offset=3)
    z = z["selfRef"]
    w0, w1, w2, w3 = words_of(2, 3, 5)
    u1 = (((w1 << np.uint64(32)) | w0) >> np.uint64(11)).astype(np.float64) * 2.0**-53 + 2.0**-53
    u2 = (((w3 << np.uint64(32)) | w2) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    x, y = z[0::2], np.append(z[1::2], 0.0)
    np.testing.assert_allclose((x**2 + y**2)[:4], (-2.0 * np.log(u1))[:4], rtol=1e-12)
    np.testing.assert_allclose(np.mod(np.arctan2(y, x), 2 * np.pi)[:4], 2 * np.pi * u2[:4], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(x[4], math.sqrt(-2.0 * math.log(u1[4])) * math.cos(2 * math.pi * u2[4]), rtol=1e-12)


@pytest.mark.parametrize("op", ["InplaceUniform", "InplaceNormal"])
def test_packed_fills_keep_their_distribution(op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KS on 1e5 float64 values of the packed layout (uniform on [-2, 3), standard normal)."""
    monkeypatch.setenv(LAYOUT_ENV, "packed")
    n, x = 100_000, np.zeros(100_000, np.float64)
    if op == "InplaceUniform":
        v = np.sort(eager.run(op, "reference", selfRef=x, seed=11, offset=3, **_range(-2, 3))["selfRef"])
        cdf = (v + 2.0) / 5.0
    else:
        v = np.sort(eager.run(op, "reference", selfRef=x, mean=0.0, std=1.0, seed=7, offset=1)["selfRef"])
        cdf = _normal_cdf(v)
    assert ks_statistic(v, cdf) < KS_C / math.sqrt(n)


def test_packed_and_block_layouts_differ_and_a_bad_layout_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def draw() -> np.ndarray:
        x = np.zeros(64, np.float32)
        return eager.run("InplaceUniform", "reference", selfRef=x, seed=5, offset=0, **_range(0, 1))["selfRef"]

    monkeypatch.delenv(LAYOUT_ENV, raising=False)
    default = draw()
    assert fill_layout() == "packed" == LAYOUTS[0]  # unset: the measured faster layout
    monkeypatch.setenv(LAYOUT_ENV, "block")
    block = draw()
    monkeypatch.setenv(LAYOUT_ENV, "packed")
    packed = draw()
    np.testing.assert_array_equal(default, packed)
    assert packed[0] == block[0] and (packed[1:] != block[1:]).mean() > 0.9  # element 0: word 0 of block 0
    monkeypatch.setenv(LAYOUT_ENV, "sideways")
    with pytest.raises(AclError) as info:
        draw()
    assert info.value.code == 100000


# ----------------------------------------------------------------------------- Bernoulli and dropout
def _binomial_ok(successes: int, n: int, p: float) -> bool:
    """Within 4.9 standard errors (two-sided 1e-6): a rate off by 0.01 at n = 1e5 (6.3 s.e.) fails w.p. > 0.9."""
    return abs(successes - n * p) <= 4.9 * math.sqrt(n * p * (1 - p)) + 1e-9


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.97, 1.0])
def test_bernoulli_rate(p: float) -> None:
    n = 100_000
    x = eager.run("InplaceBernoulli", "reference", selfRef=np.zeros(n, np.float32), prob=p, seed=2, offset=0)
    v = x["selfRef"]
    assert set(np.unique(v)) <= {0.0, 1.0}
    assert _binomial_ok(int(v.sum()), n, p)


def test_bernoulli_into_int_and_bool() -> None:
    for dt in (np.int64, np.int8, np.bool_):
        v = eager.run("Bernoulli", "reference", self=np.zeros(64, dt), prob=0.5, seed=1, offset=0)["out"]
        assert v.dtype == dt and set(np.unique(v.astype(np.int64))) <= {0, 1}


def test_bernoulli_successes_are_independent_of_neighbours() -> None:
    """Chi-square (1 dof) on the 2x2 table of consecutive pairs: a lag-1 correlation of 0.02 at n = 1e5 fails."""
    n = 100_000
    v = eager.run("Bernoulli", "reference", self=np.zeros(n, np.int64), prob=0.5, seed=9, offset=9)["out"]
    a, b = v[:-1], v[1:]
    table = np.array([[np.sum((a == i) & (b == j)) for j in (0, 1)] for i in (0, 1)], dtype=np.float64)
    expected = np.outer(table.sum(1), table.sum(0)) / table.sum()
    assert ((table - expected) ** 2 / expected).sum() < 10.83  # chi-square 1 dof at 1e-3


@pytest.mark.parametrize("prob", [0.0, 0.1, 0.5, 1.0])
def test_gen_mask_keeps_one_minus_prob_and_pads_with_zeros(prob: float) -> None:
    n = 100_001
    mask = eager.run("DropoutGenMaskV2", "reference", shape=[n], prob=prob, seed=4, offset=2, probDataType=D.ACL_FLOAT)[
        "out"
    ]
    assert mask.shape == (mask_bytes(n),) and mask_bytes(n) == 12_512
    bits = np.unpackbits(mask, bitorder="little")
    assert not bits[n:].any()
    assert _binomial_ok(int(bits[:n].sum()), n, 1.0 - float(np.float32(prob)))


def test_gen_mask_v1_is_v2_with_float32_and_the_first_element_is_the_low_bit() -> None:
    args = {"shape": [3, 100], "prob": 0.3, "seed": 12, "offset": 5}
    v1 = eager.run("DropoutGenMask", "reference", **args)["out"]
    v2 = eager.run("DropoutGenMaskV2", "reference", probDataType=D.ACL_FLOAT, **args)["out"]
    np.testing.assert_array_equal(v1, v2)
    w0 = words_of(12, 5, 8)[0]
    keep = [int(not w < np.float32(0.3) * 2.0**32) for w in w0.tolist()]
    assert int(v1[0]) == sum(k << i for i, k in enumerate(keep))


def test_do_mask_scales_kept_and_zeroes_dropped() -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, size=(5, 60)).astype(np.float32)
    mask = eager.run("DropoutGenMask", "reference", shape=[5, 60], prob=0.25, seed=1, offset=0)["out"]
    out = eager.run("DropoutDoMask", "reference", self=x, mask=mask, prob=0.25)["out"]
    keep = np.unpackbits(mask, bitorder="little")[:300].reshape(5, 60).astype(bool)
    np.testing.assert_array_equal(out[keep], x[keep] * np.float32(1 / 0.75))
    assert (out[~keep] == 0).all()
    zero = eager.run("DropoutDoMask", "reference", self=x, mask=np.full_like(mask, 255), prob=1.0)["out"]
    assert (zero == 0).all()


# ----------------------------------------------------------------------------- Multinomial
def test_multinomial_with_replacement_matches_the_weights() -> None:
    """Chi-square on 1e5 draws over 6 categories (one of weight 0): power > 0.99 against a 1% shift of mass."""
    w = np.array([1.0, 0.0, 2.5, 0.5, 3.0, 1.0], np.float32)
    n = 100_000
    out = eager.run("Multinomial", "reference", self=w, numsamples=n, replacement=True, seed=3, offset=1)["out"]
    counts = np.bincount(out, minlength=6)
    assert counts[1] == 0
    p = w.astype(np.float64) / w.sum()
    live = p > 0
    stat = float((((counts - n * p) ** 2)[live] / (n * p)[live]).sum())
    assert stat < chi2_critical(int(live.sum()) - 1), stat


def test_multinomial_without_replacement_draws_pairs_sequentially() -> None:
    """Chi-square on 4e4 rows' ordered pairs from 4 categories (12 cells): P(i, j) = w_i/W · w_j/(W - w_i)."""
    w = np.array([1.0, 2.0, 3.0, 4.0])
    rows = 40_000
    weights = np.tile(w, (rows, 1))
    out = eager.run("Multinomial", "reference", self=weights, numsamples=2, replacement=False, seed=8, offset=0)["out"]
    assert (out[:, 0] != out[:, 1]).all()
    cells = np.bincount(out[:, 0] * 4 + out[:, 1], minlength=16).reshape(4, 4)
    total = w.sum()
    expected = np.array([[w[i] / total * w[j] / (total - w[i]) if i != j else 0 for j in range(4)] for i in range(4)])
    off = ~np.eye(4, dtype=bool)
    stat = float((((cells - rows * expected) ** 2)[off] / (rows * expected)[off]).sum())
    assert stat < chi2_critical(11), stat


def test_multinomial_takes_every_positive_category_without_replacement() -> None:
    w = np.array([[0.0, 5.0, 1e-6, 0.0, 2.0], [1.0, 1.0, 1.0, 0.0, 0.0]], np.float32)
    out = eager.run("Multinomial", "reference", self=w, numsamples=3, replacement=False, seed=1, offset=0)["out"]
    assert sorted(out[0]) == [1, 2, 4] and sorted(out[1]) == [0, 1, 2]


@pytest.mark.parametrize(
    "weights", [[1.0, -1.0, 2.0], [0.0, 0.0, 0.0], [1.0, np.inf, 1.0], [1.0, np.nan, 1.0]], ids=str
)
def test_multinomial_refuses_bad_weights(weights: list[float]) -> None:
    with pytest.raises(AclnnError) as info:
        eager.run(
            "Multinomial", "reference", self=np.array(weights, np.float32), numsamples=1, replacement=True, seed=0,
            offset=0,
        )  # fmt: skip
    assert info.value.code == 161002


def test_multinomial_refuses_too_few_positive_weights_without_replacement() -> None:
    with pytest.raises(AclnnError):
        w = np.array([1.0, 0.0, 1.0], np.float32)
        eager.run("Multinomial", "reference", self=w, numsamples=3, replacement=False, seed=0, offset=0)
