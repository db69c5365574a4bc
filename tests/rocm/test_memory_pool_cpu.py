"""The nvidia provider keeps freed stream-ordered memory in the device pool, and gives it back before failing."""

from __future__ import annotations

import enum
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from acl_core.errors import AclError
from acl_rocm.providers.base import KEEP_EVERYTHING, pool_release_threshold
from acl_rocm.providers.nvidia import NvidiaProvider


class Err(enum.Enum):
    cudaSuccess = 0
    cudaErrorMemoryAllocation = 2
    cudaErrorNotSupported = 801


class FakeRuntime:
    """The cudart calls the pool code makes, recorded; ``free_bytes`` is what cudaMalloc can still give."""

    cudaMemPoolAttr = SimpleNamespace(cudaMemPoolAttrReleaseThreshold="release-threshold")

    def __init__(self, free_bytes: int = 1 << 30, refuse_attribute: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.free_bytes = free_bytes
        self.pooled = 0
        self.refuse_attribute = refuse_attribute

    def cudaSetDevice(self, index: int) -> tuple[Err]:
        return (Err.cudaSuccess,)

    def cudaFree(self, address: int) -> tuple[Err]:
        return (Err.cudaSuccess,)

    def cudaDeviceGetDefaultMemPool(self, index: int) -> tuple[Err, str]:
        self.calls.append(("pool", index))
        return (Err.cudaSuccess, f"pool{index}")

    def cudaMemPoolSetAttribute(self, pool: str, attr: str, value: Any) -> tuple[Err]:
        self.calls.append(("set", pool, attr, int(value)))
        return (Err.cudaErrorNotSupported if self.refuse_attribute else Err.cudaSuccess,)

    def cudaMemPoolTrimTo(self, pool: str, keep: int) -> tuple[Err]:
        self.calls.append(("trim", pool, keep))
        self.free_bytes += self.pooled
        self.pooled = 0
        return (Err.cudaSuccess,)

    def cudaMalloc(self, nbytes: int) -> tuple[Err, int]:
        self.calls.append(("malloc", nbytes))
        if nbytes > self.free_bytes:
            return (Err.cudaErrorMemoryAllocation, 0)
        self.free_bytes -= nbytes
        return (Err.cudaSuccess, 0x1000)

    def cudaGetErrorString(self, error: Err) -> tuple[Err, bytes]:
        return (Err.cudaSuccess, error.name.encode())


def _provider(rt: FakeRuntime) -> NvidiaProvider:
    provider = NvidiaProvider.__new__(NvidiaProvider)
    provider.__dict__.update(rt=rt, drv=SimpleNamespace(cuuint64_t=int), _pools={})
    provider.get_device = lambda: 0  # type: ignore[method-assign]
    return provider


def test_the_default_pool_keeps_everything_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACL_POOL_RELEASE_THRESHOLD", raising=False)
    rt = FakeRuntime()
    provider = _provider(rt)
    provider.set_device(0)
    provider.set_device(0)
    assert rt.calls == [("pool", 0), ("set", "pool0", "release-threshold", KEEP_EVERYTHING)]


def test_the_threshold_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACL_POOL_RELEASE_THRESHOLD", "0")
    rt = FakeRuntime()
    _provider(rt).set_device(1)
    assert rt.calls[-1] == ("set", "pool1", "release-threshold", 0)
    for bad in ("lots", "-1", str(2**64)):
        monkeypatch.setenv("ACL_POOL_RELEASE_THRESHOLD", bad)
        with pytest.raises(ValueError, match="ACL_POOL_RELEASE_THRESHOLD"):
            pool_release_threshold()


def test_a_refused_threshold_is_logged_and_the_device_still_starts(caplog: pytest.LogCaptureFixture) -> None:
    rt = FakeRuntime(refuse_attribute=True)
    provider = _provider(rt)
    with caplog.at_level(logging.WARNING, logger="acl_rocm.memory"):
        provider.set_device(0)
    assert "release threshold of 0" in caplog.text and "cudaErrorNotSupported" in caplog.text
    rt.free_bytes = 0  # no pool held: an allocation that does not fit fails at once, with CANN's code
    with pytest.raises(AclError) as info:
        provider.malloc(64)
    assert info.value.code == 207001 and not [c for c in rt.calls if c[0] == "trim"]


def test_out_of_memory_trims_the_pool_and_tries_once_more() -> None:
    rt = FakeRuntime(free_bytes=100)
    provider = _provider(rt)
    provider.set_device(0)
    rt.pooled = 400  # freed blocks the pool still holds
    assert provider.malloc(300) == 0x1000
    assert [c[0] for c in rt.calls[-3:]] == ["malloc", "trim", "malloc"]
    with pytest.raises(AclError) as info:  # still too large after the trim: the error, not a loop
        provider.malloc(10_000)
    assert info.value.code == 207001 and [c[0] for c in rt.calls[-3:]] == ["malloc", "trim", "malloc"]
