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
    """``legacy`` plans the nk shapes measured on 2026-12-06: (tile, ksplit, unroll), grid at M = 1."""
    from acl_rocm.ops.gemv_config import parse
    from acl_rocm.ops.matmul import nk_grid, nk_shape

    legacy = parse("legacy")
    assert parse("").name == parse("auto").name == "auto"  # the default picks a preset per shape
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


def test_auto_policy_takes_the_measured_winner_per_shape(tmp_path: Path) -> None:
    """``auto`` (the default) picks, per (M, N, K), the preset measured fastest on an H100 (gemv_config.auto_preset)."""
    from acl_core.backend import Launch
    from acl_core.dtypes import DataType as D
    from acl_core.spec.ops import get_spec
    from acl_rocm.ops.gemv_config import PRESETS, auto_preset, parse, policy_for

    want = {  # (M, shape): preset
        (1, "down"): "deep",  # 4.39 / 4.23 vs legacy 5.13 / 4.77 us in two runs
        (1, "o"): "legacy",  # w16 won one run (3.43 vs 3.54) and lost the other (3.25 vs 3.18)
        (1, "gate_up"): "legacy",  # 6.61, the fastest
        (1, "qkv"): "legacy",  # row / w16 within 2%
        (8, "qkv"): "legacy",  # deep 7.54 vs 7.76, then 7.38 vs 7.37
        (8, "o"): "legacy",
        (8, "gate_up"): "legacy",
        (8, "down"): "legacy",
    }
    for (m, name), preset in want.items():
        k, n = DECODE_NK[name]
        assert auto_preset(m, n, k) == preset, (m, name)
        assert auto_preset(2 if m == 1 else 5, n, k) == preset  # the band's other rows
        assert auto_preset(16, n, k) == "legacy"  # not measured above M = 8
    assert auto_preset(1, 151936, 1024) == "legacy"  # the vocabulary head
    assert auto_preset(1, 17, 1031) == "legacy"  # K >= 2.5 N, but no layer-sized weight
    assert policy_for(parse(""), 1, 1024, 3072) == PRESETS["deep"]
    assert policy_for(PRESETS["row"], 1, 1024, 3072) == PRESETS["row"]  # a named choice is kept
    with pytest.raises(ValueError, match="auto takes no"):
        parse("auto,unroll=2")
    # the runner plans the resolved preset's shape and reports it
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": "1"})
    backend.runtime.ensure_device(0)
    for name, preset in (("down", "deep"), ("o", "legacy"), ("gate_up", "legacy")):
        k, n = DECODE_NK[name]
        a = eager.empty((1, k), D.ACL_BF16, backend)
        w = eager.to_device(np.ones((k, n), ml_dtypes.bfloat16), backend, layout="transposed")
        out = eager.empty((1, n), D.ACL_BF16, backend)
        tensors = {"self": a.tensor(), "mat2": w.tensor(), "out": out.tensor()}
        plan = {"compute": D.ACL_BF16, "precision": None}
        call = backend.matmul._gemv(Launch(get_spec("Mm"), tensors, plan, 0, 0, None))
        assert call is not None and call.policy == preset, (name, call)
        assert call.kernel.loads == PRESETS[preset].loads and call.kernel.block == PRESETS[preset].block
        for x in (a, w, out):
            x.free()


def _pdl_backend(tmp_path: Path, setting: str, programmatic: bool = True) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider(blas=True, programmatic=programmatic)
    env = {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GEMV": "1", "ACL_PDL": setting}
    backend = RocmBackend(provider, env)
    backend.runtime.ensure_device(0)
    return backend, provider


@pytest.mark.parametrize(("setting", "mode"), [("0", ""), ("1", "l2"), ("l2", "l2"), ("regs", "regs")])
def test_pdl_attribute_only_for_gemv_kernels_that_wait(tmp_path: Path, setting: str, mode: str) -> None:
    """ACL_PDL asks the provider for programmatic launch of the GEMV kernels (whose source waits), of no other
    kernel; ``0`` asks for none and its kernels have no wait."""
    backend, provider = _pdl_backend(tmp_path, setting)
    for nk in (True, False):
        provider.programmatic_launches.clear()
        assert _paths(backend, provider, 1, 64, 24, ml_dtypes.bfloat16, nk) == ["gemv_nk" if nk else "gemv_kn"]
        gemv = provider.launches[-1]
        body = gemv.source.split(f" {gemv.name}(", 1)[1]
        assert ("ACL_PDL_WAIT();" in body) == bool(mode)
        assert ("acl_gemv_prefetch(w" in body) == (mode == "l2")
        assert provider.programmatic_launches == ([gemv.name] if mode else [])
    assert "ACL_PDL_LAUNCH_DEPENDENTS();" not in gemv.source  # a GEMV's successor (a norm) launches plainly
    provider.launches.clear()
    eager.run("Add", backend, self=np.ones(8, np.float32), other=np.ones(8, np.float32), alpha=1.0)
    assert provider.launches and provider.programmatic_launches == ([gemv.name] if mode else [])  # Add: plain
    add = provider.launches[-1]
    body = add.source.split(f" {add.name}(", 1)[1]
    assert ("{\n  ACL_PDL_LAUNCH_DEPENDENTS();" in body) == bool(mode)  # first in its body: successors start early


def test_pdl_trigger_switch_and_injection() -> None:
    """ACL_PDL_TRIGGER=0 keeps the other kernels as they are; the trigger goes first in the named kernel's body."""
    from acl_rocm.pdl import triggers, with_trigger

    assert triggers({"ACL_PDL": "1"}) and triggers({"ACL_PDL": "regs", "ACL_PDL_TRIGGER": "1"})
    assert triggers({}) and not triggers({"ACL_PDL": "0"})  # on by default
    assert not triggers({"ACL_PDL": "1", "ACL_PDL_TRIGGER": "0"})
    assert not triggers({"ACL_PDL": "bad"})
    src = 'ACL_DEV int f(int x);\nextern "C" __global__ void __launch_bounds__(256) k(const int* a, int n) {\n  x;\n}'
    assert with_trigger(src, "k").endswith("(const int* a, int n) {\n  ACL_PDL_LAUNCH_DEPENDENTS();\n  x;\n}")
    assert with_trigger(src, "other") == src  # no such kernel: unchanged
    waits = src.replace("x;", "ACL_PDL_WAIT();")
    assert with_trigger(waits, "k") == waits


def test_pdl_where_the_provider_has_none_launches_plainly_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """As on the amd provider (HIP has no PDL): ACL_PDL=1 plans GEMVs without the wait, launched plainly, logged."""
    import logging

    backend, provider = _pdl_backend(tmp_path, "1", programmatic=False)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.matmul"):
        assert _paths(backend, provider, 1, 64, 24, ml_dtypes.bfloat16, True) == ["gemv_nk"]
    assert "ACL_PDL_WAIT();" not in provider.launches[-1].source.split(" acl_gemv_", 1)[1]
    assert provider.programmatic_launches == []
    assert "launch plainly: the fake provider was made without programmatic" in caplog.text, caplog.text


def test_pdl_bad_setting_is_refused(tmp_path: Path) -> None:
    from acl_core.errors import AclError, AclErrorCode

    backend, _ = _pdl_backend(tmp_path, "2")
    w = eager.to_device(np.ones((64, 24), ml_dtypes.bfloat16), backend, layout="transposed")
    with pytest.raises(AclError) as info:
        eager.run("Mm", backend, self=np.ones((1, 64), ml_dtypes.bfloat16), mat2=w, cubeMathType=0)
    assert info.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM and "ACL_PDL" in str(info.value)


def test_pdl_gemv_is_captured_with_the_attribute(tmp_path: Path) -> None:
    """A GEMV enqueued on a capturing stream asks for the attribute there too (the graph keeps the edge)."""
    from tests.rocm.capture_harness import OpCall, capture

    backend, provider = _pdl_backend(tmp_path, "1")
    w = eager.to_device(np.ones((64, 24), ml_dtypes.bfloat16), backend, layout="transposed")
    call = OpCall(backend, "Mm", {"self": np.ones((1, 64), ml_dtypes.bfloat16), "mat2": w, "cubeMathType": 0})
    s = backend.runtime.create_stream()
    graph = capture([call], s)
    assert len(provider.programmatic_launches) == 1 and provider.launches == []  # recorded into the graph
    backend.driver.graph_destroy(graph)
    backend.runtime.destroy_stream(s)
    call.free()
    w.free()


class _Recorder:
    """cuda.bindings.driver's launch-configuration types and cuLaunchKernelEx, recording the call."""

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6

    class CUlaunchAttribute:
        def __init__(self) -> None:
            self.id = None
            self.value = type("Value", (), {"programmaticStreamSerializationAllowed": 0})()

    class CUlaunchConfig:
        pass

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def cuLaunchKernelEx(self, config: object, function: object, params: int, extra: int) -> tuple[int]:
        self.calls.append((config, function, params, extra))
        return (0,)


def test_nvidia_provider_launches_with_the_programmatic_attribute() -> None:
    """launch_programmatic is cuLaunchKernelEx with one attribute: programmatic stream serialization allowed."""
    from acl_rocm.providers.amd import AmdProvider
    from acl_rocm.providers.nvidia import NvidiaProvider

    nv = object.__new__(NvidiaProvider)
    nv.drv = _Recorder()
    nv.launch_programmatic("fn", (3, 1, 1), (256, 1, 1), 128, 77, 4096)
    ((config, function, params, extra),) = nv.drv.calls
    assert (function, params, extra) == ("fn", 4096, 0)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (3, 1, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ, config.sharedMemBytes) == (256, 1, 1, 128)
    assert config.hStream == 77 and config.numAttrs == 1
    (attribute,) = config.attrs
    assert attribute.id == 6 and attribute.value.programmaticStreamSerializationAllowed == 1
    assert "HIP has no programmatic" in (object.__new__(AmdProvider).programmatic_unavailable() or "")
