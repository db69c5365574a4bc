"""The runner's only door to a device: the acl runtime for memory and streams, aclnn for every operator.

Nothing here knows which backend runs underneath. A :class:`Session` owns one device, one stream,
a grow-only workspace and every buffer the model allocates; :class:`Buffer` is a block of device
memory that hands out ``aclTensor`` views; :meth:`Session.run` runs an operator's two phases once and
:meth:`Session.prepare` keeps a repeatable executor (``aclSetAclOpExecutorRepeatable``) whose phase 2
can be launched again and again on the same buffers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import acl_core
from acl_core import acl, aclnn
from acl_core.dtypes import DataType

ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_MEMCPY_DEVICE_TO_DEVICE = 3
ACL_FORMAT_ND = 2

Phase1 = Callable[..., tuple[int, Any, int]]
Phase2 = Callable[[int | None, int, Any, int | None], int]


class DeviceError(RuntimeError):
    """An acl or aclnn call returned an error code; the message carries CANN's code and text."""


def check_acl(ret: int, what: str) -> None:
    """Raise :class:`DeviceError` when an acl runtime call failed."""
    if ret != ACL_SUCCESS:
        raise DeviceError(f"{what} failed with {ret}: {acl.get_recent_err_msg()}")


def check_aclnn(ret: int, what: str) -> None:
    """Raise :class:`DeviceError` when an aclnn call failed."""
    if ret != ACL_SUCCESS:
        raise DeviceError(f"{what} failed with {ret}: {aclnn.aclGetRecentErrMsg()}")


_PHASES: dict[str, tuple[Phase1, Phase2]] = {}


def phases(op: str) -> tuple[Phase1, Phase2]:
    """``(aclnn<op>GetWorkspaceSize, aclnn<op>)``, looked up once per operator."""
    found = _PHASES.get(op)
    if found is None:
        found = _PHASES[op] = (getattr(aclnn, f"aclnn{op}GetWorkspaceSize"), getattr(aclnn, f"aclnn{op}"))
    return found


class Buffer:
    """A block of device memory holding ``count`` elements of ``dtype``, contiguous as ``shape``."""

    def __init__(self, session: Session, shape: Sequence[int], dtype: DataType) -> None:
        self.session = session
        self.shape = tuple(int(d) for d in shape)
        self.dtype = dtype
        self.count = max(math.prod(self.shape), 1)
        self.itemsize = int(np.dtype(dtype.numpy).itemsize)
        self.nbytes = self.count * self.itemsize
        ptr, ret = acl.rt.malloc(self.nbytes, ACL_MEM_MALLOC_HUGE_FIRST)
        check_acl(ret, f"aclrtMalloc({self.nbytes})")
        self.ptr: int = ptr
        self._full: Any = None

    def view(self, shape: Sequence[int], strides: Sequence[int] | None = None, offset: int = 0) -> Any:
        """An aclTensor over this buffer: ``shape`` with element ``strides`` (default row-major) from ``offset``."""
        if strides is None:
            strides = _row_major(shape)
        tensor = aclnn.aclCreateTensor(
            list(shape), int(self.dtype), list(strides), int(offset), ACL_FORMAT_ND, [self.count], self.ptr
        )
        if tensor is None:
            raise DeviceError(f"aclCreateTensor{list(shape)} failed: {aclnn.aclGetRecentErrMsg()}")
        return tensor

    def tensor(self) -> Any:
        """The whole buffer as a contiguous aclTensor of its shape (made once)."""
        if self._full is None:
            self._full = self.view(self.shape)
        return self._full

    def free(self) -> None:
        """Give the memory back now (idempotent)."""
        if self.ptr:
            ret = acl.rt.free(self.ptr)
            self.ptr = 0
            check_acl(ret, "aclrtFree")

    def __repr__(self) -> str:
        return f"Buffer({list(self.shape)}, {self.dtype.short}, {self.nbytes} B)"


def _row_major(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(int(shape[i + 1]), 1)
    return strides


class Prepared:
    """A validated, repeatable executor: calling it launches phase 2 on the session's stream."""

    __slots__ = ("executor", "name", "phase2", "session", "size")

    def __init__(self, session: Session, name: str, phase2: Phase2, executor: Any, size: int) -> None:
        self.session = session
        self.name = name
        self.phase2 = phase2
        self.executor = executor
        self.size = size

    def __call__(self) -> None:
        """Launch phase 2 again."""
        s = self.session
        ret = self.phase2(s.workspace, s.workspace_size, self.executor, s.stream)
        s.launches += 1
        s.launched[self.name] += 1
        if ret != ACL_SUCCESS:
            check_aclnn(ret, f"aclnn{self.name}")

    def release(self) -> None:
        """aclDestroyAclOpExecutor."""
        if self.executor is not None:
            aclnn.aclDestroyAclOpExecutor(self.executor)
            self.executor = None


class Session:
    """One device, one stream, one workspace, and everything allocated on them (see the module doc)."""

    def __init__(self, backend: str | None = None, device_id: int = 0) -> None:
        if backend is not None:
            acl_core.use_backend(backend)  # an unavailable backend raises with its reason; no fallback
        self.backend = acl_core.get_backend()
        ret = acl.init()
        if ret not in (ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE):
            check_acl(ret, "aclInit")
        check_acl(acl.rt.set_device(device_id), f"aclrtSetDevice({device_id})")
        self.device_id = device_id
        stream, ret = acl.rt.create_stream()
        check_acl(ret, "aclrtCreateStream")
        self.stream: int = stream
        self.workspace = 0
        self.workspace_size = 0
        self.buffers: list[Buffer] = []
        self.validations = 0
        """Phase-1 calls made (one per :meth:`run`, one per :meth:`prepare`)."""
        self.launches = 0
        """Phase-2 calls made (one-shot and repeated)."""
        self.launched: Counter[str] = Counter()
        """Phase-2 calls made per operator name (the launch-counting hook of the tests and reports)."""
        self.generation = 0
        """Counts this session's allocations and frees; repeatable executors made before a change are stale."""
        self.workspace_moves = 0
        """Times the workspace was reallocated: a captured launch holds the old address, so it is stale."""
        self._host: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------ memory
    def alloc(self, shape: Sequence[int], dtype: DataType) -> Buffer:
        """A new device buffer, freed by :meth:`close` if not before."""
        buf = Buffer(self, shape, dtype)
        self.buffers.append(buf)
        self.generation += 1
        return buf

    def release(self, *buffers: Buffer) -> None:
        """Free ``buffers`` now."""
        for buf in buffers:
            buf.free()
        self.generation += 1
        self.buffers = [b for b in self.buffers if b.ptr]

    def host(self, name: str, nbytes: int) -> tuple[int, np.ndarray]:
        """A named page-locked host staging area of at least ``nbytes`` (aclrtMallocHost), as (ptr, bytes)."""
        ptr, size = self._host.get(name, (0, 0))
        if size < nbytes:
            if ptr:
                check_acl(acl.rt.free_host(ptr), "aclrtFreeHost")
            ptr, ret = acl.rt.malloc_host(max(nbytes, 64))
            check_acl(ret, f"aclrtMallocHost({nbytes})")
            size = max(nbytes, 64)
            self._host[name] = (ptr, size)
            self.generation += 1
        return ptr, acl.util.ptr_to_numpy(ptr, (size,), np.dtype(np.uint8).num)

    def upload(self, dst: Buffer, data: np.ndarray, byte_offset: int = 0) -> None:
        """Copy a host array's bytes into ``dst`` at ``byte_offset`` (through pinned staging, synchronous)."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if byte_offset + raw.nbytes > dst.nbytes:
            raise DeviceError(f"upload of {raw.nbytes} B at {byte_offset} overruns {dst!r}")
        if not raw.nbytes:
            return
        ptr, staging = self.host("upload", raw.nbytes)
        staging[: raw.nbytes] = raw
        ret = acl.rt.memcpy(dst.ptr + byte_offset, dst.nbytes - byte_offset, ptr, raw.nbytes, ACL_MEMCPY_HOST_TO_DEVICE)
        check_acl(ret, "aclrtMemcpy(host to device)")

    def download(self, src: Buffer, count: int | None = None, byte_offset: int = 0) -> np.ndarray:
        """A host copy of ``count`` elements of ``src`` from ``byte_offset``, after the stream drains."""
        self.synchronize()
        count = src.count if count is None else count
        nbytes = count * src.itemsize
        ptr, staging = self.host("download", nbytes)
        check_acl(
            acl.rt.memcpy(ptr, nbytes, src.ptr + byte_offset, nbytes, ACL_MEMCPY_DEVICE_TO_HOST),
            "aclrtMemcpy(device to host)",
        )
        return staging[:nbytes].view(np.dtype(src.dtype.numpy)).copy()

    def copy_async(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        """aclrtMemcpyAsync on the session's stream (host sides must be staging areas from :meth:`host`)."""
        check_acl(acl.rt.memcpy_async(dst, nbytes, src, nbytes, kind, self.stream), "aclrtMemcpyAsync")

    def synchronize(self) -> None:
        """Wait for everything enqueued on the stream."""
        check_acl(acl.rt.synchronize_stream(self.stream), "aclrtSynchronizeStream")

    def _ensure_workspace(self, size: int) -> None:
        if size > self.workspace_size:
            if self.workspace:
                self.synchronize()
                check_acl(acl.rt.free(self.workspace), "aclrtFree(workspace)")
            ptr, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
            check_acl(ret, f"aclrtMalloc(workspace {size})")
            self.workspace, self.workspace_size = ptr, size
            self.generation += 1
            self.workspace_moves += 1

    # ------------------------------------------------------------------ operators
    def run(self, op: str, *args: Any) -> None:
        """Run ``aclnn<op>`` once: phase 1 with ``args`` (official order), then phase 2 on the stream."""
        phase1, phase2 = phases(op)
        size, executor, ret = phase1(*args)
        self.validations += 1
        if ret != ACL_SUCCESS:
            check_aclnn(ret, f"aclnn{op}GetWorkspaceSize")
        if size > self.workspace_size:
            self._ensure_workspace(size)
        ret = phase2(self.workspace, self.workspace_size, executor, self.stream)
        self.launches += 1
        self.launched[op] += 1
        if ret != ACL_SUCCESS:
            check_aclnn(ret, f"aclnn{op}")

    def prepare(self, op: str, *args: Any) -> Prepared:
        """Phase 1 of ``aclnn<op>`` once, made repeatable: the returned object launches phase 2 when called."""
        phase1, phase2 = phases(op)
        size, executor, ret = phase1(*args)
        self.validations += 1
        if ret != ACL_SUCCESS:
            check_aclnn(ret, f"aclnn{op}GetWorkspaceSize")
        check_aclnn(aclnn.aclSetAclOpExecutorRepeatable(executor), f"aclSetAclOpExecutorRepeatable({op})")
        self._ensure_workspace(size)
        return Prepared(self, op, phase2, executor, size)

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free every buffer, the workspace, the staging areas and the stream; release the device."""
        try:
            self.synchronize()
        finally:
            for buf in self.buffers:
                buf.free()
            self.buffers = []
            if self.workspace:
                acl.rt.free(self.workspace)
                self.workspace, self.workspace_size = 0, 0
            for ptr, _ in self._host.values():
                acl.rt.free_host(ptr)
            self._host = {}
            if self.stream:
                acl.rt.destroy_stream(self.stream)
                self.stream = 0
                acl.rt.reset_device(self.device_id)


def scalar(value: float, dtype: DataType = DataType.ACL_FLOAT) -> Any:
    """aclCreateScalar, raising on failure."""
    handle = aclnn.aclCreateScalar(value, int(dtype))
    if handle is None:
        raise DeviceError(f"aclCreateScalar({value}) failed: {aclnn.aclGetRecentErrMsg()}")
    return handle


def int_array(values: Sequence[int]) -> Any:
    """aclCreateIntArray, raising on failure."""
    handle = aclnn.aclCreateIntArray([int(v) for v in values])
    if handle is None:
        raise DeviceError(f"aclCreateIntArray failed: {aclnn.aclGetRecentErrMsg()}")
    return handle


def tensor_list(tensors: Sequence[Any]) -> Any:
    """aclCreateTensorList, raising on failure."""
    handle = aclnn.aclCreateTensorList(list(tensors))
    if handle is None:
        raise DeviceError(f"aclCreateTensorList failed: {aclnn.aclGetRecentErrMsg()}")
    return handle
