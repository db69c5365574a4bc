"""Small-M GEMM (GEMV) kernels: ``out[m, n] = sum_k a[m, k] * w(k, n)`` for M ≤ 16 fp16 / bf16 rows.

Decode's products have one to sixteen activation rows against a large weight; the weight is read once
for all M rows, and the kernel runs at the speed of reading it. Two weight layouts:

* ``nk`` — the weight stored as ``[N, K]`` with K contiguous (a Linear layer's weight used
  transposed): a warp owns ``tile`` consecutive outputs n; its lanes walk K in ``vec``-element
  (16-byte) loads of the weight and of each activation row, keep ``M × tile`` fp32 partial sums,
  and a warp shuffle sums them; lane 0 stores the tile.
* ``kn`` — the weight stored as ``[K, N]`` with N contiguous: each thread owns ``vec`` consecutive
  columns and one of ``splits`` interleaved K ranges (``block / splits`` column groups per block);
  the splits' partial sums meet in shared memory, one activation row at a time.

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
from acl_rocm.kernels.reduction import SHUFFLE

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
    splits: int = 1
    """``kn``: K ranges per column group."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable, unique ``extern "C"`` name."""
        return f"acl_gemv_{self.layout}_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"


def _decode(dtype: D, expr: str) -> str:
    return ctype(dtype).decode.format(x=expr)


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


def _nk(kernel: GemvKernel) -> list[str]:
    m_rows, vec, tile, s = kernel.rows, kernel.vec, kernel.tile, ctype(kernel.dtype).storage
    vt = f"AclVec<{s}, {vec}>"
    return [
        f"  float acc[{m_rows}][{tile}];",
        "#pragma unroll",
        f"  for (int m = 0; m < {m_rows}; ++m)",
        "#pragma unroll",
        f"    for (int t = 0; t < {tile}; ++t) acc[m][t] = 0.0f;",
        "  const int lane = (int)(threadIdx.x % ACL_WARP_SIZE);",
        "  const long long warp = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / ACL_WARP_SIZE;",
        f"  const long long n0 = warp * {tile};",
        "  if (n0 >= n_len) return;  // a whole warp leaves together: no shuffle is left half-joined",
        f"  for (long long k = (long long)lane * {vec}; k < k_len; k += (long long)ACL_WARP_SIZE * {vec}) {{",
        f"    {vt} wv[{tile}];",
        "#pragma unroll",
        f"    for (int t = 0; t < {tile}; ++t) {{",
        "      const long long n = n0 + t < n_len ? n0 + t : n_len - 1;",
        f"      wv[t] = *reinterpret_cast<const {vt}*>(w + n * ldw + k);",
        "    }",
        "#pragma unroll",
        f"    for (int m = 0; m < {m_rows}; ++m) {{",
        f"      const {vt} av = *reinterpret_cast<const {vt}*>(a + m * lda + k);",
        "#pragma unroll",
        f"      for (int e = 0; e < {vec}; ++e) {{",
        f"        const float x = {_decode(kernel.dtype, 'av.v[e]')};",
        "#pragma unroll",
        f"        for (int t = 0; t < {tile}; ++t) acc[m][t] += x * {_decode(kernel.dtype, 'wv[t].v[e]')};",
        "      }",
        "    }",
        "  }",
        "#pragma unroll",
        f"  for (int m = 0; m < {m_rows}; ++m)",
        "#pragma unroll",
        f"    for (int t = 0; t < {tile}; ++t) {{",
        "      float v = acc[m][t];",
        "      for (int offset = ACL_WARP_SIZE / 2; offset > 0; offset >>= 1) v += ACL_SHFL_DOWN(v, offset);",
        f"      if (lane == 0 && n0 + t < n_len) out[m * ldo_m + (n0 + t) * ldo_n] = {_store(kernel, 'v')};",
        "    }",
    ]


def _kn(kernel: GemvKernel) -> list[str]:
    m_rows, vec, splits, s = kernel.rows, kernel.vec, kernel.splits, ctype(kernel.dtype).storage
    groups = GEMV_BLOCK // splits
    vt = f"AclVec<{s}, {vec}>"
    return [
        f"  float acc[{m_rows}][{vec}];",
        "#pragma unroll",
        f"  for (int m = 0; m < {m_rows}; ++m)",
        "#pragma unroll",
        f"    for (int e = 0; e < {vec}; ++e) acc[m][e] = 0.0f;",
        f"  const int g = (int)(threadIdx.x % {groups}), split = (int)(threadIdx.x / {groups});",
        f"  const long long n0 = ((long long)blockIdx.x * {groups} + g) * {vec};",
        "  if (n0 < n_len) {",
        f"    for (long long k = split; k < k_len; k += {splits}) {{",
        f"      const {vt} wv = *reinterpret_cast<const {vt}*>(w + k * ldw + n0);",
        "#pragma unroll",
        f"      for (int m = 0; m < {m_rows}; ++m) {{",
        f"        const float x = {_decode(kernel.dtype, 'a[m * lda + k]')};",
        "#pragma unroll",
        f"        for (int e = 0; e < {vec}; ++e) acc[m][e] += x * {_decode(kernel.dtype, 'wv.v[e]')};",
        "      }",
        "    }",
        "  }",
        f"  __shared__ float part[{GEMV_BLOCK}][{vec}];",
        f"  for (int m = 0; m < {m_rows}; ++m) {{",
        "#pragma unroll",
        f"    for (int e = 0; e < {vec}; ++e) part[threadIdx.x][e] = acc[m][e];",
        "    __syncthreads();",
        "    if (split == 0 && n0 < n_len) {",
        "#pragma unroll",
        f"      for (int e = 0; e < {vec}; ++e) {{",
        "        float v = part[g][e];",
        f"        for (int r = 1; r < {splits}; ++r) v += part[r * {groups} + g][e];",
        f"        out[m * ldo_m + (n0 + e) * ldo_n] = {_store(kernel, 'v')};",
        "      }",
        "    }",
        "    __syncthreads();",
        "  }",
    ]


def generate(kernel: GemvKernel) -> str:
    """The complete source (prelude included) of one GEMV kernel."""
    assert kernel.dtype in INPUTS and 1 <= kernel.rows <= MAX_ROWS
    body = _nk(kernel) if kernel.layout == "nk" else _kn(kernel)
    return "\n".join(
        [
            PRELUDE,
            SHUFFLE,
            f'extern "C" __global__ void __launch_bounds__({GEMV_BLOCK}) {kernel.kernel_name}({_params(kernel)}) {{',
            *body,
            "}",
            "",
        ]
    )
