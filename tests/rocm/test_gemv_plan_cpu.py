"""The GEMV plan choice on the fake provider (CPU): which small-M products take the GEMV kernel, and the switch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


def _backend(tmp_path: Path, mode: str) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": mode})
    backend.runtime.ensure_device(0)
    return backend, provider


def _paths(backend: RocmBackend, provider: FakeProvider, m: int, k: int, n: int, dtype, nk: bool) -> list[str]:
    """The launches and BLAS calls one Mm makes: 'gemv_nk' / 'gemv_kn' kernels, 'blas' calls, other kernels."""
    a = np.ones((m, k), dtype)
    w = eager.to_device(np.ones((k, n), dtype), backend, layout="transposed" if nk else "contiguous")
    provider.launches.clear()
    provider.gemms.clear()
    eager.run("Mm", backend, self=a, mat2=w, cubeMathType=0)
    names = ["_".join(x.name.split("_")[1:3]) for x in provider.launches]
    return names + ["blas"] * len(provider.gemms)


@pytest.mark.parametrize("nk", [True, False], ids=["nk", "kn"])
def test_forced_on_takes_gemv_for_up_to_sixteen_half_rows(tmp_path: Path, nk: bool) -> None:
    backend, provider = _backend(tmp_path, "1")
    layout = "gemv_nk" if nk else "gemv_kn"
    for m in (1, 2, 7, 8, 16):
        assert _paths(backend, provider, m, 64, 24, ml_dtypes.bfloat16, nk) == [layout]
        assert _paths(backend, provider, m, 33, 17, np.float16, nk) == [layout]
    assert _paths(backend, provider, 17, 64, 24, ml_dtypes.bfloat16, nk) == ["blas"]
    assert _paths(backend, provider, 4, 64, 24, np.float32, nk) == ["blas"]  # fp32 stays on the BLAS


def test_off_and_auto(tmp_path: Path) -> None:
    off, p_off = _backend(tmp_path / "off", "0")
    assert _paths(off, p_off, 1, 1024, 2048, ml_dtypes.bfloat16, True) == ["blas"]
    auto, p_auto = _backend(tmp_path / "auto", "auto")
    assert _paths(auto, p_auto, 1, 64, 24, ml_dtypes.bfloat16, True) == ["blas"]  # too small to matter
    assert _paths(auto, p_auto, 1, 1024, 512, ml_dtypes.bfloat16, True) == ["gemv_nk"]


def test_auto_weighs_the_gemv_kernels_arithmetic_against_the_blas(tmp_path: Path) -> None:
    # the H200 decode bench's outcomes the cost model was fitted to (GEMV µs vs BLAS µs, weight [N, K])
    from acl_rocm.ops.matmul import gemv_pays

    assert gemv_pays(16, 1024, 3072, 2)  # 12.3 vs 26.1: a small model's layer weight
    assert gemv_pays(16, 3072, 1024, 2)  # 25.6 vs 28.4
    assert gemv_pays(1, 1024, 151936, 2)  # 73 vs 80: the vocabulary head at batch 1
    assert not gemv_pays(8, 1024, 151936, 2)  # 168 vs 83
    assert not gemv_pays(16, 1024, 151936, 2)  # 376 vs 84
    auto, p_auto = _backend(tmp_path, "auto")
    assert _paths(auto, p_auto, 1, 256, 151936, ml_dtypes.bfloat16, True) == ["gemv_nk"]
    assert _paths(auto, p_auto, 8, 256, 151936, ml_dtypes.bfloat16, True) == ["blas"]


DECODE_NK = {"gate_up": (1024, 6144), "qkv": (1024, 4096), "down": (3072, 1024), "o": (2048, 1024)}
"""Qwen3-0.6B's layer weights [N, K] as (K, N)."""


def test_legacy_policy_keeps_the_measured_shapes() -> None:
    """``legacy`` (the default) plans the nk shapes measured on 2026-12-06: (tile, ksplit, unroll), grid at M = 1."""
    from acl_rocm.ops.gemv_config import parse
    from acl_rocm.ops.matmul import nk_grid, nk_shape

    legacy = parse("")
    assert legacy == parse("legacy")
    expected = {
        "gate_up": ((2, 2, 2), 768),
        "qkv": ((1, 2, 2), 1024),
        "down": ((1, 8, 2), 1024),
        "o": ((1, 8, 1), 1024),
    }
    for name, (k, n) in DECODE_NK.items():
        shape = nk_shape(1, k, n, 8, 32, 132, legacy)
        assert (shape, nk_grid(shape[0], shape[1], n, 32, 132, legacy)) == expected[name], name
        assert nk_shape(1, k, n, 8, 32, 132) == shape  # the policy's default is legacy


def test_presets_give_each_lane_more_loads_or_fewer_blocks() -> None:
    """The alternatives differ from ``legacy`` where they claim to (down [1024 x 3072] at M = 1)."""
    from acl_rocm.ops.gemv_config import PRESETS
    from acl_rocm.ops.matmul import nk_grid, nk_shape

    k, n = DECODE_NK["down"]
    shapes = {name: nk_shape(1, k, n, 8, 32, 132, p) for name, p in PRESETS.items()}
    assert shapes["stream"] == shapes["wave"] == shapes["legacy"] == (1, 8, 2)
    assert shapes["w16"] == (1, 4, 3)  # 384 chunks over 4 warps: 3 loads per lane, no idle half pass
    assert shapes["deep"] == (2, 4, 3)
    assert shapes["row"] == (1, 1, 8)  # a warp per output over all of K
    assert nk_grid(1, 8, n, 32, 132, PRESETS["wave"]) == 528  # 4 blocks per unit, looping over 1024 groups
    assert nk_grid(1, 1, n, 32, 132, PRESETS["row"]) == 256
    gate_up = nk_shape(1, *DECODE_NK["gate_up"], 8, 32, 132, PRESETS["deep"])
    assert gate_up == (2, 1, 4)  # 2 outputs x 4 loads: 8 16-byte loads in flight per lane
    for rows in (1, 8, 16):  # weight registers stay within the budget at every M
        for name, p in PRESETS.items():
            tile, _, unroll = nk_shape(rows, k, n, 8, 32, 132, p)
            assert tile * unroll <= max(p.budget_for(rows), tile), (name, rows)


def test_config_parsing_and_refusal(tmp_path: Path) -> None:
    """Presets, key=value items over a preset, and a bad setting refused with ACL_ERROR_INVALID_PARAM."""
    from acl_core.errors import AclError, AclErrorCode
    from acl_rocm.ops.gemv_config import PRESETS, parse

    p = parse("deep, block=128,loads=plain,budget=4/4/2,grid=3")
    assert (p.name, p.block, p.loads, p.budget, p.grid, p.tile) == ("deep+", 128, "plain", (4, 4, 2), 3, 2)
    assert parse("unroll=2").unroll == 2 and parse("unroll=2").name == "legacy+"
    assert parse(PRESETS["row"].describe()) == dataclasses.replace(PRESETS["row"], name="row+")
    for bad in ("fast", "deep,tile=3", "block=96", "loads=nc", "deep,8", "budget=1/2", "unroll=0", "ksplit=2"):
        with pytest.raises(ValueError):
            parse(bad)
    backend = RocmBackend(
        FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": "1", "ACL_GEMV_CONFIG": "fast"}
    )
    backend.runtime.ensure_device(0)
    w = eager.to_device(np.ones((64, 24), ml_dtypes.bfloat16), backend, layout="transposed")
    with pytest.raises(AclError) as info:
        eager.run("Mm", backend, self=np.ones((1, 64), ml_dtypes.bfloat16), mat2=w, cubeMathType=0)
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM and "ACL_GEMV_CONFIG" in str(info.value)


@pytest.mark.parametrize("config", ["row", "deep,block=512", "wave"])
def test_launch_uses_the_policys_block(tmp_path: Path, config: str) -> None:
    """The nk kernel launches with the policy's threads per block (its __launch_bounds__), the kn kernel with 256."""
    from acl_rocm.ops.gemv_config import parse

    provider = FakeProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": "1", "ACL_GEMV_CONFIG": config})
    backend.runtime.ensure_device(0)
    for nk, threads in ((True, parse(config).block), (False, 256)):
        assert _paths(backend, provider, 1, 64, 24, ml_dtypes.bfloat16, nk) == ["gemv_nk" if nk else "gemv_kn"]
        launch = provider.launches[-1]
        assert launch.block[0] == threads, launch
        assert f"__launch_bounds__({threads})" in launch.source
