"""The nvidia provider: HIP's NVIDIA platform through the CUDA Python bindings.

``cuda.bindings.runtime`` (memory, streams, events, device properties), ``cuda.bindings.driver``
(module loading and kernel launch), ``cuda.bindings.nvrtc`` (runtime compilation to a cubin for the
device's exact architecture). Every binding call returns ``(error, *values)``; :func:`_check` turns a
failure into the CANN code through :mod:`acl_rocm.errors`.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.runtime import CopyDirection
from acl_rocm.errors import error_name, is_success, vendor_error
from acl_rocm.plan_cache import PlanCache
from acl_rocm.providers import blaslt_grouped, blaslt_tune
from acl_rocm.providers.base import (
    DeviceProperties,
    GemmCall,
    GroupedGemmCall,
    RuntimeProvider,
    pool_release_threshold,
)
from acl_rocm.providers.nccl import CollectiveLibrary, open_nccl

_NOT_READY = frozenset({"cudaErrorNotReady", "CUDA_ERROR_NOT_READY"})
LOG = logging.getLogger("acl_rocm.plan_cache")
MEMORY_LOG = logging.getLogger("acl_rocm.memory")


class NvidiaProvider(RuntimeProvider):
    """CUDA runtime, driver and NVRTC through cuda-bindings."""

    platform: ClassVar[str] = "nvidia"
    compiler_name: ClassVar[str] = "nvrtc"

    def __init__(self) -> None:
        self.rt: Any = importlib.import_module("cuda.bindings.runtime")
        self.drv: Any = importlib.import_module("cuda.bindings.driver")
        self._nvrtc: Any = None
        self._lock = threading.Lock()
        self._kinds = {
            CopyDirection.HOST_TO_HOST: self.rt.cudaMemcpyKind.cudaMemcpyHostToHost,
            CopyDirection.HOST_TO_DEVICE: self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice,
            CopyDirection.DEVICE_TO_HOST: self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost,
            CopyDirection.DEVICE_TO_DEVICE: self.rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice,
        }
        self._blas: Any = None
        self._gemm_lock = threading.Lock()
        self._gemm_plans: OrderedDict[tuple[object, ...], _GemmPlan] = OrderedDict()
        self._scalars: Any = None
        self._pools: dict[int, Any] = {}

    # ------------------------------------------------------------------ helpers
    def _describe(self, error: object) -> str:
        name = error_name(error)
        try:
            if name.startswith("cuda"):
                _err, text = self.rt.cudaGetErrorString(error)
                return text.decode() if isinstance(text, bytes) else str(text)
            if name.startswith("CUDA_"):
                _err, text = self.drv.cuGetErrorString(error)
                return text.decode() if isinstance(text, bytes) else str(text)
        except Exception:
            return ""
        return ""

    def _check(self, call: str, result: Any, detail: str = "") -> Any:
        values = result if isinstance(result, tuple) else (result,)
        error, rest = values[0], values[1:]
        if not is_success(error):
            described = self._describe(error)
            raise vendor_error(call, error, "; ".join(x for x in (detail, described) if x))
        if not rest:
            return None
        return rest[0] if len(rest) == 1 else rest

    @property
    def nvrtc(self) -> Any:
        """cuda.bindings.nvrtc, imported at the first compilation."""
        if self._nvrtc is None:
            self._nvrtc = importlib.import_module("cuda.bindings.nvrtc")
        return self._nvrtc

    # ------------------------------------------------------------------ devices
    def device_count(self) -> int:
        """cudaGetDeviceCount (0 when no device or driver is usable)."""
        result = self.rt.cudaGetDeviceCount()
        if not is_success(result[0]):
            return 0
        return int(result[1])

    def set_device(self, index: int) -> None:
        """cudaSetDevice, which also makes the device's primary context current; the pool keeps freed memory."""
        self._check(f"cudaSetDevice({index})", self.rt.cudaSetDevice(index))
        self._check("cudaFree(0)", self.rt.cudaFree(0))
        if index not in self._pools:
            self._pools[index] = self._keep_pool(index)

    def _keep_pool(self, index: int) -> Any:
        """The device's default pool with its release threshold raised (None where the runtime refuses)."""
        threshold = pool_release_threshold()
        try:
            pool = self._check("cudaDeviceGetDefaultMemPool", self.rt.cudaDeviceGetDefaultMemPool(index))
            attr = self.rt.cudaMemPoolAttr.cudaMemPoolAttrReleaseThreshold
            self._check(
                "cudaMemPoolSetAttribute", self.rt.cudaMemPoolSetAttribute(pool, attr, self.drv.cuuint64_t(threshold))
            )
        except Exception as exc:  # a performance setting: the pool still works at the CUDA default
            MEMORY_LOG.warning("device %d: the memory pool keeps CUDA's release threshold of 0 (%s)", index, exc)
            return None
        MEMORY_LOG.debug(
            "device %d: the memory pool keeps up to %d freed bytes across synchronisations", index, threshold
        )
        return pool

    def _trim_pool(self) -> bool:
        """Give the current device's pooled free memory back (before a retried allocation); False when none is held."""
        pool = self._pools.get(self.get_device())
        if pool is None:
            return False
        self._check("cudaMemPoolTrimTo", self.rt.cudaMemPoolTrimTo(pool, 0))
        return True

    def get_device(self) -> int:
        """cudaGetDevice (asked on every launch: a success skips the general result check)."""
        result = self.rt.cudaGetDevice()
        if result[0] == 0:  # cudaError_t is an int enum; any other success type takes the full check
            return int(result[1])
        return int(self._check("cudaGetDevice", result))

    def _attribute(self, name: str, index: int) -> int:
        attr = getattr(self.rt.cudaDeviceAttr, name)
        return int(self._check(f"cudaDeviceGetAttribute({name})", self.rt.cudaDeviceGetAttribute(attr, index)))

    def device_properties(self, index: int) -> DeviceProperties:
        """cudaGetDeviceProperties plus attributes; the architecture is ``sm_<major><minor>``."""
        prop = self._check(f"cudaGetDeviceProperties({index})", self.rt.cudaGetDeviceProperties(index))
        raw = prop.name
        name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        major = self._attribute("cudaDevAttrComputeCapabilityMajor", index)
        minor = self._attribute("cudaDevAttrComputeCapabilityMinor", index)
        return DeviceProperties(
            index=index,
            name=name,
            arch=f"sm_{major}{minor}",
            warp_size=self._attribute("cudaDevAttrWarpSize", index),
            compute_units=self._attribute("cudaDevAttrMultiProcessorCount", index),
            total_memory=int(prop.totalGlobalMem),
            integrated=bool(self._attribute("cudaDevAttrIntegrated", index)),
            max_threads_per_block=self._attribute("cudaDevAttrMaxThreadsPerBlock", index),
            max_grid_x=self._attribute("cudaDevAttrMaxGridDimX", index),
            shared_memory_per_block=self._attribute("cudaDevAttrMaxSharedMemoryPerBlock", index),
            l2_cache_bytes=self._attribute("cudaDevAttrL2CacheSize", index),
            shared_memory_opt_in=self._attribute("cudaDevAttrMaxSharedMemoryPerBlockOptin", index),
        )

    def synchronize_device(self) -> None:
        """cudaDeviceSynchronize."""
        self._check("cudaDeviceSynchronize", self.rt.cudaDeviceSynchronize())

    def versions(self) -> dict[str, str]:
        """CUDA runtime / driver / NVRTC / cuda-bindings versions."""

        def dotted(v: int) -> str:
            return f"{v // 1000}.{(v % 1000) // 10}"

        out = {
            "cuda_runtime": dotted(int(self._check("cudaRuntimeGetVersion", self.rt.cudaRuntimeGetVersion()))),
            "cuda_driver": dotted(int(self._check("cudaDriverGetVersion", self.rt.cudaDriverGetVersion()))),
            "nvrtc": self.compiler_version(),
        }
        try:
            out["cuda_bindings"] = metadata.version("cuda-bindings")
        except metadata.PackageNotFoundError:
            pass
        return out

    # ------------------------------------------------------------------ memory
    def malloc(self, nbytes: int) -> int:
        """cudaMalloc; out of memory, once more after the pool has given its free memory back."""
        result = self.rt.cudaMalloc(nbytes)
        if error_name(result[0]) == "cudaErrorMemoryAllocation" and self._trim_pool():
            result = self.rt.cudaMalloc(nbytes)
        return int(self._check(f"cudaMalloc({nbytes} bytes)", result))

    def free(self, address: int) -> None:
        """cudaFree."""
        self._check(f"cudaFree({address:#x})", self.rt.cudaFree(address))

    def malloc_host(self, nbytes: int) -> int:
        """cudaMallocHost (page-locked, mapped into the device's address space)."""
        return int(self._check(f"cudaMallocHost({nbytes} bytes)", self.rt.cudaMallocHost(nbytes)))

    def free_host(self, address: int) -> None:
        """cudaFreeHost."""
        self._check(f"cudaFreeHost({address:#x})", self.rt.cudaFreeHost(address))

    def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        """cudaMemcpy, or cudaMemcpyAsync on ``stream``."""
        kind = self._kinds[direction]
        if stream is None:
            self._check(f"cudaMemcpy({nbytes} bytes, {direction.name})", self.rt.cudaMemcpy(dst, src, nbytes, kind))
        else:
            self._check(
                f"cudaMemcpyAsync({nbytes} bytes, {direction.name})",
                self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream),
            )

    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        """cudaMemset, or cudaMemsetAsync on ``stream``."""
        if stream is None:
            self._check(f"cudaMemset({nbytes} bytes)", self.rt.cudaMemset(dst, value & 0xFF, nbytes))
        else:
            self._check(f"cudaMemsetAsync({nbytes} bytes)", self.rt.cudaMemsetAsync(dst, value & 0xFF, nbytes, stream))

    def mem_info(self) -> tuple[int, int]:
        """cudaMemGetInfo."""
        free, total = self._check("cudaMemGetInfo", self.rt.cudaMemGetInfo())
        return int(free), int(total)

    # ------------------------------------------------------------------ streams and events
    def stream_create(self) -> int:
        """cudaStreamCreate (a blocking stream: it orders with the legacy default stream)."""
        return int(self._check("cudaStreamCreate", self.rt.cudaStreamCreate()))

    def stream_create_nonblocking(self) -> int:
        """cudaStreamCreateWithFlags(cudaStreamNonBlocking): no implicit order with the legacy stream."""
        flags = int(getattr(self.rt, "cudaStreamNonBlocking", 1))
        return int(self._check("cudaStreamCreateWithFlags", self.rt.cudaStreamCreateWithFlags(flags)))

    def stream_destroy(self, stream: int) -> None:
        """cudaStreamDestroy."""
        self._check("cudaStreamDestroy", self.rt.cudaStreamDestroy(stream))

    def stream_synchronize(self, stream: int) -> None:
        """cudaStreamSynchronize."""
        self._check("cudaStreamSynchronize", self.rt.cudaStreamSynchronize(stream))

    def stream_query(self, stream: int) -> bool:
        """cudaStreamQuery: cudaErrorNotReady means pending work."""
        (error,) = self.rt.cudaStreamQuery(stream)
        if error_name(error) in _NOT_READY:
            return False
        self._check("cudaStreamQuery", (error,))
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        """cudaStreamWaitEvent."""
        self._check("cudaStreamWaitEvent", self.rt.cudaStreamWaitEvent(stream, event, 0))

    def event_create(self) -> int:
        """cudaEventCreate (timing enabled)."""
        return int(self._check("cudaEventCreate", self.rt.cudaEventCreate()))

    def event_destroy(self, event: int) -> None:
        """cudaEventDestroy."""
        self._check("cudaEventDestroy", self.rt.cudaEventDestroy(event))

    def event_record(self, event: int, stream: int) -> None:
        """cudaEventRecord."""
        self._check("cudaEventRecord", self.rt.cudaEventRecord(event, stream))

    def event_synchronize(self, event: int) -> None:
        """cudaEventSynchronize."""
        self._check("cudaEventSynchronize", self.rt.cudaEventSynchronize(event))

    def event_query(self, event: int) -> bool:
        """cudaEventQuery: cudaErrorNotReady means the recording has not completed."""
        (error,) = self.rt.cudaEventQuery(event)
        if error_name(error) in _NOT_READY:
            return False
        self._check("cudaEventQuery", (error,))
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        """cudaEventElapsedTime."""
        return float(self._check("cudaEventElapsedTime", self.rt.cudaEventElapsedTime(start, end)))

    # ------------------------------------------------------------------ stream capture (CUDA graphs)
    def capture_unavailable(self) -> str | None:
        """None: CUDA graphs are part of every CUDA runtime cuda-bindings supports."""
        return None

    def capture_begin(self, stream: int) -> None:
        """cudaStreamBeginCapture in cudaStreamCaptureModeRelaxed (the shared runtime enforces CANN's modes)."""
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
        self._check("cudaStreamBeginCapture", self.rt.cudaStreamBeginCapture(stream, mode))

    def capture_end(self, stream: int) -> object:
        """cudaStreamEndCapture, then cudaGraphInstantiateWithFlags (AutoFreeOnLaunch)."""
        graph = self._check("cudaStreamEndCapture", self.rt.cudaStreamEndCapture(stream))
        kinds = getattr(self.rt, "cudaGraphInstantiateFlags", None)
        flags = int(getattr(kinds, "cudaGraphInstantiateFlagAutoFreeOnLaunch", 1))
        try:
            exec_ = self._check("cudaGraphInstantiateWithFlags", self.rt.cudaGraphInstantiateWithFlags(graph, flags))
        except BaseException:
            self.rt.cudaGraphDestroy(graph)
            raise
        return _Graph(graph, exec_)

    def graph_launch(self, graph: object, stream: int) -> None:
        """cudaGraphLaunch."""
        assert isinstance(graph, _Graph)
        self._check("cudaGraphLaunch", self.rt.cudaGraphLaunch(graph.exec, stream))

    def graph_destroy(self, graph: object) -> None:
        """cudaGraphExecDestroy, then cudaGraphDestroy."""
        assert isinstance(graph, _Graph)
        self._check("cudaGraphExecDestroy", self.rt.cudaGraphExecDestroy(graph.exec))
        self._check("cudaGraphDestroy", self.rt.cudaGraphDestroy(graph.graph))

    # ------------------------------------------------------------------ compilation and launch
    def compiler_version(self) -> str:
        """``nvrtc <major>.<minor>``."""
        major, minor = self._check("nvrtcVersion", self.nvrtc.nvrtcVersion())
        return f"nvrtc {major}.{minor}"

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        """NVRTC to a cubin for ``arch`` (e.g. sm_90); the log is in the error message on failure."""
        nv = self.nvrtc
        prog = self._check(
            "nvrtcCreateProgram", nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
        )
        try:
            opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
            result = nv.nvrtcCompileProgram(prog, len(opts), opts)
            if not is_success(result[0]):
                size = self._check("nvrtcGetProgramLogSize", nv.nvrtcGetProgramLogSize(prog))
                log = b" " * int(size)
                self._check("nvrtcGetProgramLog", nv.nvrtcGetProgramLog(prog, log))
                text = log.decode(errors="replace").strip("\0 \n")
                raise vendor_error(f"nvrtcCompileProgram({name})", result[0], text[-4000:])
            size = self._check("nvrtcGetCUBINSize", nv.nvrtcGetCUBINSize(prog))
            image = b" " * int(size)
            self._check("nvrtcGetCUBIN", nv.nvrtcGetCUBIN(prog, image))
            return image
        finally:
            nv.nvrtcDestroyProgram(prog)

    def module_load(self, image: bytes) -> object:
        """cuModuleLoadData into the current context."""
        return self._check("cuModuleLoadData", self.drv.cuModuleLoadData(image))

    def module_function(self, module: object, name: str) -> object:
        """cuModuleGetFunction."""
        return self._check(f"cuModuleGetFunction({name})", self.drv.cuModuleGetFunction(module, name.encode()))

    def set_max_dynamic_shared(self, function: object, nbytes: int) -> None:
        """cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)."""
        attribute = self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check(
            f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes})",
            self.drv.cuFuncSetAttribute(function, attribute, int(nbytes)),
        )

    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """cuLaunchKernel with a ``void*[]`` of argument addresses."""
        result = self.drv.cuLaunchKernel(function, *grid, *block, shared_bytes, stream, params, 0)
        if result[0] != 0:  # CUresult is an int enum; a success compares equal to 0
            self._check("cuLaunchKernel", result)

    def programmatic_unavailable(self) -> str | None:
        """None on compute capability 9.0+ with cuLaunchKernelEx and the programmatic attribute in the bindings."""
        if not hasattr(self.drv, "cuLaunchKernelEx"):
            return "cuda-bindings has no cuLaunchKernelEx"
        ids = getattr(self.drv, "CUlaunchAttributeID", None)
        if ids is None or not hasattr(ids, "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION"):
            return "cuda-bindings has no CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION"
        arch = self.device_properties(self.get_device()).arch
        if int(arch.removeprefix("sm_").rstrip("af") or 0) < 90:
            return f"programmatic dependent launch needs sm_90 or later, not {arch}"
        return None

    def _programmatic_config(
        self, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int, stream: int
    ) -> Any:
        """A CUlaunchConfig carrying CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 1."""
        drv = self.drv
        attribute = drv.CUlaunchAttribute()
        attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attribute.value.programmaticStreamSerializationAllowed = 1
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = shared_bytes
        config.hStream = stream
        config.attrs = [attribute]
        config.numAttrs = 1
        return config

    def launch_programmatic(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """cuLaunchKernelEx with programmatic stream serialization (captured into a graph as a programmatic edge)."""
        config = self._programmatic_config(grid, block, shared_bytes, stream)
        result = self.drv.cuLaunchKernelEx(config, function, params, 0)
        if result[0] != 0:
            self._check("cuLaunchKernelEx(PROGRAMMATIC_STREAM_SERIALIZATION)", result)

    def launcher(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        params: int,
        keepalive: object = None,
    ) -> Callable[[int], None]:
        """cuLaunchKernel bound once: each call passes the stream and checks the result, nothing else."""
        launch = self.drv.cuLaunchKernel
        gx, gy, gz = grid
        bx, by, bz = block
        check = self._check

        def enqueue(stream: int, _keep: object = keepalive) -> None:
            result = launch(function, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, 0)
            if result[0] != 0:
                check("cuLaunchKernel", result)

        return enqueue

    # ------------------------------------------------------------------ stream-ordered memory
    def malloc_async(self, nbytes: int, stream: int) -> int:
        """cudaMallocAsync (from the device's default memory pool, ordered on ``stream``)."""
        return int(self._check(f"cudaMallocAsync({nbytes} bytes)", self.rt.cudaMallocAsync(nbytes, stream)))

    def free_async(self, address: int, stream: int) -> None:
        """cudaFreeAsync."""
        self._check(f"cudaFreeAsync({address:#x})", self.rt.cudaFreeAsync(address, stream))

    # ------------------------------------------------------------------ GEMM through cuBLASLt
    @property
    def lt(self) -> Any:
        """nvmath-python's cuBLASLt bindings (imported at the first GEMM)."""
        if self._blas is None:
            self._blas = importlib.import_module("nvmath.bindings.cublasLt")
        return self._blas

    def gemm_unavailable(self) -> str | None:
        """None when nvmath-python's cuBLASLt bindings import, else why not."""
        try:
            self.lt  # noqa: B018 - the import is the check
        except Exception as exc:
            return f"no cuBLASLt: nvmath-python failed to import ({exc}); pip install 'acl-core[nvidia]'"
        return None

    def _lt_handle(self) -> int:
        device = self.get_device()
        with self._lock:
            handles: dict[int, int] = self.__dict__.setdefault("_lt_handles", {})
            if device not in handles:
                handles[device] = int(self._lt_call("cublasLtCreate", self.lt.create))
            return handles[device]

    def _lt_call(self, name: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            status = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            label = self.lt.get_status_name(status) if status is not None else type(exc).__name__
            raise vendor_error(name, label, str(exc)) from None

    def _lt_set(self, setter: Any, dtype_of: Any, obj: int, key: Any, value: Any) -> None:
        """One cuBLASLt attribute through ``setter``, typed as the binding's ``dtype_of`` says."""
        import numpy as np

        buf = np.array([value], dtype=dtype_of(key))
        self._lt_call(setter.__name__, setter, obj, key, buf.ctypes.data, buf.nbytes)

    def gemm(self, call: GemmCall, workspace: int, workspace_size: int, stream: int) -> None:
        """cublasLtMatmul with a plan (descriptors, layouts, heuristic algorithm) made once per GEMM shape.

        The algorithm persists in :attr:`plan_cache`: a later process checks the stored one with
        cublasLtMatmulAlgoCheck instead of asking the heuristic again (and asks it when the check refuses).
        """
        handle = self._lt_handle()
        tune = self._tune_wanted(call)
        key = (*_gemm_key(call, workspace_size, self.get_device()), tune)
        with self._gemm_lock:  # held across the matmul: an eviction never destroys a plan in use
            plan = self._gemm_plans.get(key)
            if plan is None:
                plan = self._gemm_plan(handle, call, workspace_size, tune, (workspace, stream))
                self._gemm_plans[key] = plan
                while len(self._gemm_plans) > GEMM_PLAN_LIMIT:
                    _, evicted = self._gemm_plans.popitem(last=False)
                    self._destroy_gemm_plan(evicted)
            else:
                self._gemm_plans.move_to_end(key)
            self._set_scale_pointers(plan, call)
            self._matmul(handle, plan, call, plan.algo.ptr, workspace, workspace_size, stream)

    def gemm_launcher(self, call: GemmCall, workspace: int, workspace_size: int) -> Callable[[int], None]:
        """:meth:`gemm` of ``call`` bound once (issue 16: the key, handle and scalars cost a decode call some 10 us a
        GEMM): each call looks its plan up by the keys made here, under the plan lock as :meth:`gemm` does; a plan
        not there (never made, or evicted since) is made through :meth:`gemm`."""
        handle = self._lt_handle()
        shape = _gemm_key(call, workspace_size, self.get_device())
        keys = {False: (*shape, False), True: (*shape, True)}
        alpha, beta = self._alpha_beta(_is_integer(call))
        scaled = bool(call.a_scale or call.b_scale)
        a, b, d = call.a.address, call.b.address, call.d.address

        def enqueue(stream: int) -> None:
            key = keys[self._tune_wanted(call)]
            with self._gemm_lock:
                plan = self._gemm_plans.get(key)
                if plan is not None:
                    self._gemm_plans.move_to_end(key)
                    if scaled:
                        self._set_scale_pointers(plan, call)
                    a_layout, b_layout, d_layout = plan.layouts
                    self._lt_call(
                        "cublasLtMatmul", self.lt.matmul, handle, plan.desc, alpha, a, a_layout, b, b_layout, beta,
                        d, d_layout, d, d_layout, plan.algo.ptr, workspace, workspace_size, stream,
                    )  # fmt: skip
                    return
            self.gemm(call, workspace, workspace_size, stream)

        return enqueue

    def grouped_gemm_unavailable(self) -> str | None:
        """None where cuBLASLt's device-sized grouped GEMM is bound for this device (:mod:`blaslt_grouped`)."""
        return blaslt_grouped.unavailable(self)

    def grouped_gemm(self, call: GroupedGemmCall, workspace: int, workspace_size: int, stream: int) -> str | None:
        """cublasLtMatmul over grouped layouts (:mod:`blaslt_grouped`); the heuristic's refusal, nothing enqueued."""
        return blaslt_grouped.grouped_gemm(self, call, workspace, workspace_size, stream)

    def _matmul(
        self, handle: int, plan: _GemmPlan, call: GemmCall, algo: int, workspace: int, workspace_size: int, stream: int
    ) -> None:
        """One cublasLtMatmul of ``call`` with ``plan``'s descriptors and the algorithm at address ``algo``."""
        a_layout, b_layout, d_layout = plan.layouts
        alpha, beta = self._alpha_beta(_is_integer(call))
        self._lt_call(
            "cublasLtMatmul",
            self.lt.matmul,
            handle,
            plan.desc,
            alpha,
            call.a.address,
            a_layout,
            call.b.address,
            b_layout,
            beta,
            call.d.address,
            d_layout,
            call.d.address,
            d_layout,
            algo,
            workspace,
            workspace_size,
            stream,
        )

    def _tune_wanted(self, call: GemmCall) -> bool:
        """True when ``ACL_BLASLT_TUNE=1`` and ``call`` is large enough to time (bad setting: INVALID_PARAM)."""
        try:
            enabled = blaslt_tune.tune_enabled()
        except ValueError as exc:
            raise AclError(AclErrorCode.ACL_ERROR_INVALID_PARAM, str(exc)) from None
        # D is n x m column-major (rows, cols); the inner dimension is A's rows when A is transposed
        k = call.a.rows if call.a.transpose else call.a.cols
        return enabled and blaslt_tune.worth_tuning(call.batch, call.d.rows, call.d.cols, k)

    def _capturing(self, stream: int) -> bool:
        """True while ``stream`` is being captured into a graph (no event may be waited on)."""
        status = self._check("cudaStreamIsCapturing", self.rt.cudaStreamIsCapturing(stream))
        return int(status) != 0  # cudaStreamCaptureStatusNone

    def _ask_heuristic(self, handle: int, plan: _GemmPlan, count: int, results: int) -> int:
        """cublasLtMatmulAlgoGetHeuristic for ``plan``: up to ``count`` results written at ``results``; how many."""
        import numpy as np

        found = np.zeros(1, dtype=np.int32)
        a_layout, b_layout, d_layout = plan.layouts
        self._lt_call(
            "cublasLtMatmulAlgoGetHeuristic",
            self.lt.matmul_algo_get_heuristic,
            handle,
            plan.desc,
            a_layout,
            b_layout,
            d_layout,
            d_layout,
            plan.pref,
            count,
            results,
            found.ctypes.data,
        )
        return int(found[0])

    def _timed_algo(
        self, handle: int, plan: _GemmPlan, call: GemmCall, workspace: int, workspace_size: int, stream: int
    ) -> None:
        """Ask the heuristic for several algorithms, time each on ``call``, put the fastest into ``plan``."""
        lt = self.lt
        results = lt.MatmulHeuristicResult(blaslt_tune.CANDIDATES)
        found = self._ask_heuristic(handle, plan, blaslt_tune.CANDIDATES, int(results.ptr))
        base = int(results.ptr)
        candidates = [
            base + i * HEURISTIC_BYTES
            for i in range(min(found, blaslt_tune.CANDIDATES))
            if ctypes.c_int32.from_address(base + i * HEURISTIC_BYTES + STATE_OFFSET).value == 0
        ]
        if not candidates:
            raise vendor_error(
                "cublasLtMatmulAlgoGetHeuristic", "CUBLAS_STATUS_NOT_SUPPORTED", "no algorithm for this problem"
            )
        start, end = self.event_create(), self.event_create()

        def time_ms(i: int) -> float | None:
            try:
                for _ in range(blaslt_tune.WARMUP):
                    self._matmul(handle, plan, call, candidates[i], workspace, workspace_size, stream)
                self.event_record(start, stream)
                for _ in range(blaslt_tune.REPEATS):
                    self._matmul(handle, plan, call, candidates[i], workspace, workspace_size, stream)
                self.event_record(end, stream)
                self.event_synchronize(end)
                return self.event_elapsed_ms(start, end) / blaslt_tune.REPEATS
            except AclError as exc:  # this candidate does not run here: the others are timed
                LOG.debug("cuBLASLt candidate %d refused: %s", i, exc)
                return None

        try:
            best, times = blaslt_tune.pick_fastest(len(candidates), time_ms)
        except ValueError as exc:
            raise vendor_error("cublasLtMatmul", "CUBLAS_STATUS_NOT_SUPPORTED", str(exc)) from None
        finally:
            self.event_destroy(start)
            self.event_destroy(end)
        ctypes.memmove(plan.algo.ptr, candidates[best], ALGO_BYTES)
        LOG.debug("cuBLASLt algorithm timed (ms per call, chosen in []): %s", blaslt_tune.describe(times, best))

    def _alpha_beta(self, integer: bool = False) -> tuple[int, int]:
        """Host addresses of alpha = 1 and beta = 0: fp32, or int32 for int8 GEMMs (made once, kept)."""
        if self._scalars is None:
            import numpy as np

            self._scalars = (np.array([1.0, 0.0], dtype=np.float32), np.array([1, 0], dtype=np.int32))
        base = int(self._scalars[1 if integer else 0].ctypes.data)
        return base, base + 4

    def _set_scale_pointers(self, plan: _GemmPlan, call: GemmCall) -> None:
        """Point the cached descriptor at this call's per-tensor fp8 scales (addresses change per call)."""
        import numpy as np

        lt = self.lt
        for key, address in (
            (lt.MatmulDescAttribute.A_SCALE_POINTER, call.a_scale),
            (lt.MatmulDescAttribute.B_SCALE_POINTER, call.b_scale),
        ):
            if address:
                buf = np.array([address], dtype=lt.get_matmul_desc_attribute_dtype(key))
                self._lt_call(
                    "cublasLtMatmulDescSetAttribute",
                    lt.matmul_desc_set_attribute,
                    plan.desc,
                    key,
                    buf.ctypes.data,
                    buf.nbytes,
                )

    def _gemm_plan(
        self,
        handle: int,
        call: GemmCall,
        workspace_size: int,
        tune: bool = False,
        target: tuple[int, int] = (0, 0),
    ) -> _GemmPlan:
        """Descriptor, layouts, preference and the heuristic's first algorithm for ``call``'s shape.

        ``tune``: the fastest of the heuristic's candidates instead, timed on ``call`` with ``target``'s
        (workspace, stream) unless the stream is being captured (:mod:`blaslt_tune`).
        """

        lt = self.lt
        if _is_integer(call):
            compute, scale_type = _COMPUTE_32I, _R_32I
        else:
            compute, scale_type = (_COMPUTE_32F_FAST_TF32 if call.fast_tf32 else _COMPUTE_32F), _R_32F
        plan = _GemmPlan()
        attr = self._lt_set
        try:
            plan.desc = self._lt_call("cublasLtMatmulDescCreate", lt.matmul_desc_create, compute, scale_type)
            desc_attr = lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype
            attr(*desc_attr, plan.desc, lt.MatmulDescAttribute.TRANSA, 1 if call.a.transpose else 0)
            attr(*desc_attr, plan.desc, lt.MatmulDescAttribute.TRANSB, 1 if call.b.transpose else 0)
            self._set_scale_pointers(plan, call)  # the heuristic sees the scaled problem
            layout_attr = lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype
            for m in (call.a, call.b, call.d):
                layout = self._lt_call(
                    "cublasLtMatrixLayoutCreate", lt.matrix_layout_create, _CUDA_TYPES[m.dtype], m.rows, m.cols, m.ld
                )
                plan.layouts.append(layout)
                if call.batch > 1:
                    attr(*layout_attr, layout, lt.MatrixLayoutAttribute.BATCH_COUNT, call.batch)
                    attr(*layout_attr, layout, lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET, m.batch_stride)
            plan.pref = self._lt_call("cublasLtMatmulPreferenceCreate", lt.matmul_preference_create)
            pref_attr = lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype
            attr(*pref_attr, plan.pref, lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES, workspace_size)
            # split-K partial sums may only be reduced in the compute type (fp32), never in a 16-bit output
            # type: products accumulate in fp32 and round once (the default mask allows every scheme)
            mask = lt.MatmulPreferenceAttribute.REDUCTION_SCHEME_MASK
            attr(*pref_attr, plan.pref, mask, int(lt.ReductionScheme.COMPUTE_TYPE))
            for name, m in (("A", call.a), ("B", call.b), ("C", call.d), ("D", call.d)):
                key = getattr(lt.MatmulPreferenceAttribute, f"MIN_ALIGNMENT_{name}_BYTES")
                attr(*pref_attr, plan.pref, key, m.alignment)
            plan.algo = lt.MatmulHeuristicResult(1)
            cache = self.plan_cache
            fields = self._gemm_fields(call, workspace_size, compute, scale_type) if cache is not None else {}
            timed = tune and not self._capturing(target[1])
            if tune and not timed:
                LOG.debug("cuBLASLt: a GEMM planned during stream capture takes the heuristic's algorithm, untimed")
            if timed:
                fields["choice"] = "timed"  # a key of its own: the heuristic's answer is kept beside it
            if cache is not None and self._stored_algo(handle, plan, cache, fields, workspace_size):
                return plan
            if timed:
                self._timed_algo(handle, plan, call, target[0], workspace_size, target[1])
        except BaseException:
            self._destroy_gemm_plan(plan)
            raise
        if timed:
            if cache is not None:
                cache.made(CUBLASLT_PLAN)
                cache.store(CUBLASLT_PLAN, fields, ctypes.string_at(plan.algo.ptr, ALGO_BYTES))
            return plan
        try:
            if self._ask_heuristic(handle, plan, 1, int(plan.algo.ptr)) == 0:
                raise vendor_error(
                    "cublasLtMatmulAlgoGetHeuristic", "CUBLAS_STATUS_NOT_SUPPORTED", "no algorithm for this problem"
                )
        except BaseException:
            self._destroy_gemm_plan(plan)
            raise
        if cache is not None:
            cache.made(CUBLASLT_PLAN)
            # the heuristic's answer (also a GEMM planned during capture) goes under the untimed key, never the
            # timed one: a warm start that plans it during capture again loads it and makes nothing
            cache.store(CUBLASLT_PLAN, fields, ctypes.string_at(plan.algo.ptr, ALGO_BYTES))
        return plan

    def _gemm_fields(self, call: GemmCall, workspace_size: int, compute: int, scale_type: int) -> dict[str, object]:
        """Everything a stored cuBLASLt algorithm depends on: device, library version, recipe, the call's signature."""
        with self._lock:
            version = self.__dict__.get("_lt_version")
            if version is None:
                version = self.__dict__["_lt_version"] = int(self.lt.get_version())
        return {
            "device": self.device_tag(self.get_device()),
            "cublasLt": version,
            "recipe": GEMM_RECIPE,
            "compute": compute,
            "scale_type": scale_type,
            "batch": call.batch,
            "workspace": workspace_size,
            "scales": [bool(call.a_scale), bool(call.b_scale)],
            "operands": [
                [m.dtype, m.rows, m.cols, m.ld, m.batch_stride, m.transpose, m.alignment]
                for m in (call.a, call.b, call.d)
            ],
        }

    def _stored_algo(
        self, handle: int, plan: _GemmPlan, cache: PlanCache, fields: dict[str, object], workspace_size: int
    ) -> bool:
        """Put the stored algorithm of ``fields`` into ``plan`` if cublasLtMatmulAlgoCheck accepts it here."""
        entry = cache.load(CUBLASLT_PLAN, fields)
        if entry is None:
            return False
        if len(entry.payload) != ALGO_BYTES:
            cache.refused(CUBLASLT_PLAN, f"{len(entry.payload)} bytes, not a {ALGO_BYTES}-byte cublasLtMatmulAlgo_t")
            return False
        lt = self.lt
        ctypes.memmove(plan.algo.ptr, entry.payload, ALGO_BYTES)  # the algorithm leads cublasLtMatmulHeuristicResult_t
        check = lt.MatmulHeuristicResult(1)
        a_layout, b_layout, d_layout = plan.layouts
        try:
            self._lt_call(
                "cublasLtMatmulAlgoCheck",
                lt.matmul_algo_check,
                handle,
                plan.desc,
                a_layout,
                b_layout,
                d_layout,
                d_layout,
                plan.algo.ptr,
                check.ptr,
            )
        except Exception as exc:  # refused here (another library build, device or driver): ask the heuristic
            cache.refused(CUBLASLT_PLAN, str(exc))
            return False
        needed = ctypes.c_size_t.from_address(check.ptr + ALGO_BYTES).value  # its workspaceSize
        if needed > workspace_size:
            cache.refused(CUBLASLT_PLAN, f"it needs {needed} workspace bytes, {workspace_size} are given")
            return False
        LOG.debug("cuBLASLt plan loaded from %s", cache.directory)
        return True

    def _destroy_gemm_plan(self, plan: _GemmPlan) -> None:
        """Destroy what ``plan`` created (errors ignored: this runs on eviction and close)."""
        lt = self.lt
        steps = [(lt.matmul_preference_destroy, plan.pref)] if plan.pref is not None else []
        steps += [(lt.matrix_layout_destroy, layout) for layout in reversed(plan.layouts)]
        if plan.desc is not None:
            steps.append((lt.matmul_desc_destroy, plan.desc))
        for destroy, value in steps:
            try:
                destroy(value)
            except Exception:
                pass
        plan.pref, plan.desc, plan.layouts = None, None, []

    # ------------------------------------------------------------------ collectives
    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        """NCCL: nccl4py's bindings, else ctypes on libnccl.so.2 (opened once; ACL_NCCL_BINDING forces one)."""
        with self._lock:
            if not hasattr(self, "_nccl"):
                self._nccl = open_nccl()
            return self._nccl

    def close(self) -> None:
        """Destroy every cached GEMM plan (a later GEMM makes its plan again)."""
        if self._blas is None:
            return
        with self._gemm_lock:
            blaslt_grouped.close(self)
            while self._gemm_plans:
                _, plan = self._gemm_plans.popitem(last=False)
                self._destroy_gemm_plan(plan)


@dataclass(frozen=True)
class _Graph:
    """A captured cudaGraph_t and its instantiation (a vendor graph handle pair)."""

    graph: Any
    exec: Any


GEMM_PLAN_LIMIT = 256
"""GEMM shapes whose cuBLASLt plans are kept (least recently used destroyed first)."""
CUBLASLT_PLAN = "cublaslt"
"""The plan cache kind of stored cuBLASLt algorithms."""
GEMM_RECIPE = 1
"""Version of how :meth:`NvidiaProvider._gemm_plan` asks the heuristic (preferences, reduction mask): part of
the stored algorithms' key, to be bumped whenever that changes."""
ALGO_BYTES = 64
HEURISTIC_BYTES = 96
"""sizeof(cublasLtMatmulHeuristicResult_t): algo (64), workspaceSize (8), state (4), wavesCount (4), reserved (16)."""
STATE_OFFSET = 72
"""Offset of the result's ``cublasStatus_t state`` (0: the algorithm can run this problem)."""
"""sizeof(cublasLtMatmulAlgo_t) (``uint64_t data[8]``), the first member of cublasLtMatmulHeuristicResult_t,
which is followed by ``size_t workspaceSize``."""


@dataclass
class _GemmPlan:
    """The cuBLASLt objects of one GEMM shape: matmul descriptor, A/B/D layouts, preference, algorithm."""

    desc: int | None = None
    layouts: list[int] = field(default_factory=list)
    pref: int | None = None
    algo: Any = None


def _gemm_key(call: GemmCall, workspace_size: int, device: int) -> tuple[object, ...]:
    """Everything a cuBLASLt plan depends on: the call without addresses, plus alignments, workspace and device."""
    shape = tuple(
        (m.dtype, m.rows, m.cols, m.ld, m.batch_stride, m.transpose, m.alignment) for m in (call.a, call.b, call.d)
    )
    scales = (bool(call.a_scale), bool(call.b_scale))
    return (device, call.fast_tf32, call.batch, workspace_size, scales, *shape)


def _is_integer(call: GemmCall) -> bool:
    """True for an int8 x int8 -> int32 GEMM (compute and scale type 32I)."""
    return call.a.dtype == _ACL_INT8


_ACL_INT8 = 2
_R_32F = 0
_R_32I = 10
_COMPUTE_32F = 68
_COMPUTE_32F_FAST_TF32 = 77
_COMPUTE_32I = 72
_CUDA_TYPES = {0: 0, 1: 2, 27: 14, 11: 1, 2: 3, 3: 10, 35: 29, 36: 28}
"""aclDataType → cudaDataType (float32, float16, bf16, float64, int8, int32, fp8 E5M2, fp8 E4M3);
cublasComputeType_t 32F / 32F_FAST_TF32 / 32I."""
