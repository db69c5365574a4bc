"""ApplyAdamW and ApplyAdamWV2 above the provider seam, on the CPU kernel emulator.

Every sample runs contiguous, transposed and padded against the reference under the ops' accuracy
class; the kernel specialises on version, amsgrad, maximize and the geometry's rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.optim import AdamW
from acl_rocm.ops import optim
from tests.rocm.against_reference import compare_run


@pytest.mark.parametrize("op", optim.OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2026)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed", "padded"):
            compare_run(emulated, reference, op, dict(sample.args), layout, sample.note)


def test_both_ops_are_claimed(emulated: RocmBackend) -> None:
    assert set(optim.OPS) <= set(emulated.capabilities().ops)


def test_sources_specialise_on_version_and_flags() -> None:
    v1 = AdamW(D.ACL_BF16, 1, amsgrad=True, maximize=False, ndim=1, scalar_dtypes=(D.ACL_FLOAT,) * 7).source()
    v2 = AdamW(D.ACL_FLOAT, 2, amsgrad=True, maximize=True, ndim=3, scalar_dtypes=(D.ACL_INT64,)).source()
    assert "beta1Power" in v1 and "pow(b1, t)" in v2
    assert "vmax[o_vmax] =" in v2 and "vmax[o_vmax] =" not in v1  # V1's maximum is an input only
    assert "const double g = -" in v2 and "const double g = -" not in v1
    assert "rest % m_.shape[d]" in v2 and "rest %" not in v1  # a 1-D geometry skips the unravel


@pytest.mark.parametrize("config", optim.CONFIGS)
@pytest.mark.parametrize("op", optim.OPS)
def test_every_sample_matches_the_reference_under_each_config(
    emulated: RocmBackend, reference: Backend, op: str, config: str
) -> None:
    """ACL_ADAMW_CONFIG: ``vec`` (4 elements a thread where the geometry allows) meets the class on every sample."""
    runner = emulated.runners["optim"]
    runner.forced_config = config
    try:
        for sample in get_spec(op).samples(np.random.default_rng(2027)):  # type: ignore[misc]
            for layout in ("contiguous", "padded"):
                compare_run(emulated, reference, op, dict(sample.args), layout, f"{config} {sample.note}")
    finally:
        runner.forced_config = None


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_vec_steps_equal_the_scalar_kernel_bit_for_bit(emulated: RocmBackend, amsgrad: bool, dtype: type) -> None:
    """``vec`` takes whole 4-element vectors and a tail (n = 4k + 3): the scalar kernel's exact bits."""
    from acl_core import eager

    runner = emulated.runners["optim"]
    rng = np.random.default_rng(11)
    n = 4 * 37 + 3
    state = {
        "varRef": rng.uniform(-2, 2, n).astype(dtype),
        "mRef": rng.uniform(-0.1, 0.1, n).astype(dtype),
        "vRef": rng.uniform(1e-4, 0.05, n).astype(dtype),
        "grad": rng.uniform(-1, 1, n).astype(dtype),
        "maxGradNormOptionalRef": rng.uniform(1e-4, 0.08, n).astype(dtype),
    }
    hyper = {"lr": 1e-3, "weightDecay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    args = state | hyper | {"step": np.array([7.0], np.float32), "amsgrad": amsgrad, "maximize": False}
    kernels: list = []
    real_step = runner.sorter.step
    runner.sorter.step = lambda prog, kernel, *rest: (kernels.append(kernel), real_step(prog, kernel, *rest))[1]
    got = {}
    try:
        for config in optim.CONFIGS:
            runner.forced_config = config
            fresh = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
            got[config] = eager.run("ApplyAdamWV2", emulated, **fresh)
    finally:
        runner.forced_config = None
        runner.sorter.step = real_step
    assert [k.vec for k in kernels] == [1, 4]
    for name in ("varRef", "mRef", "vRef", *(["maxGradNormOptionalRef"] if amsgrad else [])):
        assert got["vec"][name].tobytes() == got["scalar"][name].tobytes(), name


def test_a_bad_config_is_refused(emulated: RocmBackend) -> None:
    """An ACL_ADAMW_CONFIG outside scalar / vec is a 161002 error, not a silent default."""
    from acl_core.errors import AclnnError

    runner = emulated.runners["optim"]
    runner.forced_config = "fastest"
    try:
        with pytest.raises(AclnnError) as err:
            runner.config()
    finally:
        runner.forced_config = None
    assert err.value.code == 161002
