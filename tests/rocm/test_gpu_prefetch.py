"""aclrtCmoAsync's prefetch kernels on the device (GPU tier; ``ACL_ROCM_EMULATE=1`` runs them on the CPU).

Every method (``ACL_CMO_CONFIG``) runs on unaligned ranges, changes no byte, keeps stream order, and is
captured and replayed through the aclmdlRI front end.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from acl_core.backend import Backend
from acl_core.spec.runtime import MemcpyKind

pytestmark = pytest.mark.gpu

PREFETCH = 0
NBYTES = 70_000
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prefetch_bench.py"
H2D, D2H = MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST


def _methods(rocm: Backend) -> list[str]:
    return ["bulk", "lines", "load"] if rocm.capabilities().notes["cmo_prefetch_native"] == "true" else ["load"]


@pytest.fixture
def prefetch(rocm: Backend) -> Iterator[object]:
    yield rocm.prefetch  # type: ignore[attr-defined]
    rocm.prefetch.use_config(None)  # type: ignore[attr-defined]


def _copy(rocm: Backend, dst: int, src: int, nbytes: int, kind: MemcpyKind) -> None:
    rocm.runtime.memcpy(dst, nbytes, src, nbytes, kind)


@pytest.mark.parametrize("config", ["", "bulk", "lines", "load", "bulk:1", "lines:2", "load:3"])
def test_prefetch_changes_nothing_and_keeps_stream_order(rocm: Backend, prefetch: object, config: str) -> None:
    if config.split(":")[0] not in ("", *_methods(rocm)):
        pytest.skip(f"{config} is NVIDIA-only (the amd provider answers 207000: test_prefetch_cpu)")
    rocm.prefetch.use_config(config)  # type: ignore[attr-defined]
    rt = rocm.runtime
    data = np.random.default_rng(len(config)).integers(0, 256, NBYTES, dtype=np.uint8)
    out = np.zeros(NBYTES, np.uint8)
    rt.register_host(data.ctypes.data, NBYTES, data)
    rt.register_host(out.ctypes.data, NBYTES, out)
    dev = rt.malloc(NBYTES)
    s = rt.create_stream()
    try:
        _copy(rocm, dev, data.ctypes.data, NBYTES, H2D)
        rt.memset_async(dev, NBYTES, 0x5A, 1000, s)
        for lo, n in ((0, NBYTES), (3, NBYTES - 3), (4097, 12_345), (NBYTES - 1, 1)):
            rt.cmo_async(dev + lo, n, PREFETCH, s)
        rt.memset_async(dev + NBYTES - 10, 10, 0xA5, 10, s)
        rt.synchronize_stream(s)
        _copy(rocm, out.ctypes.data, dev, NBYTES, D2H)
        expected = data.copy()
        expected[:1000] = 0x5A
        expected[-10:] = 0xA5
        np.testing.assert_array_equal(out, expected)
    finally:
        rt.destroy_stream(s)
        rt.free(dev)
        rt.unregister(data.ctypes.data)
        rt.unregister(out.ctypes.data)


@pytest.mark.parametrize("method", ["bulk", "lines", "load"])
def test_prefetch_is_captured_and_replayed(rocm: Backend, prefetch: object, method: str) -> None:
    if method not in _methods(rocm):
        pytest.skip(f"{method} is NVIDIA-only")
    rocm.prefetch.use_config(method)  # type: ignore[attr-defined]
    rt = rocm.runtime
    dev = rt.malloc(NBYTES)
    out = np.zeros(NBYTES, np.uint8)
    rt.register_host(out.ctypes.data, NBYTES, out)
    s = rt.create_stream()
    try:
        rt.ri_capture_begin(s, 2)
        rt.cmo_async(dev + 5, NBYTES - 5, PREFETCH, s)
        rt.memset_async(dev, NBYTES, 0x33, NBYTES, s)
        rt.cmo_async(dev, NBYTES, PREFETCH, s)
        model = rt.ri_capture_end(s)
        rt.memset(dev, NBYTES, 0, NBYTES)
        rt.synchronize_stream(s)
        _copy(rocm, out.ctypes.data, dev, NBYTES, D2H)
        assert not out.any(), "the capture ran nothing"
        for _ in range(2):
            rt.ri_execute_async(model, s)
        rt.synchronize_stream(s)
        _copy(rocm, out.ctypes.data, dev, NBYTES, D2H)
        assert (out == 0x33).all()
        rt.ri_destroy(model)
    finally:
        rt.destroy_stream(s)
        rt.free(dev)
        rt.unregister(out.ctypes.data)


def test_the_prefetch_bench_runs_every_method(rocm: Backend, rocm_under_test: str, tmp_path: Path) -> None:
    """scripts/prefetch_bench.py on rocm: each method, ahead and side, beside cold and warm (timings not judged)."""
    spec = importlib.util.spec_from_file_location("prefetch_bench", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "prefetch.json"
    argv = ["--backend", rocm_under_test, "--rounds", "1", "--spacer", "2", "--flush-mb", "1", "--scale", "32"]
    assert module.main([*argv, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    native = rocm.capabilities().notes["cmo_prefetch_native"] == "true"  # type: ignore[attr-defined]
    methods = ["bulk", "lines", "load"] if native else ["load"]
    assert report["methods"] == methods
    assert report["kinds"] == ["cold", "warm"] + [f"{m}:{x}" for x in methods for m in ("ahead", "side")]
    assert all(row[f"{k}_us"] > 0 for row in report["rows"] for k in report["kinds"])
