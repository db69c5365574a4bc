"""Run aclnn calls eagerly and under the rocm driver's stream capture, for tests that compare the two.

A :class:`OpCall` places one operator's NumPy arguments on the device once (inputs and outputs), runs
phase 1 (``prepare``) and phase 2 (``enqueue``) on a stream, and rewrites its inputs in place between
runs. :func:`compare_replay` runs a chain of calls eagerly twice (first inputs, then changed inputs),
then captures the chain once through ``driver.capture_begin``/``capture_end`` and replays the graph
twice with the same two input sets: each replay must equal its eager run bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from acl_core.aclnn import execute, get_workspace_size
from acl_core.backend import Backend
from acl_core.eager import DeviceArray, _Arguments, empty
from acl_core.spec.ops import get_spec
from acl_core.spec.opspec import OutInfo, Role
from acl_core.spec.runtime import CaptureMode, MemcpyKind
from acl_core.spec.validate import check_inputs
from acl_core.tensor import AclTensorList


def write(da: DeviceArray, raw: np.ndarray) -> None:
    """Overwrite a device array's whole storage with ``raw`` bytes (synchronous, outside any capture)."""
    rt = da.backend.runtime
    host = np.ascontiguousarray(raw, dtype=np.uint8)
    rt.register_host(host.ctypes.data, host.nbytes, host)
    try:
        rt.memcpy(da.address, da.nbytes, host.ctypes.data, host.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
    finally:
        rt.unregister(host.ctypes.data)


def _changed(raw: np.ndarray, item: int) -> np.ndarray:
    """The same bytes rotated by one element: new values in every slot, each still a value of the input."""
    return np.roll(raw, max(item, 1))


@dataclass
class OpCall:
    """One operator call with device-resident arguments that can be re-run and re-filled in place."""

    backend: Backend
    op: str
    kwargs: dict[str, Any]
    args: dict[str, Any] = field(init=False)
    conv: _Arguments = field(init=False)
    variants: list[list[tuple[DeviceArray, np.ndarray]]] = field(init=False)

    def __post_init__(self) -> None:
        spec = get_spec(self.op)
        self.spec = spec
        self.conv = _Arguments(self.backend, "contiguous")
        self.args = self.conv.convert(spec, dict(self.kwargs))
        plan = check_inputs(spec, self.args, self.backend.runtime, outputs_required=False)
        for p in spec.params:
            info = plan.plan["outputs"].get(p.name)
            if p.role is not Role.OUT or self.args[p.name] is not None or info is None:
                continue
            if isinstance(info, list):  # an aclTensorList output (the Foreach family)
                arrays = [empty(i.shape, i.dtype, self.backend) for i in info]
                self.conv.arrays[p.name] = arrays
                self.args[p.name] = AclTensorList.create([a.tensor() for a in arrays])
                continue
            assert isinstance(info, OutInfo)
            da = empty(info.shape, info.dtype, self.backend)
            self.conv.arrays[p.name] = da
            self.args[p.name] = da.tensor()
        first: list[tuple[DeviceArray, np.ndarray]] = []
        second: list[tuple[DeviceArray, np.ndarray]] = []
        for p in spec.params:
            item = self.conv.arrays.get(p.name)
            if p.role is Role.OUT or item is None:
                continue
            for da in item if isinstance(item, list) else [item]:
                raw = da.storage_bytes()
                first.append((da, raw))
                is_float = da.dtype.numpy is not None and np.issubdtype(da.dtype.numpy, np.floating)
                second.append((da, _changed(raw, da.dtype.numpy.itemsize) if is_float else raw))  # type: ignore[union-attr]
        self.variants = [first, second]
        self._workspace: tuple[int, int] = (0, 0)

    def fill(self, variant: int) -> None:
        """Write input set ``variant`` (0: the given values, 1: float inputs rotated by one element)."""
        for da, raw in self.variants[variant]:
            write(da, raw)

    def prepare(self) -> tuple[int, Any]:
        """Phase 1 (host only): the workspace size and the executor, workspace allocated here."""
        size, executor = get_workspace_size(self.spec, [], self.args, backend=self.backend)
        if size > self._workspace[1]:
            if self._workspace[0]:
                self.backend.runtime.free(self._workspace[0])
            self._workspace = (self.backend.runtime.malloc(size), size)
        return size, executor

    def enqueue(self, prepared: tuple[int, Any], stream: int) -> None:
        """Phase 2 on acl stream ``stream``."""
        size, executor = prepared
        execute(self.spec, self._workspace[0] if size else 0, size, executor, stream)

    def outputs(self) -> dict[str, np.ndarray]:
        """Every output and in-out tensor as NumPy (reads wait for the device)."""
        out: dict[str, np.ndarray] = {}
        for p in self.spec.params:
            item = self.conv.arrays.get(p.name)
            if p.role is Role.IN or item is None:
                continue
            for i, da in enumerate(item if isinstance(item, list) else [item]):
                out[f"{p.name}[{i}]"] = da.numpy()
        return out

    def free(self) -> None:
        """Release the device arrays and the workspace."""
        self.conv.free()
        if self._workspace[0]:
            self.backend.runtime.free(self._workspace[0])
            self._workspace = (0, 0)


def run_eager(calls: Sequence[OpCall], stream: int, variant: int) -> list[dict[str, np.ndarray]]:
    """Fill ``variant``, run every call eagerly in order, synchronise; the outputs."""
    rt = calls[0].backend.runtime
    for c in calls:
        c.fill(variant)
    for c in calls:
        c.enqueue(c.prepare(), stream)
    rt.synchronize_stream(stream)
    return [c.outputs() for c in calls]


def front_end_replays(calls: Sequence[OpCall], stream: int, mode: int) -> int:
    """Capture ``calls`` through aclmdlRICapture*, replay both variants with ri_execute_async, each equal to eager.

    Returns the model running instance (the caller destroys it).
    """
    from acl_core.spec.runtime import CaptureStatus

    rt = calls[0].backend.runtime
    want = [run_eager(calls, stream, v) for v in (0, 1)]
    prepared = [c.prepare() for c in calls]
    rt.ri_capture_begin(stream, mode)
    status, _model = rt.ri_capture_get_info(stream)
    assert status == CaptureStatus.ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE
    for c, p in zip(calls, prepared):
        c.enqueue(p, stream)
    model = rt.ri_capture_end(stream)
    for variant in (0, 1):
        for c in calls:
            c.fill(variant)
        rt.ri_execute_async(model, stream)
        rt.synchronize_stream(stream)
        assert_bitwise([c.outputs() for c in calls], want[variant], f"replay {variant}")
    return int(model)


def capture(calls: Iterable[OpCall], stream: int) -> Any:
    """Phase 1 of every call, then their phase 2 captured on ``stream``; the driver's graph."""
    calls = list(calls)
    backend = calls[0].backend
    prepared = [c.prepare() for c in calls]
    driver_stream = backend.runtime.stream(stream)
    driver = backend.driver
    driver.capture_begin(driver_stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    try:
        for c, p in zip(calls, prepared):
            c.enqueue(p, stream)
    except BaseException:
        driver.graph_destroy(driver.capture_end(driver_stream))
        raise
    return driver.capture_end(driver_stream)


def replay(calls: Sequence[OpCall], graph: Any, stream: int, variant: int) -> list[dict[str, np.ndarray]]:
    """Fill ``variant``, replay ``graph`` on ``stream``, synchronise; the outputs."""
    backend = calls[0].backend
    for c in calls:
        c.fill(variant)
    backend.driver.graph_launch(graph, backend.runtime.stream(stream))
    backend.runtime.synchronize_stream(stream)
    return [c.outputs() for c in calls]


def assert_bitwise(got: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]], what: str) -> None:
    """Every output array equal byte for byte (NaNs included)."""
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.keys() == w.keys()
        for name in w:
            a, b = np.ascontiguousarray(g[name]), np.ascontiguousarray(w[name])
            assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: call {i} {name}"
            assert a.tobytes() == b.tobytes(), f"{what}: call {i} {name} differs from eager"


def compare_replay(calls: Sequence[OpCall], stream: int) -> Any:
    """Eager twice (two input sets), then capture once and replay twice: bit-for-bit equal. The graph."""
    eager0 = run_eager(calls, stream, 0)
    eager1 = run_eager(calls, stream, 1)
    graph = capture(calls, stream)
    try:
        assert_bitwise(replay(calls, graph, stream, 0), eager0, "replay 1")
        assert_bitwise(replay(calls, graph, stream, 1), eager1, "replay 2")
    except BaseException:
        calls[0].backend.driver.graph_destroy(graph)
        raise
    return graph


def replays_like_eager(backend: Any, op: str, args: dict[str, Any]) -> None:
    """``op(**args)`` captured on a fresh stream replays bit for bit like its eager runs (:func:`compare_replay`)."""
    call = OpCall(backend, op, args)
    stream = backend.runtime.create_stream()
    try:
        backend.driver.graph_destroy(compare_replay([call], stream))
    finally:
        call.free()
        backend.runtime.destroy_stream(stream)
