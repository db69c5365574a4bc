"""A host-memory stand-in for a vendor runtime, so the code above the provider seam runs on a CPU.

Memory is real host memory (so copies and memsets are real), streams and events are counters, the
"compiler" returns the source text, and launches are recorded instead of executed.

Stream capture behaves as CUDA's relaxed mode does: work enqueued on a capturing stream (or a stream
that joined it by waiting on one of its events) is kept, not run, with kernel arguments copied at
enqueue time; ``graph_launch`` runs it. What breaks a real capture raises here too: synchronising or
querying a capturing stream, or the device (107027, as cudaErrorStreamCaptureUnsupported maps), and a synchronous
copy or memset on the legacy stream while a capture runs (107031, cudaErrorStreamCaptureImplicit).
Memory freed stream-ordered inside a capture is the graph's, released when the graph is destroyed.
"""

from __future__ import annotations

import ctypes
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import AclError, RtErrorCode
from acl_core.spec.ops.matmul import round_to_hf32
from acl_core.spec.runtime import CopyDirection
from acl_rocm.providers.base import DeviceProperties, GemmCall, GroupedGemmCall, Matrix, RuntimeProvider


@dataclass
class Launched:
    """One recorded kernel launch."""

    name: str
    source: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    stream: int
    args: list[bytes]


@dataclass
class FakeCapture:
    """Work recorded by one capture, to be run by each replay on the replay stream."""

    origin: int
    work: list[Callable[[int], object]] = field(default_factory=list)
    owned: list[int] = field(default_factory=list)


@dataclass
class FakeProvider(RuntimeProvider):
    """Host memory and recorded launches behind the provider interface (device: an 'sm_90' with 132 units)."""

    platform: ClassVar[str] = "nvidia"
    compiler_name: ClassVar[str] = "fake-rtc"
    arch: str = "sm_90"
    warp_size: int = 32
    memory: int = 1 << 30
    devices: int = 1
    blas: bool = False
    launches: list[Launched] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)
    gemms: list[GemmCall] = field(default_factory=list)
    capture: bool = True
    graph_launches: int = 0
    shared_opt_in: int = 232448
    """The opt-in shared memory maximum a block has (an H100's 227 KiB)."""
    dynamic_shared: dict[str, int] = field(default_factory=dict)
    """Kernel name -> the dynamic shared memory limit ``set_max_dynamic_shared`` gave it."""
    programmatic: bool = True
    """Whether the device offers programmatic dependent launch (an sm_90 does; False: as the amd provider)."""
    programmatic_launches: list[str] = field(default_factory=list)
    """Names of the kernels launched (or captured) with the programmatic attribute, in order."""
    grouped_blas: bool = False
    """Whether the provider offers the device-sized grouped GEMM (:meth:`grouped_gemm`, in NumPy)."""
    grouped_refusal: str | None = None
    """A refusal :meth:`grouped_gemm` answers instead of computing (as a library heuristic finding no algorithm)."""
    grouped_gemms: list[GroupedGemmCall] = field(default_factory=list)
    grouped_rows: list[list[int]] = field(default_factory=list)
    """Each computed grouped GEMM's rows per group, as its size array held them."""
    runs_kernels: ClassVar[bool] = False
    """Whether launches execute (the kernel emulator's subclass): the grouped GEMM then computes from its arrays."""

    def __post_init__(self) -> None:
        self._buffers: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._device = 0
        self._next_handle = 100
        self._capture_of: dict[int, FakeCapture] = {}
        self._event_capture: dict[int, FakeCapture] = {}
        self._nonblocking: set[int] = set()
        self.graphs: dict[int, FakeCapture] = {}

    def _handle(self) -> int:
        self._next_handle += 1
        return self._next_handle

    def device_count(self) -> int:
        return self.devices

    def set_device(self, index: int) -> None:
        if not 0 <= index < self.devices:
            raise AclError(RtErrorCode.ACL_ERROR_RT_INVALID_DEVICEID, f"fakeSetDevice({index}) failed")
        self._device = index

    def get_device(self) -> int:
        return self._device

    def device_properties(self, index: int) -> DeviceProperties:
        return DeviceProperties(
            index, "Fake GPU", self.arch, self.warp_size, 132, self.memory, False, 1024, 2**31 - 1, 49152, 1 << 25,
            shared_memory_opt_in=self.shared_opt_in,
        )  # fmt: skip

    def set_max_dynamic_shared(self, function: object, nbytes: int) -> None:
        name = function[0]  # type: ignore[index]
        if nbytes > self.shared_opt_in:
            raise AclError(RtErrorCode.ACL_ERROR_RT_PARAM_INVALID, f"fakeFuncSetAttribute({name}, {nbytes}) failed")
        self.dynamic_shared[name] = nbytes

    def synchronize_device(self) -> None:
        if self._capture_of:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, "fakeDeviceSynchronize during a capture")

    def versions(self) -> dict[str, str]:
        return {"fake_runtime": "1.0"}

    def malloc(self, nbytes: int) -> int:
        if nbytes > self.memory:
            raise AclError(RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION, f"fakeMalloc({nbytes} bytes) failed")
        buf = ctypes.create_string_buffer(nbytes + 256)
        address = (ctypes.addressof(buf) + 255) // 256 * 256
        self._buffers[address] = buf
        return address

    def free(self, address: int) -> None:
        del self._buffers[address]

    malloc_host = malloc
    free_host = free

    def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
        if not self._recorded(stream, lambda _s: ctypes.memmove(dst, src, nbytes), "fakeMemcpy"):
            ctypes.memmove(dst, src, nbytes)

    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        if not self._recorded(stream, lambda _s: ctypes.memset(dst, value & 0xFF, nbytes), "fakeMemset"):
            ctypes.memset(dst, value & 0xFF, nbytes)

    def malloc_async(self, nbytes: int, stream: int) -> int:
        return self.malloc(nbytes)

    def free_async(self, address: int, stream: int) -> None:
        capture = self._capture_of.get(stream)
        if capture is not None:  # graph memory: its nodes still use it at every replay
            capture.owned.append(address)
        else:
            self.free(address)

    def _recorded(self, stream: int | None, work: Callable[[int], object], call: str) -> bool:
        """Keep ``work`` when ``stream`` captures (True); refuse a legacy-stream call during a capture."""
        if stream is None or stream == 0:
            if self._capture_of:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, f"{call} on the legacy stream during a capture"
                )
            return False
        capture = self._capture_of.get(stream)
        if capture is None:
            return False
        capture.work.append(work)
        return True

    def mem_info(self) -> tuple[int, int]:
        return self.memory // 2, self.memory

    def stream_create(self) -> int:
        return self._handle()

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_create_nonblocking(self) -> int:
        stream = self._handle()
        self._nonblocking.add(stream)
        return stream

    def stream_synchronize(self, stream: int) -> None:
        if stream in self._capture_of or (stream == 0 and self._capture_of):
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"fakeStreamSynchronize({stream}) while capturing")

    def stream_query(self, stream: int) -> bool:
        if stream in self._capture_of:  # cudaStreamQuery on a capturing stream: cudaErrorStreamCaptureUnsupported
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"fakeStreamQuery({stream}) while capturing")
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        capture = self._event_capture.get(event)
        if capture is not None:
            self._capture_of[stream] = capture

    def event_create(self) -> int:
        return self._handle()

    def event_destroy(self, event: int) -> None:
        pass

    def event_record(self, event: int, stream: int) -> None:
        capture = self._capture_of.get(stream)
        if capture is not None:
            self._event_capture[event] = capture
        else:
            self._event_capture.pop(event, None)

    # ------------------------------------------------------------------ capture
    def capture_unavailable(self) -> str | None:
        return None if self.capture else "the fake provider was made without capture"

    def capture_begin(self, stream: int) -> None:
        if not self.capture:
            raise AclError(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT, "no capture")
        if stream == 0:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_IMPLICIT, "fakeStreamBeginCapture(legacy stream)")
        if stream in self._capture_of:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURED, f"stream {stream} already captures")
        self._capture_of[stream] = FakeCapture(stream)

    def capture_end(self, stream: int) -> object:
        capture = self._capture_of.get(stream)
        if capture is None or capture.origin != stream:
            raise AclError(RtErrorCode.ACL_ERROR_RT_STREAM_CAPTURE_UNMATCHED, f"stream {stream} began no capture")
        for s in [s for s, c in self._capture_of.items() if c is capture]:
            del self._capture_of[s]
        for e in [e for e, c in self._event_capture.items() if c is capture]:
            del self._event_capture[e]
        graph = self._handle()
        self.graphs[graph] = capture
        return graph

    def graph_launch(self, graph: object, stream: int) -> None:
        capture = self.graphs[graph]  # type: ignore[index]
        if self._recorded(stream, lambda s: self._replay(capture, s), "fakeGraphLaunch"):
            return
        self._replay(capture, stream)

    def _replay(self, capture: FakeCapture, stream: int) -> None:
        self.graph_launches += 1
        for work in capture.work:
            work(stream)

    def graph_destroy(self, graph: object) -> None:
        capture = self.graphs.pop(graph)  # type: ignore[call-overload]
        for address in capture.owned:
            self.free(address)

    def event_synchronize(self, event: int) -> None:
        pass

    def event_query(self, event: int) -> bool:
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return 0.5

    def compiler_version(self) -> str:
        return "fake-rtc 1.0"

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        self.compiled.append(name)
        return source.encode()

    def module_load(self, image: bytes) -> object:
        return image.decode()

    def module_function(self, module: object, name: str) -> object:
        assert isinstance(module, str) and re.search(rf"void __launch_bounds__\([^)]+\) {name}\(", module)
        return (name, module)

    def programmatic_unavailable(self) -> str | None:
        return None if self.programmatic else "the fake provider was made without programmatic dependent launch"

    def launch_programmatic(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """Record the attribute (a kernel without ACL_PDL_WAIT() must never get it), then launch plainly."""
        name, source = function[0], function[1]  # type: ignore[index]
        assert "ACL_PDL_WAIT();" in source.split(f" {name}(", 1)[1], f"{name} has no ACL_PDL_WAIT() in its body"
        self.programmatic_launches.append(name)
        self.launch(function, grid, block, shared_bytes, stream, params)

    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        if stream in self._capture_of:
            name, source = function[0], function[1]  # type: ignore[index]
            sizes = _parameter_sizes(source, name)
            table = (ctypes.c_void_p * len(sizes)).from_address(params)
            # a kernel node keeps a copy of its arguments, as cudaStreamBeginCapture's graph does
            kept = [ctypes.create_string_buffer(ctypes.string_at(table[i], n), n) for i, n in enumerate(sizes)]
            copy = (ctypes.c_void_p * max(len(kept), 1))(*[ctypes.addressof(b) for b in kept])

            def node(s: int, _keep: object = kept) -> None:
                self._run(function, grid, block, shared_bytes, s, ctypes.addressof(copy))

            self._capture_of[stream].work.append(node)
            return
        self._run(function, grid, block, shared_bytes, stream, params)

    def _run(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        """Execute (here: record) one launch."""
        name, source = function  # type: ignore[misc]
        if shared_bytes > max(49152, self.dynamic_shared.get(name, 0)):  # as cuLaunchKernel refuses it
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_PARAM_INVALID,
                f"fakeLaunchKernel({name}): {shared_bytes} bytes of shared memory",
            )
        sizes = _parameter_sizes(source, name)
        table = (ctypes.c_void_p * len(sizes)).from_address(params)
        args = [ctypes.string_at(table[i], size) for i, size in enumerate(sizes)]  # copied, as a real launch does
        self.launches.append(Launched(name, source, grid, block, stream, args))

    def gemm_unavailable(self) -> str | None:
        return None if self.blas else "the fake provider was made without BLAS"

    def gemm(self, call: GemmCall, workspace: int, workspace_size: int, stream: int) -> None:
        """Compute the column-major BLAS problem on the host in float64 (to check how op code maps views)."""
        if stream in self._capture_of:
            self._capture_of[stream].work.append(lambda s: self._gemm_now(call))
            return
        self._gemm_now(call)

    def _gemm_now(self, call: GemmCall) -> None:
        narrow = (int(DataType.ACL_FLOAT16), int(DataType.ACL_BF16))
        if call.a.dtype == call.b.dtype == int(DataType.ACL_FLOAT) and call.d.dtype in narrow:
            # as cuBLASLt answers on the GPU (the H100 run of 2026-12-06 found op code asking for it)
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR,
                "cublasLtMatmulAlgoGetHeuristic failed: fp32 x fp32 -> 16-bit output is not supported",
            )
        self.gemms.append(call)
        for i in range(call.batch):
            a, b = _matrix(call.a, i), _matrix(call.b, i)
            a = a.T if call.a.transpose else a
            b = b.T if call.b.transpose else b
            if call.fast_tf32:  # TF32 keeps 10 explicit mantissa bits, as HF32 does
                a, b = round_to_hf32(a), round_to_hf32(b)
            d = _matrix(call.d, i)
            scale = 1.0
            for address in (call.a_scale, call.b_scale):  # per-tensor fp8 scales: one float32 each
                if address:
                    scale *= float(np.frombuffer((ctypes.c_char * 4).from_address(address), dtype=np.float32)[0])
            d[...] = (scale * (a.astype(np.float64) @ b.astype(np.float64))).astype(d.dtype)

    def grouped_gemm_unavailable(self) -> str | None:
        return None if self.grouped_blas else "the fake provider was made without a grouped GEMM"

    def grouped_gemm(self, call: GroupedGemmCall, workspace: int, workspace_size: int, stream: int) -> str | None:
        """The library's grouped GEMM in float64 on the host, reading its arrays back when it runs (a replay reads
        them then); rounds once to D's dtype."""
        assert self.grouped_blas and workspace and workspace_size
        if self.grouped_refusal is not None:
            return self.grouped_refusal
        if stream in self._capture_of:
            self._capture_of[stream].work.append(lambda s: self._grouped_now(call))
        else:
            self._grouped_now(call)
        return None

    def _grouped_now(self, call: GroupedGemmCall) -> None:
        self.grouped_gemms.append(call)
        if not self.runs_kernels:  # the arrays kernel only ran where launches execute (the kernel emulator)
            return
        g = call.groups
        pointers = np.frombuffer((ctypes.c_char * (24 * g)).from_address(call.pointers), dtype=np.int64)
        sizes = np.frombuffer((ctypes.c_char * (24 * g)).from_address(call.sizes), dtype=np.int32).reshape(6, g)
        scalars = np.frombuffer((ctypes.c_char * 8).from_address(call.scalars), dtype=np.float32)
        assert scalars.tolist() == [1.0, 0.0], scalars
        self.grouped_rows.append(sizes[0].tolist())
        for i in range(g):
            rows, n, k, lda, ldb, ldd = (int(v) for v in sizes[:, i])
            a_at, b_at, d_at = (int(pointers[j * g + i]) for j in range(3))
            assert (n, k) == (call.n, call.k)
            assert all(v % 16 == 0 for v in (a_at, b_at, d_at, 2 * lda, 2 * ldb, 2 * ldd)), "off the 16-byte grid"
            if rows == 0:
                continue
            a = _matrix(Matrix(a_at, call.dtype, *((k, n) if call.transpose_a else (n, k)), lda), 0)
            a = a.T if call.transpose_a else a
            b = _matrix(Matrix(b_at, call.dtype, k, rows, ldb), 0)
            d = _matrix(Matrix(d_at, call.out_dtype, n, rows, ldd), 0)
            d[...] = (a.astype(np.float64) @ b.astype(np.float64)).astype(d.dtype)


def _matrix(m: Matrix, index: int) -> np.ndarray:
    """A writable NumPy view of a stored column-major matrix (batch ``index``)."""
    dtype = DataType(m.dtype).numpy
    assert dtype is not None
    item = dtype.itemsize
    count = (m.cols - 1) * m.ld + m.rows
    base = m.address + index * m.batch_stride * item
    raw = np.dtype(f"u{item}")  # as_strided rebuilds the dtype from its typestr, which ml_dtypes' E5M2 lacks
    flat = np.frombuffer((ctypes.c_char * (count * item)).from_address(base), dtype=raw)
    return np.lib.stride_tricks.as_strided(flat, (m.rows, m.cols), (item, m.ld * item), writeable=True).view(dtype)


_SIZES = {"float": 4, "double": 8, "long long": 8, "unsigned long long": 8, "bool": 1, "int": 4, "unsigned int": 4}


def _struct_size(source: str, kind: str) -> int:
    """Bytes of a by-value struct parameter whose members are scalars or arrays of one int type each."""
    found = re.search(rf"struct {re.escape(kind)} \{{ (.*?) \}};", source)
    assert found, f"no struct {kind}"
    total = 0
    for member in found.group(1).split(";"):
        member = member.strip()
        if not member:
            continue
        ctype, rest = member.rsplit(" ", 1)
        count = math.prod(int(n) for n in re.findall(r"\[(\d+)\]", rest))
        total += _SIZES[ctype] * count
    return total


def _parameter_sizes(source: str, name: str) -> list[int]:
    """Byte size of each parameter of kernel ``name``, read from its generated declaration."""
    meta = re.search(r"struct Meta \{ (int|long long) n; \1 shape\[(\d+)\]; \1 stride\[(\d+)\]\[(\d+)\]; \};", source)
    meta_size = 0  # kernels without a Meta struct (GEMV) take plain pointers and scalars
    if meta:
        item = _SIZES[meta.group(1)]
        meta_size = item * (1 + int(meta.group(2)) + math.prod(int(g) for g in meta.group(3, 4)))
    declaration = source.split(f"{name}(", 1)[1].split(") {", 1)[0]
    sizes = []
    for param in (p.strip() for p in declaration.split(",")):
        kind = param.removeprefix("const ").rsplit(" ", 1)[0]
        if param.startswith("const Meta"):
            assert meta, "no Meta struct"
            sizes.append(meta_size)
        elif "*" not in param and kind not in _SIZES:
            sizes.append(_struct_size(source, kind))
        elif "*" in param:
            sizes.append(8)
        else:
            sizes.append(_SIZES[param.removeprefix("const ").rsplit(" ", 1)[0]])
    return sizes
