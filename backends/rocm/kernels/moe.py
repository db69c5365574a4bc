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
from dataclasses import dataclass

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.movement import HELPERS, store_narrow, word
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
