"""Kernel generators of the movement family: strided copies, index checks, gathers and scatters, arange.

Every kernel walks one iteration space in row-major order with a grid-stride loop and finds each
operand's element through one stride vector per operand (in elements, 0 on broadcast dimensions,
negative where a view runs backwards), packed in the same ``Meta`` struct as the elementwise kernels:
``n``, ``shape[ndim]`` and ``stride[rows][ndim]``. Copies move storage words of the element's byte
size, so they are exact for every dtype. Kernels that take index tensors get a device flag: a check
kernel sets it when an index value lies outside its range, and the gather or scatter that follows
reads it first and writes nothing when it is set (the op reports 161002 when its stream is synchronised).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
WORDS: Final[dict[int, str]] = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
"""The storage word a copy moves for each element byte size (16 bytes: the ``acl_mv_word16`` struct)."""

HELPERS: Final = r"""
struct alignas(8) acl_mv_word16 { unsigned long long lo, hi; };
// double -> float rounded to odd: a later round-to-nearest to fp16/bf16 then equals one direct rounding
__device__ __forceinline__ float acl_mv_odd(double d) {
  float f = (float)d;
  if ((double)f != d && d == d) {
    unsigned int b = __float_as_uint(f);
    if (fabs((double)f) > fabs(d)) b -= 1u;  // rounded away from zero: step back toward zero
    f = __uint_as_float(b | 1u);
  }
  return f;
}
"""


def word(itemsize: int) -> str:
    """The C type a copy moves for elements of ``itemsize`` bytes."""
    if itemsize == 16:
        return "acl_mv_word16"
    try:
        return WORDS[itemsize]
    except KeyError:
        raise ValueError(f"no storage word of {itemsize} bytes") from None


def wide(dtype: D) -> str:
    """The C type the reference computes ``dtype`` in (double, long long, unsigned long long, bool)."""
    c = ctype(dtype)
    return {"float": "double", "int": "long long", "uint64": "unsigned long long", "bool": "bool"}[c.kind]


def load_wide(expr: str, dtype: D) -> str:
    """C expression reading one stored ``dtype`` element ``expr`` as its wide type."""
    c = ctype(dtype)
    if c.kind == "bool":
        return f"({expr} != 0)"
    return f"(({wide(dtype)})({c.decode.format(x=expr)}))"


def store_narrow(expr: str, dtype: D) -> str:
    """C expression turning a wide value into ``dtype``'s storage (one rounding, integers wrap)."""
    c = ctype(dtype)
    if dtype == D.ACL_FLOAT16:
        return f"acl_f2h(acl_mv_odd({expr}))"
    if dtype == D.ACL_BF16:
        return f"acl_f2b(acl_mv_odd({expr}))"
    return f"(({c.storage})({expr}))"


def unique_name(kind: str, key: object) -> str:
    """A kernel name unique to ``key`` (a hash of its repr), prefixed ``acl_mv_<kind>``."""
    return f"acl_mv_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def meta_struct(index_type: str, ndim: int, rows: int) -> str:
    """The ``Meta`` struct: ``n``, ``shape[ndim]`` and ``stride[rows][ndim]`` in ``index_type``."""
    return f"struct Meta {{ {index_type} n; {index_type} shape[{ndim}]; {index_type} stride[{rows}][{ndim}]; }};"


@dataclass(frozen=True)
class InlineChecks:
    """Range checks of small 1-D index views that every block runs before its first write.

    They replace :class:`Check` launches: a block that finds a value outside ``[low, high)`` (or a flag
    already set) writes nothing, and block 0 sets the flag, so no element is written when any index is
    bad, as with a Check launch before the kernel. Parameters, after the kernel's ``flag``: per check the
    index pointer, its count and stride, and the bounds.
    """

    dtypes: tuple[D, ...]

    def params(self) -> list[str]:
        """The kernel parameters of the checks (the flag itself stays the kernel's)."""
        found: list[str] = []
        for j, dt in enumerate(self.dtypes):
            found.append(f"const {ctype(dt).storage}* chk{j}")
            found += [f"const long long chk{j}_{n}" for n in ("count", "stride", "low", "high")]
        return found

    def prologue(self) -> list[str]:
        """C lines: every block scans every checked index; on a bad one it returns (block 0 sets the flag)."""
        lines = ["__shared__ int acl_bad;", "if (threadIdx.x == 0) acl_bad = *flag;", "__syncthreads();"]
        for j in range(len(self.dtypes)):
            lines += [
                f"for (long long q = threadIdx.x; q < chk{j}_count; q += blockDim.x) {{",
                f"  const long long v = (long long)chk{j}[q * chk{j}_stride];",
                f"  if (v < chk{j}_low || v >= chk{j}_high) acl_bad = 1;",
                "}",
            ]
        lines += [
            "__syncthreads();",
            "if (acl_bad) {",
            "  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 1;",
            "  return;",
            "}",
        ]
        return lines


def flag_param(checks: InlineChecks | None) -> list[str]:
    """The ``flag`` parameter (writable when the kernel runs inline checks) and the checks' own parameters."""
    return ["const int* flag"] if checks is None else ["int* flag", *checks.params()]


def grid_loop(
    index_type: str,
    ndim: int,
    rows: int,
    body: list[str],
    flag: bool = False,
    checks: InlineChecks | None = None,
) -> list[str]:
    """The grid-stride loop with coordinates ``c[d]`` and offsets ``o0..o{rows-1}`` of element ``i``.

    With ``flag`` the kernel first returns when the check flag is set, or runs ``checks`` (which do that too).
    """
    idx = index_type
    lines = (checks.prologue() if checks is not None else ["if (*flag) return;"]) if flag else []
    lines += [
        f"const {idx} grid_step = ({idx})gridDim.x * ({idx})blockDim.x;",
        f"for ({idx} i = ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < m.n; i += grid_step) {{",
        f"  {idx} c[{ndim}];",
        f"  {idx} rest = i;",
        "  #pragma unroll",
        f"  for (int d = {ndim - 1}; d > 0; --d) {{ c[d] = rest % m.shape[d]; rest /= m.shape[d]; }}",
        "  c[0] = rest;",
    ]
    for r in range(rows):
        lines.append(f"  {idx} o{r} = 0;")
    lines.append("  #pragma unroll")
    lines.append(
        f"  for (int d = 0; d < {ndim}; ++d) {{ "
        + " ".join(f"o{r} += c[d] * m.stride[{r}][d];" for r in range(rows))
        + " }"
    )
    lines += ["  " + line for line in body]
    lines.append("}")
    return lines


def kernel_source(comment: str, meta: str, name: str, params: list[str], body: list[str]) -> str:
    """A complete kernel: prelude, helpers, ``meta``, and ``name(params)`` running ``body``."""
    return "\n".join(
        [
            PRELUDE,
            HELPERS,
            f"// movement: {comment}",
            meta,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


# ----------------------------------------------------------------------------- copies
@dataclass(frozen=True)
class Copy:
    """``dst = src`` over one view pair (rows 0 src, 1 dst); ``mode`` tril/triu keeps a triangle of the last 2 dims."""

    itemsize: int
    ndim: int
    index_type: str
    mode: str = "copy"

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name(self.mode, self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = ["const Meta m", f"const {w}* src", f"{w}* dst"]
        if self.mode == "copy":
            body = ["dst[o1] = src[o0];"]
        else:
            if self.ndim < 2:
                raise ValueError("a triangle needs two dimensions")
            params.append("const long long diagonal")
            test = "<=" if self.mode == "tril" else ">="
            body = [
                f"const long long offset = (long long)c[{self.ndim - 1}] - (long long)c[{self.ndim - 2}];",
                f"typedef {w} word_t;",
                f"if (offset {test} diagonal) dst[o1] = src[o0]; else dst[o1] = word_t();",
            ]
        return kernel_source(
            f"{self.mode} of {self.itemsize}-byte elements",
            meta_struct(self.index_type, self.ndim, 2),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 2, body),
        )


# ----------------------------------------------------------------------------- index checks
@dataclass(frozen=True)
class Check:
    """``*flag = 1`` when a value of an index view (row 0) lies outside ``[low, high)``."""

    index: D
    ndim: int
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("check", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = [
            "const Meta m",
            f"const {ctype(self.index).storage}* index",
            "const long long low",
            "const long long high",
            "int* flag",
        ]
        body = ["const long long v = (long long)index[o0];", "if (v < low || v >= high) *flag = 1;"]
        return kernel_source(
            f"range check of {self.index.short} indices",
            meta_struct(self.index_type, self.ndim, 1),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 1, body),
        )


# ----------------------------------------------------------------------------- gathers
@dataclass(frozen=True)
class Take:
    """``out[p] = self[base(p) + sum_k wrap(index_k[p]) * dim_stride_k]`` (rows: 0 self, 1 out, 2.. each index).

    Covers Embedding, IndexSelect, GatherV2, Gather and Index: self's stride row is 0 on the output
    dimensions an index replaces, each index's row is 0 on the dimensions it does not span. ``wrap``
    counts negative values from the end (values were range-checked before).
    """

    itemsize: int
    indices: tuple[D, ...]
    ndim: int
    index_type: str
    wrap: bool
    checks: InlineChecks | None = None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("take", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        k = len(self.indices)
        params = ["const Meta m", f"const {w}* src", f"{w}* dst"]
        params += [f"const {ctype(dt).storage}* index{j}" for j, dt in enumerate(self.indices)]
        for j in range(k):
            params += [f"const long long dim_stride{j}", f"const long long size{j}"]
        params += flag_param(self.checks)
        body = ["long long at = (long long)o0;", "bool ok = true;"]
        for j in range(k):
            body.append(f"{{ long long v = (long long)index{j}[o{2 + j}];")
            if self.wrap:
                body.append(f"  if (v < 0) v += size{j};")
            body.append(f"  if (v < 0 || v >= size{j}) ok = false;")
            body.append(f"  at += v * dim_stride{j}; }}")
        body.append("if (ok) dst[o1] = src[at];")
        return kernel_source(
            f"take through {k} index tensor(s), {self.itemsize}-byte elements",
            meta_struct(self.index_type, self.ndim, 2 + k),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 2 + k, body, flag=True, checks=self.checks),
        )


# ----------------------------------------------------------------------------- scatters
@dataclass(frozen=True)
class Scatter:
    """Scatter pulled per output element (rows: 0 self, 1 out, 2 index, 3 src, 4 index *extents*).

    For out position p the candidates are the index positions q equal to p off ``dim`` (inside the
    index's extents); those whose value is p[dim] apply in increasing q[dim] order, the order in which
    the reference applies them: reduce 0 keeps the last, 1 adds, 2 multiplies, in the wide type, with
    one rounding to the dtype at the end. Deterministic, and free of atomics.
    """

    dtype: D
    index: D
    ndim: int
    index_type: str
    dim: int
    reduce: int
    with_value: bool
    checks: InlineChecks | None = None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("scatter", self)

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.dtype)
        wt = wide(self.dtype)
        params = [
            "const Meta m",
            f"const {c.storage}* self",
            f"{c.storage}* out",
            f"const {ctype(self.index).storage}* index",
        ]
        params.append(f"const {wt} value" if self.with_value else f"const {c.storage}* src")
        params += flag_param(self.checks)
        dim = self.dim
        combine = {0: "acc = v;", 1: "acc = acc || v;" if wt == "bool" else "acc = acc + v;"}
        combine[2] = "acc = acc && v;" if wt == "bool" else "acc = acc * v;"
        body = [
            f"{wt} acc = {load_wide('self[o0]', self.dtype)};",
            "bool inside = true;",
            "#pragma unroll",
            f"for (int d = 0; d < {self.ndim}; ++d) if (d != {dim} && c[d] >= m.stride[4][d]) inside = false;",
            "if (inside) {",
            f"  const long long base_index = (long long)o2 - (long long)c[{dim}] * m.stride[2][{dim}];",
            f"  [[maybe_unused]] const long long base_src = (long long)o3 - (long long)c[{dim}] * m.stride[3][{dim}];",
            f"  for (long long j = 0; j < (long long)m.stride[4][{dim}]; ++j) {{",
            f"    if ((long long)index[base_index + j * m.stride[2][{dim}]] != (long long)c[{dim}]) continue;",
            f"    const {wt} v = "
            + ("value;" if self.with_value else f"{load_wide(f'src[base_src + j * m.stride[3][{dim}]]', self.dtype)};"),
            f"    {combine[self.reduce]}",
            "  }",
            "}",
            f"out[o1] = {store_narrow('acc', self.dtype)};",
        ]
        return kernel_source(
            f"scatter reduce {self.reduce} of {self.dtype.short} along dim {dim}",
            meta_struct(self.index_type, self.ndim, 5),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 5, body, flag=True, checks=self.checks),
        )


@dataclass(frozen=True)
class ScatterUpdate:
    """InplaceScatterUpdate pushed per updates element (rows: 0 updates, 1 data at the same coordinates).

    Updates element c of batch i = c[0] goes to data at batch ``b_i`` (indices' first column, or i) and
    at ``offset_i + c[axis]`` along ``axis``, unless a later batch j > i writes that same data element
    (the reference applies the batches in order, so the last one wins). Only the updated elements are
    touched: a decode step's one-token write into a long KV cache costs its own size, not the cache's.
    """

    itemsize: int
    index: D
    ndim: int
    index_type: str
    axis: int
    two_columns: bool
    checks: InlineChecks | None = None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("scatter_update", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = [
            "const Meta m",
            f"{w}* data",
            f"const {w}* updates",
            f"const {ctype(self.index).storage}* indices",
            "const long long batches",
            "const long long row_stride",
            "const long long column_stride",
            "const long long length",
            *flag_param(self.checks),
        ]
        axis = self.axis

        def batch(b: str) -> str:
            return f"(long long)indices[{b} * row_stride]" if self.two_columns else b

        def offset(b: str) -> str:
            column = " + column_stride" if self.two_columns else ""
            return f"(long long)indices[{b} * row_stride{column}]"

        body = [
            "const long long own = (long long)c[0];",
            f"const long long batch = {batch('own')};",
            f"const long long at = {offset('own')} + (long long)c[{axis}];",
            "bool last = true;",
        ]
        if self.two_columns:  # one-column indices give every batch its own data batch: no later writer
            body += [
                "for (long long j = own + 1; j < batches && last; ++j) {",
                f"  const long long start = {offset('j')};",
                f"  if ({batch('j')} == batch && at >= start && at < start + length) last = false;",
                "}",
            ]
        body += [
            "if (last) {",
            f"  const long long to = (long long)o1 + (batch - own) * (long long)m.stride[1][0]"
            f" + (at - (long long)c[{axis}]) * (long long)m.stride[1][{axis}];",
            "  data[to] = updates[o0];",
            "}",
        ]
        return kernel_source(
            f"scatter update along axis {axis}, {self.itemsize}-byte elements",
            meta_struct(self.index_type, self.ndim, 2),
            self.kernel_name,
            params,
            grid_loop(self.index_type, self.ndim, 2, body, flag=True, checks=self.checks),
        )


# ----------------------------------------------------------------------------- arange
@dataclass(frozen=True)
class Arange:
    """``out[i] = start + i * step`` (row 0 out): in int64 when ``int64``, else in double rounded once."""

    dtype: D
    int64: bool
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return unique_name("arange", self)

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.dtype)
        if self.int64:
            params = ["const Meta m", f"{c.storage}* out", "const long long start", "const long long step"]
            body = [f"out[o0] = ({c.storage})(start + (long long)i * step);"]
        else:
            params = ["const Meta m", f"{c.storage}* out", "const double start", "const double step"]
            value = "__dadd_rn(start, __dmul_rn((double)i, step))"  # no fused multiply-add: NumPy rounds twice
            if c.kind == "int":
                store = f"({c.storage})acl_f2i(r, {c.lo!r}, {c.hi!r})"
            else:
                store = store_narrow("r", self.dtype)
            body = [f"const double r = {value};", f"out[o0] = {store};"]
        return kernel_source(
            f"arange into {self.dtype.short}",
            meta_struct(self.index_type, 1, 1),
            self.kernel_name,
            params,
            grid_loop(self.index_type, 1, 1, body),
        )
