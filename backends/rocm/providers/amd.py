"""The amd provider: ROCm through hip-python (``hip.hip``, ``hip.hiprtc``; hipBLASLt when present).

Thin by design: every primitive is one binding call. It supports the hip-python 7.2 line and the 10.x
line by looking names up at run time (``hipGetDevicePropertiesR0600`` or ``hipGetDeviceProperties``;
``hip.hipblaslt`` when that module exists). No AMD GPU was available while this was written, so this
provider is untested on hardware: the shared code above the seam is proven on the nvidia provider.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any, ClassVar

from acl_core.spec.runtime import CopyDirection
from acl_rocm.errors import error_name, unpack
from acl_rocm.providers.base import DeviceProperties, RuntimeProvider, pool_release_threshold
from acl_rocm.providers.nccl import CollectiveLibrary, open_rccl

_NOT_READY = "hipErrorNotReady"


def _optional_module(name: str) -> Any:
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except (ImportError, ValueError):
        return None
    return importlib.import_module(name)


MEMORY_LOG = logging.getLogger("acl_rocm.memory")


class AmdProvider(RuntimeProvider):
    """HIP runtime and hipRTC through hip-python."""

    platform: ClassVar[str] = "amd"
    compiler_name: ClassVar[str] = "hiprtc"

    def __init__(self) -> None:
        self.hip: Any = importlib.import_module("hip.hip")
        self.hiprtc: Any = importlib.import_module("hip.hiprtc")
        self.hipblaslt: Any = _optional_module("hip.hipblaslt")
        kinds = self.hip.hipMemcpyKind
        self._kinds = {
            CopyDirection.HOST_TO_HOST: kinds.hipMemcpyHostToHost,
            CopyDirection.HOST_TO_DEVICE: kinds.hipMemcpyHostToDevice,
            CopyDirection.DEVICE_TO_HOST: kinds.hipMemcpyDeviceToHost,
            CopyDirection.DEVICE_TO_DEVICE: kinds.hipMemcpyDeviceToDevice,
        }
        self._pools: dict[int, Any] = {}

    def _describe(self, error: object) -> str:
        text = self.hip.hipGetErrorString(error)
        if isinstance(text, tuple):
            text = text[-1]
        return text.decode() if isinstance(text, bytes) else str(text)

    def _call(self, call: str, result: object) -> Any:
        return unpack(call, result, self._describe)

    # ------------------------------------------------------------------ devices
    def device_count(self) -> int:
        """hipGetDeviceCount (0 when none is usable)."""
        result = self.hip.hipGetDeviceCount()
        if error_name(result[0]) != "hipSuccess":
            return 0
        return int(result[1])

    def set_device(self, index: int) -> None:
        """hipSetDevice; the device's default pool keeps freed memory (:func:`pool_release_threshold`)."""
        self._call(f"hipSetDevice({index})", self.hip.hipSetDevice(index))
        if index not in self._pools:
            self._pools[index] = self._keep_pool(index)

    def _keep_pool(self, index: int) -> Any:
        """hipMemPoolSetAttribute(hipMemPoolAttrReleaseThreshold) on the default pool (None where refused)."""
        threshold = ctypes.c_uint64(pool_release_threshold())
        try:
            pool = self._call("hipDeviceGetDefaultMemPool", self.hip.hipDeviceGetDefaultMemPool(index))
            attr = self.hip.hipMemPoolAttr.hipMemPoolAttrReleaseThreshold
            self._call(
                "hipMemPoolSetAttribute", self.hip.hipMemPoolSetAttribute(pool, attr, ctypes.addressof(threshold))
            )
        except Exception as exc:  # a performance setting: the pool still works at HIP's default
            MEMORY_LOG.warning("device %d: the memory pool keeps HIP's release threshold of 0 (%s)", index, exc)
            return None
        return pool

    def _trim_pool(self) -> bool:
        """hipMemPoolTrimTo(0) on the current device's pool; False when none is held."""
        pool = self._pools.get(self.get_device())
        if pool is None:
            return False
        self._call("hipMemPoolTrimTo", self.hip.hipMemPoolTrimTo(pool, 0))
        return True

    def get_device(self) -> int:
        """hipGetDevice."""
        return int(self._call("hipGetDevice", self.hip.hipGetDevice()))

    def _attribute(self, name: str, index: int) -> int:
        attr = getattr(self.hip.hipDeviceAttribute_t, name)
        return int(self._call(f"hipDeviceGetAttribute({name})", self.hip.hipDeviceGetAttribute(attr, index)))

    def device_properties(self, index: int) -> DeviceProperties:
        """hipGetDeviceProperties; the architecture is ``gcnArchName`` (features stripped later)."""
        props = self.hip.hipDeviceProp_t()
        getter = getattr(self.hip, "hipGetDevicePropertiesR0600", None) or self.hip.hipGetDeviceProperties
        self._call(f"hipGetDeviceProperties({index})", getter(props, index))

        def text(value: object) -> str:
            return value.split(b"\0", 1)[0].decode() if isinstance(value, bytes) else str(value)

        return DeviceProperties(
            index=index,
            name=text(props.name),
            arch=text(props.gcnArchName),
            warp_size=int(props.warpSize),
            compute_units=int(props.multiProcessorCount),
            total_memory=int(props.totalGlobalMem),
            integrated=bool(props.integrated),
            max_threads_per_block=int(props.maxThreadsPerBlock),
            max_grid_x=int(props.maxGridSize[0]),
            shared_memory_per_block=int(props.sharedMemPerBlock),
            l2_cache_bytes=int(props.l2CacheSize),
            shared_memory_opt_in=int(getattr(props, "sharedMemPerBlockOptin", 0) or 0),
        )

    def synchronize_device(self) -> None:
        """hipDeviceSynchronize."""
        self._call("hipDeviceSynchronize", self.hip.hipDeviceSynchronize())

    def versions(self) -> dict[str, str]:
        """HIP runtime / driver / hipRTC / hip-python versions."""
        out = {
            "hip_runtime": str(self._call("hipRuntimeGetVersion", self.hip.hipRuntimeGetVersion())),
            "hip_driver": str(self._call("hipDriverGetVersion", self.hip.hipDriverGetVersion())),
            "hiprtc": self.compiler_version(),
        }
        try:
            out["hip_python"] = metadata.version("hip-python")
        except metadata.PackageNotFoundError:
            pass
        return out

    # ------------------------------------------------------------------ memory
    def malloc(self, nbytes: int) -> int:
        """hipMalloc; out of memory, once more after the pool has given its free memory back."""
        result = self.hip.hipMalloc(nbytes)
        first = result[0] if isinstance(result, tuple) else result
        if error_name(first) == "hipErrorOutOfMemory" and self._trim_pool():
            result = self.hip.hipMalloc(nbytes)
        return int(self._call(f"hipMalloc({nbytes} bytes)", result))

    def free(self, address: int) -> None:
        """hipFree."""
        self._call(f"hipFree({address:#x})", self.hip.hipFree(address))

    def malloc_host(self, nbytes: int) -> int:
        """hipHostMalloc (page-locked)."""
        return int(self._call(f"hipHostMalloc({nbytes} bytes)", self.hip.hipHostMalloc(nbytes, 0)))

    def free_host(self, address: int) -> None:
        """hipHostFree."""
        self._call(f"hipHostFree({address:#x})", self.hip.hipHostFree(address))

    def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        """hipMemcpy, or hipMemcpyAsync on ``stream``."""
        kind = self._kinds[direction]
        if stream is None:
            self._call(f"hipMemcpy({nbytes} bytes, {direction.name})", self.hip.hipMemcpy(dst, src, nbytes, kind))
        else:
            self._call(
                f"hipMemcpyAsync({nbytes} bytes, {direction.name})",
                self.hip.hipMemcpyAsync(dst, src, nbytes, kind, stream),
            )

    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        """hipMemset, or hipMemsetAsync on ``stream``."""
        if stream is None:
            self._call(f"hipMemset({nbytes} bytes)", self.hip.hipMemset(dst, value & 0xFF, nbytes))
        else:
            self._call(f"hipMemsetAsync({nbytes} bytes)", self.hip.hipMemsetAsync(dst, value & 0xFF, nbytes, stream))

    def mem_info(self) -> tuple[int, int]:
        """hipMemGetInfo."""
        free, total = self._call("hipMemGetInfo", self.hip.hipMemGetInfo())
        return int(free), int(total)

    # ------------------------------------------------------------------ streams and events
    def stream_create(self) -> int:
        """hipStreamCreate."""
        return int(self._call("hipStreamCreate", self.hip.hipStreamCreate()))

    def stream_create_nonblocking(self) -> int:
        """hipStreamCreateWithFlags(hipStreamNonBlocking): no implicit order with the null stream."""
        flags = int(getattr(self.hip, "hipStreamNonBlocking", 1))
        return int(self._call("hipStreamCreateWithFlags", self.hip.hipStreamCreateWithFlags(flags)))

    def stream_destroy(self, stream: int) -> None:
        """hipStreamDestroy."""
        self._call("hipStreamDestroy", self.hip.hipStreamDestroy(stream))

    def stream_synchronize(self, stream: int) -> None:
        """hipStreamSynchronize."""
        self._call("hipStreamSynchronize", self.hip.hipStreamSynchronize(stream))

    def stream_query(self, stream: int) -> bool:
        """hipStreamQuery: hipErrorNotReady means pending work."""
        result = self.hip.hipStreamQuery(stream)
        error = result[0] if isinstance(result, tuple) else result
        if error_name(error) == _NOT_READY:
            return False
        self._call("hipStreamQuery", result)
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        """hipStreamWaitEvent."""
        self._call("hipStreamWaitEvent", self.hip.hipStreamWaitEvent(stream, event, 0))

    def event_create(self) -> int:
        """hipEventCreate."""
        return int(self._call("hipEventCreate", self.hip.hipEventCreate()))

    def event_destroy(self, event: int) -> None:
        """hipEventDestroy."""
        self._call("hipEventDestroy", self.hip.hipEventDestroy(event))

    def event_record(self, event: int, stream: int) -> None:
        """hipEventRecord."""
        self._call("hipEventRecord", self.hip.hipEventRecord(event, stream))

    def event_synchronize(self, event: int) -> None:
        """hipEventSynchronize."""
        self._call("hipEventSynchronize", self.hip.hipEventSynchronize(event))

    def event_query(self, event: int) -> bool:
        """hipEventQuery."""
        result = self.hip.hipEventQuery(event)
        error = result[0] if isinstance(result, tuple) else result
        if error_name(error) == _NOT_READY:
            return False
        self._call("hipEventQuery", result)
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        """hipEventElapsedTime."""
        return float(self._call("hipEventElapsedTime", self.hip.hipEventElapsedTime(start, end)))

    # ------------------------------------------------------------------ stream capture (HIP graphs)
    def capture_unavailable(self) -> str | None:
        """None when hip-python exposes the HIP graph API (untested on hardware: no AMD GPU was available)."""
        names = ("hipStreamBeginCapture", "hipStreamEndCapture", "hipGraphInstantiateWithFlags", "hipGraphLaunch")
        missing = [n for n in names if not hasattr(self.hip, n)]
        return f"hip-python lacks {', '.join(missing)}" if missing else None

    def capture_begin(self, stream: int) -> None:
        """hipStreamBeginCapture in hipStreamCaptureModeRelaxed (the shared runtime enforces CANN's modes)."""
        mode = self.hip.hipStreamCaptureMode.hipStreamCaptureModeRelaxed
        self._call("hipStreamBeginCapture", self.hip.hipStreamBeginCapture(stream, mode))

    def capture_end(self, stream: int) -> object:
        """hipStreamEndCapture, then hipGraphInstantiateWithFlags (AutoFreeOnLaunch)."""
        graph = self._call("hipStreamEndCapture", self.hip.hipStreamEndCapture(stream))
        flags = int(getattr(self.hip, "hipGraphInstantiateFlagAutoFreeOnLaunch", 1))
        try:
            exec_ = self._call("hipGraphInstantiateWithFlags", self.hip.hipGraphInstantiateWithFlags(graph, flags))
        except BaseException:
            self.hip.hipGraphDestroy(graph)
            raise
        return _Graph(graph, exec_)

    def graph_launch(self, graph: object, stream: int) -> None:
        """hipGraphLaunch."""
        assert isinstance(graph, _Graph)
        self._call("hipGraphLaunch", self.hip.hipGraphLaunch(graph.exec, stream))

    def graph_destroy(self, graph: object) -> None:
        """hipGraphExecDestroy, then hipGraphDestroy."""
        assert isinstance(graph, _Graph)
        self._call("hipGraphExecDestroy", self.hip.hipGraphExecDestroy(graph.exec))
        self._call("hipGraphDestroy", self.hip.hipGraphDestroy(graph.graph))

    # ------------------------------------------------------------------ compilation and launch
    def compiler_version(self) -> str:
        """``hiprtc <major>.<minor>``."""
        major, minor = self._call("hiprtcVersion", self.hiprtc.hiprtcVersion())
        return f"hiprtc {major}.{minor}"

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        """hipRTC to a code object for ``arch`` (e.g. gfx942)."""
        rtc = self.hiprtc
        prog = self._call(
            "hiprtcCreateProgram", rtc.hiprtcCreateProgram(source.encode(), f"{name}.hip".encode(), 0, [], [])
        )
        try:
            opts = [f"--offload-arch={arch}".encode(), *(o.encode() for o in options)]
            result = rtc.hiprtcCompileProgram(prog, len(opts), opts)
            error = result[0] if isinstance(result, tuple) else result
            if error_name(error) != "HIPRTC_SUCCESS":
                size = self._call("hiprtcGetProgramLogSize", rtc.hiprtcGetProgramLogSize(prog))
                log = bytearray(int(size))
                self._call("hiprtcGetProgramLog", rtc.hiprtcGetProgramLog(prog, log))
                unpack(f"hiprtcCompileProgram({name})", result, lambda _e: bytes(log).decode(errors="replace")[-4000:])
            size = self._call("hiprtcGetCodeSize", rtc.hiprtcGetCodeSize(prog))
            code = bytearray(int(size))
            self._call("hiprtcGetCode", rtc.hiprtcGetCode(prog, code))
            return bytes(code)
        finally:
            rtc.hiprtcDestroyProgram(prog)

    def module_load(self, image: bytes) -> object:
        """hipModuleLoadData."""
        return self._call("hipModuleLoadData", self.hip.hipModuleLoadData(image))

    def module_function(self, module: object, name: str) -> object:
        """hipModuleGetFunction."""
        return self._call(f"hipModuleGetFunction({name})", self.hip.hipModuleGetFunction(module, name.encode()))

    def set_max_dynamic_shared(self, function: object, nbytes: int) -> None:
        """hipFuncSetAttribute(hipFuncAttributeMaxDynamicSharedMemorySize) (untested: no AMD GPU was available)."""
        attribute = self.hip.hipFuncAttribute.hipFuncAttributeMaxDynamicSharedMemorySize
        self._call(
            f"hipFuncSetAttribute(MaxDynamicSharedMemorySize, {nbytes})",
            self.hip.hipFuncSetAttribute(function, attribute, int(nbytes)),
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
        """hipModuleLaunchKernel with a ``void*[]`` of argument addresses."""
        self._call(
            "hipModuleLaunchKernel",
            self.hip.hipModuleLaunchKernel(function, *grid, *block, shared_bytes, stream, params, None),
        )

    def programmatic_unavailable(self) -> str | None:
        """HIP has no programmatic dependent launch (:meth:`launch_programmatic` launches plainly)."""
        return "HIP has no programmatic dependent launch"

    def grouped_gemm_unavailable(self) -> str | None:
        """Why there is no device-sized grouped GEMM here: hipBLASLt's grouped GEMM is not bound."""
        return "hipBLASLt's grouped GEMM is not bound (the amd provider has no grouped GEMM)"

    # ------------------------------------------------------------------ collectives
    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        """RCCL through ctypes on librccl.so.1 (same C API as NCCL; untested: no AMD GPU was available)."""
        if not hasattr(self, "_rccl"):
            self._rccl = open_rccl()
        return self._rccl


@dataclass(frozen=True)
class _Graph:
    """A captured hipGraph_t and its instantiation."""

    graph: Any
    exec: Any
