"""A host-memory stand-in for a vendor runtime, so the code above the provider seam runs on a CPU.

Memory is real host memory (so copies and memsets are real), streams and events are counters, the
"compiler" returns the source text, and launches are recorded instead of executed.
"""

from __future__ import annotations

import ctypes
import math
import re
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from acl_core.dtypes import DataType
from acl_core.errors import AclError, RtErrorCode
from acl_core.spec.ops.matmul import round_to_hf32
from acl_core.spec.runtime import CopyDirection
from acl_rocm.providers.base import DeviceProperties, GemmCall, Matrix, RuntimeProvider


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

    def __post_init__(self) -> None:
        self._buffers: dict[int, ctypes.Array[ctypes.c_char]] = {}
        self._device = 0
        self._next_handle = 100

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
            index, "Fake GPU", self.arch, self.warp_size, 132, self.memory, False, 1024, 2**31 - 1, 49152, 1 << 25
        )

    def synchronize_device(self) -> None:
        pass

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
        ctypes.memmove(dst, src, nbytes)

    def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
        ctypes.memset(dst, value & 0xFF, nbytes)

    def mem_info(self) -> tuple[int, int]:
        return self.memory // 2, self.memory

    def stream_create(self) -> int:
        return self._handle()

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_synchronize(self, stream: int) -> None:
        pass

    def stream_query(self, stream: int) -> bool:
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        pass

    def event_create(self) -> int:
        return self._handle()

    def event_destroy(self, event: int) -> None:
        pass

    def event_record(self, event: int, stream: int) -> None:
        pass

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
        assert isinstance(module, str) and re.search(rf"void __launch_bounds__\(\d+\) {name}\(", module)
        return (name, module)

    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        name, source = function  # type: ignore[misc]
        sizes = _parameter_sizes(source, name)
        table = (ctypes.c_void_p * len(sizes)).from_address(params)
        args = [ctypes.string_at(table[i], size) for i, size in enumerate(sizes)]  # copied, as a real launch does
        self.launches.append(Launched(name, source, grid, block, stream, args))

    def gemm_unavailable(self) -> str | None:
        return None if self.blas else "the fake provider was made without BLAS"

    def gemm(self, call: GemmCall, workspace: int, workspace_size: int, stream: int) -> None:
        """Compute the column-major BLAS problem on the host in float64 (to check how op code maps views)."""
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


def _matrix(m: Matrix, index: int) -> np.ndarray:
    """A writable NumPy view of a stored column-major matrix (batch ``index``)."""
    dtype = DataType(m.dtype).numpy
    assert dtype is not None
    item = dtype.itemsize
    count = (m.cols - 1) * m.ld + m.rows
    base = m.address + index * m.batch_stride * item
    flat = np.frombuffer((ctypes.c_char * (count * item)).from_address(base), dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, (m.rows, m.cols), (item, m.ld * item), writeable=True)


_SIZES = {"float": 4, "double": 8, "long long": 8, "unsigned long long": 8, "bool": 1, "int": 4}


def _parameter_sizes(source: str, name: str) -> list[int]:
    """Byte size of each parameter of kernel ``name``, read from its generated declaration."""
    meta = re.search(r"struct Meta \{ (int|long long) n; \1 shape\[(\d+)\]; \1 stride\[(\d+)\]\[(\d+)\]; \};", source)
    assert meta, "no Meta struct"
    item = _SIZES[meta.group(1)]
    meta_size = item * (1 + int(meta.group(2)) + math.prod(int(g) for g in meta.group(3, 4)))
    declaration = source.split(f"{name}(", 1)[1].split(") {", 1)[0]
    sizes = []
    for param in (p.strip() for p in declaration.split(",")):
        if param.startswith("const Meta"):
            sizes.append(meta_size)
        elif "*" in param:
            sizes.append(8)
        else:
            sizes.append(_SIZES[param.removeprefix("const ").rsplit(" ", 1)[0]])
    return sizes
