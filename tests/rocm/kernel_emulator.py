"""Run generated HIP/CUDA-common kernels on the CPU: g++ with a small shim, one fiber per GPU thread.

The shim maps ``__global__``/``__device__`` away, ``__shared__`` to ``static`` (the blocks of a grid of
up to three dimensions run one after another, so a static is exactly one block's shared memory),
``extern __shared__ T name[]`` to a static array of 256 KiB, ``__syncthreads`` to a block barrier,
``ACL_SHFL_DOWN`` / ``ACL_SHFL_XOR`` / ``ACL_SHFL_IDX`` to an exchange through per-warp slots between two
warp barriers, ``ACL_WARP_SYNC`` to a warp barrier and
``ACL_WARP_ALLGATHER`` (the software matrix path of ``kernels/mma.py``: every lane's fragment words to
every lane) to one exchange between two warp barriers (``-DACL_EMU_PLAIN_SHUFFLES`` leaves it to
mma.py's indexed shuffles); the prelude then takes its portable (software fp16/bf16) path. ``ACL_EMULATOR`` is
defined and the dynamic shared array's address kept in ``emu_shared_base``: ``kernels/wgmma.py``'s software SS and RS
steps read their shared operands there (RS gathers a warp's A fragments by ``ACL_WARP_ALLGATHER``; the stock
provider still refuses sm_90a kernels; a test's subclass may claim the target).
A block's threads are fibers (``ucontext``) on one OS thread that switch only at barriers, in thread order: no
kernel code runs concurrently, so a race that needs true concurrency goes unseen, but a run is deterministic and
cheap. A barrier that some threads never reach fails the launch (on a GPU it hangs or misbehaves), and a shuffle
reads exactly the lane a GPU would. It checks what the kernels compute, not how the vendor compilers treat them (nvcc
checks those where it is installed).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from tests.rocm.fake_provider import FakeProvider

SHIM = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
static dim3 threadIdx, blockIdx, blockDim, gridDim;  // threadIdx: the scheduler sets it before it resumes a thread
// Each GPU thread of a block is a fiber on one OS thread; a barrier is where a fiber hands over. Fibers switch only at
// barriers, so no kernel code runs concurrently: atomics are plain, and a barrier some thread never reaches is found.
struct EmuBarrier { unsigned expected, arrived; unsigned long long generation; };
struct EmuFiber { ucontext_t context; unsigned barrier; unsigned long long generation; bool waiting, done; };
struct EmuBlock {
  EmuBarrier* barriers;  // [0]: the block; [1 + w]: warp w
  unsigned long long slots[1024];
  unsigned* words;  // ACL_WARP_ALLGATHER: EMU_GATHER_WORDS per thread
};
#define EMU_GATHER_WORDS 32
#define EMU_DYNAMIC_SHARED (256 * 1024)  // extern __shared__ arrays: a static of the largest size a GPU offers
#define ACL_EMULATOR 1  // kernels/wgmma.py's software SS step: shared addresses are offsets from emu_shared_base
static unsigned char* emu_shared_base;  // the dynamic shared array of the running kernel (1024-byte aligned)
static EmuBlock* emu_block;
static EmuFiber* emu_fibers;
static unsigned emu_current;
static ucontext_t emu_scheduler;
static void emu_arrive(unsigned which) {
  EmuBarrier& b = emu_block->barriers[which];
  if (++b.arrived == b.expected) {  // the last to arrive releases the others and goes on
    b.arrived = 0;
    ++b.generation;
    return;
  }
  EmuFiber& self = emu_fibers[emu_current];
  self.waiting = true;
  self.barrier = which;
  self.generation = b.generation;
  swapcontext(&self.context, &emu_scheduler);
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__
inline void __syncthreads() { emu_arrive(0); }
static void emu_warp_barrier() { emu_arrive(1 + threadIdx.x / ACL_WARP_SIZE); }
template <class T> T emu_shfl_down(T v, int offset) {
  const unsigned t = threadIdx.x, warp = t / ACL_WARP_SIZE, lane = t % ACL_WARP_SIZE;
  memcpy(&emu_block->slots[t], &v, sizeof(T));
  emu_warp_barrier();
  T r = v;
  if (lane + (unsigned)offset < ACL_WARP_SIZE) memcpy(&r, &emu_block->slots[t + offset], sizeof(T));
  emu_warp_barrier();
  return r;
}
#define ACL_SHFL_DOWN(v, o) emu_shfl_down((v), (o))
template <class T> T emu_shfl_xor(T v, int mask) {
  const unsigned t = threadIdx.x, warp = t / ACL_WARP_SIZE, lane = t % ACL_WARP_SIZE;
  memcpy(&emu_block->slots[t], &v, sizeof(T));
  emu_warp_barrier();
  T r = v;
  const unsigned other = lane ^ (unsigned)mask;
  if (other < ACL_WARP_SIZE) memcpy(&r, &emu_block->slots[t - lane + other], sizeof(T));
  emu_warp_barrier();
  return r;
}
#define ACL_SHFL_XOR(v, o) emu_shfl_xor((v), (o))
template <class T> T emu_shfl_idx(T v, int src) {
  const unsigned t = threadIdx.x, warp = t / ACL_WARP_SIZE, lane = t % ACL_WARP_SIZE;
  memcpy(&emu_block->slots[t], &v, sizeof(T));
  emu_warp_barrier();
  T r;
  memcpy(&r, &emu_block->slots[t - lane + ((unsigned)src % ACL_WARP_SIZE)], sizeof(T));
  emu_warp_barrier();
  return r;
}
#define ACL_SHFL_IDX(v, l) emu_shfl_idx((v), (l))
inline void emu_warp_sync() { emu_warp_barrier(); }
#define ACL_WARP_SYNC() emu_warp_sync()
#ifndef ACL_EMU_PLAIN_SHUFFLES
template <int N> void emu_warp_allgather(const unsigned* in, unsigned* out) {
  static_assert(N <= EMU_GATHER_WORDS, "too many words per lane");
  const unsigned t = threadIdx.x, warp = t / ACL_WARP_SIZE, lane = t % ACL_WARP_SIZE;
  memcpy(&emu_block->words[(size_t)t * EMU_GATHER_WORDS], in, N * sizeof(unsigned));
  emu_warp_barrier();
  for (unsigned l = 0; l < ACL_WARP_SIZE; ++l)
    memcpy(out + l * N, &emu_block->words[(size_t)(t - lane + l) * EMU_GATHER_WORDS], N * sizeof(unsigned));
  emu_warp_barrier();
}
#define ACL_WARP_ALLGATHER(in, out, n) emu_warp_allgather<n>((in), (out))
#endif
inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; memcpy(&v, &d, 8); return v; }
// round-to-nearest double arithmetic without contraction (-O0 never fuses a multiply into an add)
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fmul_rn(float a, float b) { return a * b; }
// sin(πx) and cos(πx) in float (the device's within 1 ulp): evaluated in double, rounded once
inline void sincospif(float x, float* s, float* c) {
  const double t = (double)x * 3.14159265358979323846;
  *s = (float)sin(t);
  *c = (float)cos(t);
}
// NVRTC compiles without the C library's headers: a kernel naming one of their macros fails there, so here too
#undef HUGE_VAL
#undef HUGE_VALF
#undef HUGE_VALL
#undef INFINITY
#undef NAN
#undef M_PI
#undef M_E
#undef M_LN2
#undef M_SQRT2
"""

LAUNCHER = r"""
static void** emu_args;
static void emu_thread() { KERNEL_CALL; emu_fibers[emu_current].done = true; }  // returns to uc_link: the scheduler
#define EMU_STACK (4u << 20)  // reserved, not committed: a thread touches only what its frames use
// 0, or 1 + the block whose threads wait at barriers that the rest never reach (a deadlock or worse on a GPU)
extern "C" unsigned emu_launch(unsigned gx, unsigned gy, unsigned gz, unsigned block, void** args) {
  gridDim.x = gx;
  gridDim.y = gy;
  gridDim.z = gz;
  blockDim.x = block;
  emu_args = args;
  const unsigned warps = (block + ACL_WARP_SIZE - 1) / ACL_WARP_SIZE;
  const size_t page = 4096;
  char* stacks = (char*)mmap(nullptr, (size_t)block * EMU_STACK, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) { perror("emu_launch: mmap"); return 1; }
  for (unsigned t = 0; t < block; ++t) mprotect(stacks + (size_t)t * EMU_STACK, page, PROT_NONE);  // overflow faults
  EmuFiber* fibers = new EmuFiber[block];
  EmuBarrier* barriers = new EmuBarrier[1 + warps];
  unsigned* words = new unsigned[(size_t)block * EMU_GATHER_WORDS]();
  EmuBlock state;
  state.barriers = barriers;
  state.words = words;
  emu_block = &state;
  emu_fibers = fibers;
  unsigned stuck = 0;
  for (unsigned b = 0; b < gx * gy * gz && !stuck; ++b) {
    blockIdx.x = b % gx;
    blockIdx.y = (b / gx) % gy;
    blockIdx.z = b / (gx * gy);
    barriers[0] = {block, 0, 0};
    for (unsigned w = 0; w < warps; ++w)
      barriers[1 + w] = {block - w * ACL_WARP_SIZE < ACL_WARP_SIZE ? block - w * ACL_WARP_SIZE : ACL_WARP_SIZE, 0, 0};
    for (unsigned t = 0; t < block; ++t) {
      EmuFiber& f = fibers[t];
      f.waiting = f.done = false;
      getcontext(&f.context);
      f.context.uc_stack.ss_sp = stacks + (size_t)t * EMU_STACK + page;
      f.context.uc_stack.ss_size = EMU_STACK - page;
      f.context.uc_link = &emu_scheduler;
      makecontext(&f.context, emu_thread, 0);
    }
    for (unsigned live = block; live && !stuck;) {
      bool ran = false;
      for (unsigned t = 0; t < block; ++t) {  // in thread order, each runnable thread up to its next barrier
        EmuFiber& f = fibers[t];
        if (f.done || (f.waiting && barriers[f.barrier].generation == f.generation)) continue;
        f.waiting = false;
        emu_current = t;
        threadIdx.x = t;
        swapcontext(&emu_scheduler, &f.context);
        ran = true;
        live -= f.done;
      }
      if (!ran) stuck = 1 + b;
    }
  }
  delete[] words;
  delete[] barriers;
  delete[] fibers;
  munmap(stacks, (size_t)block * EMU_STACK);
  return stuck;
}
"""


def available() -> str | None:
    """None when g++ is here to build emulated kernels, else why not."""
    if shutil.which("g++") is None:
        return "no g++ to build emulated kernels"
    return None


def _call(source: str, name: str) -> str:
    declaration = source.split(f"{name}(", 1)[1].split(") {", 1)[0]
    params = [p.strip() for p in declaration.split(",")]
    args = []
    for i, param in enumerate(params):
        ctype = param.rsplit(" ", 1)[0]
        args.append(f"*({ctype}*)emu_args[{i}]")
    return f"{name}({', '.join(args)})"


class EmulatedProvider(FakeProvider):
    """The fake provider whose launches run: each kernel built with g++ against the shim and executed."""

    compiler_name: ClassVar[str] = "g++-emulation"
    runs_kernels: ClassVar[bool] = True
    build_dir: ClassVar[Path | None] = None

    def module_function(self, module: object, name: str) -> object:
        assert isinstance(module, str)
        return (name, module, _library(module, name, self.options_for(module)))

    def arch_specific(self, arch: str) -> str | None:
        """None: the emulator runs no arch-specific instructions (no wgmma), so kernels needing them are refused."""
        return None

    def options_for(self, source: str) -> list[str]:
        """The prelude's defines (as the backend passes them)."""
        return [f"-DACL_WARP_SIZE={self.warp_size}", f"-DACL_LANE_MASK_BITS={self.warp_size}"]

    def _run(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        name, source, library = function  # type: ignore[misc]
        assert block[1:] == (1, 1)
        super()._run((name, source), grid, block, shared_bytes, stream, params)
        gx, gy, gz = (ctypes.c_uint(n) for n in grid)
        stuck = library.emu_launch(gx, gy, gz, ctypes.c_uint(block[0]), ctypes.c_void_p(params))
        if stuck:
            raise AssertionError(
                f"{name}: in block {stuck - 1} some threads wait at a barrier that the others never reach"
                " (on a GPU a hang or undefined behaviour)"
            )


def emulated_backend(kernel_cache: Path, provider: EmulatedProvider | None = None) -> Any:
    """A RocmBackend whose kernels run here (pytest-skipped without g++); g++ builds persist in the temp dir."""
    import tempfile

    import pytest

    from acl_rocm.backend import RocmBackend

    reason = available()
    if reason:
        pytest.skip(f"the kernel emulator is unavailable: {reason}")
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    EmulatedProvider.build_dir = build
    choices = ("ACL_DECODE_CONFIG", "ACL_PDL", "ACL_CMO_CONFIG")  # the choices a run compares
    passed = {k: os.environ[k] for k in choices if k in os.environ}
    backend = RocmBackend(provider or EmulatedProvider(), {"ACL_KERNEL_CACHE": str(kernel_cache), **passed})
    backend.runtime.ensure_device(0)
    return backend


_LIBRARIES: dict[str, Any] = {}
DYNAMIC_SHARED = re.compile(r"extern __shared__ ([^;\[]+?) (\w+)\[\];")
"""``extern __shared__ T name[];`` (dynamic shared memory), which the shim declares as a static array."""


def _library(source: str, name: str, options: list[str]) -> Any:
    source = DYNAMIC_SHARED.sub(
        r"alignas(1024) static \1 \2[EMU_DYNAMIC_SHARED / sizeof(\1)]; emu_shared_base = (unsigned char*)\2;", source
    )
    text = SHIM + source + LAUNCHER.replace("KERNEL_CALL", _call(source, name))
    key = hashlib.sha1((text + " ".join(options)).encode()).hexdigest()[:16]
    if key in _LIBRARIES:
        return _LIBRARIES[key]
    directory = EmulatedProvider.build_dir
    assert directory is not None, "set EmulatedProvider.build_dir"
    so = directory / f"{key}.so"
    if not so.exists():
        src = directory / f"{key}.{os.getpid()}.cpp"
        src.write_text(text)
        tmp = directory / f"{key}.{os.getpid()}.so"
        cmd = ["g++", "-std=c++20", "-O0", "-shared", "-fPIC", "-w", *options, str(src), "-o", str(tmp)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode:
            raise AssertionError(f"g++ failed on {name}:\n" + _excerpt(result.stderr))
        tmp.rename(so)  # atomic: a parallel worker never loads a half-written library
        src.unlink()
    lib = ctypes.CDLL(str(so))
    lib.emu_launch.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
    lib.emu_launch.restype = ctypes.c_uint
    _LIBRARIES[key] = lib
    return lib


def _excerpt(log: str) -> str:
    lines = [line for line in log.splitlines() if re.search(r"error", line)]
    return "\n".join(lines[:20]) or log[-3000:]
