"""Conformance under capture: a value case captured on a stream, replayed twice with new inputs.

The call is captured once (aclmdlRICaptureBegin/End) over device inputs that hold zeros; before
each of two replays new input values are written in place with async copies on the replay's
stream, and each replay's outputs must equal, bit for bit (any NaN equals any NaN: its sign and
payload vary with a CPU's SIMD path), what the same backend computes eagerly for those inputs.
The first replay gets the sample's inputs, the second the same with every float input reversed.
A replay that read its inputs when it was captured, or that wrote somewhere else, fails. An
operator in ``capabilities().capture_refused_ops`` is reported as refusing capture (a skip whose
reason starts "refuses capture"), except one that writes back a view shape (``OpSpec.writeback``), whose
refusal is its contract: its case passes when the capturing stream refuses it with 107041 and the capture
ends invalidated (507903). A backend that cannot capture skips these cases. The call is
placed as ``acl_core.eager.run`` places it (0-d, packed and tensor-list arguments alike).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from acl_conformance.cases import Case
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
                # np.array, not ascontiguousarray (which makes a 0-d input 1-d); subok keeps an NZ-placed input NZ
                out[p.name] = np.array(value.reshape(-1)[::-1].reshape(value.shape), order="C", subok=True)
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
    spec = runner.spec(case.op)
    if spec.writeback:  # refusing capture is these ops' contract on every backend: check the refusal itself
        return _refused(runner, case, spec, dict(runner.catalog.sample(case.op, case.sample).args))
    if case.op in caps.capture_refused_ops:
        return runner._skip(case, f"{REFUSES}: {case.op} is in capture_refused_ops")
    sample = runner.catalog.sample(case.op, case.sample)
    inputs = [dict(sample.args), _changed(spec, dict(sample.args))]
    try:
        expected = [eager.run(case.op, backend, op_args=args) for args in inputs]
    except AclCoreError as exc:
        return runner._skip(case, f"the backend refuses the eager call ({exc.code}); its value case reports it")
    return _captured(runner, case, spec, inputs, expected)


def _zeroed(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.zeros_like(value)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        return [np.zeros_like(v) for v in value]
    return value


def _captured(
    runner: Runner, case: Case, spec: Any, inputs: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> Outcome:
    """Place the call as eager.run does (inputs zeroed, outputs by the output rule), capture, replay, compare."""
    from acl_core.aclnn import execute
    from acl_core.eager import _Arguments, _collect

    backend = runner.backend
    rt = backend.runtime
    rt.ensure_device()
    readable = _readable(spec)
    conv = _Arguments(backend, "contiguous")
    staged: list[Any] = []
    stream = rt.create_stream()
    model = workspace = 0
    try:
        size, executor = _place(
            backend, spec, conv, {k: _zeroed(v) if k in readable else v for k, v in inputs[0].items()}
        )
        workspace = rt.malloc(size) if size else 0
        rt.ri_capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)
        try:
            execute(spec, workspace, size, executor, stream)
        finally:
            model = rt.ri_capture_end(stream)
        for round_, (values, want) in enumerate(zip(inputs, expected)):
            # The new inputs, placed exactly as eager.run places them (packed private formats included),
            # then written in place over the captured call's inputs by async copies on the replay's stream.
            placed_new = _Arguments(backend, "contiguous")
            staged.append(placed_new)
            placed_new.convert(spec, values)
            for name in readable:
                placed = conv.arrays.get(name)
                fresh = placed_new.arrays.get(name)
                if placed is None or fresh is None:
                    continue
                targets = placed if isinstance(placed, list) else [placed]
                news = fresh if isinstance(fresh, list) else [fresh]
                for target, src in zip(targets, news):
                    rt.memcpy_async(
                        target.address,
                        target.nbytes,
                        src.address,
                        min(src.nbytes, target.nbytes),
                        MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE,
                        stream,
                    )
            rt.ri_execute_async(model, stream)
            rt.synchronize_stream(stream)
            got = _collect(spec, conv)
            for name, value in want.items():
                if name in got and not _same_bits(got[name], value):
                    return runner._fail(
                        case,
                        "capture",
                        f"replay {round_ + 1} of the captured call differs from the eager result for {name} "
                        "(a replay must read its inputs when it runs and write its outputs)",
                        {"output": name, "replay": round_ + 1},
                    )
    except AclCoreError as exc:
        return runner._fail(case, "capture", f"capturing or replaying failed with {exc.code}: {exc.message}")
    finally:
        if model:
            rt.ri_destroy(model)
        rt.destroy_stream(stream)
        if workspace:
            rt.free(workspace)
        for placed_new in staged:
            placed_new.free()
        conv.free()
    return runner._pass(case)


def _readable(spec: Any) -> set[str]:
    """The names of the tensor and tensor-list parameters the call reads."""
    return {p.name for p in spec.params if p.role is not Role.OUT and p.kind in (Kind.TENSOR, Kind.TENSOR_LIST)}


def _place(backend: Any, spec: Any, conv: Any, values: dict[str, Any]) -> tuple[int, Any]:
    """Convert ``values`` into ``conv`` as eager.run does, outputs by the output rule; (workspace size, executor)."""
    from acl_core.aclnn import get_workspace_size
    from acl_core.eager import allocate_outputs

    args = conv.convert(spec, values)
    conv.arrays.update(allocate_outputs(spec, args, backend))
    return get_workspace_size(spec, [], args, backend=backend)


def _refused(runner: Runner, case: Case, spec: Any, values: dict[str, Any]) -> Outcome:
    """An op that writes back a view shape must refuse a capturing stream with 107041 and invalidate the capture."""
    from acl_core.aclnn import execute
    from acl_core.eager import _Arguments
    from acl_core.errors import RtErrorCode

    backend = runner.backend
    rt = backend.runtime
    rt.ensure_device()
    conv = _Arguments(backend, "contiguous")
    stream = rt.create_stream()
    try:
        size, executor = _place(backend, spec, conv, values)
        workspace = rt.malloc(size) if size else 0
        rt.ri_capture_begin(stream, CaptureMode.ACL_MODEL_RI_CAPTURE_MODE_GLOBAL)
        try:
            execute(spec, workspace, size, executor, stream)
            code = 0
        except AclCoreError as exc:
            code = int(exc.code)
        try:
            rt.ri_destroy(rt.ri_capture_end(stream))
            ended = 0
        except AclCoreError as exc:
            ended = int(exc.code)
        if workspace:
            rt.free(workspace)
    except AclCoreError as exc:
        return runner._fail(case, "capture", f"placing the refused call failed with {exc.code}: {exc.message}")
    finally:
        rt.destroy_stream(stream)
        conv.free()
    block, invalid = (
        RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
        RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
    )
    if code != block or ended != invalid:
        message = (
            f"{case.op} writes back out's view shape, so a capturing stream must refuse it with {int(block)} and the "
            f"capture end with {int(invalid)}; got {code} and {ended}"
        )
        return runner._fail(case, "capture", message)
    return runner._pass(case)
