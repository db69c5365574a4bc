"""Reference kernels of the fused add + RmsNorm + quantisation ops against PyTorch CPU (float64 norm, float32 quant)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.errors import AclnnError
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_torch

HALF = [np.float16, ml_dtypes.bfloat16]


def _f64(a: np.ndarray) -> torch.Tensor:
    return to_torch(a).double()


def _torch_y(x1: np.ndarray, x2: np.ndarray, gamma: np.ndarray, eps: float, beta: np.ndarray | None = None) -> tuple:
    """(x, normed, y as float32) with torch: x = x1 + x2, normed = rms_norm(x) * gamma, y = normed + beta."""
    x = _f64(x1) + _f64(x2)
    normed = torch.rms_norm(x, list(gamma.shape), _f64(gamma), eps=eps)
    y = normed + _f64(beta) if beta is not None else normed
    return x, normed, y.float()


def _int8(q: torch.Tensor) -> np.ndarray:
    """torch.round is half to even; saturate to int8, NaN to 0."""
    return torch.nan_to_num(torch.round(q.double()), nan=0.0).clamp(-128, 127).to(torch.int8).numpy()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("div", [False, True])
def test_add_rms_norm_quant_v2_matches_torch(dtype: type, div: bool, rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((3, 4, 32)).astype(dtype) for _ in range(2))
    gamma = rng.uniform(0.5, 1.5, 32).astype(dtype)
    beta = rng.standard_normal(32).astype(dtype)
    s1, s2 = (rng.uniform(0.5, 4.0, 32).astype(np.float32) for _ in range(2))
    z1, z2 = (rng.integers(-5, 6, 32).astype(np.int32) for _ in range(2))
    got = ref(
        "AddRmsNormQuantV2",
        x1=x1,
        x2=x2,
        gamma=gamma,
        scales1=s1,
        scales2Optional=s2,
        zeroPoints1Optional=z1,
        zeroPoints2Optional=z2,
        betaOptional=beta,
        axis=-1,
        epsilon=1e-6,
        divMode=div,
        rmsNormOut=np.zeros(x1.shape, dtype),
    )
    x, normed, y = _torch_y(x1, x2, gamma, 1e-6, beta)
    for out, s, z in (("y1Out", s1, z1), ("y2Out", s2, z2)):
        q = (y / torch.from_numpy(s) if div else y * torch.from_numpy(s)) + torch.from_numpy(z).float()
        assert got[out].dtype == np.int8
        np.testing.assert_array_equal(got[out], _int8(q))
    assert_close(got["xOut"], x.to(to_torch(x1).dtype).float().numpy())
    assert_close(got["rmsNormOut"], normed.numpy())


def test_add_rms_norm_quant_v1_is_v2_without_beta(rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((5, 16)).astype(np.float16) for _ in range(2))
    gamma = rng.uniform(0.5, 1.5, 16).astype(np.float16)
    s1 = rng.uniform(100, 200, 16).astype(np.float32)
    args = {"x1": x1, "x2": x2, "gamma": gamma, "scales1": s1, "axis": -1, "epsilon": 1e-6, "divMode": False}
    got = ref("AddRmsNormQuant", **args)
    _, _, y = _torch_y(x1, x2, gamma, 1e-6)
    np.testing.assert_array_equal(got["y1Out"], _int8(y * torch.from_numpy(s1)))
    np.testing.assert_array_equal(got["y2Out"], np.zeros_like(got["y2Out"]))  # no scales2: zeroed
    assert got["y1Out"].min() == -128 and got["y1Out"].max() == 127  # |y| ~ 1 times 100-200 saturates


def test_add_rms_norm_quant_hand_computed() -> None:
    # x = [3, 4] + [1, 0] = [4, 4]: rms = 4, y = x / 4 * gamma = gamma; q = round(gamma * 10 + zp)
    x1, x2 = np.array([[3.0, 4.0]], np.float32), np.array([[1.0, 0.0]], np.float32)
    gamma = np.array([0.25, -1.25], np.float32)
    got = ref(
        "AddRmsNormQuantV2",
        x1=x1,
        x2=x2,
        gamma=gamma,
        scales1=np.full(2, 10.0, np.float32),
        zeroPoints1Optional=np.array([0.0, 1.0], np.float32),
        axis=-1,
        epsilon=0.0,
        divMode=False,
    )
    np.testing.assert_array_equal(got["y1Out"], [[2, -12]])  # 2.5 -> 2 (half to even), -12.5 + 1 -> -12 (even)
    np.testing.assert_array_equal(got["xOut"], [[4.0, 4.0]])


def test_add_rms_norm_quant_errors(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 8)).astype(np.float16)
    good = {"x1": x, "x2": x, "gamma": np.ones(8, np.float16), "scales1": np.ones(8, np.float32)}
    good |= {"axis": -1, "epsilon": 1e-6, "divMode": True}
    with pytest.raises(AclnnError) as e:
        ref("AddRmsNormQuantV2", **good, zeroPoints2Optional=np.zeros(8, np.int32))
    assert e.value.code == 161002
    with pytest.raises(AclnnError) as e:
        ref("AddRmsNormQuantV2", **{**good, "scales1": np.ones(4, np.float32)})
    assert e.value.code == 161002
    with pytest.raises(AclnnError) as e:
        ref("AddRmsNormQuantV2", **{**good, "scales1": None})
    assert e.value.code == 161001


def _torch_dynamic(y: torch.Tensor, smooth: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    v = y * to_torch(smooth).float() if smooth is not None else y
    scale = v.abs().amax(dim=-1) / 127.0
    q = torch.where(scale[..., None] == 0, torch.zeros_like(v), v / scale[..., None])
    return _int8(q), scale.numpy()


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: np.dtype(d).name)
def test_add_rms_norm_dynamic_quant_v2_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((2, 3, 64)).astype(dtype) for _ in range(2))
    gamma = rng.uniform(0.5, 1.5, 64).astype(dtype)
    beta = rng.standard_normal(64).astype(dtype)
    sm1, sm2 = (rng.uniform(0.5, 2, 64).astype(dtype) for _ in range(2))
    got = ref(
        "AddRmsNormDynamicQuantV2",
        x1=x1,
        x2=x2,
        gamma=gamma,
        smoothScale1Optional=sm1,
        smoothScale2Optional=sm2,
        betaOptional=beta,
        epsilon=1e-6,
    )
    x, _, y = _torch_y(x1, x2, gamma, 1e-6, beta)
    for i, sm in ((1, sm1), (2, sm2)):
        q, scale = _torch_dynamic(y, sm)
        np.testing.assert_array_equal(got[f"y{i}Out"], q)
        assert got[f"scale{i}Out"].shape == (2, 3) and got[f"scale{i}Out"].dtype == np.float32
        np.testing.assert_array_equal(got[f"scale{i}Out"], scale)
        assert np.abs(got[f"y{i}Out"]).max(axis=-1).min() == 127  # every row reaches the range's end
    assert_close(got["xOut"], x.to(to_torch(x1).dtype).float().numpy())


def test_add_rms_norm_dynamic_quant_output_mask(rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((4, 16)).astype(np.float16) for _ in range(2))
    gamma = np.ones(16, np.float16)
    base = {"x1": x1, "x2": x2, "gamma": gamma, "epsilon": 1e-6}
    _, _, y = _torch_y(x1, x2, gamma, 1e-6)
    q, scale = _torch_dynamic(y, None)
    # V1 without smooth scales: the second quantisation is invalid ([1], zeroed)
    got = ref("AddRmsNormDynamicQuant", **base)
    np.testing.assert_array_equal(got["y1Out"], q)
    assert got["y2Out"].shape == (1,) and got["scale2Out"].shape == (1,) and got["y2Out"][0] == 0
    # outputMask [false, true]: only the second
    got = ref("AddRmsNormDynamicQuantV2", **base, outputMaskOptional=[False, True])
    assert got["y1Out"].shape == (1,) and got["scale1Out"].shape == (1,)
    np.testing.assert_array_equal(got["y2Out"], q)
    np.testing.assert_array_equal(got["scale2Out"], scale)
    for mask in ([False, False], [True]):
        with pytest.raises(AclnnError) as e:
            ref("AddRmsNormDynamicQuantV2", **base, outputMaskOptional=mask)
        assert e.value.code == 161002
    with pytest.raises(AclnnError) as e:  # smoothScale2 alone without a mask
        ref("AddRmsNormDynamicQuantV2", **base, smoothScale2Optional=gamma)
    assert e.value.code == 161002


def test_add_rms_norm_dynamic_quant_zero_row() -> None:
    z = np.zeros((2, 8), np.float16)
    got = ref("AddRmsNormDynamicQuant", x1=z, x2=z, gamma=np.ones(8, np.float16), epsilon=1e-6)
    np.testing.assert_array_equal(got["y1Out"], np.zeros((2, 8), np.int8))
    np.testing.assert_array_equal(got["scale1Out"], [0.0, 0.0])


@pytest.mark.parametrize("dtype", HALF, ids=lambda d: np.dtype(d).name)
def test_add_rms_norm_cast_matches_torch(dtype: type, rng: np.random.Generator) -> None:
    x1, x2 = (rng.standard_normal((3, 5, 48)).astype(dtype) for _ in range(2))
    gamma = rng.uniform(0.5, 1.5, 48).astype(dtype)
    got = ref("AddRmsNormCast", x1=x1, x2=x2, gamma=gamma, epsilon=1e-5)
    x, normed, y32 = _torch_y(x1, x2, gamma, 1e-5)
    assert got["y1Out"].dtype == np.float32
    assert_close(got["y1Out"], normed.numpy())
    np.testing.assert_array_equal(got["y1Out"], y32.numpy())  # rounded once to float32
    torch_dtype = to_torch(x1).dtype
    np.testing.assert_array_equal(got["y2Out"].astype(np.float32), y32.to(torch_dtype).float().numpy())
    assert got["rstdOut"].shape == (3, 5, 1)
    assert_close(got["rstdOut"], torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + 1e-5).numpy())
    assert_close(got["xOut"], x.to(torch_dtype).float().numpy())
