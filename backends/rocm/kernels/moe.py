"""Kernel generators of the MoE family: gating softmax, top-k emission, routing tables, and the combine.

Gating computes the softmax of each row in double into a temporary (as the reference computes in
float64) beside each row's ranking keys (the logits themselves, exact; zeros for a row whose
probabilities are NaN); the row sorter (:mod:`acl_rocm.kernels.sort`) orders the keys descending with
ties to the lower expert, and :class:`GatingEmit` writes the first k. Routing sorts the expert numbers
stably (and the row indices, to check they are a permutation) and writes the tables; the kernels
after a check read the device flag first and write nothing when it is set.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.movement import HELPERS, store_narrow, word
from acl_rocm.kernels.reduction import SHUFFLE
from acl_rocm.kernels.sort import kernel_name, meta, row_offsets, source

_DOUBLE = ctype(D.ACL_DOUBLE)
_GRID_LOOP = "const long long step = (long long)gridDim.x * blockDim.x;"


def _loop(total: str) -> str:
    return f"for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < {total}; e += step) {{"


def _as_double(expr: str, dtype: D) -> str:
    return load(expr, ctype(dtype), _DOUBLE)


# ----------------------------------------------------------------------------- gating
@dataclass(frozen=True)
class GatingSoftmax:
    """``probs[row][e] = softmax(x[row, :])[e]`` in double and ``keys[row][e]``, one block per row (Meta row 0: x).

    ``keys`` ranks the experts: the logit itself (softmax is increasing, so this is the exact order of the
    probabilities), or 0 for every expert of a row whose maximum is not finite (its probabilities are NaN).
    The block size must be a power of two (tree reductions in shared memory).
    """

    dtype: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gating_softmax", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* x", "double* probs", "double* keys", "const long long experts"]
        params.append("const long long xs")
        value = _as_double("x[o0 + i * xs]", self.dtype)
        reduce_max = "red[threadIdx.x] = acl_maximum(red[threadIdx.x], red[threadIdx.x + s]);"
        body = [
            "__shared__ double red[256];",
            "const double minus_inf = -__longlong_as_double(0x7ff0000000000000LL);",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            *("  " + line for line in row_offsets(self.ndim, 1)),
            "  double v = minus_inf;",
            f"  for (long long i = threadIdx.x; i < experts; i += blockDim.x) v = acl_maximum(v, {value});",
            "  red[threadIdx.x] = v;",
            "  __syncthreads();",
            "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {",
            f"    if (threadIdx.x < s) {reduce_max}",
            "    __syncthreads();",
            "  }",
            "  const double top = red[0];",
            "  __syncthreads();",
            "  double sum = 0.0;",
            f"  for (long long i = threadIdx.x; i < experts; i += blockDim.x) sum += exp({value} - top);",
            "  red[threadIdx.x] = sum;",
            "  __syncthreads();",
            "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {",
            "    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];",
            "    __syncthreads();",
            "  }",
            "  const double total = red[0];",
            "  const bool ranked = isfinite(top);",
            "  for (long long i = threadIdx.x; i < experts; i += blockDim.x) {",
            f"    const double v = {value};",
            "    probs[row * experts + i] = exp(v - top) / total;",
            "    keys[row * experts + i] = ranked ? v : 0.0;",
            "  }",
            "  __syncthreads();",
            "}",
        ]
        return source(
            f"moe: gating softmax of {self.dtype.short} rows", meta(self.ndim, 1), self.kernel_name, params, body
        )


@dataclass(frozen=True)
class GatingEmit:
    """The first k of each sorted probability row: yOut, expertIdxOut (E for finished rows), rowIdxOut.

    Meta: ``n`` rows over x's outer dims; rows 0 y, 1 expertIdx, 2 rowIdx, 3 finished (0 without it).
    """

    dtype: D
    ndim: int
    finished: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gating_emit", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = [
            "const Meta m",
            "const double* probs",
            "const int* sorted_idx",
            f"{st}* y",
            "int* expert",
            "int* rows",
        ]
        if self.finished:
            params.append("const unsigned char* finished")
        params += ["const long long experts", "const long long k", "const long long ys", "const long long es"]
        params.append("const long long rs")
        chosen = "finished[o3] != 0 ? (int)experts : (int)at" if self.finished else "(int)at"
        body = [
            _GRID_LOOP,
            _loop("m.n * k"),
            "  const long long row = e / k, j = e % k;",
            *("  " + line for line in row_offsets(self.ndim, 4)),
            "  const long long at = sorted_idx[row * experts + j];",
            f"  y[o0 + j * ys] = {store_narrow('probs[row * experts + at]', self.dtype)};",
            f"  expert[o1 + j * es] = {chosen};",
            "  rows[o2 + j * rs] = (int)(j * m.n + row);",
            "}",
        ]
        return source(
            f"moe: gating top-k into {self.dtype.short}", meta(self.ndim, 4), self.kernel_name, params, body, HELPERS
        )


# ----------------------------------------------------------------------------- routing
_ROW_IDX = "row_idx[(p / k) * rs0 + (p % k) * rs1]"
"""rowIdx at flat position p of its (numRows, k) view."""


@dataclass(frozen=True)
class RoutingCheck:
    """``*flag = 1`` unless the sorted rowIdx keys are 0, 1, ..., n-1 (rowIdx is then a permutation)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("routing_check", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const unsigned int* sorted_keys", "int* flag"]
        body = [
            _GRID_LOOP,
            _loop("m.n"),
            "  if ((long long)(int)(sorted_keys[e] ^ 0x80000000u) != e) *flag = 1;",
            "}",
        ]
        return source("moe: rowIdx is a permutation", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class RoutingEmit:
    """expandedExpertIdxOut[s] = sorted expert s; expandedRowIdxOut[rowIdx[p_s]] = s (flag-gated)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("routing_emit", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = [
            "const Meta m",
            "const unsigned int* expert_keys",
            "const int* expert_pos",
            "const int* row_idx",
            "int* expanded_expert",
            "int* expanded_row",
            "const int* flag",
            "const long long k",
            "const long long rs0",
            "const long long rs1",
            "const long long eos",
            "const long long ros",
        ]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long p = expert_pos[e];",
            "  expanded_expert[e * eos] = (int)(expert_keys[e] ^ 0x80000000u);",
            f"  expanded_row[(long long){_ROW_IDX} * ros] = (int)e;",
            "}",
        ]
        return source("moe: routing tables", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class RoutingGather:
    """expandedXOut[s, h] = x[rowIdx[p_s] % numRows, h] for the active positions s (Meta n: active × H)."""

    itemsize: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("routing_gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = [
            "const Meta m",
            f"const {w}* x",
            "const int* expert_pos",
            "const int* row_idx",
            f"{w}* out",
            "const int* flag",
            "const long long hidden",
            "const long long num_rows",
            "const long long k",
            "const long long rs0",
            "const long long rs1",
            "const long long xs0",
            "const long long xs1",
            "const long long os0",
            "const long long os1",
        ]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long s = e / hidden, h = e % hidden;",
            "  const long long p = expert_pos[s];",
            f"  const long long r = (long long){_ROW_IDX} % num_rows;",
            "  out[s * os0 + h * os1] = x[r * xs0 + h * xs1];",
            "}",
        ]
        return source(
            f"moe: gather routed rows, {self.itemsize}-byte elements", meta(1, 1), self.kernel_name, params, body
        )


# ----------------------------------------------------------------------------- finalize
@dataclass(frozen=True)
class Finalize:
    """out[i, h] = x1 + Σ_j scales[i, j] * (expandedX[dest[i + j*rows], h] + bias[expert[i, j], h]) (+ x2), in double.

    Meta: shape (rows, H); rows 0 x1, 1 x2 (zeros without it), 2 out. Flag-gated (index checks first).
    """

    dtype: D
    x2: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("finalize", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* expanded", f"const {st}* x1"]
        if self.x2:
            params.append(f"const {st}* x2")
        params += [f"const {st}* bias", f"const {st}* scales", "const int* dest", "const int* expert"]
        params += [f"{st}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("k", "xs0", "xs1", "bs0", "bs1", "ss0", "ss1", "ds", "es0", "es1")]

        def d(expr: str) -> str:
            return _as_double(expr, self.dtype)

        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long i = e / m.shape[1], h = e % m.shape[1];",
            "  const long long rows = m.shape[0];",
            "  double acc = 0.0;",
            "  for (long long j = 0; j < k; ++j) {",
            "    const long long at = (long long)dest[(i + j * rows) * ds];",
            "    const long long ex = (long long)expert[i * es0 + j * es1];",
            f"    const double g = {d('expanded[at * xs0 + h * xs1]')};",
            f"    const double b = {d('bias[ex * bs0 + h * bs1]')};",
            f"    acc += {d('scales[i * ss0 + j * ss1]')} * (g + b);",
            "  }",
            f"  double r = {d('x1[i * m.stride[0][0] + h * m.stride[0][1]]')} + acc;",
        ]
        if self.x2:
            body.append(f"  r = r + {d('x2[i * m.stride[1][0] + h * m.stride[1][1]]')};")
        body += [f"  out[i * m.stride[2][0] + h * m.stride[2][1]] = {store_narrow('r', self.dtype)};", "}"]
        return source(
            f"moe: finalize routing in {self.dtype.short}", meta(2, 3), self.kernel_name, params, body, HELPERS
        )


# ----------------------------------------------------------------------------- exact ranking arithmetic
def _bits(value: float) -> str:
    """A C expression of the double ``value``, bit for bit."""
    return f"__longlong_as_double({struct.unpack('<q', struct.pack('<d', value))[0]}LL)"


EXP_TERMS = 14
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_LOG2E = float.fromhex("0x1.71547652b82fep+0")


def ranking_exp_source() -> str:
    """``acl_rank_exp(t)``: the reference's ``ranking_exp`` (acl_reference.kernels.moe), bit for bit.

    Range reduction ``t = n·ln2 + r`` (Cody-Waite, ln2 in two parts), 14 Taylor terms by Horner, then a
    multiplication by ``2^n`` built from its bits; every step is an ``__dmul_rn`` / ``__dadd_rn`` /
    ``__dsub_rn`` (never fused), so any device rounds exactly as NumPy does.
    """
    lines = [
        "__device__ __forceinline__ double acl_rank_exp(double t) {",
        "  if (t != t) return t;",
        "  if (t > 709.0) return __longlong_as_double(0x7ff0000000000000LL);",
        "  if (t < -708.0) return 0.0;",
        f"  const double n = rint(__dmul_rn(t, {_bits(_LOG2E)}));",
        f"  const double r = __dsub_rn(__dsub_rn(t, __dmul_rn(n, {_bits(_LN2_HI)})), __dmul_rn(n, {_bits(_LN2_LO)}));",
        f"  double p = {_bits(1.0 / math.factorial(EXP_TERMS - 1))};",
    ]
    for j in range(EXP_TERMS - 2, -1, -1):
        lines.append(f"  p = __dadd_rn(__dmul_rn(p, r), {_bits(1.0 / math.factorial(j))});")
    lines += ["  return __dmul_rn(p, __longlong_as_double(((long long)n + 1023LL) << 52));", "}"]
    return "\n".join(lines)


RANK_BEFORE = r"""
// expert a (key ka) ranks before b: larger keys first, NaN last, equal keys (-0 = 0) by number
__device__ __forceinline__ bool acl_rank_before(double ka, long long a, double kb, long long b) {
  if (ka != ka) return kb != kb && a < b;
  return kb != kb || ka > kb || (ka == kb && a < b);
}
"""


# ----------------------------------------------------------------------------- MoeGatingTopK
@dataclass(frozen=True)
class GatingTopKPrep:
    """Per row (one block each): normOut (double temp and float32 ``outOut``), ranking keys, group masking.

    Softmax rows sum their exponentials with the reference's :func:`tree_sum` order in shared memory
    (``width``: the power of two the experts are padded to). Keys are the logits without a bias, else
    ``normOut + bias``; the ``kGroup`` best groups (by their best key, or the sum of their two best
    values) keep their keys, the others get -Inf. Block size: a power of two.
    """

    dtype: D
    bias: bool
    norm_type: int
    mode: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gating_k_prep", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* x"]
        if self.bias:
            params.append(f"const {st}* bias")
        params += ["double* norm", "double* keys", "float* out_norm"]
        params += [f"const long long {n}" for n in ("experts", "width", "groups", "k_group", "xs0", "xs1", "bs")]
        params += ["const long long os0", "const long long os1"]
        x = _as_double("x[xo + (i) * xs1]", self.dtype)
        value = "(nrm[i])" if not self.bias else f"__dadd_rn(nrm[i], {_as_double('bias[(i) * bs]', self.dtype)})"
        key = "v" if self.bias else x
        body = [
            "__shared__ double buf[2048];",
            "__shared__ unsigned char keep[2048];",
            "const double minus_inf = -__longlong_as_double(0x7ff0000000000000LL);",
            "const long long size = experts / groups;",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            "  const long long xo = row * xs0;",
            "  double* nrm = norm + row * experts;",
            "  double* key = keys + row * experts;",
        ]
        if self.norm_type == 0:
            body += [
                "  double v = minus_inf;",
                f"  for (long long i = threadIdx.x; i < experts; i += blockDim.x) v = acl_maximum(v, {x});",
                "  buf[threadIdx.x] = v;",
                "  __syncthreads();",
                "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {",
                "    if (threadIdx.x < s) buf[threadIdx.x] = acl_maximum(buf[threadIdx.x], buf[threadIdx.x + s]);",
                "    __syncthreads();",
                "  }",
                "  const double top = buf[0];",
                "  __syncthreads();",
                "  for (long long i = threadIdx.x; i < width; i += blockDim.x) {",
                f"    const double e = i < experts ? acl_rank_exp(__dsub_rn({x}, top)) : 0.0;",
                "    buf[i] = e;",
                "    if (i < experts) nrm[i] = e;",
                "  }",
                "  __syncthreads();",
                "  for (long long s = width / 2; s > 0; s >>= 1) {",
                "    for (long long i = threadIdx.x; i < s; i += blockDim.x) buf[i] = __dadd_rn(buf[i], buf[i + s]);",
                "    __syncthreads();",
                "  }",
                "  const double total = buf[0];",
                "  __syncthreads();",
                "  for (long long i = threadIdx.x; i < experts; i += blockDim.x) nrm[i] = nrm[i] / total;",
            ]
        else:
            body.append(
                f"  for (long long i = threadIdx.x; i < experts; i += blockDim.x) "
                f"nrm[i] = 1.0 / __dadd_rn(1.0, acl_rank_exp(-{x}));"
            )
        body += [
            "  for (long long i = threadIdx.x; i < experts; i += blockDim.x) {",
            "    out_norm[row * os0 + i * os1] = (float)nrm[i];",
            f"    const double v = {value};",
            f"    key[i] = {key};",
            "  }",
            "  __syncthreads();",
            "  for (long long g = threadIdx.x; g < groups; g += blockDim.x) {",
            "    long long a = -1, b = -1;",
            "    for (long long i = g * size; i < (g + 1) * size; ++i) {",
            "      if (a < 0 || acl_rank_before(key[i], i, key[a], a)) { b = a; a = i; }",
            "      else if (b < 0 || acl_rank_before(key[i], i, key[b], b)) b = i;",
            "    }",
        ]
        if self.mode == 0:
            body.append("    buf[g] = key[a];")
        else:
            val = "key" if self.bias else "nrm"
            body.append(f"    buf[g] = __dadd_rn({val}[a], {val}[b]);")
        body += [
            "  }",
            "  __syncthreads();",
            "  for (long long g = threadIdx.x; g < groups; g += blockDim.x) {",
            "    long long rank = 0;",
            "    for (long long h = 0; h < groups; ++h) rank += acl_rank_before(buf[h], h, buf[g], g) ? 1 : 0;",
            "    keep[g] = rank < k_group ? 1 : 0;",
            "  }",
            "  __syncthreads();",
            "  for (long long i = threadIdx.x; i < experts; i += blockDim.x) if (!keep[i / size]) key[i] = minus_inf;",
            "  __syncthreads();",
            "}",
        ]
        helpers = HELPERS + ranking_exp_source() + RANK_BEFORE
        return source(
            f"moe: gating top-k keys of {self.dtype.short} rows", meta(1, 1), self.kernel_name, params, body, helpers
        )


@dataclass(frozen=True)
class GatingTopKEmit:
    """One thread per row: the first k sorted experts, their normOut renormalised (``renorm``) and scaled."""

    dtype: D
    renorm: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gating_k_emit", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", "const double* norm", "const int* sorted_idx", f"{st}* y", "int* expert"]
        params += [f"const long long {n}" for n in ("experts", "k", "ys0", "ys1", "es0", "es1")]
        params += ["const double scaling", "const double eps"]
        body = [
            _GRID_LOOP,
            _loop("m.n"),
            "  const double* nrm = norm + e * experts;",
            "  const int* idx = sorted_idx + e * experts;",
            "  double denom = 1.0;",
        ]
        if self.renorm:
            body += [
                "  double sum = 0.0;",
                "  for (long long j = 0; j < k; ++j) sum += nrm[idx[j]];",
                "  denom = sum + eps;",
            ]
        body += [
            "  for (long long j = 0; j < k; ++j) {",
            f"    const double w = {'nrm[idx[j]] / denom' if self.renorm else 'nrm[idx[j]]'} * scaling;",
            f"    y[e * ys0 + j * ys1] = {store_narrow('w', self.dtype)};",
            "    expert[e * es0 + j * es1] = idx[j];",
            "  }",
            "}",
        ]
        return source(
            f"moe: gating top-k weights into {self.dtype.short}", meta(1, 1), self.kernel_name, params, body, HELPERS
        )


# ----------------------------------------------------------------------------- MoeGatingTopKBackward
def gating_backward_shared(experts: int, k: int) -> int:
    """Dynamic shared bytes of :class:`GatingTopKBackward`: k doubles, k ints and one int per expert."""
    return k * 8 + k * 4 + experts * 4


@dataclass(frozen=True)
class GatingTopKBackward:
    """MoeGatingTopKBackward, one block per row (grid-stride over rows), flag-gated, in double.

    Threads take the row's k chosen experts: ``D = Σ x + eps`` and ``Σ x·s·g`` (``beta`` is it over ``D``)
    by warp shuffles, then every thread adds the warps' partials in warp order (fixed orders: deterministic).
    ``(s·g - beta)/D`` per chosen expert goes to shared memory (sized by :func:`gating_backward_shared`) and
    ``slot[expert] = p``; a row whose experts repeat (``slot`` names another p) is marked. Every thread then
    writes its experts' ``x(1 - x)·gradNorm``: 0 where no p reaches the expert, the one p's value, or, in a
    marked row, the sum over the p reaching it in increasing p (the reference's order). No atomics; four
    barriers a row.
    """

    grad: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("gating_k_backward", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.grad).storage
        params = ["const Meta m", "const float* x", f"const {st}* g", "const int* idx", f"{st}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("experts", "k", "xs0", "xs1", "gs0", "gs1", "is0", "is1")]
        params += ["const long long os0", "const long long os1", "const double scaling", "const double eps"]
        body = [
            "if (*flag) return;",
            "extern __shared__ double gating_bw_raw[];  // gw[k], then chosen[k] and slot[experts] as ints",
            "double* gw = gating_bw_raw;",
            "int* chosen = (int*)(gating_bw_raw + k);",
            "int* slot = chosen + k;",
            "__shared__ double wa[32], wb[32];",
            "__shared__ int repeated;",
            "const int lane = threadIdx.x % ACL_WARP_SIZE, warp = threadIdx.x / ACL_WARP_SIZE;",
            "const int warps = blockDim.x / ACL_WARP_SIZE;",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            "  const double x_own = threadIdx.x < experts ? (double)x[row * xs0 + threadIdx.x * xs1] : 0.0;",
            "  double a = 0.0, b = 0.0;",
            "  for (long long p = threadIdx.x; p < k; p += blockDim.x) {",
            "    const int j = idx[row * is0 + p * is1];",
            "    const double xv = (double)x[row * xs0 + j * xs1];",
            f"    const double gv = {_as_double('g[row * gs0 + p * gs1]', self.grad)} * scaling;",
            "    chosen[p] = j; gw[p] = gv;",
            "    a += xv; b += xv * gv;",
            "  }",
            "  for (long long j = threadIdx.x; j < experts; j += blockDim.x) slot[j] = -1;",
            "  if (threadIdx.x == 0) repeated = 0;",
            "  for (int off = ACL_WARP_SIZE / 2; off > 0; off /= 2) {",
            "    a += ACL_SHFL_DOWN(a, off);",
            "    b += ACL_SHFL_DOWN(b, off);",
            "  }",
            "  if (lane == 0) { wa[warp] = a; wb[warp] = b; }",
            "  __syncthreads();",
            "  double sa = 0.0, sb = 0.0;",
            "  for (int w = 0; w < warps; ++w) { sa += wa[w]; sb += wb[w]; }",
            "  const double d = sa + eps, beta = sb / d;",
            "  for (long long p = threadIdx.x; p < k; p += blockDim.x) {",
            "    gw[p] = (gw[p] - beta) / d;",
            "    slot[chosen[p]] = (int)p;  // of repeated experts one p stays: the row is marked below",
            "  }",
            "  __syncthreads();",
            "  for (long long p = threadIdx.x; p < k; p += blockDim.x) if (slot[chosen[p]] != (int)p) repeated = 1;",
            "  __syncthreads();",
            "  for (long long j = threadIdx.x; j < experts; j += blockDim.x) {",
            "    const int q = slot[j];",
            "    double acc = 0.0;",
            "    if (q >= 0 && !repeated) acc += gw[q];  // 0 + gw, as the reference's scatter adds (-0 becomes 0)",
            "    else if (q >= 0) for (long long p = 0; p < k; ++p) if (chosen[p] == j) acc += gw[p];",
            "    const double xv = j == threadIdx.x ? x_own : (double)x[row * xs0 + j * xs1];",
            f"    out[row * os0 + j * os1] = {store_narrow('xv * (1.0 - xv) * acc', self.grad)};",
            "  }",
            "  __syncthreads();  // the next row rewrites the shared arrays and partials",
            "}",
        ]
        return source(
            f"moe: gating top-k backward into {self.grad.short}",
            meta(1, 1),
            self.kernel_name,
            params,
            body,
            HELPERS + SHUFFLE,
        )


# ----------------------------------------------------------------------------- MoeTokenPermute / Unpermute
@dataclass(frozen=True)
class PermuteCheck:
    """``*flag = 1`` unless the smallest and largest sorted expert numbers lie in ``[0, high)`` (one thread)."""

    key_bits: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("permute_check", self)

    def source(self) -> str:
        """The complete kernel source."""
        kt = "unsigned long long" if self.key_bits == 64 else "unsigned int"
        sign = "0x8000000000000000ull" if self.key_bits == 64 else "0x80000000u"
        cast = "long long" if self.key_bits == 64 else "int"
        params = ["const Meta m", f"const {kt}* sorted_keys", "int* flag", "const long long high"]
        body = [
            "if (blockIdx.x != 0 || threadIdx.x != 0 || m.n == 0) return;",
            f"const long long low_value = (long long)({cast})(sorted_keys[0] ^ {sign});",
            f"const long long high_value = (long long)({cast})(sorted_keys[m.n - 1] ^ {sign});",
            "if (low_value < 0 || high_value >= high) *flag = 1;",
        ]
        return source("moe: expert numbers in range", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class PermuteIndices:
    """``sortedIndicesOut[pos[p]] = p`` (flag-gated): each flat (token, slot) learns its sorted position."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("permute_indices", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const int* pos", "int* out", "const int* flag", "const long long os"]
        body = ["if (*flag) return;", _GRID_LOOP, _loop("m.n"), "  out[(long long)pos[e] * os] = (int)e;", "}"]
        return source("moe: permute positions", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class RowGather:
    """``out[p, rest] = src[pos[p] / top_k, rest]`` for the kept rows (flag-gated).

    ``word`` > 0: rows move as ``word``-byte words (contiguous rows, aligned; Meta n = rows × words per
    row); else element by element of ``itemsize`` bytes over the rest dims (Meta: shape = rest dims,
    rows 0 src, 1 out; n = rows × inner).
    """

    itemsize: int
    ndim: int
    word: int = 0

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("row_gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.word or self.itemsize)
        params = ["const Meta m", f"const {w}* src", "const int* pos", f"{w}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("top_k", "inner", "srs", "ors")]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long p = e / inner, q = e % inner;",
            "  const long long r = (long long)pos[p] / top_k;",
        ]
        if self.word:
            body.append("  out[p * ors + q] = src[r * srs + q];")
        else:
            body += [
                *("  " + line for line in row_offsets(self.ndim, 2, "q")),
                "  out[p * ors + o1] = src[r * srs + o0];",
            ]
        body.append("}")
        kind = f"{self.word}-byte words" if self.word else f"{self.itemsize}-byte elements"
        return source(f"moe: gather permuted rows, {kind}", meta(self.ndim, 2), self.kernel_name, params, body, HELPERS)


@dataclass(frozen=True)
class Unpermute:
    """``out[i, h] = Σ_j src[order[i·K + j], h] · probs[i, j]`` in double (flag-gated; probs 1 without it).

    ``bounded``: positions at or past ``kept`` (a trailing parameter) add nothing: MoeTokenPermuteGrad's copies
    that the forward's numOutTokens dropped.
    """

    dtype: D
    probs: D | None
    bounded: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("unpermute", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* src", "const int* order"]
        if self.probs is not None:
            params.append(f"const {ctype(self.probs).storage}* probs")
        params += [f"{st}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("k", "hidden", "ss0", "ss1", "os", "ps0", "ps1", "out0", "out1")]
        if self.bounded:
            params.append("const long long kept")
        weight = "1.0" if self.probs is None else _as_double("probs[i * ps0 + j * ps1]", self.probs)
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long i = e / hidden, h = e % hidden;",
            "  double acc = 0.0;",
            "  for (long long j = 0; j < k; ++j) {",
            "    const long long at = (long long)order[(i * k + j) * os];",
            *(["    if (at >= kept) continue;"] if self.bounded else []),
            f"    acc += {_as_double('src[at * ss0 + h * ss1]', self.dtype)} * {weight};",
            "  }",
            f"  out[i * out0 + h * out1] = {store_narrow('acc', self.dtype)};",
            "}",
        ]
        what = "permute grad" if self.bounded else "unpermute"
        return source(f"moe: {what} into {self.dtype.short}", meta(1, 1), self.kernel_name, params, body, HELPERS)


@dataclass(frozen=True)
class InverseScatter:
    """``inverse[order[i]] = i`` (flag-gated, after the range check): each position learns who names it."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("inverse_scatter", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const int* order", "int* inverse", "const int* flag", "const long long os"]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  inverse[(long long)order[e * os]] = (int)e;",
            "}",
        ]
        return source("moe: inverse of sortedIndices", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class InverseCheck:
    """``*flag = 1`` where ``inverse[order[i]] != i``: a position named twice (one of its writers lost)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("inverse_check", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const int* order", "const int* inverse", "int* flag", "const long long os"]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  if ((long long)inverse[(long long)order[e * os]] != e) *flag = 1;",
            "}",
        ]
        return source("moe: sortedIndices is a permutation", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class UnpermuteGradRows:
    """``out[p, h] = grad[t, h] · probs[t, j]`` with ``t·K + j = inverse[p]`` (a copy of grad without probs).

    One rounding of the exact double product (flag-gated; Meta n = rows × hidden of out).
    """

    dtype: D
    probs: D | None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("unpermute_grad_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* grad", "const int* inverse"]
        if self.probs is not None:
            params.append(f"const {ctype(self.probs).storage}* probs")
        params += [f"{st}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("k", "hidden", "gs0", "gs1", "ps0", "ps1", "out0", "out1")]
        value = _as_double("grad[t * gs0 + h * gs1]", self.dtype)
        if self.probs is not None:
            value += " * " + _as_double("probs[t * ps0 + j * ps1]", self.probs)
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long p = e / hidden, h = e % hidden;",
            "  const long long i = (long long)inverse[p];",
            "  const long long t = i / k, j = i % k;",
            f"  const double v = {value};",
            f"  out[p * out0 + h * out1] = {store_narrow('v', self.dtype)};",
            "}",
        ]
        return source(
            f"moe: unpermute grad rows into {self.dtype.short}", meta(1, 1), self.kernel_name, params, body, HELPERS
        )


@dataclass(frozen=True)
class UnpermuteProbsGrad:
    """``probsGrad[t, j] = Σ_h grad[t, h] · src[order[t·K + j], h]`` in double, one block per (t, j) (flag-gated).

    Meta n = tokens × K; the block size must be a power of two at most 256 (a tree reduction in shared memory).
    """

    dtype: D
    probs: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("unpermute_probs_grad", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* grad", f"const {st}* src", "const int* order"]
        params += [f"{ctype(self.probs).storage}* out", "const int* flag"]
        params += [f"const long long {n}" for n in ("k", "hidden", "gs0", "gs1", "ss0", "ss1", "os", "out0", "out1")]
        g = _as_double("grad[t * gs0 + h * gs1]", self.dtype)
        x = _as_double("src[at * ss0 + h * ss1]", self.dtype)
        body = [
            "if (*flag) return;",
            "__shared__ double red[256];",
            "for (long long r = blockIdx.x; r < m.n; r += gridDim.x) {",
            "  const long long t = r / k, j = r % k;",
            "  const long long at = (long long)order[r * os];",
            "  double acc = 0.0;",
            f"  for (long long h = threadIdx.x; h < hidden; h += blockDim.x) acc += {g} * {x};",
            "  red[threadIdx.x] = acc;",
            "  __syncthreads();",
            "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {",
            "    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];",
            "    __syncthreads();",
            "  }",
            f"  if (threadIdx.x == 0) out[t * out0 + j * out1] = {store_narrow('red[0]', self.probs)};",
            "  __syncthreads();",
            "}",
        ]
        comment = f"moe: unpermute probs grad, {self.dtype.short} rows into {self.probs.short}"
        return source(comment, meta(1, 1), self.kernel_name, params, body, HELPERS)


# ----------------------------------------------------------------------------- MoeInitRoutingV2
def _search(key_bits: int) -> str:
    """``acl_first_at_least(keys, n, e)``: the first sorted position whose expert is at least ``e``."""
    kt = "unsigned long long" if key_bits == 64 else "unsigned int"
    sign = "0x8000000000000000ull" if key_bits == 64 else "0x80000000u"
    value = "long long" if key_bits == 64 else "int"
    return f"""
typedef {kt} acl_key_t;
__device__ __forceinline__ acl_key_t acl_expert_key(long long e) {{ return (acl_key_t)e ^ {sign}; }}
__device__ __forceinline__ long long acl_key_expert(acl_key_t k) {{ return (long long)({value})(k ^ {sign}); }}
__device__ __forceinline__ long long acl_first_at_least(const acl_key_t* keys, long long n, long long e) {{
  const acl_key_t target = acl_expert_key(e);
  long long lo = 0, hi = n;
  while (lo < hi) {{ const long long mid = (lo + hi) / 2; if (keys[mid] < target) lo = mid + 1; else hi = mid; }}
  return lo;
}}
"""


@dataclass(frozen=True)
class ExpertCounts:
    """Per expert (one thread each, Meta n = experts): its token count, or the running total through it (flag-gated)."""

    key_bits: int
    cumulative: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("expert_counts", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const acl_key_t* keys", "int* out", "const int* flag", "const long long total"]
        params.append("const long long os")
        value = "hi" if self.cumulative else "hi - acl_first_at_least(keys, total, e)"
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long hi = acl_first_at_least(keys, total, e + 1);",
            f"  out[e * os] = (int)({value});",
            "}",
        ]
        return source("moe: tokens per expert", meta(1, 1), self.kernel_name, params, body, _search(self.key_bits))


@dataclass(frozen=True)
class CapacitySlots:
    """Drop/pad mode, per sorted position i (flag-gated): ``expandedRowIdxOut[pos[i]]`` = its slot ``e·C + r`` or -1.

    ``limit``: an ``experts`` parameter follows, and expert numbers outside [0, experts) get -1 (MoeInitRoutingV3).
    """

    key_bits: int
    limit: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("capacity_slots", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const acl_key_t* keys", "const int* pos", "int* out", "const int* flag"]
        params += ["const long long capacity", "const long long os"]
        fits = "r < capacity && ex >= 0 && ex < experts" if self.limit else "r < capacity"
        if self.limit:
            params.append("const long long experts")
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long ex = acl_key_expert(keys[e]);",
            "  const long long r = e - acl_first_at_least(keys, m.n, ex);",
            f"  out[(long long)pos[e] * os] = {fits} ? (int)(ex * capacity + r) : -1;",
            "}",
        ]
        return source("moe: capacity slots", meta(1, 1), self.kernel_name, params, body, _search(self.key_bits))


@dataclass(frozen=True)
class CapacityGather:
    """Drop/pad mode: ``out[e, r, h] = x[pos[first(e) + r] / k, h]`` while expert e has an r-th token, else 0.

    Meta n = experts × capacity × h (flag-gated); elements of ``itemsize`` bytes.
    """

    key_bits: int
    itemsize: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("capacity_gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = ["const Meta m", "const acl_key_t* keys", "const int* pos", f"const {w}* x", f"{w}* out"]
        params += ["const int* flag"] + [
            f"const long long {n}" for n in ("total", "k", "capacity", "hidden", "xs0", "xs1", "os0", "os1", "os2")
        ]
        body = [
            "if (*flag) return;",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long slot = e / hidden, h = e % hidden;",
            "  const long long ex = slot / capacity, r = slot % capacity;",
            "  const long long i = acl_first_at_least(keys, total, ex) + r;",
            f"  {w} v{{}};",
            "  if (i < acl_first_at_least(keys, total, ex + 1)) v = x[((long long)pos[i] / k) * xs0 + h * xs1];",
            "  out[ex * os0 + r * os1 + h * os2] = v;",
            "}",
        ]
        helpers = HELPERS + _search(self.key_bits)
        return source("moe: drop/pad gather", meta(1, 1), self.kernel_name, params, body, helpers)


@dataclass(frozen=True)
class ZeroFill:
    """Zeros into every element of a strided view (Meta: its shape, row 0 its strides)."""

    itemsize: int
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("zero_fill", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = ["const Meta m", f"{w}* out"]
        body = [
            _GRID_LOOP,
            _loop("m.n"),
            *("  " + line for line in row_offsets(self.ndim, 1, "e")),
            f"  out[o0] = {w}{{}};",
            "}",
        ]
        return source("moe: zeros", meta(self.ndim, 1), self.kernel_name, params, body, HELPERS)


# ----------------------------------------------------------------------------- MoeInitRoutingV3
_F32 = ctype(D.ACL_FLOAT)


@dataclass(frozen=True)
class RangeBounds:
    """One thread: ``bounds = {first sorted position of expert >= start, ... >= end}`` (the routed copies)."""

    key_bits: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("range_bounds", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const acl_key_t* keys", "long long* bounds", "const long long start"]
        params.append("const long long end")
        body = [
            "if (blockIdx.x != 0 || threadIdx.x != 0) return;",
            "bounds[0] = acl_first_at_least(keys, m.n, start);",
            "bounds[1] = acl_first_at_least(keys, m.n, end);",
        ]
        return source("moe: active expert range", meta(1, 1), self.kernel_name, params, body, _search(self.key_bits))


@dataclass(frozen=True)
class RangeRowIndex:
    """expandedRowIdxOut of a dropless MoeInitRoutingV3, per position e of Meta n = rows·k.

    Gather: ``out[pos[e]] = e - lo`` for the routed sorted positions ``lo <= e < hi``, else -1. Scatter:
    ``out[e] = pos[(lo + e) % n]`` (the routed copies, then the rest in rotated sorted order).
    """

    scatter: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("range_row_index", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const int* pos", "const long long* bounds", "int* out", "const long long os"]
        if self.scatter:
            line = "  out[e * os] = pos[(lo + e) % m.n];"
        else:
            line = "  out[(long long)pos[e] * os] = (e >= lo && e < hi) ? (int)(e - lo) : -1;"
        body = ["const long long lo = bounds[0], hi = bounds[1];", _GRID_LOOP, _loop("m.n"), line, "}"]
        return source("moe: routed row index", meta(1, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class RangeGather:
    """``out[p, q] = src[pos[lo + p] / top_k, q]`` for the routed rows p < hi - lo, zeros after (Meta n = rows × inner).

    ``word`` > 0: contiguous aligned rows moved as ``word``-byte words (strides in words, column stride 1);
    else ``itemsize``-byte elements with a column stride (0 for a 1-D source such as per-row scales).
    """

    itemsize: int
    word: int = 0

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("range_gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.word or self.itemsize)
        params = ["const Meta m", f"const {w}* src", "const int* pos", "const long long* bounds", f"{w}* out"]
        params += [f"const long long {n}" for n in ("top_k", "inner", "srs", "scs", "ors", "ocs")]
        body = [
            "const long long lo = bounds[0], routed = bounds[1] - bounds[0];",
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long p = e / inner, q = e % inner;",
            f"  {w} v{{}};",
            "  if (p < routed) v = src[((long long)pos[lo + p] / top_k) * srs + q * scs];",
            "  out[p * ors + q * ocs] = v;",
            "}",
        ]
        kind = f"{self.word}-byte words" if self.word else f"{self.itemsize}-byte elements"
        return source(f"moe: gather routed rows, {kind}", meta(1, 1), self.kernel_name, params, body, HELPERS)


@dataclass(frozen=True)
class RangeQuant:
    """Routed rows quantised to int8, one block per output row (Meta n = rows out; block size a power of two ≤ 256).

    ``static``: ``code = rint(f16(f16(f16(x)·f16(scale)) + f16(offset)))`` (CANN's float16 steps). Else
    dynamic, in float32: ``v = x · smooth[expert - start]`` (when ``smooth``), ``s = max|v| / 127``,
    ``code = rint(v / s)``, ``scaleOut = s``. Codes: NaN to 0, saturated to int8. Rows past the routed
    copies are zeros (scale 0).
    """

    dtype: D
    static: bool
    smooth: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("range_quant", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", f"const {st}* x", "const int* pos", "const long long* bounds"]
        params += ["const acl_key_t* keys", "const float* qs", "const float* qo", "signed char* out", "float* so"]
        params += [f"const long long {n}" for n in ("top_k", "hidden", "xs0", "xs1", "qs0", "qs1", "os0", "os1")]
        params += ["const long long sos", "const long long start"]
        x_value = load("x[src * xs0 + h * xs1]", ctype(self.dtype), _F32)
        code = (
            "  const float r = rintf(c); const signed char q = c != c ? (signed char)0 : (signed char)"
            "(r < -128.0f ? -128.0f : (r > 127.0f ? 127.0f : r));"
        )
        body = [
            "__shared__ float red[256];",
            "const long long lo = bounds[0], routed = bounds[1] - bounds[0];",
            "for (long long row = blockIdx.x; row < m.n; row += gridDim.x) {",
            "  if (row >= routed) {",
            "    for (long long h = threadIdx.x; h < hidden; h += blockDim.x) out[row * os0 + h * os1] = 0;",
            "    if (so != 0 && threadIdx.x == 0) so[row * sos] = 0.0f;" if not self.static else "",
            "    continue;",
            "  }",
            "  const long long src = (long long)pos[lo + row] / top_k;",
        ]
        if self.static:
            body += [
                "  const float sc = acl_h2f(acl_f2h(qs[0])), of = acl_h2f(acl_f2h(qo[0]));",
                "  for (long long h = threadIdx.x; h < hidden; h += blockDim.x) {",
                f"    const float xv = acl_h2f(acl_f2h({x_value}));",
                "    const float c = acl_h2f(acl_f2h(acl_h2f(acl_f2h(xv * sc)) + of));",
                "  " + code,
                "    out[row * os0 + h * os1] = q;",
                "  }",
                "}",
            ]
        else:
            smooth = "qs[g * qs0 + h * qs1]" if self.smooth else "1.0f"
            value = f"({x_value} * {smooth})" if self.smooth else x_value
            body += [
                "  const long long g = acl_key_expert(keys[lo + row]) - start;" if self.smooth else "",
                "  float amax = 0.0f;",
                "  for (long long h = threadIdx.x; h < hidden; h += blockDim.x)",
                f"    amax = acl_maximum(amax, fabsf({value}));",
                "  red[threadIdx.x] = amax;",
                "  __syncthreads();",
                "  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {",
                "    if (threadIdx.x < s) red[threadIdx.x] = acl_maximum(red[threadIdx.x], red[threadIdx.x + s]);",
                "    __syncthreads();",
                "  }",
                "  const float sc = red[0] / 127.0f;",
                "  __syncthreads();",
                "  for (long long h = threadIdx.x; h < hidden; h += blockDim.x) {",
                f"    const float c = {value} / sc;",
                "  " + code,
                "    out[row * os0 + h * os1] = q;",
                "  }",
                "  if (threadIdx.x == 0) so[row * sos] = sc;",
                "}",
            ]
        kind = "static" if self.static else "dynamic"
        return source(
            f"moe: {kind} int8 of routed {self.dtype.short} rows",
            meta(1, 1),
            self.kernel_name,
            params,
            [line for line in body if line],
            _search(32),
        )


@dataclass(frozen=True)
class RangeCounts:
    """Per expert j of the range (Meta n = end - start): its token count, or the running total through it (int64)."""

    key_bits: int
    cumulative: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("range_counts", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const acl_key_t* keys", "long long* out", "const long long total"]
        params += ["const long long start", "const long long os"]
        low = "start" if self.cumulative else "start + e"
        body = [
            _GRID_LOOP,
            _loop("m.n"),
            "  const long long hi = acl_first_at_least(keys, total, start + e + 1);",
            f"  out[e * os] = hi - acl_first_at_least(keys, total, {low});",
            "}",
        ]
        return source(
            "moe: tokens per routed expert", meta(1, 1), self.kernel_name, params, body, _search(self.key_bits)
        )


@dataclass(frozen=True)
class KeyValueCounts:
    """One block: ``out[r] = (expert, count)`` for the r-th expert of [start, end) with tokens, zeros after.

    Experts go in chunks of blockDim.x (a power of two ≤ 256) through a shared-memory prefix sum of
    "has tokens"; Meta n = the rows of ``out`` (expertNum).
    """

    key_bits: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("key_value_counts", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const acl_key_t* keys", "long long* out", "const long long total"]
        params += ["const long long start", "const long long end", "const long long os0", "const long long os1"]
        body = [
            "__shared__ long long scan[256];",
            "if (blockIdx.x != 0) return;",
            "long long base = 0;",
            "for (long long chunk = start; chunk < end; chunk += blockDim.x) {",
            "  const long long ex = chunk + threadIdx.x;",
            "  long long count = 0;",
            "  if (ex < end) count = acl_first_at_least(keys, total, ex + 1) - acl_first_at_least(keys, total, ex);",
            "  scan[threadIdx.x] = count > 0 ? 1 : 0;",
            "  __syncthreads();",
            "  for (unsigned s = 1; s < blockDim.x; s <<= 1) {",
            "    const long long add = threadIdx.x >= s ? scan[threadIdx.x - s] : 0;",
            "    __syncthreads();",
            "    scan[threadIdx.x] += add;",
            "    __syncthreads();",
            "  }",
            "  if (count > 0) {",
            "    const long long r = base + scan[threadIdx.x] - 1;",
            "    out[r * os0] = ex;",
            "    out[r * os0 + os1] = count;",
            "  }",
            "  base += scan[blockDim.x - 1];",
            "  __syncthreads();",
            "}",
            "for (long long r = base + threadIdx.x; r < m.n; r += blockDim.x) {",
            "  out[r * os0] = 0;",
            "  out[r * os0 + os1] = 0;",
            "}",
        ]
        return source("moe: key-value token counts", meta(1, 1), self.kernel_name, params, body, _search(self.key_bits))
