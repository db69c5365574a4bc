"""Small-M GEMM (GEMV) kernels: ``out[m, n] = sum_k a[m, k] * w(k, n)`` for M ≤ 16 fp16 / bf16 rows.

Decode's products have one to sixteen activation rows against a large weight; the weight is read once
for all M rows, and the kernel runs at the speed of reading it. Two weight layouts:

* ``nk`` — the weight stored as ``[N, K]`` with K contiguous (a Linear layer's weight used
  transposed): a warp owns ``tile`` consecutive outputs n; ``ksplit`` warps of a block share the tile,
  warp p taking K's ``vec``-element (16-byte) chunks p, p + ksplit, ... of each lane's stride. Each
  lane issues its ``unroll`` × ``tile`` weight loads of a pass before it uses the first (the loads a
  small weight needs to be in flight at once to cover HBM latency), keeps ``M × tile`` fp32 partial
  sums, and the warp sums them by a butterfly that halves each lane's values per step (about
  ``M × tile`` shuffles per lane instead of ``M × tile × log2(warp)``). The K parts' sums meet in
  shared memory in a fixed order; one thread stores each output. ``block`` threads per block;
  ``loads="stream"`` reads the weight through CUDA's non-coherent path without L1 allocation (it is read
  once); a ``persist`` kernel may run on fewer blocks than tile groups, each block taking groups
  ``blockIdx.x``, ``+ gridDim.x``, ... (the accumulation order does not depend on the grid).
* ``kn`` — the weight stored as ``[K, N]`` with N contiguous: a block owns ``groups`` column groups of
  ``vec`` columns; a warp's lanes read ``groups`` groups (one 32-byte sector or more) of each of
  ``warp / groups`` rows, the block's 256 threads thus splitting K ``256 / groups`` ways, each issuing
  ``unroll`` rows of loads per pass before use. The splits' sums meet by the same butterfly within a
  warp, then in shared memory in warp order.

Accumulation is fp32, rounded once to the output's dtype (fp16, bf16 or fp32). Strides of the
activation and of the output are arguments (rows may be padded); a 1-D grid of 1-D blocks.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import SHUFFLE, SHUFFLE_XOR

MAX_ROWS: Final = 16
"""The most activation rows (M) a GEMV kernel takes; above it the vendor BLAS runs."""
GEMV_BLOCK: Final = 256
INPUTS: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})


@dataclass(frozen=True)
class GemvKernel:
    """Everything that makes one compiled GEMV kernel distinct."""

    layout: str
    """``nk`` (weight [N, K], K contiguous) or ``kn`` (weight [K, N], N contiguous)."""
    dtype: D
    out_dtype: D
    rows: int
    vec: int
    tile: int = 1
    """``nk``: outputs per warp."""
    groups: int = 1
    """``kn``: column groups of ``vec`` columns a block owns (a warp's lanes: ``groups`` columns × splits of K)."""
    ksplit: int = 1
    """``nk``: warps of a block that share an output tile, each taking every ``ksplit``-th chunk of K."""
    unroll: int = 1
    """Weight loads per lane (per output) issued before the first of them is used."""
    block: int = GEMV_BLOCK
    """Threads per block (``nk``: a multiple of ``ksplit`` warps; ``kn``: always :data:`GEMV_BLOCK`)."""
    loads: str = "plain"
    """``nk`` weight loads: ``plain`` (cached) or ``stream`` (CUDA sm_80+: ``ld.global.nc`` with
    ``L1::no_allocate`` and a 256-byte L2 prefetch, the weight being read once; plain elsewhere)."""
    persist: bool = False
    """``nk``: the grid may be smaller than the output tile groups; each block loops over groups by grid stride."""
    pdl: str = ""
    """Programmatic dependent launch (NVIDIA sm_90+; ``""``: none, the kernel is launched plainly). Each thread
    starts its first pass of weight reads, then ``ACL_PDL_WAIT()`` (the predecessor complete and its memory
    visible), then reads the activation; a thread that reads nothing waits before its first store. ``l2``:
    the first pass is prefetched into L2 and loaded after the wait (correct whatever the predecessor wrote: L2
    is the device's point of coherence); ``regs``: the first pass is loaded into registers before the wait
    (correct only where the predecessor does not write the weight: model parameters). Only a kernel with a
    wait may be launched with the programmatic attribute."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable, unique ``extern "C"`` name."""
        return f"acl_gemv_{self.layout}_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"


def _decode(dtype: D, expr: str) -> str:
    return ctype(dtype).decode.format(x=expr)


STREAM_LOAD: Final = r"""
// a weight vector read once: CUDA sm_80+ loads it through the read-only path without allocating in L1 and
// asks L2 for the whole 256-byte segment; elsewhere (HIP, the CPU emulator) a plain load
template <class V> ACL_DEV V acl_gemv_stream(const V* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  V v;
  unsigned int* u = reinterpret_cast<unsigned int*>(&v);
  if constexpr (sizeof(V) == 16) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p));
    return v;
  } else if constexpr (sizeof(V) == 8) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.v2.u32 {%0, %1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p));
    return v;
  } else if constexpr (sizeof(V) == 4) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.u32 %0, [%1];" : "=r"(u[0]) : "l"(p));
    return v;
  }
#endif
  return *p;
}
"""


def _params(kernel: GemvKernel) -> str:
    s = ctype(kernel.dtype).storage
    o = ctype(kernel.out_dtype).storage
    return (
        f"const {s}* a, const {s}* w, {o}* out, "
        "const long long k_len, const long long n_len, const long long lda, const long long ldw, "
        "const long long ldo_m, const long long ldo_n"
    )


def _store(kernel: GemvKernel, value: str) -> str:
    return store(value, ctype(D.ACL_FLOAT), ctype(kernel.out_dtype))


def _butterfly(values: int, warp: int, low: int = 1) -> tuple[list[str], int, int]:
    """A reduce-scatter of ``r[values]`` (a power of two) over the lanes that differ in bits ``low`` and up:
    each step a lane keeps half of its values, adds the partner's copy of that half and sends the other;
    once one value is left, plain xor sums. Returns (lines, held, mask): afterwards lane l holds ``r[i]``
    (i < held) = the sum of value ``idx + i`` over those lanes, the same in every lane with other ``mask`` bits."""
    lines = ["int idx = 0;"]
    length, offset, mask = values, warp // 2, 0
    while offset >= low:
        if length > 1:
            half = length // 2
            lines += [
                "{",
                f"  const bool hi = (lane & {offset}) != 0;",
                f"  if (hi) idx += {half};",
                "#pragma unroll",
                f"  for (int i = 0; i < {half}; ++i) {{",
                f"    const float send = hi ? r[i] : r[i + {half}];",
                f"    const float keep = hi ? r[i + {half}] : r[i];",
                f"    r[i] = keep + ACL_SHFL_XOR(send, {offset});",
                "  }",
                "}",
            ]
            length = half
        else:
            lines.append(f"r[0] += ACL_SHFL_XOR(r[0], {offset});")
            mask |= offset
        offset //= 2
    return lines, length, mask


PREFETCH: Final = r"""
// a weight segment asked of L2 before the kernel waits for its predecessor (CUDA sm_90+; elsewhere nothing)
ACL_DEV void acl_gemv_prefetch(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}
"""

PDL_MODES: Final = ("", "l2", "regs")


def _pdl_wait(kernel: GemvKernel, indent: str, after: str = "") -> list[str]:
    """A PDL kernel's wait for its predecessor, once per thread (nothing for a kernel launched plainly, nor
    where ``after`` names the other mode: the wait then sits elsewhere)."""
    if not kernel.pdl or after == kernel.pdl:
        return []
    return [f"{indent}if (!pdl_waited) {{  // the predecessor done and visible: read the activation, write out",
            f"{indent}  ACL_PDL_WAIT();",
            f"{indent}  pdl_waited = true;",
            f"{indent}}}"]  # fmt: skip


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _nk_finish(kernel: GemvKernel, warp: int) -> list[str]:
    """The warp's sums of ``acc`` (butterfly), then the store (one K part) or the K parts' meeting in shared memory."""
    m_rows, tile, ksplit = kernel.rows, kernel.tile, kernel.ksplit
    count = m_rows * tile
    values = _pow2(count)
    lines = [f"float r[{values}];", "#pragma unroll", f"for (int i = 0; i < {values}; ++i) r[i] = 0.0f;"]
    lines += [f"r[{m * tile + t}] = acc[{m}][{t}];" for m in range(m_rows) for t in range(tile)]
    steps, held, plain = _butterfly(values, warp)
    lines += steps
    lines += [
        f"if ((lane & {plain}) == 0) {{  // one of the lanes holding copies of the same sums",
        "#pragma unroll",
        f"  for (int i = 0; i < {held}; ++i) {{",
        "    const int j = idx + i;",
        f"    if (j < {count}) {{",
    ]
    if ksplit == 1:
        lines += [
            f"      const long long n = n0 + j % {tile};",
            f"      if (n < n_len) out[(j / {tile}) * ldo_m + n * ldo_n] = {_store(kernel, 'r[i]')};",
        ]
    else:
        lines.append("      s_part[wib][j] = r[i];")
    return [*lines, "    }", "  }", "}"]


def _nk_prefetch(kernel: GemvKernel) -> list[str]:
    """``l2`` PDL: the first pass's weight segments asked of L2, then the wait (before the loop reads anything)."""
    if kernel.pdl != "l2":
        return []
    lines = [
        "#pragma unroll",
        f"  for (int u = 0; u < {kernel.unroll}; ++u) {{",
        "    const long long k = first + u * step;",
        "#pragma unroll",
        f"    for (int t = 0; t < {kernel.tile}; ++t) {{",
        "      const long long n = n0 + t < n_len ? n0 + t : n_len - 1;",
        "      if (k < k_len) acl_gemv_prefetch(w + n * ldw + k);",
        "    }",
        "  }",
    ]
    return lines + _pdl_wait(kernel, "  ")


def _nk(kernel: GemvKernel) -> list[str]:
    m_rows, vec, tile, s = kernel.rows, kernel.vec, kernel.tile, ctype(kernel.dtype).storage
    ksplit, unroll, block = kernel.ksplit, kernel.unroll, kernel.block
    vt = f"AclVec<{s}, {vec}>"
    count = m_rows * tile
    load = f"acl_gemv_stream(reinterpret_cast<const {vt}*>(w + n * ldw + k))"
    if kernel.loads == "plain":
        load = f"*reinterpret_cast<const {vt}*>(w + n * ldw + k)"
    lines = [
        "  const int lane = (int)(threadIdx.x % ACL_WARP_SIZE);",
        "  const int wib = (int)(threadIdx.x / ACL_WARP_SIZE);  // the warp in its block",
        f"  const int groups = {block} / ACL_WARP_SIZE / {ksplit};  // output tiles per block",
        f"  const int group = wib / {ksplit}, kpart = wib % {ksplit};",
        f"  const long long blocks = ((n_len + {tile} - 1) / {tile} + groups - 1) / groups;  // tile groups",
    ]
    if kernel.pdl:
        lines.append("  bool pdl_waited = false;  // ACL_PDL_WAIT() done: the activation may be read, out written")
    if ksplit > 1:
        lines.append(f"  __shared__ float s_part[{block} / ACL_WARP_SIZE][{count}];")
    lines += [
        "  // one group per block, or (persistent grids) groups bg, bg + gridDim.x, ...: block-uniform bounds",
        "  for (long long bg = blockIdx.x; bg < blocks; bg += gridDim.x) {",
    ]
    lines += [
        f"  const long long n0 = (bg * groups + group) * {tile};",
        f"  float acc[{m_rows}][{tile}];",
        "#pragma unroll",
        f"  for (int m = 0; m < {m_rows}; ++m)",
        "#pragma unroll",
        f"    for (int t = 0; t < {tile}; ++t) acc[m][t] = 0.0f;",
    ]
    # ksplit 1: a warp past N skips its work whole (no shuffle is left half-joined); split warps all run
    # (their loads clamp to the last row) to meet at the block's barrier
    lines.append("  if (n0 < n_len) {" if ksplit == 1 else "  {")
    lines += [
        f"  const long long step = (long long)ACL_WARP_SIZE * {ksplit} * {vec};  // elements between a lane's chunks",
        f"  const long long first = ((long long)kpart * ACL_WARP_SIZE + lane) * {vec};",
        *_nk_prefetch(kernel),
        f"  for (long long k0 = first; k0 < k_len; k0 += step * {unroll}) {{",
        f"    {vt} wv[{unroll}][{tile}];  // every weight load of the pass is issued before the first use",
        "#pragma unroll",
        f"    for (int u = 0; u < {unroll}; ++u) {{",
        "      const long long k = k0 + u * step;",
        "#pragma unroll",
        f"      for (int t = 0; t < {tile}; ++t) {{",
        "        const long long n = n0 + t < n_len ? n0 + t : n_len - 1;",
        f"        if (k < k_len) wv[u][t] = {load};",
        "        else {",
        "#pragma unroll",
        f"          for (int e = 0; e < {vec}; ++e) wv[u][t].v[e] = ({s})0;",
        "        }",
        "      }",
        "    }",
        *_pdl_wait(kernel, "    ", after="l2"),
        "#pragma unroll",
        f"    for (int u = 0; u < {unroll}; ++u) {{",
        "      const long long k = k0 + u * step;",
        "      if (k < k_len) {",
        "#pragma unroll",
        f"        for (int m = 0; m < {m_rows}; ++m) {{",
        f"          const {vt} av = *reinterpret_cast<const {vt}*>(a + m * lda + k);",
        "#pragma unroll",
        f"          for (int e = 0; e < {vec}; ++e) {{",
        f"            const float x = {_decode(kernel.dtype, 'av.v[e]')};",
        "#pragma unroll",
        f"            for (int t = 0; t < {tile}; ++t) acc[m][t] += x * {_decode(kernel.dtype, 'wv[u][t].v[e]')};",
        "          }",
        "        }",
        "      }",
        "    }",
        "  }",
    ]
    lines += _pdl_wait(kernel, "    ")  # a thread that loaded nothing (past N or K) waits before it stores
    lines += ["#if ACL_WARP_SIZE == 64"]
    lines += ["    " + x for x in _nk_finish(kernel, 64)]
    lines += ["#else"]
    lines += ["    " + x for x in _nk_finish(kernel, 32)]
    lines += ["#endif", "  }"]
    if ksplit > 1:  # the K parts of each output meet in a fixed order (the result does not depend on timing)
        lines += [
            "  __syncthreads();",
            f"  for (int i = (int)threadIdx.x; i < groups * {count}; i += (int)blockDim.x) {{",
            f"    const int g = i / {count}, j = i % {count};",
            f"    const long long n = (bg * groups + g) * {tile} + j % {tile};",
            "    if (n < n_len) {",
            f"      float v = s_part[g * {ksplit}][j];",
            "#pragma unroll",
            f"      for (int p = 1; p < {ksplit}; ++p) v += s_part[g * {ksplit} + p][j];",
            f"      out[(j / {tile}) * ldo_m + n * ldo_n] = {_store(kernel, 'v')};",
            "    }",
            "  }",
            "  if (bg + gridDim.x < blocks) __syncthreads();  // s_part is read before the next group writes it",
        ]
    return [*lines, "  }"]


def _kn_finish(kernel: GemvKernel, warp: int) -> list[str]:
    """A warp's sums over its splits (butterfly over the lanes of one column group) into shared memory."""
    count = kernel.rows * kernel.vec
    values = _pow2(count)
    lines = [f"float r[{values}];", "#pragma unroll", f"for (int i = 0; i < {values}; ++i) r[i] = 0.0f;"]
    lines += [f"r[{m * kernel.vec + e}] = acc[{m}][{e}];" for m in range(kernel.rows) for e in range(kernel.vec)]
    steps, held, plain = _butterfly(values, warp, kernel.groups)
    lines += steps
    return [
        *lines,
        f"if ((lane & {plain}) == 0) {{",
        "#pragma unroll",
        f"  for (int i = 0; i < {held}; ++i)",
        f"    if (idx + i < {count}) s_part[wib][c][idx + i] = r[i];",
        "}",
    ]


def _kn_prefetch(kernel: GemvKernel) -> list[str]:
    """``l2`` PDL: the first pass's weight rows asked of L2, then the wait."""
    if kernel.pdl != "l2":
        return []
    lines = [
        "#pragma unroll",
        f"    for (int u = 0; u < {kernel.unroll}; ++u) {{",
        "      const long long k = split + u * splits;",
        "      if (k < k_len) acl_gemv_prefetch(w + k * ldw + n0);",
        "    }",
    ]
    return lines + _pdl_wait(kernel, "    ")


def _kn(kernel: GemvKernel) -> list[str]:
    m_rows, vec, groups, s = kernel.rows, kernel.vec, kernel.groups, ctype(kernel.dtype).storage
    unroll, count = kernel.unroll, kernel.rows * kernel.vec
    vt = f"AclVec<{s}, {vec}>"
    lines = [
        f"  float acc[{m_rows}][{vec}];",
        "#pragma unroll",
        f"  for (int m = 0; m < {m_rows}; ++m)",
        "#pragma unroll",
        f"    for (int e = 0; e < {vec}; ++e) acc[m][e] = 0.0f;",
        "  const int lane = (int)(threadIdx.x % ACL_WARP_SIZE);",
        "  const int wib = (int)(threadIdx.x / ACL_WARP_SIZE);  // the warp in its block",
        f"  const int c = lane % {groups};  // the column group; a warp reads {groups} of them per row, contiguous",
        f"  const long long split = (long long)wib * (ACL_WARP_SIZE / {groups}) + lane / {groups};",
        f"  const long long splits = {GEMV_BLOCK} / {groups};",
        f"  const long long n0 = ((long long)blockIdx.x * {groups} + c) * {vec};",
        *(["  bool pdl_waited = false;"] if kernel.pdl else []),
        "  if (n0 < n_len) {",
        *_kn_prefetch(kernel),
        f"    for (long long k0 = split; k0 < k_len; k0 += splits * {unroll}) {{",
        f"      {vt} wv[{unroll}];  // every weight load of the pass is issued before the first use",
        "#pragma unroll",
        f"      for (int u = 0; u < {unroll}; ++u) {{",
        "        const long long k = k0 + u * splits;",
        f"        if (k < k_len) wv[u] = *reinterpret_cast<const {vt}*>(w + k * ldw + n0);",
        "        else {",
        "#pragma unroll",
        f"          for (int e = 0; e < {vec}; ++e) wv[u].v[e] = ({s})0;",
        "        }",
        "      }",
        *_pdl_wait(kernel, "      ", after="l2"),
        "#pragma unroll",
        f"      for (int u = 0; u < {unroll}; ++u) {{",
        "        const long long k = k0 + u * splits;",
        "        if (k < k_len) {",
        "#pragma unroll",
        f"          for (int m = 0; m < {m_rows}; ++m) {{",
        f"            const float x = {_decode(kernel.dtype, 'a[m * lda + k]')};",
        "#pragma unroll",
        f"            for (int e = 0; e < {vec}; ++e) acc[m][e] += x * {_decode(kernel.dtype, 'wv[u].v[e]')};",
        "          }",
        "        }",
        "      }",
        "    }",
        "  }",
        f"  __shared__ float s_part[{GEMV_BLOCK} / ACL_WARP_SIZE][{groups}][{count}];",
        *_pdl_wait(kernel, "  "),
        "  {",
        "#if ACL_WARP_SIZE == 64",
        *("    " + x for x in _kn_finish(kernel, 64)),
        "#else",
        *("    " + x for x in _kn_finish(kernel, 32)),
        "#endif",
        "  }",
        "  __syncthreads();",
        "  // the warps' sums of each (row, column) meet in warp order (the result does not depend on timing)",
        f"  for (int i = (int)threadIdx.x; i < {groups * count}; i += (int)blockDim.x) {{",
        f"    const int cc = i / {count}, j = i % {count};",
        f"    const long long n = ((long long)blockIdx.x * {groups} + cc) * {vec};",
        "    if (n < n_len) {",
        "      float v = s_part[0][cc][j];",
        f"      for (int p = 1; p < {GEMV_BLOCK} / ACL_WARP_SIZE; ++p) v += s_part[p][cc][j];",
        f"      out[(j / {vec}) * ldo_m + (n + j % {vec}) * ldo_n] = {_store(kernel, 'v')};",
        "    }",
        "  }",
    ]
    return lines


def generate(kernel: GemvKernel) -> str:
    """The complete source (prelude included) of one GEMV kernel."""
    assert kernel.dtype in INPUTS and 1 <= kernel.rows <= MAX_ROWS and kernel.loads in ("plain", "stream")
    assert kernel.pdl in PDL_MODES
    assert kernel.layout == "nk" or kernel.block == GEMV_BLOCK
    body = _nk(kernel) if kernel.layout == "nk" else _kn(kernel)
    return "\n".join(
        [
            PRELUDE,
            SHUFFLE,
            SHUFFLE_XOR,
            *([STREAM_LOAD] if kernel.layout == "nk" and kernel.loads == "stream" else []),
            *([PREFETCH] if kernel.pdl == "l2" else []),
            f'extern "C" __global__ void __launch_bounds__({kernel.block}) {kernel.kernel_name}({_params(kernel)}) {{',
            *body,
            "}",
            "",
        ]
    )
