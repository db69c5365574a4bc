"""aclrtCmoAsync on the rocm backend over the fake provider: method choice (ACL_CMO_CONFIG), launch plans, capture."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from acl_core.errors import AclError
from acl_core.spec.runtime import CaptureMode
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.prefetch import BULK_UNIT, METHODS, PrefetchKernel
from acl_rocm.prefetch import CmoConfig, parse_cmo_config, plan_prefetch
from tests.rocm.fake_provider import FakeProvider

PREFETCH = 0


def _backend(tmp_path: Path, provider: FakeProvider | None = None, **env: str) -> tuple[RocmBackend, FakeProvider]:
    provider = provider or FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), **env})
    backend.runtime.ensure_device(0)
    return backend, provider


def _code(fn, *args) -> int:
    with pytest.raises(AclError) as exc:
        fn(*args)
    return exc.value.code


def test_parse() -> None:
    assert parse_cmo_config("") == CmoConfig("auto", 0)
    assert parse_cmo_config(" Lines ") == CmoConfig("lines", 0)
    assert parse_cmo_config("bulk:8") == CmoConfig("bulk", 8)
    for bad in ("fast", "bulk:0", "load:x", "lines:-1"):
        with pytest.raises(ValueError):
            parse_cmo_config(bad)


@pytest.mark.parametrize("method", METHODS)
def test_plans_cover_the_range_and_nothing_beyond_the_aligned_hull(method: str) -> None:
    rng = np.random.default_rng(len(method))
    for _ in range(300):
        address = (1 << 40) + 256 * int(rng.integers(0, 1000)) + int(rng.integers(0, 256))
        nbytes = int(rng.choice([1, 15, 16, 127, 129, 4099, BULK_UNIT, BULK_UNIT + 1, 12_582_912, 6_291_457]))
        cap = int(rng.choice([1, 3, 132]))
        p = plan_prefetch(method, address, nbytes, cap)
        assert p.base <= address and p.lo == address and p.hi == address + nbytes
        assert p.base + (p.units - 1) * p.unit < p.hi <= p.base + p.units * p.unit  # every unit meets the range
        assert address - p.base < {"bulk": 16, "lines": 128, "load": 32}[method]
        assert 1 <= p.grid <= cap and p.grid * p.threads >= min(p.units, cap * p.threads)
        if method == "bulk":
            assert p.base % 16 == 0 and p.unit % 16 == 0


def test_qwen3_shapes_launch_few_bulk_blocks() -> None:
    # gate_up 12.6 MB: 193 requests of 64 KiB, one per thread, 7 warps' worth of blocks
    p = plan_prefetch("bulk", 1 << 40, 2 * 3072 * 1024 * 2, 132)
    assert (p.units, p.grid, p.threads) == (192, 6, 32)
    p = plan_prefetch("lines", 1 << 40, 2 * 3072 * 1024 * 2, 132)
    assert (p.units, p.grid) == (98304, 132)


def test_the_method_per_platform_and_setting(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path)
    assert backend.prefetch.method() == "bulk"  # sm_90
    notes = backend.capabilities().notes
    assert notes["cmo_prefetch"].startswith("bulk (native L2 prefetch") and notes["cmo_prefetch_native"] == "true"
    backend.prefetch.use_config("load:4")
    assert backend.prefetch.method() == "load" and "at most 4 blocks" in backend.prefetch.describe()
    old, _ = _backend(tmp_path / "old", FakeProvider(arch="sm_80"))
    assert old.prefetch.method() == "lines"
    bad, _ = _backend(tmp_path / "bad", ACL_CMO_CONFIG="nope")
    dev = bad.runtime.malloc(4096)
    assert _code(bad.runtime.cmo_async, dev, 4096, PREFETCH, None) == 100000
    assert "ACL_CMO_CONFIG='nope'" in bad.prefetch.describe()


def test_amd_has_only_the_load_method(tmp_path: Path) -> None:
    backend, provider = _backend(tmp_path)
    provider.platform = "amd"  # type: ignore[misc]
    backend.prefetch.use_config("")
    assert backend.prefetch.method() == "load" and not backend.prefetch.native
    assert "loads (not a native prefetch)" in backend.prefetch.describe()
    dev = backend.runtime.malloc(4096)
    for method in ("bulk", "lines"):
        backend.prefetch.use_config(method)
        assert _code(backend.runtime.cmo_async, dev, 4096, PREFETCH, None) == 207000
    backend.prefetch.use_config("load")
    backend.runtime.cmo_async(dev, 4096, PREFETCH, None)
    assert provider.launches[-1].name == "acl_cmo_prefetch_load"


@pytest.mark.parametrize("method", METHODS)
def test_one_launch_on_the_callers_stream_with_the_planned_arguments(tmp_path: Path, method: str) -> None:
    backend, provider = _backend(tmp_path, ACL_CMO_CONFIG=method)
    rt = backend.runtime
    dev = rt.malloc(100_000)
    s = rt.create_stream()
    before = len(provider.launches)
    rt.cmo_async(dev + 3, 70_001, PREFETCH, s)
    (launch,) = provider.launches[before:]
    p = plan_prefetch(method, dev + 3, 70_001, 132)
    assert launch.name == PrefetchKernel(method).kernel_name
    assert launch.grid == (p.grid, 1, 1) and launch.block == (p.threads, 1, 1)
    assert launch.stream == int(rt.stream(s))  # type: ignore[call-overload]
    values = [struct.unpack("<q", a)[0] for a in launch.args]
    assert values == [p.base, p.units, p.unit, p.lo, p.hi]
    rt.cmo_async(dev, 0, PREFETCH, s)  # size 0: nothing launched
    assert len(provider.launches) == before + 1


def test_a_captured_prefetch_runs_only_at_replay(tmp_path: Path) -> None:
    backend, provider = _backend(tmp_path, ACL_CMO_CONFIG="lines")
    rt, driver = backend.runtime, backend.driver
    dev = rt.malloc(8192)
    s = rt.create_stream()
    stream = rt.stream(s)
    driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    before = len(provider.launches)
    rt.cmo_async(dev, 8192, PREFETCH, s)
    graph = driver.capture_end(stream)
    assert len(provider.launches) == before  # recorded, not run
    for _ in range(2):
        driver.graph_launch(graph, stream)
    assert [x.name for x in provider.launches[before:]] == ["acl_cmo_prefetch_lines"] * 2
    driver.graph_destroy(graph)


def test_the_driver_without_a_prefetcher_answers_207000(tmp_path: Path) -> None:
    backend, _ = _backend(tmp_path)
    backend.driver.prefetcher = None
    dev = backend.runtime.malloc(64)
    assert _code(backend.runtime.cmo_async, dev, 64, PREFETCH, None) == 207000


def test_the_kernel_is_compiled_before_a_capture_begins(tmp_path: Path) -> None:
    backend, provider = _backend(tmp_path, ACL_CMO_CONFIG="load")
    s = backend.runtime.create_stream()
    stream = backend.runtime.stream(s)
    assert "acl_cmo_prefetch_load" not in provider.compiled
    backend.driver.capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    assert "acl_cmo_prefetch_load" in provider.compiled
    backend.driver.graph_destroy(backend.driver.capture_end(stream))
