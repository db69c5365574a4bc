"""The nvidia provider: HIP's NVIDIA platform through the CUDA Python bindings.

``cuda.bindings.runtime`` (memory, streams, events, device properties), ``cuda.bindings.driver``
(module loading and kernel launch), ``cuda.bindings.nvrtc`` (runtime compilation to a cubin for the
device's exact architecture). Every binding call returns ``(error, *values)``; :func:`_check` turns a
failure into the CANN code through :mod:`acl_rocm.errors`.
"""

from __future__ import annotations

import importlib
import threading
from importlib import metadata
from typing import Any, ClassVar

from acl_core.spec.runtime import CopyDirection
from acl_rocm.errors import error_name, is_success, vendor_error
from acl_rocm.providers.base import DeviceProperties, GemmCall, RuntimeProvider

_NOT_READY = frozenset({"cudaErrorNotReady", "CUDA_ERROR_NOT_READY"})


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
        """cudaSetDevice, which also makes the device's primary context current."""
        self._check(f"cudaSetDevice({index})", self.rt.cudaSetDevice(index))
        self._check("cudaFree(0)", self.rt.cudaFree(0))

    def get_device(self) -> int:
        """cudaGetDevice."""
        return int(self._check("cudaGetDevice", self.rt.cudaGetDevice()))

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
        """cudaMalloc."""
        return int(self._check(f"cudaMalloc({nbytes} bytes)", self.rt.cudaMalloc(nbytes)))

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
        self._check(
            "cuLaunchKernel",
            self.drv.cuLaunchKernel(function, *grid, *block, shared_bytes, stream, params, 0),
        )

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

    def gemm(self, call: GemmCall, workspace: int, workspace_size: int, stream: int) -> None:
        """cublasLtMatmul with the first heuristic algorithm (alignment and workspace declared)."""
        import numpy as np

        lt = self.lt
        handle = self._lt_handle()
        compute = _COMPUTE_32F_FAST_TF32 if call.fast_tf32 else _COMPUTE_32F
        created: list[tuple[Any, int]] = []

        def keep(destroy: Any, value: int) -> int:
            created.append((destroy, value))
            return value

        def attr(setter: Any, obj: int, key: Any, value: Any) -> None:
            buf = np.array([value], dtype=dtype_of(key))
            self._lt_call(setter.__name__, setter, obj, key, buf.ctypes.data, buf.nbytes)

        try:
            desc = keep(
                lt.matmul_desc_destroy,
                self._lt_call("cublasLtMatmulDescCreate", lt.matmul_desc_create, compute, _R_32F),
            )
            dtype_of = lt.get_matmul_desc_attribute_dtype
            attr(lt.matmul_desc_set_attribute, desc, lt.MatmulDescAttribute.TRANSA, 1 if call.a.transpose else 0)
            attr(lt.matmul_desc_set_attribute, desc, lt.MatmulDescAttribute.TRANSB, 1 if call.b.transpose else 0)
            layouts = []
            dtype_of = lt.get_matrix_layout_attribute_dtype
            for m in (call.a, call.b, call.d):
                layout = keep(
                    lt.matrix_layout_destroy,
                    self._lt_call(
                        "cublasLtMatrixLayoutCreate",
                        lt.matrix_layout_create,
                        _CUDA_TYPES[m.dtype],
                        m.rows,
                        m.cols,
                        m.ld,
                    ),
                )
                if call.batch > 1:
                    attr(lt.matrix_layout_set_attribute, layout, lt.MatrixLayoutAttribute.BATCH_COUNT, call.batch)
                    attr(
                        lt.matrix_layout_set_attribute,
                        layout,
                        lt.MatrixLayoutAttribute.STRIDED_BATCH_OFFSET,
                        m.batch_stride,
                    )
                layouts.append(layout)
            pref = keep(
                lt.matmul_preference_destroy,
                self._lt_call("cublasLtMatmulPreferenceCreate", lt.matmul_preference_create),
            )
            dtype_of = lt.get_matmul_preference_attribute_dtype
            attr(
                lt.matmul_preference_set_attribute,
                pref,
                lt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
                workspace_size,
            )
            for key, m in (("A", call.a), ("B", call.b), ("C", call.d), ("D", call.d)):
                attr(
                    lt.matmul_preference_set_attribute,
                    pref,
                    getattr(lt.MatmulPreferenceAttribute, f"MIN_ALIGNMENT_{key}_BYTES"),
                    m.alignment,
                )
            results = lt.MatmulHeuristicResult(1)
            found = np.zeros(1, dtype=np.int32)
            a_layout, b_layout, d_layout = layouts
            self._lt_call(
                "cublasLtMatmulAlgoGetHeuristic",
                lt.matmul_algo_get_heuristic,
                handle,
                desc,
                a_layout,
                b_layout,
                d_layout,
                d_layout,
                pref,
                1,
                results.ptr,
                found.ctypes.data,
            )
            if int(found[0]) == 0:
                raise vendor_error(
                    "cublasLtMatmulAlgoGetHeuristic", "CUBLAS_STATUS_NOT_SUPPORTED", "no algorithm for this problem"
                )
            alpha = np.ones(1, dtype=np.float32)
            beta = np.zeros(1, dtype=np.float32)
            self._lt_call(
                "cublasLtMatmul",
                lt.matmul,
                handle,
                desc,
                alpha.ctypes.data,
                call.a.address,
                a_layout,
                call.b.address,
                b_layout,
                beta.ctypes.data,
                call.d.address,
                d_layout,
                call.d.address,
                d_layout,
                results.ptr,
                workspace,
                workspace_size,
                stream,
            )
        finally:
            for destroy, value in reversed(created):
                try:
                    destroy(value)
                except Exception:
                    pass


_R_32F = 0
_COMPUTE_32F = 68
_COMPUTE_32F_FAST_TF32 = 77
_CUDA_TYPES = {0: 0, 1: 2, 27: 14, 11: 1}
"""aclDataType → cudaDataType (float32, float16, bf16, float64); cublasComputeType_t 32F / 32F_FAST_TF32."""
