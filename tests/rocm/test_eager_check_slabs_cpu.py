"""Eager device-check flags from per-stream slabs on the fake provider: one read per synchronisation, not per call.

Driver-level cases set a slot by hand where a kernel would; the Embedding cases run the gather's host model
(the ``movement_model`` fixture: :mod:`tests.rocm.movement_model`), whose bad index sets the flag as the kernel does.
"""

from __future__ import annotations

import ctypes
from collections.abc import Collection
from typing import Any

import numpy as np
import pytest

from acl_core.aclnn import execute, get_workspace_size
from acl_core.eager import to_device
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.runtime import CopyDirection
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import SLAB_SLOTS, RocmDriver, handle
from tests.rocm.fake_provider import FakeProvider


class CopyCounting(FakeProvider):
    """The fake provider, counting synchronous device-to-host copies and device frees."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.reads: list[int] = []
        self.freed: list[int] = []

    def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        if stream is None and direction is CopyDirection.DEVICE_TO_HOST:
            self.reads.append(nbytes)
        super().memcpy(dst, src, nbytes, direction, stream)

    def free(self, address: int) -> None:
        self.freed.append(address)
        super().free(address)


def _set(flag: int) -> None:
    """What a kernel does on bad device data."""
    ctypes.c_int32.from_address(flag).value = 1


def _value(flag: int) -> int:
    return ctypes.c_int32.from_address(flag).value


@pytest.fixture
def driver() -> RocmDriver:
    return RocmDriver(CopyCounting())


def _calls(driver: RocmDriver, stream: int, n: int, bad: Collection[int] = ()) -> list[int]:
    """``n`` checked calls on ``stream``; call i (from 0) sets its flag when i is in ``bad``."""
    flags = []
    for i in range(n):
        flag = driver.check_flag(stream)
        if i in bad:
            _set(flag)
        driver.defer_check(stream, flag, f"call {i}")
        flags.append(flag)
    return flags


def test_many_calls_then_one_sync_read_their_flags_with_one_copy(driver: RocmDriver) -> None:
    provider: Any = driver.provider
    stream = provider.stream_create()
    _calls(driver, stream, 200)
    driver.synchronize_stream(stream)
    assert provider.reads == [4 * 200]
    driver.synchronize_stream(stream)  # nothing used since: no copy at all
    assert provider.reads == [4 * 200]


def test_a_failure_reports_once_first_failure_wins_and_the_next_sync_is_clean(driver: RocmDriver) -> None:
    stream = driver.provider.stream_create()
    flags = _calls(driver, stream, 20, bad={6, 12})
    with pytest.raises(AclnnError) as err:
        driver.synchronize_stream(stream)
    assert err.value.code == 161002 and err.value.message == "call 6"
    assert all(_value(f) == 0 for f in flags)  # zeroed once read
    driver.synchronize_stream(stream)
    again = _calls(driver, stream, 20)
    assert again == flags  # the same slots, handed out again, zero
    driver.synchronize_stream(stream)


def test_failures_report_in_the_order_their_checks_were_deferred(driver: RocmDriver) -> None:
    stream = driver.provider.stream_create()
    outer = driver.check_flag(stream)  # an op that takes its flag, then runs another checked op first
    inner = driver.check_flag(stream)
    _set(outer)
    _set(inner)
    driver.defer_check(stream, inner, "inner")
    driver.defer_check(stream, outer, "outer")
    with pytest.raises(AclnnError) as err:
        driver.synchronize_stream(stream)
    assert err.value.message == "inner"  # as when each check was its own flag, read in deferral order


def test_a_set_slot_nobody_deferred_reports_nothing_and_comes_back_zero(driver: RocmDriver) -> None:
    stream = driver.provider.stream_create()
    dropped = driver.check_flag(stream)
    _set(dropped)  # its kernel ran, then the call failed (or had no report) and dropped its check
    driver.drop_check(stream, dropped)
    never = driver.check_flag(stream)  # handed out, never deferred nor dropped
    _set(never)
    driver.synchronize_stream(stream)
    assert _value(dropped) == _value(never) == 0
    assert driver.check_flag(stream) == dropped


def test_streams_do_not_see_each_others_failures(driver: RocmDriver) -> None:
    first, second = driver.provider.stream_create(), driver.provider.stream_create()
    _calls(driver, first, 3, bad={1})
    _calls(driver, second, 3)
    driver.synchronize_stream(second)
    with pytest.raises(AclnnError) as err:
        driver.synchronize_stream(first)
    assert err.value.message == "call 1"
    _calls(driver, first, 2)
    _calls(driver, second, 2, bad={0})
    with pytest.raises(AclnnError):
        driver.synchronize_device()  # every stream with used slots is read
    driver.synchronize_stream(first)
    driver.synchronize_stream(second)


def test_a_full_slab_grows_and_a_failure_in_the_second_slab_is_found(driver: RocmDriver) -> None:
    provider: Any = driver.provider
    stream = provider.stream_create()
    flags = _calls(driver, stream, SLAB_SLOTS + 5, bad={SLAB_SLOTS + 2})
    assert len(driver._eager[stream].active) == 2
    assert flags[SLAB_SLOTS] not in range(flags[0], flags[0] + 4 * SLAB_SLOTS)
    with pytest.raises(AclnnError) as err:
        driver.synchronize_stream(stream)
    assert err.value.message == f"call {SLAB_SLOTS + 2}"
    assert provider.reads == [4 * SLAB_SLOTS, 4 * 5]  # one copy per slab used
    assert _calls(driver, stream, SLAB_SLOTS + 5) == flags  # both slabs handed out again, in order
    driver.synchronize_stream(stream)


def test_destroying_a_stream_frees_its_slabs_without_reporting(driver: RocmDriver) -> None:
    provider: Any = driver.provider
    stream = provider.stream_create()
    _calls(driver, stream, SLAB_SLOTS + 1, bad={0})
    bases = [slab.base for slab in driver._eager[stream].active]
    driver.destroy_stream(stream)  # nobody synchronised for the failure: not reported
    assert sorted(provider.freed) == sorted(bases)
    assert stream not in driver._eager


def test_a_flag_not_from_check_flag_is_refused(driver: RocmDriver) -> None:
    stream = driver.provider.stream_create()
    driver.check_flag(stream)
    with pytest.raises(Exception, match="check_flag"):
        driver.defer_check(stream, 16, "stray")


def test_a_bad_index_in_call_7_of_20_reports_once_at_the_sync(movement_model: RocmBackend) -> None:
    weight = to_device(np.arange(12, dtype=np.float32).reshape(4, 3), movement_model)
    out = to_device(np.zeros((2, 3), np.float32), movement_model)
    spec = get_spec("Embedding")
    for i in range(20):  # call 7 (i = 6) indexes row 4 of 4
        ids = to_device(np.array([1, 4 if i == 6 else 3], np.int64), movement_model)
        size, executor = get_workspace_size(spec, [weight.tensor(), ids.tensor(), out.tensor()], backend=movement_model)
        execute(spec, None, size, executor, None)
    stream = handle(movement_model.runtime.stream(None))
    with pytest.raises(AclnnError) as err:
        movement_model.driver.synchronize_stream(stream)
    assert err.value.code == 161002 and "Embedding" in err.value.message
    movement_model.driver.synchronize_stream(stream)  # reported once
    ids = to_device(np.array([3, 0], np.int64), movement_model)
    size, executor = get_workspace_size(spec, [weight.tensor(), ids.tensor(), out.tensor()], backend=movement_model)
    execute(spec, None, size, executor, None)
    movement_model.driver.synchronize_stream(stream)  # the reused slot was zero: a good call is clean
    got = np.frombuffer(ctypes.string_at(out.address, 24), np.float32).reshape(2, 3)
    np.testing.assert_array_equal(got, np.arange(12, dtype=np.float32).reshape(4, 3)[[3, 0]])
