"""Kernel generators of the construction and index movement ops: word fills, Linspace, OneHot, Roll, flat Take.

They share the movement kernels' conventions (:mod:`acl_rocm.kernels.movement`): a grid-stride loop
over one iteration space in row-major order, a ``Meta`` struct of the index type holding ``n``, the
shape and one stride row per operand (in elements), and storage words of the element's byte size
for everything that is only moved. Gathers read the index-check flag first and write nothing when a
check kernel has set it (the op reports 161002 when its stream is synchronised).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.movement import grid_loop, kernel_source, meta_struct, store_narrow, unique_name, word


@dataclass(frozen=True)
class Fill:
    """``dst = value`` over one strided view (row 0), ``value`` the storage bits of the element (in 64 bits)."""

    itemsize: int
    ndim: int
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("fill", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        return kernel_source(
            f"fill of {self.itemsize}-byte elements",
            meta_struct(self.index_type, self.ndim, 1),
            self.kernel_name,
            ["const Meta m", f"{w}* dst", "const unsigned long long value"],
            grid_loop(self.index_type, self.ndim, 1, [f"dst[o0] = ({w})value;"]),
        )


@dataclass(frozen=True)
class Linspace:
    """torch's symmetric linspace in double (row 0 out): the first half from ``start``, the rest from ``end``.

    Each product and sum is rounded on its own (no fused multiply-add), as NumPy computes it, and the
    double is rounded once to out's dtype (integers truncate toward zero and saturate).
    """

    dtype: D
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("linspace", self)

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.dtype)
        if c.kind == "int":
            store = f"({c.storage})acl_f2i(r, {c.lo!r}, {c.hi!r})"
        else:
            store = store_narrow("r", self.dtype)
        params = [
            "const Meta m",
            f"{c.storage}* out",
            "const double start",
            "const double end",
            "const double step",
            "const long long steps",
        ]
        body = [
            "const long long k = (long long)i;",
            "double r;",
            "if (steps == 1) r = start;",
            "else if (k < steps / 2) r = __dadd_rn(start, __dmul_rn((double)k, step));",
            "else r = __dsub_rn(end, __dmul_rn((double)(steps - 1 - k), step));",
            f"out[o0] = {store};",
        ]
        return kernel_source(
            f"linspace into {self.dtype.short}",
            meta_struct(self.index_type, 1, 1),
            self.kernel_name,
            params,
            grid_loop(self.index_type, 1, 1, body),
        )


@dataclass(frozen=True)
class OneHot:
    """``out[p] = self[p without axis] == p[axis] ? on[0] : off[0]`` (rows: 0 out, 1 self with 0 on ``axis``)."""

    index: D
    itemsize: int
    ndim: int
    index_type: str
    axis: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("one_hot", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = ["const Meta m", f"const {ctype(self.index).storage}* self", f"const {w}* on", f"const {w}* off"]
        params.append(f"{w}* dst")
        body = [
            "const long long v = (long long)self[o1];",
            f"dst[o0] = v == (long long)c[{self.axis}] ? on[0] : off[0];",
        ]
        return kernel_source(
            f"one hot of {self.index.short} along axis {self.axis}, {self.itemsize}-byte values",
            meta_struct(self.index_type, self.ndim, 2),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 2, body),
        )


@dataclass(frozen=True)
class Roll:
    """``out[p] = x[p - shift]`` cyclically (rows: 0 out, 1 x, 2 the shift per dim, each in [0, size)).

    ``flat`` rolls the C-order sequence of elements instead: element i of out takes element
    ``(i - shift[0]) mod n`` of x, found through x's shape and strides.
    """

    itemsize: int
    ndim: int
    index_type: str
    flat: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("roll", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        idx = self.index_type
        if self.flat:
            body = [
                f"{idx} j = i - m.stride[2][0];",
                "if (j < 0) j += m.n;",
                f"{idx} at = 0;",
                f"for (int d = {self.ndim - 1}; d >= 0; --d) {{",
                "  at += (j % m.shape[d]) * m.stride[1][d];",
                "  j /= m.shape[d];",
                "}",
            ]
        else:
            body = [
                f"{idx} at = 0;",
                "#pragma unroll",
                f"for (int d = 0; d < {self.ndim}; ++d) {{",
                f"  {idx} s = c[d] - m.stride[2][d];",
                "  if (s < 0) s += m.shape[d];",
                "  at += s * m.stride[1][d];",
                "}",
            ]
        body.append("dst[o0] = src[at];")
        return kernel_source(
            f"{'flat ' if self.flat else ''}roll of {self.itemsize}-byte elements",
            meta_struct(idx, self.ndim, 3),
            self.kernel_name,
            ["const Meta m", f"const {w}* src", f"{w}* dst"],
            grid_loop(idx, self.ndim, 1, body),
        )


@dataclass(frozen=True)
class CheckVec:
    """``*flag = 1`` when a value of a contiguous index array lies outside ``[low, high)``: 16-byte loads.

    ``ACL_TAKE_CHECK=vec``: the Check launch's work with fewer instructions a byte. The ``head`` elements before
    the first 16-byte boundary and the tail after the last whole vector are taken one per thread; between them
    each thread loads ``UNROLL`` vectors before testing any (their loads in flight together). A value is tested
    as ``(u64)(v - low) >= high - low`` (one unsigned compare, no overflow); a thread writes the flag once, at
    its end, only when it saw a bad value; a kernel whose flag is already set returns at once.
    """

    index: D
    UNROLL = 4

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("check_vec", self)

    @property
    def per_vector(self) -> int:
        """Index values in one 16-byte vector."""
        return 16 // (self.index.info.storage_bits // 8)

    def source(self) -> str:
        """The complete kernel source (arguments: n, index, head, low, high, flag)."""
        t, v, u = ctype(self.index).storage, self.per_vector, self.UNROLL
        vec = f"AclVec<{t}, {v}>"
        test = "bad |= (unsigned long long)(long long){x} - (unsigned long long)low >= span;"
        params = ["const long long n", f"const {t}* index", "const long long head", "const long long low"]
        params += ["const long long high", "int* flag"]
        body = [
            "if (*flag) return;  // an earlier check of this call has failed: nothing to learn",
            "const unsigned long long span = (unsigned long long)high - (unsigned long long)low;",
            "const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "const long long threads = (long long)gridDim.x * blockDim.x;",
            f"const long long nvec = (n - head) / {v};",
            f"const {vec}* vecs = reinterpret_cast<const {vec}*>(index + head);",
            "bool bad = false;",
            f"for (long long b = tid; b < nvec; b += threads * {u}) {{",
            f"  {vec} q[{u}];",
            "  #pragma unroll",
            f"  for (int k = 0; k < {u}; ++k) if (b + k * threads < nvec) q[k] = vecs[b + k * threads];",
            "  #pragma unroll",
            f"  for (int k = 0; k < {u}; ++k) {{",
            "    if (b + k * threads >= nvec) break;",
            "    #pragma unroll",
            f"    for (int j = 0; j < {v}; ++j) {{ {test.format(x='q[k].v[j]')} }}",
            "  }",
            "}",
            f"for (long long i = tid; i < head; i += threads) {{ {test.format(x='index[i]')} }}",
            f"for (long long i = head + nvec * {v} + tid; i < n; i += threads) {{ {test.format(x='index[i]')} }}",
            "if (bad) *flag = 1;",
        ]
        return kernel_source(
            f"range check of contiguous {self.index.short} indices, 16-byte loads", "", self.kernel_name, params, body
        )


@dataclass(frozen=True)
class TakeFlat:
    """``out[p] = self.flat[index[p]]`` (Meta rows: 0 out, 1 index, 2 self's shape, 3 self's strides).

    Negative values count from the end; the flat position is unravelled over self's shape in C
    order (rows 2 and 3, padded in front with size 1), so any strided self works.
    """

    itemsize: int
    index: D
    ndim: int
    index_type: str
    fused: bool = False
    """``ACL_TAKE_CHECK=fused`` (the default): no Check launch before (the indices are read once, not twice); an
    element whose index is outside [-numel, numel) sets the flag and is not written, and every other element is
    (no early return on the flag: what ``out`` holds after a failed call does not depend on thread order). The call
    fails with 161002 as under the Check launch, which leaves ``out`` untouched instead."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("take_flat", self)

    def source(self) -> str:
        """The complete kernel source."""
        w, idx = word(self.itemsize), self.index_type
        params = ["const Meta m", f"const {w}* src", f"{w}* dst", f"const {ctype(self.index).storage}* index"]
        params += ["const long long numel", "int* flag" if self.fused else "const int* flag"]
        body = [
            "long long v = (long long)index[o1];",
            "if (v < 0) v += numel;",
            "if (v >= 0 && v < numel) {",
            "  long long at = 0;",
            f"  for (int d = {self.ndim - 1}; d > 0; --d) {{",
            "    at += (v % (long long)m.stride[2][d]) * (long long)m.stride[3][d];",
            "    v /= (long long)m.stride[2][d];",
            "  }",
            "  at += v * (long long)m.stride[3][0];  // v < shape[0] here: the outermost dim needs no division",
            "  dst[o0] = src[at];",
            "}",
        ]
        if self.fused:  # the range check of this element's index, where a Check launch would have read it
            body += ["else {", "  *flag = 1;", "}"]
        return kernel_source(
            f"flat take through {self.index.short} indices, {self.itemsize}-byte elements"
            + (", indices checked in place" if self.fused else ""),
            meta_struct(idx, self.ndim, 4),
            self.kernel_name,
            params,
            grid_loop(idx, self.ndim, 2, body, flag=not self.fused),
        )
