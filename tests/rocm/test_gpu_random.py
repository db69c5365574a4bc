"""The random family on the GPU (GPU tier): the reference's Philox stream, bit for bit.

The device Philox4x32-10 matches Random123's known-answer vectors; every spec sample of every op
equals the reference's result byte for byte (InplaceNormal within its accuracy class: libm's and the
device's log and cos may differ by a few double ulps), contiguous and through padded and transposed
views, with guards against writes outside the outputs; the sizes cross a block (256 threads) and,
with a grid of a few blocks, the grid-stride loop; Multinomial's device check refuses bad weights.
Under ``ACL_ROCM_EMULATE=1`` these run on the CPU kernel emulator (slow: the sizes stay small).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.random import LAYOUT_ENV, LAYOUTS
from acl_rocm.kernels.random import PhiloxBlocks
from acl_rocm.launch import KernelArgs
from tests.ops.test_random import KATS
from tests.rocm.test_gpu_quant import same

pytestmark = pytest.mark.gpu

EXACT_OPS = ["InplaceUniform", "InplaceBernoulli", "Bernoulli", "DropoutGenMask", "DropoutGenMaskV2"]
EXACT_OPS += ["DropoutDoMask", "Multinomial"]
VIEWS = ("contiguous", "padded", "transposed", "offset")
"""The fills' views: ``offset`` starts one element in, so the packed kernel's vector stores fall back."""


def test_device_philox_matches_random123_known_answers(rocm: Backend) -> None:
    counters = np.array([c for c, _, _ in KATS], np.uint32).reshape(-1)
    keys = np.array([k for _, k, _ in KATS], np.uint32).reshape(-1)
    ctr, key = eager.to_device(counters, rocm), eager.to_device(keys, rocm)
    out = eager.to_device(np.zeros(4 * len(KATS), np.uint32), rocm)
    kernel = PhiloxBlocks()
    function = rocm.function(kernel.source(), kernel.kernel_name)  # type: ignore[attr-defined]
    meta = KernelArgs.index_array([len(KATS), len(KATS), 1], "long long")
    args = KernelArgs([meta, *(KernelArgs.pointer(a.address) for a in (ctr, key, out))])
    rocm.provider.launch(function, (1, 1, 1), (32, 1, 1), 0, 0, args.address)  # type: ignore[attr-defined]
    rocm.provider.synchronize_device()  # type: ignore[attr-defined]
    got = out.numpy().reshape(len(KATS), 4)
    assert [tuple(int(w) for w in row) for row in got] == [e for _, _, e in KATS]


def _check(
    rocm: Backend,
    reference: Backend,
    op: str,
    args: dict[str, object],
    note: str,
    layouts: tuple[str, ...] = ("contiguous", "padded", "transposed"),
) -> None:
    for layout in layouts:
        want = eager.run(op, reference, layout=layout, op_args=args)
        same(eager.run(op, rocm, layout=layout, guard=True, op_args=args), want, f"{op} {note} @{layout}")


@pytest.mark.parametrize("op", EXACT_OPS)
def test_every_sample_is_bit_identical(rocm: Backend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(31)):
        _check(rocm, reference, op, sample.args, sample.note)


def test_normal_samples_agree_to_the_rounding(rocm: Backend, reference: Backend) -> None:
    """ACL_RANDOM_NORMAL=split forced: the double transform, the reference's, gives its values to the rounding."""
    spec = get_spec("InplaceNormal")
    assert spec.samples is not None
    runner = rocm.runners["random"]  # type: ignore[attr-defined]
    runner.forced_trig = "split"
    try:
        pairs = [
            (eager.run("InplaceNormal", rocm, op_args=s.args)["selfRef"], s)
            for s in spec.samples(np.random.default_rng(31))
        ]
    finally:
        runner.forced_trig = None
    for got, sample in pairs:
        want = eager.run("InplaceNormal", reference, op_args=sample.args)["selfRef"]
        if want.dtype == np.float64:
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14, err_msg=sample.note)
        else:  # in float32 and 16-bit results a few double ulps never moved a value across a rounding boundary
            same({"selfRef": got}, {"selfRef": want}, sample.note)


def _normal_samples_within_class(rocm: Backend, reference: Backend) -> None:
    """Every InplaceNormal sample on rocm (as its random runner is set) against the reference: float64 results (the
    double transform) to 1e-14, the rest within InplaceNormal's class."""
    from tests.rocm.test_random_float32_cpu import _within_class

    spec = get_spec("InplaceNormal")
    assert spec.samples is not None
    for sample in spec.samples(np.random.default_rng(31)):
        got = eager.run("InplaceNormal", rocm, op_args=sample.args)["selfRef"]
        want = eager.run("InplaceNormal", reference, op_args=sample.args)["selfRef"]
        if want.dtype == np.float64:
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14, err_msg=sample.note)
        elif want.size:
            _within_class(got.reshape(-1), want.reshape(-1), sample.args, sample.note)


@pytest.mark.parametrize(("layout", "trig"), [(layout, "split") for layout in LAYOUTS] + [("packed", "sincos")])
def test_fills_in_each_layout_match_the_reference_on_every_sample(
    rocm: Backend, reference: Backend, layout: str, trig: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each layout (ACL_RANDOM_LAYOUT) and each way to a packed normal pair's sine and cosine (ACL_RANDOM_NORMAL):
    uniform bit for bit, normal to the rounding, every sample and view."""
    monkeypatch.setenv(LAYOUT_ENV, layout)
    runner = rocm.runners["random"]  # type: ignore[attr-defined]
    runner.forced_trig = trig
    try:
        _fills_match(rocm, reference, layout)
    finally:
        runner.forced_trig = None


def _fills_match(rocm: Backend, reference: Backend, layout: str) -> None:
    for op in ("InplaceUniform", "InplaceNormal"):
        spec = get_spec(op)
        assert spec.samples is not None
        for sample in spec.samples(np.random.default_rng(31)):
            if op == "InplaceUniform" or sample.args["selfRef"].dtype != np.float64:
                _check(rocm, reference, op, sample.args, f"{layout} {sample.note}", VIEWS)
                continue
            got = eager.run(op, rocm, op_args=sample.args)["selfRef"]
            want = eager.run(op, reference, op_args=sample.args)["selfRef"]
            np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14, err_msg=sample.note)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [255, 1025, 3000, 3001])
def test_fills_across_blocks_and_grid_trips(
    rocm: Backend, reference: Backend, n: int, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bit for bit with the reference across block and grid-stride boundaries; InplaceNormal on the double transform
    (``split``: the packed layout's default, float32p, is within its class rather than bit-identical, which
    test_float32p_normal_transform_is_the_model_and_within_class proves)."""
    monkeypatch.setenv(LAYOUT_ENV, layout)
    x = np.zeros(n, np.float32)
    runner = rocm.runners["random"]  # type: ignore[attr-defined]
    runner.forced_trig = "split"
    try:
        for op, extra in (
            ("InplaceUniform", {"from": -1.0, "to": 2.0}),
            ("InplaceNormal", {"mean": 1.0, "std": 2.0}),
            ("InplaceBernoulli", {"prob": 0.3}),
        ):
            args = {"selfRef": x, "seed": 77, "offset": 5, **extra}
            _check(rocm, reference, op, args, f"n={n}")
    finally:
        runner.forced_trig = None
    for dtype in (np.float64, np.float16):
        args = {"selfRef": np.zeros(n, dtype), "seed": 77, "offset": 5, "from": -1.0, "to": 2.0}
        _check(rocm, reference, "InplaceUniform", args, f"{np.dtype(dtype).name} n={n}", VIEWS)
    args = {"shape": [n], "prob": 0.4, "seed": -5, "offset": 2**33 + 1}
    _check(rocm, reference, "DropoutGenMask", args, f"n={n}")


def test_multinomial_on_a_long_row_and_many_rows(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    for shape, k, replacement in (((2, 3000), 4, True), ((300, 9), 3, False), ((2, 500), 40, False)):
        w = rng.uniform(0, 1, shape).astype(np.float32)
        args = {"self": w, "numsamples": k, "replacement": replacement, "seed": 9, "offset": 1}
        _check(rocm, reference, "Multinomial", args, f"{shape} k={k}")


@pytest.mark.parametrize("bad", [-1.0, np.inf, np.nan])
@pytest.mark.parametrize("replacement", [True, False])
def test_multinomial_refuses_bad_weights_on_the_device(rocm: Backend, bad: float, replacement: bool) -> None:
    w = np.ones((3, 4), np.float32)
    w[2, 1] = bad
    with pytest.raises(AclnnError) as info:
        eager.run("Multinomial", rocm, self=w, numsamples=2, replacement=replacement, seed=0, offset=0)
    assert info.value.code == 161002


def test_multinomial_refuses_a_zero_row_and_too_few_positive_weights(rocm: Backend) -> None:
    w = np.ones((2, 4), np.float32)
    w[1] = 0
    with pytest.raises(AclnnError):
        eager.run("Multinomial", rocm, self=w, numsamples=1, replacement=True, seed=0, offset=0)
    w = np.array([1.0, 0.0, 2.0, 0.0], np.float32)
    with pytest.raises(AclnnError):
        eager.run("Multinomial", rocm, self=w, numsamples=3, replacement=False, seed=0, offset=0)


def test_the_stream_argument_splits_seed_and_offset() -> None:
    from acl_rocm.ops.random import stream_args

    g = stream_args(-1, 0x0370734413198A2E)
    assert (g.seed_lo, g.seed_hi, g.off_lo, g.off_hi) == (0xFFFFFFFF, 0xFFFFFFFF, 0x13198A2E, 0x03707344)
    assert ctypes.sizeof(g) == 16


def test_float32_normal_transform_within_class(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ACL_RANDOM_NORMAL=float32 forced: every InplaceNormal sample (float64 ones take the double transform) and
    2^22 float32 draws (2^16 on the emulator) of N(0, 1), N(-1, 3) and N(2.5, 0.5) within the class of the
    reference, and N(0, 1)'s z within 6.75·2^-24 of the double transform relative to |z|."""
    import os

    from tests.rocm.test_random_float32_cpu import BOUND, _double_pairs, _within_class

    monkeypatch.delenv(LAYOUT_ENV, raising=False)
    runner = rocm.runners["random"]  # type: ignore[attr-defined]
    runner.forced_trig = "float32"
    try:
        _normal_samples_within_class(rocm, reference)
        n = (1 << 16) if os.environ.get("ACL_ROCM_EMULATE") == "1" else (1 << 22)
        for mean, std, seed, offset in ((0.0, 1.0, 11, 0), (-1.0, 3.0, 5, 7), (2.5, 0.5, -3, 2**40)):
            args = {"selfRef": np.zeros(n, np.float32), "mean": mean, "std": std, "seed": seed, "offset": offset}
            got = eager.run("InplaceNormal", rocm, op_args=args)["selfRef"]
            want = eager.run("InplaceNormal", reference, op_args=args)["selfRef"]
            _within_class(got, want, args, f"N({mean}, {std}) n={n}")
            if (mean, std) == (0.0, 1.0):
                z = _double_pairs(seed, offset, n // 2, 0)
                live = z != 0
                worst = (np.abs(got.astype(np.float64) - z)[live] / np.abs(z[live])).max() * 2.0**24
                assert worst <= BOUND + 1.5, f"worst {worst}·2^-24"
    finally:
        runner.forced_trig = None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bfloat16"], ids=["fp32", "fp16", "bf16"])
def test_float32p_normal_transform_is_the_model_and_within_class(
    rocm: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, dtype: object
) -> None:
    """ACL_RANDOM_NORMAL=float32p forced: bit for bit the NumPy model of its arithmetic (every step a float32 rounding
    or fmaf, no product left for the compiler to contract) through every view, with guards; every InplaceNormal
    sample within the class (float64 ones take the double transform); 2^22 float32 draws (2^20 of 16-bit ones, 2^14 on
    the emulator) across grid trips, ending mid-vector, within the class of the reference."""
    import os

    import ml_dtypes

    from tests.rocm.test_random_float32_cpu import _within_class
    from tests.rocm.test_random_float32p_cpu import _model, fma32

    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    monkeypatch.delenv(LAYOUT_ENV, raising=False)
    runner = rocm.runners["random"]  # type: ignore[attr-defined]
    runner.forced_trig = "float32p"
    try:
        _normal_samples_within_class(rocm, reference)
        big = (1 << 14) if os.environ.get("ACL_ROCM_EMULATE") == "1" else (1 << 22) if dt is np.float32 else (1 << 20)
        cases = ((big + 3, 0.0, 1.0, 11, 0), (4101, -1.0, 3.0, 5, 7), (big - 2, 2.5, 0.5, -3, 2**40))
        for n, mean, std, seed, offset in cases:
            args = {"selfRef": np.zeros(n, dt), "mean": mean, "std": std, "seed": seed, "offset": offset}
            want = eager.run("InplaceNormal", reference, op_args=args)["selfRef"]
            model = fma32(np.full(n, np.float32(std)), _model(seed, offset, n), np.full(n, np.float32(mean))).astype(dt)
            for layout in VIEWS if n < big else ("contiguous",):
                got = eager.run("InplaceNormal", rocm, layout=layout, guard=True, op_args=args)["selfRef"]
                note = f"N({mean}, {std}) n={n} @{layout}"
                assert np.array_equal(got.view(np.uint8), model.view(np.uint8)), note
                _within_class(got, want, args, note)
    finally:
        runner.forced_trig = None
