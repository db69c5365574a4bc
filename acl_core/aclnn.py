"""The C-shaped aclnn front end: ``aclCreateTensor``, ``aclnnXxxGetWorkspaceSize``, ``aclnnXxx``...

pyACL's convention: C out-parameters come back first and the status code last
(``workspace_size, executor, ret = aclnnAddGetWorkspaceSize(a, b, alpha, out)``); functions whose C
form returns a pointer return the handle or None; errors are returned, never raised; the message of
the last error is ``aclGetRecentErrMsg()``. Every ``aclnnXxxGetWorkspaceSize`` / ``aclnnXxx`` pair is
generated from the operator registry on first access.
"""

from __future__ import annotations

import operator
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from acl_core import rebinding
from acl_core.backend import RELAUNCH, Backend, Launch
from acl_core.errors import AclCoreError, AclError, AclnnError, AclnnStatus
from acl_core.plugin import get_backend
from acl_core.runtime import Range, Runtime
from acl_core.spec.kernel_args import kernel_args as normalised_args
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Call, Kind, OpSpec
from acl_core.spec.validate import bind_values, signer, validate
from acl_core.tensor import (
    AclBoolArray,
    AclFloatArray,
    AclIntArray,
    AclScalar,
    AclScalarList,
    AclTensor,
    AclTensorList,
    Handle,
)

ACLNN_SUCCESS = 0
_local = threading.local()


def _fail(exc: AclCoreError) -> int:
    _local.message = exc.message
    return exc.code


def _guard(fn: Callable[[], Any], null_result: bool = False) -> Any:
    """Run ``fn``; return its result, or (None | code) with the message recorded, never raising."""
    try:
        return fn()
    except AclCoreError as exc:
        code = _fail(exc)
        return None if null_result else code
    except Exception as exc:  # never let a defect escape as a crash of the caller's program
        code = _internal(exc)
        return None if null_result else code


def _internal(exc: Exception) -> int:
    """Record a defect as ACLNN_ERR_INNER and return its code."""
    return _fail(AclnnError(AclnnStatus.ACLNN_ERR_INNER, f"internal error: {type(exc).__name__}: {exc}"))


def aclGetRecentErrMsg() -> str:
    """The message of the last failed call on this thread ('' if none)."""
    return getattr(_local, "message", "")


# ----------------------------------------------------------------------------- tensors and friends
def aclCreateTensor(
    view_dims: Sequence[int],
    data_type: int,
    strides: Sequence[int] | None,
    offset: int,
    format: int,
    storage_dims: Sequence[int] | None,
    data: int | None,
) -> AclTensor | None:
    """aclCreateTensor: a view over device memory at ``data``; None when the arguments are invalid."""
    return _guard(lambda: AclTensor.create(view_dims, data_type, strides, offset, format, storage_dims, data), True)


def aclCreateScalar(value: object, data_type: int) -> AclScalar | None:
    """aclCreateScalar: ``value`` converted to ``data_type``; None on failure."""
    return _guard(lambda: AclScalar.create(value, data_type), True)


def aclCreateIntArray(values: Sequence[int]) -> AclIntArray | None:
    """aclCreateIntArray."""
    return _guard(lambda: AclIntArray.create(values), True)


def aclCreateFloatArray(values: Sequence[float]) -> AclFloatArray | None:
    """aclCreateFloatArray."""
    return _guard(lambda: AclFloatArray.create(values), True)


def aclCreateBoolArray(values: Sequence[bool]) -> AclBoolArray | None:
    """aclCreateBoolArray."""
    return _guard(lambda: AclBoolArray.create(values), True)


def aclCreateTensorList(tensors: Sequence[AclTensor]) -> AclTensorList | None:
    """aclCreateTensorList: the list owns its tensors."""
    return _guard(lambda: AclTensorList.create(tensors), True)


def aclCreateScalarList(scalars: Sequence[AclScalar]) -> AclScalarList | None:
    """aclCreateScalarList: the list owns its scalars."""
    return _guard(lambda: AclScalarList.create(scalars), True)


def _destroy(handle: Any, kind: type[Handle], what: str) -> int:
    def run() -> int:
        if handle is None or handle == 0:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{what} is null")
        if not isinstance(handle, kind):
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"expected an {what}, got {type(handle).__name__}")
        h: Any = handle
        h.check_alive(what)
        h.destroyed = True
        for member in getattr(handle, "tensors", ()) + getattr(handle, "scalars", ()):
            member.destroyed = True
        return ACLNN_SUCCESS

    return int(_guard(run))


def aclDestroyTensor(tensor: AclTensor | None) -> int:
    """aclDestroyTensor."""
    return _destroy(tensor, AclTensor, "aclTensor")


def aclDestroyScalar(scalar: AclScalar | None) -> int:
    """aclDestroyScalar."""
    return _destroy(scalar, AclScalar, "aclScalar")


def aclDestroyIntArray(array: AclIntArray | None) -> int:
    """aclDestroyIntArray."""
    return _destroy(array, AclIntArray, "aclIntArray")


def aclDestroyFloatArray(array: AclFloatArray | None) -> int:
    """aclDestroyFloatArray."""
    return _destroy(array, AclFloatArray, "aclFloatArray")


def aclDestroyBoolArray(array: AclBoolArray | None) -> int:
    """aclDestroyBoolArray."""
    return _destroy(array, AclBoolArray, "aclBoolArray")


def aclDestroyTensorList(tensors: AclTensorList | None) -> int:
    """aclDestroyTensorList (destroys the member tensors too)."""
    return _destroy(tensors, AclTensorList, "aclTensorList")


def aclDestroyScalarList(scalars: AclScalarList | None) -> int:
    """aclDestroyScalarList (destroys the member scalars too)."""
    return _destroy(scalars, AclScalarList, "aclScalarList")


def _size_of(handle: Any, kind: type[Handle], what: str) -> tuple[int, int]:
    def run() -> tuple[int, int]:
        if not isinstance(handle, kind):
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, f"{what} is null or of the wrong kind")
        h: Any = handle
        h.check_alive(what)
        return len(h), ACLNN_SUCCESS

    result = _guard(run)
    return (0, result) if isinstance(result, int) else result


def aclGetIntArraySize(array: AclIntArray) -> tuple[int, int]:
    """aclGetIntArraySize: (size, ret)."""
    return _size_of(array, AclIntArray, "aclIntArray")


def aclGetFloatArraySize(array: AclFloatArray) -> tuple[int, int]:
    """aclGetFloatArraySize: (size, ret)."""
    return _size_of(array, AclFloatArray, "aclFloatArray")


def aclGetBoolArraySize(array: AclBoolArray) -> tuple[int, int]:
    """aclGetBoolArraySize: (size, ret)."""
    return _size_of(array, AclBoolArray, "aclBoolArray")


def aclGetTensorListSize(tensors: AclTensorList) -> tuple[int, int]:
    """aclGetTensorListSize: (size, ret)."""
    return _size_of(tensors, AclTensorList, "aclTensorList")


def aclGetScalarListSize(scalars: AclScalarList) -> tuple[int, int]:
    """aclGetScalarListSize: (size, ret)."""
    return _size_of(scalars, AclScalarList, "aclScalarList")


def _tensor_attr(tensor: AclTensor | None, getter: Callable[[AclTensor], Any]) -> tuple[Any, int]:
    def run() -> tuple[Any, int]:
        if not isinstance(tensor, AclTensor):
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "tensor is null")
        tensor.check_alive("aclTensor")
        return getter(tensor), ACLNN_SUCCESS

    result = _guard(run)
    return (None, result) if isinstance(result, int) else result


def aclGetViewShape(tensor: AclTensor) -> tuple[list[int] | None, int]:
    """aclGetViewShape: (dims, ret)."""
    return _tensor_attr(tensor, lambda t: list(t.view_dims))


def aclGetStorageShape(tensor: AclTensor) -> tuple[list[int] | None, int]:
    """aclGetStorageShape: (dims, ret)."""
    return _tensor_attr(tensor, lambda t: list(t.storage_dims))


def aclGetViewStrides(tensor: AclTensor) -> tuple[list[int] | None, int]:
    """aclGetViewStrides: (strides, ret)."""
    return _tensor_attr(tensor, lambda t: list(t.strides))


def aclGetViewOffset(tensor: AclTensor) -> tuple[int | None, int]:
    """aclGetViewOffset: (offset, ret)."""
    return _tensor_attr(tensor, lambda t: t.offset)


def aclGetFormat(tensor: AclTensor) -> tuple[int | None, int]:
    """aclGetFormat: (aclFormat, ret)."""
    return _tensor_attr(tensor, lambda t: int(t.format))


def aclGetDataType(tensor: AclTensor) -> tuple[int | None, int]:
    """aclGetDataType: (aclDataType, ret)."""
    return _tensor_attr(tensor, lambda t: int(t.dtype))


def aclGetRawTensorAddr(tensor: AclTensor) -> tuple[int | None, int]:
    """aclGetRawTensorAddr: (address, ret)."""
    return _tensor_attr(tensor, lambda t: t.data)


def aclSetRawTensorAddr(tensor: AclTensor, address: int) -> int:
    """aclSetRawTensorAddr: points the tensor at other storage."""

    def setter(t: AclTensor) -> None:
        t.data = _handle_value(address, "address")

    return _tensor_attr(tensor, setter)[1]


# ----------------------------------------------------------------------------- executors
def _held(runtime: Runtime, tensors: Sequence[AclTensor]) -> tuple[Range, ...] | None:
    """The live device ranges holding each non-empty tensor's bytes, or None when one is not held whole.

    A :class:`Range` stands for one allocation and goes dead when it is freed, so "every range still
    live" is exactly the memory condition under which a validation of these tensors stays true.
    """
    found: list[Range] = []
    for t in tensors:
        if t.numel == 0:
            continue
        start, end = t.byte_span()
        try:
            rng = runtime.memory.resolve(start, end - start, "tensor data")
        except AclError:
            return None
        if not rng.kind.on_device:
            return None
        found.append(rng)
    return tuple(found)


def _all_live(ranges: tuple[Range, ...] | None) -> bool:
    if ranges is None:
        return False
    for rng in ranges:
        if not rng.live:
            return False
    return True


class AclOpExecutor:
    """aclOpExecutor: one validated call, ready for phase 2 (single use unless made repeatable).

    It stays valid while every device range its tensors lie in is live (no free, whatever else is
    allocated or freed) and no tensor was re-pointed (aclSetRawTensorAddr); otherwise phase 2
    validates again before launching.
    """

    __slots__ = (
        "addresses",
        "backend",
        "call",
        "destroyed",
        "kernel_args",
        "kernel_spec",
        "ranges",
        "repeatable",
        "spec",
        "tensors",
        "used",
        "workspace_size",
    )

    def __init__(
        self,
        spec: OpSpec,
        call: Call,
        backend: Backend,
        workspace_size: int,
        tensors: Sequence[AclTensor],
        ranges: tuple[Range, ...] | None,
        kernel_spec: OpSpec,
        addresses: tuple[int, ...] | None = None,
        kernel_args: dict[str, Any] | None = None,
    ) -> None:
        self.spec = spec
        self.call = call
        self.backend = backend
        self.workspace_size = workspace_size
        self.repeatable = False
        self.used = False
        self.destroyed = False
        self.tensors = tensors
        # ``addresses`` and ``kernel_args`` may be shared with the phase-1 cache: never mutate them
        self.addresses = tuple([t.data for t in tensors]) if addresses is None else addresses
        self.ranges = ranges
        self.kernel_spec = kernel_spec
        if kernel_args is None:
            kernel_args = normalised_args(spec, call.args)
        self.kernel_args = kernel_args

    def still_valid(self) -> bool:
        """True when the memory behind every tensor is still live and no tensor was re-pointed since validation."""
        if not _all_live(self.ranges):
            return False
        for t, address in zip(self.tensors, self.addresses):
            if t.data != address:
                return False
        return True

    def revalidate(self) -> None:
        """Validate the call again against the memory as it is now (raises AclnnError), then re-arm."""
        runtime = self.backend.runtime
        validate(self.spec, self.call.args, runtime)
        # a re-pointed tensor invalidates backend launch metadata; the shared cached call keeps its own
        self.call = Call(self.spec, self.call.args, self.call.plan)
        self.addresses = tuple([t.data for t in self.tensors])
        self.ranges = _held(runtime, self.tensors)

    def __repr__(self) -> str:
        return f"<aclOpExecutor {self.spec.name} ws={self.workspace_size}{' repeatable' if self.repeatable else ''}>"


def aclSetAclOpExecutorRepeatable(executor: AclOpExecutor | None) -> int:
    """aclSetAclOpExecutorRepeatable: phase 2 may then run many times; release with aclDestroyAclOpExecutor."""

    def run() -> int:
        if not isinstance(executor, AclOpExecutor):
            raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, "executor is null")
        if executor.destroyed or executor.used:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, "executor was already released")
        executor.repeatable = True
        return ACLNN_SUCCESS

    return int(_guard(run))


def aclDestroyAclOpExecutor(executor: AclOpExecutor | None) -> int:
    """aclDestroyAclOpExecutor: releases a repeatable executor."""

    def run() -> int:
        if not isinstance(executor, AclOpExecutor):
            raise AclnnError(AclnnStatus.ACLNN_ERR_INNER_NULLPTR, "executor is null")
        if executor.destroyed:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, "executor was already destroyed")
        executor.destroyed = True
        return ACLNN_SUCCESS

    return int(_guard(run))


def aclSetInputTensorAddr(executor: AclOpExecutor | None, index: int, tensor: AclTensor | None, addr: int) -> int:
    """aclSetInputTensorAddr: point input tensor ``index`` of a repeatable executor at ``addr`` (acl_core.rebinding)."""
    return int(_guard(lambda: rebinding.set_tensor_addr(executor, "input", index, tensor, addr)))


def aclSetOutputTensorAddr(executor: AclOpExecutor | None, index: int, tensor: AclTensor | None, addr: int) -> int:
    """aclSetOutputTensorAddr: point output tensor ``index`` of a repeatable executor at ``addr``."""
    return int(_guard(lambda: rebinding.set_tensor_addr(executor, "output", index, tensor, addr)))


def aclSetTensorAddr(executor: AclOpExecutor | None, index: int, tensor: AclTensor | None, addr: int) -> int:
    """aclSetTensorAddr: point tensor ``index`` (all tensor parameters, prototype order) at ``addr``."""
    return int(_guard(lambda: rebinding.set_tensor_addr(executor, "any", index, tensor, addr)))


def aclSetDynamicInputTensorAddr(
    executor: AclOpExecutor | None, ir_index: int, relative_index: int, tensors: AclTensorList | None, addr: int
) -> int:
    """aclSetDynamicInputTensorAddr: point member ``relative_index`` of input list ``ir_index`` at ``addr``."""
    return int(
        _guard(lambda: rebinding.set_dynamic_tensor_addr(executor, "input", ir_index, relative_index, tensors, addr))
    )


def aclSetDynamicOutputTensorAddr(
    executor: AclOpExecutor | None, ir_index: int, relative_index: int, tensors: AclTensorList | None, addr: int
) -> int:
    """aclSetDynamicOutputTensorAddr: point member ``relative_index`` of output list ``ir_index`` at ``addr``."""
    return int(
        _guard(lambda: rebinding.set_dynamic_tensor_addr(executor, "output", ir_index, relative_index, tensors, addr))
    )


def aclSetDynamicTensorAddr(
    executor: AclOpExecutor | None, ir_index: int, relative_index: int, tensors: AclTensorList | None, addr: int
) -> int:
    """aclSetDynamicTensorAddr: point member ``relative_index`` of list ``ir_index`` (any role) at ``addr``."""
    return int(
        _guard(lambda: rebinding.set_dynamic_tensor_addr(executor, "any", ir_index, relative_index, tensors, addr))
    )


def _tensors_in(values: Sequence[Any]) -> tuple[AclTensor, ...]:
    """The tensors among the arguments, tensor-list members included, in argument order."""
    found: list[AclTensor] = []
    for v in values:
        kind = type(v)
        if kind is AclTensor:
            found.append(v)
        elif kind is AclTensorList:
            found.extend(v.tensors)
    return tuple(found)


class _Validated:
    """A phase-1 result kept per signature, sound while every range in ``ranges`` is live.

    ``values`` are the arguments it was validated with, in official order. A later call passing the
    very same handles (tuple equality: handles compare by identity) shares ``call``, ``tensors``,
    ``addresses`` and ``kernel_args`` as they are; a call with other, equal-signature handles gets
    a copy of the arguments with its own handles bound in (``handle_slots``).
    """

    __slots__ = (
        "addresses",
        "call",
        "handle_slots",
        "has_lists",
        "kernel_args",
        "kernel_spec",
        "ranges",
        "size",
        "tensors",
        "values",
    )

    def __init__(
        self,
        call: Call,
        values: tuple[Any, ...],
        size: int,
        tensors: tuple[AclTensor, ...],
        ranges: tuple[Range, ...],
        kernel_spec: OpSpec,
        kernel_args: dict[str, Any],
    ) -> None:
        self.call = call
        self.values = values
        self.size = size
        self.tensors = tensors
        self.addresses = tuple([t.data for t in tensors])
        self.ranges = ranges
        self.kernel_spec = kernel_spec
        self.kernel_args = kernel_args
        names = call.spec.param_names
        self.handle_slots = tuple((names[i], i) for i, v in enumerate(values) if isinstance(v, Handle))
        self.has_lists = any(type(v) is AclTensorList for v in values)

    def executor(self, spec: OpSpec, values: tuple[Any, ...], backend: Backend) -> AclOpExecutor:
        """An executor for a call whose signature matched this one (its handles checked alive)."""
        if values == self.values and not self.has_lists:
            return AclOpExecutor(
                spec,
                self.call,
                backend,
                self.size,
                self.tensors,
                self.ranges,
                self.kernel_spec,
                self.addresses,
                self.kernel_args,
            )
        cached = self.call
        fresh = dict(cached.args)
        for name, i in self.handle_slots:
            fresh[name] = values[i]
        call = Call(spec, fresh, cached.plan, cached.memo)
        return AclOpExecutor(spec, call, backend, self.size, _tensors_in(values), self.ranges, self.kernel_spec)


_CACHE_LIMIT = 1024
_cache: OrderedDict[tuple[object, ...], _Validated] = OrderedDict()
_cache_lock = threading.Lock()


_Claim = tuple[frozenset[Any], frozenset[Any], tuple[str, ...]]
_claims: weakref.WeakKeyDictionary[Backend, dict[str, _Claim]] = weakref.WeakKeyDictionary()


def _claim(spec: OpSpec, backend: Backend) -> _Claim:
    """(dtypes, formats, tensor parameter names) ``spec`` claims on ``backend`` (:meth:`Backend.claim`), cached."""
    per_op = _claims.get(backend)
    if per_op is None:
        per_op = _claims.setdefault(backend, {})
    found = per_op.get(spec.name)
    if found is None:
        dtypes, formats = backend.claim(spec.name)
        names = tuple(p.name for p in spec.params if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST))
        found = per_op[spec.name] = (dtypes, formats, names)
    return found


def _refuse_unclaimed(spec: OpSpec, backend: Backend, call: Call) -> None:
    """161002 for a tensor whose dtype or format the backend's capabilities do not claim for this operator.

    Runs on phase 1's validating path only (a signature-cache hit was checked when it was cached), so
    a kernel never sees a call its backend does not claim.
    """
    dtypes, formats, names = _claim(spec, backend)
    for name in names:
        value = call.args.get(name)
        members = value.tensors if type(value) is AclTensorList else (value,) if value is not None else ()
        for t in members:
            if t.dtype not in dtypes:
                raise AclnnError(
                    AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                    f"aclnn{spec.name}: backend {backend.name} does not claim dtype {t.dtype.short} for {name} "
                    f"(it claims {', '.join(sorted(d.short for d in dtypes)) or 'none'})",
                )
            if t.format not in formats:
                raise AclnnError(
                    AclnnStatus.ACLNN_ERR_PARAM_INVALID,
                    f"aclnn{spec.name}: backend {backend.name} does not claim format {t.format.name} for {name}",
                )


def get_workspace_size(
    spec: OpSpec, args: Sequence[Any], kwargs: dict[str, Any] | None = None, backend: Backend | None = None
) -> tuple[int, AclOpExecutor]:
    """Phase 1 for ``spec`` on ``backend`` (default: the process's), raising :class:`AclnnError`.

    A call whose signature (layouts, addresses, attribute values) matches an earlier valid call reuses
    that validation while the device memory it checked is still the same live allocations (nothing
    it lies in was freed) and every handle passed is alive. DESIGN.md §4.2.
    """
    names = spec.param_names
    values = args if type(args) is tuple and not kwargs and len(args) == len(names) else bind_values(spec, args, kwargs)
    if backend is None:
        backend = get_backend()
    key = signer(spec)(values, id(backend))
    if key is not None:
        hit = _cache.get(key)
        if hit is not None and _all_live(hit.ranges):
            return hit.size, hit.executor(spec, values, backend)
    runtime = backend.runtime
    call = validate(spec, dict(zip(names, values)), runtime)
    _refuse_unclaimed(spec, backend, call)
    if spec.kernel_name not in backend.kernels:
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
            f"backend {backend.name!r} has no kernel for {spec.kernel_name}",
        )
    size = int(spec.workspace(call))
    tensors = _tensors_in([call.args[n] for n in names])
    ranges = _held(runtime, tensors)
    kernel_spec = get_spec(spec.kernel_name)
    kernel_args = normalised_args(spec, call.args)  # once per validated signature: kernels get plain values
    if key is not None and ranges is not None:
        entry = _Validated(call, values, size, tensors, ranges, kernel_spec, kernel_args)
        with _cache_lock:
            _cache[key] = entry
            if len(_cache) > _CACHE_LIMIT:
                _cache.popitem(last=False)
    return size, AclOpExecutor(spec, call, backend, size, tensors, ranges, kernel_spec, None, kernel_args)


def _handle_value(value: object, what: str) -> int:
    """A pointer, size or handle argument of phase 2 as the integer C passes (None is 0; 161002 otherwise)."""
    if value is None:
        return 0
    try:
        if isinstance(value, bool):
            raise TypeError  # a bool is no pointer, size or handle, though Python counts it an int
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{what} must be an integer, not {type(value).__name__}"
        ) from None
    if not 0 <= number < 2**64:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{what}={number} is not a 64-bit unsigned value")
    return number


def execute(
    spec: OpSpec, workspace: int | None, workspace_size: int, executor: AclOpExecutor | None, stream: int | None
) -> None:
    """Phase 2 for ``spec``, raising :class:`AclnnError`."""
    if type(executor) is not AclOpExecutor and not isinstance(executor, AclOpExecutor):
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "executor is null")
    if executor.spec is not spec:
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"executor belongs to aclnn{executor.spec.name}, not aclnn{spec.name}"
        )
    if executor.destroyed or (executor.used and not executor.repeatable):
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID,
            "executor was already used (executors are single-use unless aclSetAclOpExecutorRepeatable was called)",
        )
    backend = executor.backend
    runtime = backend.runtime
    needed = executor.workspace_size
    # the phase-2 hot path: plain ints pass untouched, anything else is checked (None is 0)
    if type(workspace) is not int:
        workspace = _handle_value(workspace, "workspace")
    if type(workspace_size) is not int:
        workspace_size = _handle_value(workspace_size, "workspaceSize")
    if type(stream) is not int:
        stream = _handle_value(stream, "stream")
    if workspace_size < needed:
        raise AclnnError(
            AclnnStatus.ACLNN_ERR_PARAM_INVALID,
            f"workspaceSize {workspace_size} is smaller than the {needed} bytes phase 1 asked for",
        )
    if needed:
        if not workspace:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, "workspace is null but the operator needs one")
        try:
            runtime.device_range(workspace, needed, "workspace")
        except AclError as exc:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, exc.message) from None
    try:
        driver_stream = runtime.stream(stream)
    except AclError as exc:
        raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, exc.message) from None
    if not executor.still_valid():  # memory behind the tensors may have been freed since phase 1
        executor.revalidate()
    if runtime.capture.recording:  # a capture logs the task, or refuses an op whose phase 2 needs the host
        runtime.capture.log(stream, f"aclnn{spec.name}", spec.name)
    executor.used = True
    call = executor.call
    if not needed:
        relaunch = call.memo.get(RELAUNCH)
        if relaunch is not None and relaunch(driver_stream):
            return
    backend.launch(
        Launch(
            executor.kernel_spec,
            executor.kernel_args,
            call.plan,
            workspace,
            needed,
            driver_stream,
            call.memo,
        )
    )


# ----------------------------------------------------------------------------- generated operator entry points
_PHASE1 = re.compile(r"^aclnn(\w+)GetWorkspaceSize$")
_PHASE2 = re.compile(r"^aclnn(\w+)$")


def _phase1(spec: OpSpec) -> Callable[..., tuple[int, AclOpExecutor | None, int]]:
    def phase1(*args: Any, **kwargs: Any) -> tuple[int, AclOpExecutor | None, int]:
        try:  # _guard's contract, inlined: this is the per-operator hot path
            size, executor = get_workspace_size(spec, args, kwargs)
        except AclCoreError as exc:
            return 0, None, _fail(exc)
        except Exception as exc:
            return 0, None, _internal(exc)
        return size, executor, ACLNN_SUCCESS

    phase1.__name__ = phase1.__qualname__ = f"aclnn{spec.name}GetWorkspaceSize"
    params = ", ".join(p.name for p in spec.params)
    phase1.__doc__ = f"aclnn{spec.name}GetWorkspaceSize({params}) -> (workspace_size, executor, ret)."
    return phase1


def _phase2(spec: OpSpec) -> Callable[[int | None, int, AclOpExecutor | None, int | None], int]:
    def phase2(
        workspace: int | None, workspace_size: int, executor: AclOpExecutor | None, stream: int | None = None
    ) -> int:
        try:  # _guard's contract, inlined: this is the per-operator hot path
            execute(spec, workspace, workspace_size, executor, stream)
        except AclCoreError as exc:
            return _fail(exc)
        except Exception as exc:
            return _internal(exc)
        return ACLNN_SUCCESS

    phase2.__name__ = phase2.__qualname__ = f"aclnn{spec.name}"
    phase2.__doc__ = f"aclnn{spec.name}(workspace, workspace_size, executor, stream) -> ret."
    return phase2


def aclnnInit(config_path: str | None = None) -> int:
    """aclnnInit: nothing to do beyond aclInit here; returns 0."""
    return ACLNN_SUCCESS


def aclnnFinalize() -> int:
    """aclnnFinalize: returns 0."""
    return ACLNN_SUCCESS


def __getattr__(name: str) -> Any:
    match = _PHASE1.match(name)
    if match:
        try:
            fn: Any = _phase1(get_spec(match.group(1)))
        except KeyError:
            raise AttributeError(f"{name}: no aclnn operator {match.group(1)} is declared") from None
    else:
        match = _PHASE2.match(name)
        if not match:
            raise AttributeError(name)
        try:
            fn = _phase2(get_spec(match.group(1)))
        except KeyError:
            raise AttributeError(f"{name}: no aclnn operator {match.group(1)} is declared") from None
    globals()[name] = fn
    return fn


def __dir__() -> list[str]:
    names = [n for n in globals() if n.startswith("acl")]
    for op in all_specs():
        names += [f"aclnn{op}GetWorkspaceSize", f"aclnn{op}"]
    return sorted(set(names))


# issue 6: host helpers without two phases, kept with the FRACTAL_NZ layout in acl_core.nz
from acl_core.nz import aclnnCalculateMatmulWeightSize as aclnnCalculateMatmulWeightSize  # noqa: E402
from acl_core.nz import aclnnCalculateMatmulWeightSizeV2 as aclnnCalculateMatmulWeightSizeV2  # noqa: E402
from acl_core.nz import aclnnNpuFormatCastCalculateSizeAndFormat as aclnnNpuFormatCastCalculateSizeAndFormat  # noqa: E402
