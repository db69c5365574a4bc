"""aclmdlRI* on rocm through the shared runtime's front end: CUDA-graph-shaped replay on the CPU emulator.

The runtime keeps the rules (:mod:`acl_core.runtime.capture`); the rocm driver records. Captures a
chain, replays it twice with inputs changed in place (bit-for-bit equal to eager), replaces a task
group's launch, and has a deferred index check fire at a replay's synchronisation.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core.errors import AclError, AclnnError
from acl_core.spec.runtime import CaptureMode
from acl_rocm.backend import RocmBackend
from tests.rocm.capture_harness import OpCall, front_end_replays, write

RELAXED = int(CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
GLOBAL = int(CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)


def test_a_captured_chain_replays_through_execute_async_bit_for_bit(emulated: RocmBackend) -> None:
    rt = emulated.runtime
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    calls = [
        OpCall(emulated, "Add", {"self": x, "other": y, "alpha": 1.0}),
        OpCall(emulated, "Mul", {"self": x, "other": y}),
    ]
    stream = rt.create_stream()
    try:
        model = front_end_replays(calls, stream, GLOBAL)
        rt.ri_destroy(model)
        with pytest.raises(AclError):
            rt.ri_execute_async(model, stream)
    finally:
        for c in calls:
            c.free()
        rt.destroy_stream(stream)


def test_a_task_group_update_replaces_its_launch(emulated: RocmBackend) -> None:
    rt = emulated.runtime
    x = np.arange(8, dtype=np.float32)
    head = OpCall(emulated, "Add", {"self": x, "other": x, "alpha": 1.0})
    group = OpCall(emulated, "Muls", {"self": x, "other": 2.0})
    update = OpCall(emulated, "Muls", {"self": x, "other": 3.0})
    stream, other = rt.create_stream(), rt.create_stream()
    try:
        for c in (head, group, update):
            c.fill(0)
        p_head, p_group = head.prepare(), group.prepare()
        rt.ri_capture_begin(stream, RELAXED)
        head.enqueue(p_head, stream)
        rt.ri_capture_task_grp_begin(stream)
        group.enqueue(p_group, stream)
        handle = rt.ri_capture_task_grp_end(stream)
        model = rt.ri_capture_end(stream)
        p_update = update.prepare()
        rt.ri_capture_task_update_begin(other, handle)
        update.enqueue(p_update, other)
        rt.ri_capture_task_update_end(other)
        for c in (head, group, update):
            write(c.conv.arrays["out"], np.zeros(32, np.uint8))  # type: ignore[arg-type]
        rt.ri_execute_async(model, stream)
        rt.synchronize_stream(stream)
        assert np.array_equal(head.outputs()["out[0]"], 2 * x)
        assert np.array_equal(update.outputs()["out[0]"], 3 * x)
        assert not group.outputs()["out[0]"].any(), "the replaced launch must not run"
        rt.ri_destroy(model)
    finally:
        for c in (head, group, update):
            c.free()
        rt.destroy_stream(stream)
        rt.destroy_stream(other)


def test_a_deferred_index_check_fires_at_the_replays_synchronisation(emulated: RocmBackend) -> None:
    rt = emulated.runtime
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    call = OpCall(emulated, "IndexSelect", {"self": table, "dim": 0, "index": np.array([1, 2], dtype=np.int64)})
    stream = rt.create_stream()
    try:
        call.fill(0)
        prepared = call.prepare()
        rt.ri_capture_begin(stream, RELAXED)
        call.enqueue(prepared, stream)
        model = rt.ri_capture_end(stream)
        write(call.conv.arrays["index"], np.array([1, 9], np.int64).view(np.uint8))  # type: ignore[arg-type]
        rt.ri_execute_async(model, stream)
        with pytest.raises(AclnnError) as info:
            rt.synchronize_stream(stream)
        assert int(info.value.code) == 161002
        write(call.conv.arrays["index"], np.array([5, 0], np.int64).view(np.uint8))  # type: ignore[arg-type]
        rt.ri_execute_async(model, stream)
        rt.synchronize_stream(stream)
        assert np.array_equal(call.outputs()["out[0]"], table[[5, 0]])
        rt.ri_destroy(model)
    finally:
        call.free()
        rt.destroy_stream(stream)
