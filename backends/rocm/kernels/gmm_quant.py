"""Kernel generators of the grouped quantised GEMMs (rules: :mod:`acl_core.spec.ops.gmm_quant`).

The GEMM itself is the grouped GEMM's integer mode (:class:`acl_rocm.kernels.grouped_matmul.GmmKernel`)
and GroupedMatmulSwigluQuant's epilogue is DequantSwigluQuant's kernel
(:class:`acl_rocm.kernels.quant_vllm.DequantSwigluQuant`); what is here is the glue:

* :data:`GROUP_LIST_ENDS`: one thread turns a device group list (cumulative ends or counts) into
  cumulative int64 row ends capped at M, which the epilogues binary-search.
* :class:`QuantRows`: QuantGroupedMatmulDequant's x quantisation, one block per row: the optional
  smoothing product, the row's scale (given, or ``max|x| / 127`` by a shared-memory maximum), and
  ``round(x / scale)`` into an INT8 temporary (FLOAT32 operations rounded once each, as the reference).
* :class:`Dequant`: its epilogue, one thread per output element: ``float32(acc) * weightScale[g]
  (* scale_x)`` rounded to float16; rows past the last group are written with 0.

Both epilogues read the grouped GEMM's device check flag and write nothing when a bad group list set it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.quant import BLOCK_THREADS, kernel_name, load, source
from acl_rocm.kernels.quant_vllm import REDUCE_MAX

LONG: Final = "const long long"
GROUP_LIST_ENDS: Final = r"""
extern "C" __global__ void __launch_bounds__(32) acl_gmmq_group_ends(const long long* list, const long long l0,
    const long long ls, const long long groups, const long long rows, const int cumulative, long long* ends) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  long long prev = 0;
  for (long long g = 0; g < groups; ++g) {
    const long long v = list[l0 + g * ls];
    long long end = cumulative ? v : prev + (v > 0 ? v : 0);
    end = end < prev ? prev : (end > rows ? rows : end);
    ends[g] = end;
    prev = end;
  }
}
"""
"""Cumulative row ends (non-decreasing, capped at ``rows``) from a cumulative (1) or count (0) group list."""

_FIND_GROUP: Final = [
    "long long lo = 0, hi = groups;",
    "while (lo < hi) {",
    "  const long long mid = lo + ((hi - lo) >> 1);",
    "  if (ends[mid] <= row) lo = mid + 1; else hi = mid;",
    "}",
]
"""Lines: ``lo`` = the group of ``row`` (``groups`` when past the last end)."""


@dataclass(frozen=True)
class QuantRows:
    """x [rows, k] (FLOAT16, any strides) to a dense INT8 [rows, k] and a dense FLOAT32 scale per row.

    ``scale``: the given scale's dtype (FLOAT32 / FLOAT16; its row stride is 0 for pertensor) or None
    for the dynamic ``max|x| / 127``.
    """

    smooth: bool
    scale: D | None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gmmq_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _rows_source(self)


@functools.cache
def _rows_source(k: QuantRows) -> str:
    value = load(D.ACL_FLOAT16, "x", "xrow + j * xc")
    if k.smooth:
        value = f"ACL_QMUL({value}, {load(D.ACL_FLOAT16, 'sm', 'sm0 + j * smc')})"
    params = ["const unsigned short* x", f"{LONG} x0", f"{LONG} xr", f"{LONG} xc"]
    params += ["const unsigned short* sm", f"{LONG} sm0", f"{LONG} smc"]
    xs_type = "float" if k.scale in (None, D.ACL_FLOAT) else "unsigned short"
    params += [f"const {xs_type}* xs", f"{LONG} xs0", f"{LONG} xsr"]
    params += ["signed char* xq", "float* scale", f"{LONG} rows", f"{LONG} k"]
    body = [
        "__shared__ float red[256];",
        "(void)red; (void)sm; (void)sm0; (void)smc; (void)xs; (void)xs0; (void)xsr;",
        "for (long long row = blockIdx.x; row < rows; row += gridDim.x) {",
        "  const long long xrow = x0 + row * xr;",
    ]
    if k.scale is None:
        body += [
            "  float amax = 0.0f;",
            f"  for (long long j = threadIdx.x; j < k; j += blockDim.x) amax = acl_q_max(amax, fabsf({value}));",
            "  red[threadIdx.x] = amax;",
            *("  " + line for line in REDUCE_MAX),
            "  const float sv = ACL_QDIV(red[0], 127.0f);",
            "  __syncthreads();",
        ]
    else:
        body.append(f"  const float sv = {load(k.scale, 'xs', 'xs0 + row * xsr')};")
    zero = "sv == 0.0f ? 0.0f : " if k.scale is None else ""
    body += [
        "  if (threadIdx.x == 0) scale[row] = sv;",
        "  for (long long j = threadIdx.x; j < k; j += blockDim.x) {",
        f"    const float q = {zero}ACL_QDIV({value}, sv);",
        "    xq[row * k + j] = (signed char)acl_q_int((double)q, ACL_QR_RINT, -128.0, 127.0);",
        "  }",
        "}",
    ]
    struct = "struct Meta { long long n; };"
    comment = f"QuantGroupedMatmulDequant x rows ({'dynamic' if k.scale is None else k.scale.short} scale)"
    return source(comment, struct, k.kernel_name, params, body)


@dataclass(frozen=True)
class Dequant:
    """out[row, col] = float16(float32(acc[row, col]) * ws[g, col] (* xs[row])) for rows of group g; 0 past them.

    ``packed``: the weight scale is INT64 (a FLOAT32 in its low 32 bits) and already holds the x scale.
    """

    packed: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gmmq_dequant", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _dequant_source(self)


@functools.cache
def _dequant_source(k: Dequant) -> str:
    ws_type = "long long" if k.packed else "float"
    at = "ws0 + lo * wsg + col * wsc"
    weight = (
        f"__uint_as_float((unsigned int)((unsigned long long)ws[{at}] & 0xffffffffull))" if k.packed else f"ws[{at}]"
    )
    params = ["const int* acc", f"const {ws_type}* ws", f"{LONG} ws0", f"{LONG} wsg", f"{LONG} wsc", "const float* xs"]
    params += ["unsigned short* out", f"{LONG} o0", f"{LONG} osr", f"{LONG} osc"]
    params += ["const long long* ends", f"{LONG} groups", f"{LONG} total", f"{LONG} n", "const int* flag"]
    body = [
        "if (*flag) return;  // a bad group list: nothing is written",
        "(void)xs;",
        "const long long step = (long long)gridDim.x * blockDim.x;",
        "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += step) {",
        "  const long long row = q / n, col = q % n;",
        *("  " + line for line in _FIND_GROUP),
        "  float v = 0.0f;  // rows past the last group: 0",
        "  if (lo < groups) {",
        f"    v = ACL_QMUL((float)acc[q], {weight});",
        *([] if k.packed else ["    v = ACL_QMUL(v, xs[row]);"]),
        "  }",
        "  out[o0 + row * osr + col * osc] = acl_f2h(v);",
        "}",
    ]
    struct = "struct Meta { long long n; };"
    return source(f"QuantGroupedMatmulDequant epilogue (packed {k.packed})", struct, k.kernel_name, params, body)


__all__ = ["BLOCK_THREADS", "GROUP_LIST_ENDS", "Dequant", "QuantRows"]
