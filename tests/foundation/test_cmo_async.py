"""aclrtCmoAsync (acl.rt.cmo_async): the prefetch hint's rules, every misuse's code, stream order and capture."""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import acl
from acl_core.errors import AclError
from acl_core.plugin import get_backend
from acl_core.runtime import Runtime
from acl_core.spec.runtime import CmoType, Driver
from acl_reference.driver import ReferenceDriver

PREFETCH = 0
NBYTES = 4096


@pytest.fixture
def rt() -> Runtime:
    runtime = Runtime("reference", ReferenceDriver())
    runtime.init()
    runtime.set_device(0)
    return runtime


def _code(fn, *args) -> int:
    with pytest.raises(AclError) as exc:
        fn(*args)
    return exc.value.code


def test_the_enum_has_the_official_values() -> None:
    assert [(m.name, int(m)) for m in CmoType] == [
        ("ACL_RT_CMO_TYPE_PREFETCH", 0),
        ("ACL_RT_CMO_TYPE_WRITEBACK", 1),
        ("ACL_RT_CMO_TYPE_INVALID", 2),
        ("ACL_RT_CMO_TYPE_FLUSH", 3),
    ]


def test_prefetch_is_a_stream_task_in_order_and_changes_no_data(rt: Runtime) -> None:
    dev = rt.malloc(NBYTES)
    s = rt.create_stream()
    rt.memset_async(dev, NBYTES, 7, NBYTES, s)
    rt.cmo_async(dev + 64, NBYTES - 64, PREFETCH, s)
    rt.memset_async(dev, NBYTES, 9, 16, s)
    queue = rt.stream(s).queue  # type: ignore[attr-defined]
    assert [t.what for t in queue] == [
        f"memset of {NBYTES} bytes",
        f"prefetch of {NBYTES - 64} bytes",
        "memset of 16 bytes",
    ]
    rt.synchronize_stream(s)
    data = rt.driver.device_bytes(dev, NBYTES)  # type: ignore[attr-defined]
    assert (data[:16] == 9).all() and (data[16:] == 7).all()
    rt.cmo_async(dev, NBYTES, PREFETCH, None)  # the default stream
    assert [t.what for t in rt.stream(None).queue] == [f"prefetch of {NBYTES} bytes"]  # type: ignore[attr-defined]
    rt.synchronize_device()
    rt.cmo_async(dev, 0, PREFETCH, s)  # size 0 enqueues nothing
    assert not rt.stream(s).queue  # type: ignore[attr-defined]


def test_every_misuse_returns_its_code(rt: Runtime) -> None:
    dev = rt.malloc(NBYTES)
    s = rt.create_stream()
    assert _code(rt.cmo_async, dev, NBYTES, 4, s) == 100000  # no such aclrtCmoType
    assert _code(rt.cmo_async, dev, NBYTES, 0xFFFF, s) == 100000
    for other in (1, 2, 3):  # WRITEBACK, INVALID, FLUSH: CANN supports only PREFETCH
        assert _code(rt.cmo_async, dev, NBYTES, other, s) == 207000
    assert _code(rt.cmo_async, None, NBYTES, PREFETCH, s) == 100000  # null
    assert _code(rt.cmo_async, 0, 0, PREFETCH, s) == 100000
    assert _code(rt.cmo_async, dev + 8 * NBYTES + 4096, 16, PREFETCH, s) == 100000  # nobody's memory
    assert _code(rt.cmo_async, dev, NBYTES + 1, PREFETCH, s) == 100000  # runs past the allocation
    assert _code(rt.cmo_async, dev + NBYTES, 1, PREFETCH, s) == 100000
    assert _code(rt.cmo_async, dev, -1, PREFETCH, s) == 100000  # not a size_t
    assert _code(rt.cmo_async, dev, "16", PREFETCH, s) == 100000
    assert _code(rt.cmo_async, dev, NBYTES, "prefetch", s) == 100000
    host = rt.malloc_host(NBYTES)
    assert _code(rt.cmo_async, host, NBYTES, PREFETCH, s) == 100000  # page-locked host memory
    pageable = np.zeros(NBYTES, np.uint8)
    rt.register_host(pageable.ctypes.data, pageable.nbytes, pageable)
    assert _code(rt.cmo_async, pageable.ctypes.data, NBYTES, PREFETCH, s) == 100000
    gone = rt.malloc(NBYTES)
    rt.free(gone)
    assert _code(rt.cmo_async, gone, NBYTES, PREFETCH, s) == 100000  # freed
    assert _code(rt.cmo_async, dev, NBYTES, PREFETCH, 0xDEAD) == 107017  # unknown stream
    dead = rt.create_stream()
    rt.destroy_stream(dead)
    assert _code(rt.cmo_async, dev, NBYTES, PREFETCH, dead) == 107017
    rt.set_device(1)  # memory of device 0 is not the current device's
    assert _code(rt.cmo_async, dev, NBYTES, PREFETCH, None) == 100000
    rt.set_device(0)
    assert not rt.stream(s).queue  # type: ignore[attr-defined]  # nothing refused was enqueued


def test_without_device_or_init(rt: Runtime) -> None:
    fresh = Runtime("reference", ReferenceDriver())
    assert _code(fresh.cmo_async, 1, 1, PREFETCH, None) == 100001  # before aclInit
    fresh.init()
    assert _code(fresh.cmo_async, 1, 1, PREFETCH, None) == 107002  # no device set


def test_a_driver_without_prefetch_answers_feature_not_supported() -> None:
    class Plain(ReferenceDriver):
        cmo_prefetch = Driver.cmo_prefetch

    runtime = Runtime("plain", Plain())
    runtime.init()
    runtime.set_device(0)
    dev = runtime.malloc(NBYTES)
    assert _code(runtime.cmo_async, dev, NBYTES, PREFETCH, None) == 207000


def test_front_end_returns_codes() -> None:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    dev, ret = acl.rt.malloc(NBYTES, 0)
    assert ret == 0
    s, _ = acl.rt.create_stream()
    assert acl.rt.cmo_async(dev, NBYTES, PREFETCH, s) == 0
    assert acl.rt.cmo_async(dev, NBYTES, 3, s) == 207000
    assert "PREFETCH" in acl.get_recent_err_msg()
    assert acl.rt.cmo_async(dev, NBYTES + 1, PREFETCH, s) == 100000
    assert acl.rt.synchronize_stream(s) == 0
    assert acl.rt.destroy_stream(s) == 0
    assert acl.rt.free(dev) == 0


def test_captured_and_replayed_like_any_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    dev, _ = acl.rt.malloc(NBYTES, 0)
    s, _ = acl.rt.create_stream()
    runtime = get_backend().runtime
    assert acl.mdl.ri_capture_begin(s, 2) == 0
    assert acl.rt.memset_async(dev, NBYTES, 3, NBYTES, s) == 0
    assert acl.rt.cmo_async(dev, NBYTES, PREFETCH, s) == 0
    assert not runtime.stream(s).queue  # type: ignore[attr-defined]  # recorded, not queued
    model, ret = acl.mdl.ri_capture_end(s)
    assert ret == 0
    assert acl.mdl.ri_debug_print(model) == 0
    out = capsys.readouterr().out
    assert "aclrtCmoAsync" in out and "2 task(s)" in out
    assert acl.mdl.ri_execute_async(model, s) == 0
    assert [t.what for t in runtime.stream(s).queue] == [  # type: ignore[attr-defined]
        f"memset of {NBYTES} bytes",
        f"prefetch of {NBYTES} bytes",
    ]
    assert acl.rt.synchronize_stream(s) == 0
    # a replay after the memory was freed: the prefetch task reports it at synchronisation
    assert acl.rt.free(dev) == 0
    assert acl.mdl.ri_execute_async(model, s) == 0
    assert acl.rt.synchronize_stream(s) == 107000
    assert acl.mdl.ri_destroy(model) == 0
    assert acl.rt.destroy_stream(s) == 0


def test_an_invalidated_capture_refuses_the_prefetch() -> None:
    assert acl.init() in (0, 100002)
    assert acl.rt.set_device(0) == 0
    dev, _ = acl.rt.malloc(NBYTES, 0)
    s, _ = acl.rt.create_stream()
    assert acl.mdl.ri_capture_begin(s, 2) == 0
    assert acl.rt.synchronize_stream(s) == 107041  # invalidates the capture
    assert acl.rt.cmo_async(dev, NBYTES, PREFETCH, s) == 507903
    assert acl.mdl.ri_capture_end(s)[1] == 507903
    assert acl.rt.destroy_stream(s) == 0
    assert acl.rt.free(dev) == 0
