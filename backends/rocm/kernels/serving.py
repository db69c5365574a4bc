"""Kernel generators of the serving family: ApplyTopKTopP's filter after the row sort, AttentionUpdate's combine.

ApplyTopKTopP: the row sorter (:mod:`acl_rocm.kernels.sort`) orders each row ascending into a
temporary of positions; :class:`TopKCheck` sets the device flag for a ``k`` outside ``[1, vocab]``;
:class:`TopKTopP` (one block per row) walks the sorted row twice: the quantised top-p weights
(``acl_rank_exp``, exactly the reference's) summed per thread, an exclusive scan of the per-thread
sums, then each position's running sum decides its mask, written straight into ``out``'s original
position (the kept ones copy their logit's bits).
AttentionUpdate: one thread per output element recomputes its row's log-sum-exp in double over the
``sp`` partial results (at most 16), whose pointers and strides travel in one packed table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_core.spec.ops.serving import TOP_P_BITS
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.moe import ranking_exp_source
from acl_rocm.kernels.movement import HELPERS, store_narrow
from acl_rocm.kernels.sort import kernel_name, meta, source

MAX_SP: Final = 16
NEG_INF: Final[dict[D, str]] = {
    D.ACL_FLOAT: "__uint_as_float(0xff800000u)",
    D.ACL_FLOAT16: "(unsigned short)0xfc00u",
    D.ACL_BF16: "(unsigned short)0xff80u",
}
"""-Inf in each dtype's storage."""
_DOUBLE = ctype(D.ACL_DOUBLE)


def _as_double(expr: str, dtype: D) -> str:
    return load(expr, ctype(dtype), _DOUBLE)


@dataclass(frozen=True)
class TopKCheck:
    """``*flag = 1`` when a row's ``k`` lies outside ``[1, vocab]`` (one thread per row)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("top_k_check", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const int* k", "int* flag", "const long long ks", "const long long vocab"]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < m.n; r += step) {",
            "  const long long v = (long long)k[r * ks];",
            "  if (v < 1 || v > vocab) *flag = 1;",
            "}",
        ]
        return source("serving: top-k within the vocabulary", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class TopKTopP:
    """One block per row of ascending positions ``pos``: mask (-Inf) or copy each logit into ``out``.

    Flag-gated (a bad ``k`` writes nothing). Block size: at most 256 threads (the scan's shared array).
    """

    dtype: D
    top_k: bool
    top_p: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("top_k_top_p", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* x", "const int* pos", f"{st}* out", "const int* flag"]
        if self.top_k:
            params.append("const int* k")
        if self.top_p:
            params.append(f"const {st}* p")
        params += [f"const long long {n}" for n in ("vocab", "xs0", "xs1", "os0", "os1", "ks", "ps")]
        value = _as_double("x[xo + (long long)prow[j] * xs1]", self.dtype)
        kept = "!(v < thr)" if self.top_k else "true"
        weight = [
            f"    const double v = {value};",
            f"    const bool kept = {kept};",
            "    const double e = v == top ? 1.0 : acl_rank_exp(__dsub_rn(v, top));",
            f"    const double f = floor(__dmul_rn(e, {float(1 << TOP_P_BITS)!r}));",
            "    const long long q = (kept && f == f) ? (long long)f : 0;",
        ]
        body = [
            "if (*flag) return;",
            "__shared__ long long part[256];",
            "__shared__ double shared_thr;",
            "__shared__ double shared_cut;",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            "  const int* prow = pos + row * vocab;",
            "  const long long xo = row * xs0;",
            "  const long long chunk = (vocab + blockDim.x - 1) / blockDim.x;",
            "  const long long begin = threadIdx.x * chunk;",
            "  const long long end = begin + chunk < vocab ? begin + chunk : vocab;",
            "  if (threadIdx.x == 0) {",
            "    long long j = vocab - 1;",
            f"    const double top = {value};",
            "    shared_cut = top;",
        ]
        if self.top_k:
            body += ["    j = vocab - (long long)k[row * ks];", f"    shared_thr = {value};"]
        else:
            body.append("    shared_thr = 0.0;")
        body += [
            "  }",
            "  __syncthreads();",
            "  const double top = shared_cut, thr = shared_thr;",
        ]
        if self.top_p:
            body += [
                "  long long sum = 0;",
                "  for (long long j = begin; j < end; ++j) {",
                *weight,
                "    sum += q;",
                "  }",
                "  part[threadIdx.x] = sum;",
                "  __syncthreads();",
                "  if (threadIdx.x == 0) {",
                "    long long run = 0;",
                "    for (unsigned t = 0; t < blockDim.x; ++t) {",
                "      const long long s = part[t];",
                "      part[t] = run;",
                "      run += s;",
                "    }",
                f"    shared_cut = __dmul_rn(__dsub_rn(1.0, {_as_double('p[row * ps]', self.dtype)}), (double)run);",
                "  }",
                "  __syncthreads();",
                "  const double cut = shared_cut;",
                "  long long running = part[threadIdx.x];",
            ]
        neg = NEG_INF[self.dtype]
        body += [
            "  for (long long j = begin; j < end; ++j) {",
            *(weight if self.top_p else weight[:2]),
        ]
        if self.top_p:
            body += [
                "    running += q;",
                "    const bool masked = !kept || (j != vocab - 1 && (double)running <= cut);",
            ]
        else:
            body.append("    const bool masked = !kept;")
        body += [
            "    const long long at = (long long)prow[j];",
            f"    out[row * os0 + at * os1] = masked ? {neg} : x[xo + at * xs1];",
            "  }",
            "  __syncthreads();",
            "}",
        ]
        helpers = HELPERS + ranking_exp_source()
        return source(
            f"serving: top-k / top-p filter of {self.dtype.short} rows",
            meta(1, 1),
            self.kernel_name,
            params,
            body,
            helpers,
        )


@dataclass(frozen=True)
class AttentionUpdate:
    """``out[n, d] = Σ_i O_i[n, d]·exp(lse_i[n] - lse_m[n])`` and ``lseOut[n] = lse_m[n]`` (first d only).

    ``table``: ``sp`` rows of (lse address, lse stride, O address, O row stride, O column stride) as
    ``long long``; Meta ``n`` = rows × headDim.
    """

    dtype: D
    sp: int
    lse_out: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("attention_update", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", "const Table table", f"{st}* out"]
        if self.lse_out:
            params.append("float* lse_out")
        params += [f"const long long {n}" for n in ("head_dim", "os0", "os1", "ls")]
        lse = "((const float*)table.v[i][0])[n * table.v[i][1]]"
        local = _as_double(f"(({st}*)table.v[i][2])[n * table.v[i][3] + d * table.v[i][4]]", self.dtype)
        body = [
            "const double minus_inf = -__longlong_as_double(0x7ff0000000000000LL);",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < m.n; e += step) {",
            "  const long long n = e / head_dim, d = e % head_dim;",
            "  double top = minus_inf;",
            f"  for (int i = 0; i < {self.sp}; ++i) top = acl_maximum(top, (double){lse});",
            "  double sum = 0.0;",
            f"  for (int i = 0; i < {self.sp}; ++i) sum += exp((double){lse} - top);",
            "  const double lm = top + log(sum);",
            "  double acc = 0.0;",
            f"  for (int i = 0; i < {self.sp}; ++i) acc += {local} * exp((double){lse} - lm);",
            f"  out[n * os0 + d * os1] = {store_narrow('acc', self.dtype)};",
        ]
        if self.lse_out:
            body.append("  if (d == 0) lse_out[n * ls] = (float)lm;")
        body.append("}")
        table = f"struct Table {{ long long v[{self.sp}][5]; }};"
        return source(
            f"serving: attention update of {self.sp} {self.dtype.short} partials",
            meta(1, 1) + "\n" + table,
            self.kernel_name,
            params,
            body,
            HELPERS,
        )
