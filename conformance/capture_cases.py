"""Conformance under capture: a value case captured on a stream, replayed twice with new inputs.

The call is captured once (aclmdlRICaptureBegin/End) over device inputs that hold zeros; before
each of two replays new input values are written in place with async copies on the replay's
stream, and each replay's outputs must equal, bit for bit (any NaN equals any NaN: its sign and
payload vary with a CPU's SIMD path), what the same backend computes eagerly for those inputs.
The first replay gets the sample's inputs, the second the same with every float input reversed.
A replay that read its inputs when it was captured, or that wrote somewhere else, fails. An
operator in ``capabilities().capture_refused_ops`` is reported as refusing capture (a skip whose
reason starts "refuses capture"), and a backend that cannot capture skips these cases.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_conformance.cases import Case, sentinel_outputs
from acl_core import eager
from acl_core.errors import AclCoreError
from acl_core.spec.opspec import Kind, Role
from acl_core.spec.runtime import CaptureMode, MemcpyKind

if TYPE_CHECKING:
    from acl_conformance.runner import Outcome, Runner

REFUSES = "refuses capture"
"""The reason a case of an operator in capture_refused_ops carries (neither passed nor failed)."""


def _changed(spec: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The second replay's inputs: every float input tensor reversed (domains and index ranges stay valid)."""
    out = dict(args)
    for p in spec.params:
        value = args.get(p.name)
        if p.kind is Kind.TENSOR and p.role is not Role.OUT and isinstance(value, np.ndarray):
            if value.dtype.kind == "f" or "float" in str(value.dtype):
                out[p.name] = np.ascontiguousarray(value.reshape(-1)[::-1].reshape(value.shape))
    return out


def _same_bits(actual: Any, expected: Any) -> bool:
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(_same_bits, actual, expected))
    a, e = np.asarray(actual), np.asarray(expected)
    if a.size == e.size:
        a = a.reshape(e.shape)  # a 0-d result is placed as one element
    if a.shape != e.shape or a.dtype != e.dtype:
        return False
    if a.dtype.kind in "fc" or "float" in str(a.dtype):  # NaN's sign and payload carry no meaning (SIMD paths differ)
        nan_a, nan_e = np.isnan(a), np.isnan(e)
        if not np.array_equal(nan_a, nan_e):
            return False
        a, e = np.where(nan_a, 0, a).astype(a.dtype), np.where(nan_e, 0, e).astype(e.dtype)
    return a.tobytes() == e.tobytes()


def run_capture_case(runner: Runner, case: Case) -> Outcome:
    """Capture the case's call once, replay it twice with inputs rewritten in place, compare with eager."""
    backend, caps = runner.backend, runner.caps
    if not caps.stream_capture:
        return runner._skip(case, f"backend {backend.name} does not capture streams (stream_capture false)")
    if case.op in caps.capture_refused_ops:
        return runner._skip(case, f"{REFUSES}: {case.op} is in capture_refused_ops")
    spec = runner.spec(case.op)
    sample = runner.catalog.sample(case.op, case.sample)
    inputs = [dict(sample.args), _changed(spec, dict(sample.args))]
    try:
        expected = [eager.run(case.op, backend, op_args=args) for args in inputs]
    except AclCoreError as exc:
        return runner._skip(case, f"the backend refuses the eager call ({exc.code}); its value case reports it")
    tensors = [p for p in spec.params if p.kind is Kind.TENSOR]
    for p in spec.params:
        if p.kind is Kind.TENSOR_LIST or (
            p.kind is Kind.TENSOR
            and not isinstance(
                {**inputs[0], **sentinel_outputs(spec, expected[0])}.get(p.name), (np.ndarray, type(None))
            )
        ):
            return runner._skip(case, "capture cases place plain NumPy tensors only")
    return _captured(runner, case, spec, inputs, expected, tensors)


def _captured(
    runner: Runner,
    case: Case,
    spec: Any,
    inputs: list[dict[str, Any]],
    expected: list[dict[str, Any]],
    tensors: list[Any],
) -> Outcome:
    from acl_conformance.runner import _handle
    from acl_core.aclnn import execute, get_workspace_size

    backend = runner.backend
    rt = backend.runtime
    rt.ensure_device()
    args = {**inputs[0], **sentinel_outputs(spec, expected[0])}
    placed: dict[str, eager.DeviceArray] = {}
    keep: list[Any] = []
    handles: dict[str, Any] = {}
    for p in spec.params:
        value = args.get(p.name, p.default)
        if p.kind is Kind.TENSOR and isinstance(value, np.ndarray):
            start = value if p.role is Role.OUT else np.zeros_like(value)  # inputs hold zeros while captured
            placed[p.name] = eager.to_device(np.ascontiguousarray(start), backend)
            handles[p.name] = placed[p.name].tensor()
        else:
            handles[p.name] = _handle(p.kind, value, backend, keep)
    stream = rt.create_stream()
    host: list[int] = []
    model = 0
    try:
        size, executor = get_workspace_size(spec, [], handles, backend=backend)
        workspace = rt.malloc(size) if size else 0
        rt.ri_capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)
        try:
            execute(spec, workspace, size, executor, stream)
        finally:
            model = rt.ri_capture_end(stream)
        for round_, (values, want) in enumerate(zip(inputs, expected)):
            for p in tensors:
                if p.role is Role.OUT or p.name not in placed:
                    continue
                data = np.ascontiguousarray(values[p.name])
                if data.nbytes == 0:
                    continue
                pinned = rt.malloc_host(data.nbytes)
                host.append(pinned)
                ctypes.memmove(pinned, data.ctypes.data, data.nbytes)
                dev = placed[p.name]
                rt.memcpy_async(
                    dev.address, dev.nbytes, pinned, data.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE, stream
                )
            rt.ri_execute_async(model, stream)
            rt.synchronize_stream(stream)
            for name, value in want.items():
                if name not in placed:
                    continue
                got = placed[name].numpy()
                if not _same_bits(got, value):
                    return runner._fail(
                        case,
                        "capture",
                        f"replay {round_ + 1} of the captured call differs from the eager result for {name} "
                        "(a replay must read its inputs when it runs and write its outputs)",
                        {"output": name, "replay": round_ + 1},
                    )
        if workspace:
            rt.free(workspace)
    except AclCoreError as exc:
        return runner._fail(case, "capture", f"capturing or replaying failed with {exc.code}: {exc.message}")
    finally:
        if model:
            rt.ri_destroy(model)
        rt.destroy_stream(stream)
        for pinned in host:
            rt.free_host(pinned)
        for dev in placed.values():
            dev.free()
    return runner._pass(case)
