"""Row kernels: one block per output row, a strided walk over the row, warp shuffles and one shared-memory step.

Every reduction and norm kernel sees its operands in one iteration space ``outer × inner``: a row is
one index of the (coalesced) outer dimensions, its elements the indices of the (coalesced) inner
dimensions. Each operand has a stride vector over that whole space (0 where it does not vary: a
per-row statistic has inner strides 0, a per-column weight outer strides 0), so permuted, padded
and broadcast views need no gather. The ``Meta`` struct carries the row count, the shape (outer
dimensions first) and one stride row per operand.

Each thread of a block takes the row's elements ``threadIdx.x, + blockDim.x, …`` (adjacent threads
read adjacent elements of a contiguous row), combines them in a private accumulator, and the block
combines the threads' accumulators: warp shuffles down to lane 0, lane 0 of each warp to shared
memory, thread 0 over the warps. Accumulation is in ``acc``: float64 for float32/float64 data (the
reference computes in float64 and float32 results are compared to ~11 ulp), float32 for
fp16/bf16-only data, 64-bit integers (wrapping like the reference's int64) for integers.

This module holds the shared template and the reduction-family kinds; ``kernels/norm.py`` the norms.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import CType, convert, ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
"""The largest block a row kernel is launched with (its ``__launch_bounds__``)."""
MAX_WARPS: Final = 32
"""Shared-memory slots for per-warp partials (BLOCK_THREADS / the smallest warp size)."""

FLOAT64_ACC: Final = frozenset({D.ACL_FLOAT, D.ACL_DOUBLE})


@dataclass(frozen=True)
class RowOperand:
    """One tensor of a row kernel: its parameter name, storage dtype and access."""

    name: str
    dtype: D
    write: bool = False


@dataclass(frozen=True)
class RowKernel:
    """Everything that makes one compiled row kernel distinct (the generator's input)."""

    kind: str
    operands: tuple[RowOperand, ...]
    outer_nd: int
    inner_nd: int
    index_type: str
    acc: D
    options: tuple[tuple[str, str | int | bool], ...] = ()
    scalars: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: str | int | bool | None = None) -> str | int | bool | None:
        """The value of kind-specific option ``key``."""
        return dict(self.options).get(key, default)

    def index(self, name: str) -> int:
        """Position of operand ``name`` (its stride row in Meta)."""
        for k, op in enumerate(self.operands):
            if op.name == name:
                return k
        raise KeyError(name)

    def has(self, name: str) -> bool:
        """True when operand ``name`` is part of this kernel."""
        return any(op.name == name for op in self.operands)

    def operand(self, name: str) -> RowOperand:
        """Operand ``name``."""
        return self.operands[self.index(name)]

    @property
    def block(self) -> int:
        """Threads per block the kernel is built for (its ``__launch_bounds__``)."""
        return int(self.option("block", BLOCK_THREADS) or BLOCK_THREADS)

    @property
    def cached(self) -> bool:
        """True when the kernel keeps each thread's share of the row in registers (see :class:`RowCache`)."""
        return self.option("chunks") is not None

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable, unique ``extern "C"`` name (computed once per object)."""
        digest = hashlib.sha1(repr(self).encode()).hexdigest()[:12]
        return f"acl_row_{self.kind}_{digest}"


def block_reduce_source(name: str, threads: int | str, value: str = "float") -> str:
    """C source of ``value name(x, red, take_max)``: the block's max (or sum) of every thread's ``x`` through the
    shared ``red[threads]``, returned to every thread (all of the block's ``threads``, a number or a macro, call it;
    ``value``: the C type reduced)."""
    return f"""ACL_DEV {value} {name}({value} x, {value}* red, bool take_max) {{
  const int tid = threadIdx.x;
  red[tid] = x;
  __syncthreads();
  for (int w = {threads} / 2; w > 0; w >>= 1) {{
    if (tid < w) {{
      const {value} a = red[tid], b = red[tid + w];
      red[tid] = take_max ? (a > b ? a : b) : a + b;
    }}
    __syncthreads();
  }}
  const {value} r = red[0];
  __syncthreads();
  return r;
}}
"""


def block_scan_lines(array: str, thread: str, threads: int | str) -> list[str]:
    """C lines turning the shared ``long long array[threads]`` into its inclusive running sums in place
    (Hillis-Steele: log2(threads) steps); every one of the block's ``threads`` runs them, ``thread`` its index."""
    return [
        f"for (int step = 1; step < {threads}; step <<= 1) {{  // Hillis-Steele inclusive scan",
        f"  const long long add = {thread} >= step ? {array}[{thread} - step] : 0;",
        "  __syncthreads();",
        f"  {array}[{thread}] += add;",
        "  __syncthreads();",
        "}",
    ]


def acc_dtype(dtypes: Sequence[D]) -> D:
    """The float accumulator for floats: float64 when any operand is float32/float64, else float32."""
    return D.ACL_DOUBLE if any(d in FLOAT64_ACC for d in dtypes) else D.ACL_FLOAT


def int_acc(dtype: D) -> D:
    """The accumulator of a sum/product/scan in ``dtype``: float per :func:`acc_dtype`, else 64-bit integers."""
    c = ctype(dtype)
    if c.kind == "float":
        return acc_dtype([dtype])
    if c.kind == "uint64":
        return D.ACL_UINT64
    return D.ACL_INT64


# ----------------------------------------------------------------------------- source helpers
SHUFFLE: Final = r"""
#ifndef ACL_SHFL_DOWN
#if defined(__CUDA_ARCH__)
#define ACL_SHFL_DOWN(v, o) __shfl_down_sync((acl_lane_mask_t)~(acl_lane_mask_t)0, (v), (o))
#else
#define ACL_SHFL_DOWN(v, o) __shfl_down((v), (o))
#endif
#endif
"""

SHUFFLE_XOR: Final = r"""
#ifndef ACL_SHFL_XOR
#if defined(__CUDA_ARCH__)
#define ACL_SHFL_XOR(v, o) __shfl_xor_sync((acl_lane_mask_t)~(acl_lane_mask_t)0, (v), (o))
#else
#define ACL_SHFL_XOR(v, o) __shfl_xor((v), (o))
#endif
#endif
"""
"""``ACL_SHFL_XOR``: a butterfly exchange (every lane gets the result of a warp all-reduce)."""

ROW_HELPERS: Final = r"""
// ---- row-kernel helpers ----
ACL_DEV float acl_nan(float) { return __uint_as_float(0x7fc00000u); }
ACL_DEV double acl_nan(double) { return __longlong_as_double(0x7ff8000000000000LL); }
ACL_DEV float acl_inf(float) { return __uint_as_float(0x7f800000u); }
ACL_DEV double acl_inf(double) { return __longlong_as_double(0x7ff0000000000000LL); }
// exp of a float64 argument through the float exp, corrected to first order for the argument's rounding
// (|error| ~ 2e-7 relative: ample for float32 results, and 2-3x cheaper than the float64 exp); below
// -104 the float result is 0, as is every float32 result there
ACL_DEV double acl_exp_row(double d) {
  const float f = (float)d;
  if (!(f > -104.0f)) return d != d ? d : 0.0;
  return (double)expf(f) * (1.0 + (d - (double)f));
}
ACL_DEV float acl_exp_row(float d) { return expf(d); }
struct AclSum {
  template <class T> ACL_DEV T operator()(T a, T b) const { return a + b; }
  ACL_DEV long long operator()(long long a, long long b) const {
    return (long long)((unsigned long long)a + (unsigned long long)b);
  }
};
struct AclProd {
  template <class T> ACL_DEV T operator()(T a, T b) const { return a * b; }
  ACL_DEV long long operator()(long long a, long long b) const {
    return (long long)((unsigned long long)a * (unsigned long long)b);
  }
};
struct AclMax {
  template <class T> ACL_DEV T operator()(T a, T b) const { return acl_maximum(a, b); }
};
struct AclMin {
  template <class T> ACL_DEV T operator()(T a, T b) const { return acl_minimum(a, b); }
};
// the block's combination of every thread's v (all threads must call it; all get the result)
template <class T, class Op> ACL_DEV T acl_block_reduce(T v, Op op) {
  __shared__ T partial[32];
  for (int offset = ACL_WARP_SIZE / 2; offset > 0; offset >>= 1) v = op(v, (T)ACL_SHFL_DOWN(v, offset));
  const int lane = (int)(threadIdx.x % ACL_WARP_SIZE);
  const int warp = (int)(threadIdx.x / ACL_WARP_SIZE);
  const int warps = (int)((blockDim.x + ACL_WARP_SIZE - 1) / ACL_WARP_SIZE);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T r = partial[0];
    for (int w = 1; w < warps; ++w) r = op(r, partial[w]);
    partial[0] = r;
  }
  __syncthreads();
  const T r = partial[0];
  __syncthreads();  // nobody reuses partial before every thread has read it
  return r;
}
"""


def index_helpers(idx: str, nops: int, outer_nd: int, inner_nd: int) -> str:
    """Meta and the offset function: adds the offsets of linear index ``i`` over dims [first, first+count)."""
    nd = outer_nd + inner_nd
    return "\n".join(
        [
            f"typedef {idx} idx_t;",
            f"#define ACL_NOPS {nops}",
            f"#define ACL_OUTER {outer_nd}",
            f"#define ACL_INNER {inner_nd}",
            f"struct Meta {{ {idx} n; {idx} shape[{nd}]; {idx} stride[{nops}][{nd}]; }};",
            "ACL_DEV void acl_offsets(const Meta& m, idx_t i, int first, int count, idx_t* o) {",
            "  for (int d = first + count - 1; d >= first; --d) {",
            "    const idx_t c = d > first ? i % m.shape[d] : i;",
            "    if (d > first) i /= m.shape[d];",
            "    for (int k = 0; k < ACL_NOPS; ++k) o[k] += c * m.stride[k][d];",
            "  }",
            "}",
        ]
    )


def value_type(dtype: D) -> str:
    """The C type values of ``dtype`` are computed in."""
    return ctype(dtype).value


def load_as(kernel: RowKernel, name: str, offset: str, target: D, via: D | None = None) -> str:
    """C expression: operand ``name`` at ``offset`` as a ``target`` value (first cast to ``via`` if given)."""
    src = ctype(kernel.operand(name).dtype)
    expr = load(f"p_{name}[{offset}]", src, src)
    if via is not None and via != kernel.operand(name).dtype:
        expr = round_to(expr, src, ctype(via))
        src = ctype(via)
    return convert(expr, src, ctype(target))


def round_to(expr: str, src: CType, dst: CType) -> str:
    """``expr`` (a ``src`` value) cast to ``dst`` as CANN's Cast does, back as a ``dst`` value."""
    return dst.decode.format(x=store(expr, src, dst))


def store_as(kernel: RowKernel, name: str, offset: str, value: str, source: D) -> str:
    """C statement: store ``value`` (a ``source`` value) into operand ``name`` at ``offset``."""
    return f"p_{name}[{offset}] = {store(value, ctype(source), ctype(kernel.operand(name).dtype))};"


def assemble(kernel: RowKernel, body: Sequence[str], *, row_loop: bool = True) -> str:
    """The complete source: prelude, helpers, Meta, and the kernel with ``body`` run once per row.

    In the row loop, ``base[k]`` is operand k's offset of the row's first element and ``len`` the row length.
    """
    idx = kernel.index_type
    params = ["const Meta m"]
    for op in kernel.operands:
        const = "" if op.write else "const "
        params.append(f"{const}{ctype(op.dtype).storage}* p_{op.name}")
    params.extend(f"const {ctype_name} {name}" for name, ctype_name in kernel.scalars)
    lines = [
        PRELUDE,
        SHUFFLE,
        ROW_HELPERS,
        index_helpers(idx, len(kernel.operands), kernel.outer_nd, kernel.inner_nd),
        f"// row kernel {kernel.kind}: " + ", ".join(f"{k}={v}" for k, v in kernel.options),
        f"typedef {value_type(kernel.acc)} acc_t;",
        f'extern "C" __global__ void __launch_bounds__({kernel.block}) {kernel.kernel_name}(',
        "    " + ",\n    ".join(params) + ") {",
        "  idx_t len = 1;",
        "  for (int d = ACL_OUTER; d < ACL_OUTER + ACL_INNER; ++d) len *= m.shape[d];",
    ]
    group = int(kernel.option("group", 0) or 0)
    if group or kernel.option("warps"):
        lines[1:1] = [SHUFFLE_XOR]
    if row_loop and group:
        lines += [
            f"  const int lane = (int)(threadIdx.x % {group}u);  // the thread's place in its row's group",
            f"  const idx_t groups = (idx_t)(blockDim.x / {group}u);",
            f"  const idx_t mine = (idx_t)(threadIdx.x / {group}u);",
            "  // every lane of a warp runs the same iterations (the groups' shuffles need the whole warp)",
            f"  const idx_t warp_first = mine - (idx_t)((threadIdx.x % ACL_WARP_SIZE) / {group}u);",
            "  for (idx_t r0 = (idx_t)blockIdx.x * groups + warp_first; r0 < m.n; r0 += (idx_t)gridDim.x * groups) {",
            "    const idx_t row = r0 + (mine - warp_first);",
            "    const bool live = row < m.n;",
            "    idx_t base[ACL_NOPS];",
            "    for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
            "    if (live) acl_offsets(m, row, 0, ACL_OUTER, base);",
            *("    " + line for line in body),
            "  }",
        ]
    elif row_loop:
        lines += [
            "  for (idx_t row = (idx_t)blockIdx.x; row < m.n; row += (idx_t)gridDim.x) {",
            "    idx_t base[ACL_NOPS];",
            "    for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
            "    acl_offsets(m, row, 0, ACL_OUTER, base);",
            *("    " + line for line in body),
            "  }",
        ]
    else:
        lines += ["  " + line for line in body]
    lines += ["}", ""]
    return "\n".join(lines)


def element_loop(
    kernel: RowKernel,
    body: Sequence[str],
    *,
    start: str = "threadIdx.x",
    step: str = "blockDim.x",
    stop: str = "len",
) -> list[str]:
    """Lines walking the row's elements ``j`` up to ``stop``; in ``body``, ``o[k]`` is operand k's offset of j."""
    return [
        f"for (idx_t j = (idx_t)({start}); j < {stop}; j += (idx_t){step}) {{",
        "  idx_t o[ACL_NOPS];",
        "  for (int k = 0; k < ACL_NOPS; ++k) o[k] = base[k];",
        "  acl_offsets(m, j, ACL_OUTER, ACL_INNER, o);",
        *("  " + line for line in body),
        "}",
    ]


# ----------------------------------------------------------------------------- rows cached in registers
CACHED_KINDS: Final = frozenset({"softmax", "layernorm", "rmsnorm"})
"""Row kinds with a register-cached path: the row is read from memory once, kept, and written once."""
CACHE_BLOCK: Final = 512
"""The largest block of the cached path (its ``__launch_bounds__`` leaves 128 registers a thread)."""
CACHE_TARGET: Final = 16
"""Row elements per thread the cached path aims for (the block grows to keep to it)."""
VECTOR_BYTES: Final = 16


def cache_items(acc: D) -> int:
    """The most row elements one thread keeps: 16 float64 or 32 float32 accumulators (32 registers)."""
    return 16 if ctype(acc).value == "double" else 32


@dataclass(frozen=True)
class RowCache:
    """The cached path's shape: ``block`` threads, each thread chunks ``threadIdx.x + k * block`` (k < chunks)
    of ``vec`` contiguous elements; operands in ``vector`` move a chunk as one aligned ``AclVec`` access."""

    block: int
    vec: int
    chunks: int
    vector: tuple[str, ...]
    group: int = 0
    """Lanes per row of the grouped layout (several rows a block, reduced by shuffles); 0: a block per row."""
    warps: int = 0
    """Warps of the warps layout (a block of this many warps a row, every load issued before any arithmetic,
    shuffles and at most one shared-memory exchange: :func:`warp_cache`); 0: another layout."""
    exact: bool = False
    """The warps layout's lanes cover every row's chunks exactly (no lane guards a chunk)."""

    def options(self) -> tuple[tuple[str, str | int | bool], ...]:
        """The kernel options that select this path."""
        grouped = (("group", self.group),) if self.group else ()
        warps = (("warps", self.warps), ("exact", self.exact)) if self.warps else ()
        return (
            ("block", self.block),
            ("chunks", self.chunks),
            ("vec", self.vec),
            ("vector", ",".join(self.vector)),
            *grouped,
            *warps,
        )


def row_cache(length: int, warp: int, acc: D, vec: int, vector: Sequence[str]) -> RowCache | None:
    """The cached path for rows of ``length`` (``vec`` elements per chunk), or None when a row does not fit."""
    if length < 1 or vec < 1 or length % vec:
        return None
    whole = length // vec  # chunks in the row

    def warps(n: int) -> int:
        return max(warp, -(-n // warp) * warp)

    block = min(CACHE_BLOCK, warps(-(-length // CACHE_TARGET)), warps(whole))
    chunks = -(-whole // block)
    if chunks * vec > cache_items(acc):
        return None
    return RowCache(block, vec, chunks, tuple(vector) if vec > 1 else ())


def chunk_loop(kernel: RowKernel, body: Sequence[str]) -> list[str]:
    """Lines over this thread's chunks ``c`` (``k``: the chunk's slot); ``cx[k * vec + e]`` caches element e.

    A grouped kernel (option ``group`` = G: G lanes per row) walks ``lane + k * G`` of a live row."""
    vec, chunks, block = int(kernel.option("vec") or 1), int(kernel.option("chunks") or 1), kernel.block
    group = int(kernel.option("group", 0) or 0)
    first, stride, live = ("(idx_t)lane", group, "live && ") if group else ("(idx_t)threadIdx.x", block, "")
    return [
        "#pragma unroll",
        f"for (int k = 0; k < {chunks}; ++k) {{",
        f"  const idx_t c = {first} + (idx_t)k * (idx_t){stride};",
        f"  if ({live}c * {vec} < len) {{",
        *("    " + line for line in body),
        "  }",
        "}",
    ]


def is_vector_operand(kernel: RowKernel, name: str) -> bool:
    """True when operand ``name`` moves a chunk as one aligned ``AclVec`` access (option ``vector``)."""
    return name in str(kernel.option("vector", "")).split(",")


def row_reduce(kernel: RowKernel, name: str) -> str:
    """The statement summing ``name`` over the row's threads (every one gets the sum): the block's shuffles and
    shared memory, or a grouped kernel's butterfly over its G lanes (no shared memory, no barrier)."""
    group = int(kernel.option("group", 0) or 0)
    if not group:
        return f"{name} = acl_block_reduce({name}, add);"
    return f"for (int o = {group // 2}; o > 0; o >>= 1) {name} += (acc_t)ACL_SHFL_XOR({name}, o);"


def row_leader(kernel: RowKernel) -> str:
    """The condition of the one thread that stores a row's statistics."""
    return "live && lane == 0" if kernel.option("group") else "threadIdx.x == 0"


def group_cache(length: int, warp: int, acc: D, vec: int, vector: Sequence[str], threads: int) -> RowCache | None:
    """The grouped cached path: G lanes per row (the power of two <= ``warp`` covering the row's chunks, so a
    row is reduced by shuffles alone), ``threads`` per block; None when a row does not fit G lanes' registers."""
    if length < 1 or vec < 1 or length % vec:
        return None
    whole = length // vec
    group = 1
    while group < min(whole, warp):
        group *= 2
    chunks = -(-whole // group)
    if chunks * vec > cache_items(acc):
        return None
    return RowCache(max(threads, warp), vec, chunks, tuple(vector) if vec > 1 else (), group)


WARP_CHUNKS: Final = 4
"""Chunks a lane of the warps layout's automatic warp count (:func:`warp_cache`): bf16 rows of 1,024 take one
warp (4 16-byte chunks a lane), 8,192 eight."""
MAX_ROW_THREADS: Final = 1024
"""The largest block of the warps layout."""


def warp_cache(length: int, warp: int, acc: D, vec: int, vector: Sequence[str], warps: int = 0) -> RowCache | None:
    """The warps layout: a block of ``warps`` warps a row (0: the fewest, a power of two, that keep each lane to
    :data:`WARP_CHUNKS` chunks and to :func:`cache_items` elements), each lane chunks ``threadIdx.x + k * block``;
    None when a row does not fit the block's registers (or ``warps`` warps exceed :data:`MAX_ROW_THREADS`)."""
    if length < 1 or vec < 1 or length % vec:
        return None
    whole, items = length // vec, cache_items(acc)
    count = warps or 1
    if not warps:
        while count * warp < MAX_ROW_THREADS and (
            -(-whole // (count * warp)) > WARP_CHUNKS or -(-whole // (count * warp)) * vec > items
        ):
            count *= 2
    lanes = count * warp
    chunks = -(-whole // lanes)
    if lanes > MAX_ROW_THREADS or chunks * vec > items:
        return None
    return RowCache(lanes, vec, chunks, tuple(vector) if vec > 1 else (), warps=count, exact=whole == chunks * lanes)


def chunk_values(kernel: RowKernel, name: str, target: D) -> tuple[list[str], list[str]]:
    """(lines, one ``target`` expression per chunk element) reading operand ``name`` at chunk ``c``."""
    vec, k = int(kernel.option("vec") or 1), kernel.index(name)
    src = ctype(kernel.operand(name).dtype)
    if is_vector_operand(kernel, name):
        vt = f"AclVec<{src.storage}, {vec}>"
        lines = [f"const {vt} t_{name} = *reinterpret_cast<const {vt}*>(p_{name} + (base[{k}] + c * {vec}));"]
        return lines, [convert(src.decode.format(x=f"t_{name}.v[{e}]"), src, ctype(target)) for e in range(vec)]
    exprs = []
    for e in range(vec):
        offset = f"base[{k}] + (c * {vec} + {e}) * m.stride[{k}][ACL_OUTER]"
        exprs.append(convert(src.decode.format(x=f"p_{name}[{offset}]"), src, ctype(target)))
    return [], exprs


def chunk_store(kernel: RowKernel, name: str, values: Sequence[str], source: D) -> list[str]:
    """Lines storing ``values`` (``source`` values, one per chunk element) into operand ``name`` at chunk ``c``."""
    vec, k = int(kernel.option("vec") or 1), kernel.index(name)
    dst = ctype(kernel.operand(name).dtype)
    if is_vector_operand(kernel, name):
        vt = f"AclVec<{dst.storage}, {vec}>"
        lines = [f"{vt} t_{name};"]
        lines += [f"t_{name}.v[{e}] = {store(v, ctype(source), dst)};" for e, v in enumerate(values)]
        lines.append(f"*reinterpret_cast<{vt}*>(p_{name} + (base[{k}] + c * {vec})) = t_{name};")
        return lines
    return [
        f"p_{name}[base[{k}] + (c * {vec} + {e}) * m.stride[{k}][ACL_OUTER]] = {store(v, ctype(source), dst)};"
        for e, v in enumerate(values)
    ]


ROW_ELEMENTS: Final = frozenset({"self", "out", "x", "x2", "addend", "weight", "shift", "y", "xout"})
"""Operands read or written per row element (the others are per-row statistics)."""


def cache_dtype(kernel: RowKernel) -> D:
    """The type the row is cached and normalised in: float when every row element is fp16/bf16 (statistics
    still accumulate in ``acc``, float64 when a statistic is float32), else ``acc``."""
    row = [op.dtype for op in kernel.operands if op.name in ROW_ELEMENTS]
    if row and all(d in (D.ACL_FLOAT16, D.ACL_BF16) for d in row):
        return D.ACL_FLOAT
    return kernel.acc


def cache_decl(kernel: RowKernel) -> str:
    """The declaration of this thread's cached row elements (``cache_t``: see :func:`cache_dtype`)."""
    n = int(kernel.option("chunks") or 1) * int(kernel.option("vec") or 1)
    return f"typedef {value_type(cache_dtype(kernel))} cache_t;\ncache_t cx[{n}];"


def slot(kernel: RowKernel, e: int) -> str:
    """The cache slot of element ``e`` of the current chunk."""
    return f"cx[k * {int(kernel.option('vec') or 1)} + {e}]"


def at(kernel: RowKernel, name: str, where: str = "o") -> str:
    """The offset expression of operand ``name`` (``o``: current element, ``base``: the row's first)."""
    return f"{where}[{kernel.index(name)}]"


# ----------------------------------------------------------------------------- reduction-family kinds
REDUCE_OPS: Final = {"sum": "AclSum", "prod": "AclProd", "max": "AclMax", "min": "AclMin", "mean": "AclSum"}


def identity(op: str, acc: D) -> str:
    """The identity element of ``op`` as an ``acc`` C expression."""
    c = ctype(acc)
    v = c.value
    if op in ("sum", "mean"):
        return f"({v})0"
    if op == "prod":
        return f"({v})1"
    if c.kind == "float":
        return f"({'-' if op == 'max' else ''}acl_inf(({v})0))"
    if c.kind == "bool":
        return "false" if op == "max" else "true"
    if c.kind == "uint64":
        return "0ull" if op == "max" else "(~0ull)"
    return "(-9223372036854775807LL - 1LL)" if op == "max" else "9223372036854775807LL"


def _reduce(kernel: RowKernel) -> str:
    """out[row] = op over the row of self (cast to ``dtype`` first); ``mean`` divides by the count, ``log`` logs.

    The count is the row's length, or the kernel's ``count`` scalar when it has one (a loss's mean over
    terms that a first pass summed into partials).
    """
    op = str(kernel.option("op"))
    dtype = D(int(kernel.option("dtype", int(kernel.operand("self").dtype)) or 0))
    acc = kernel.acc
    value = load_as(kernel, "self", at(kernel, "self"), acc, via=dtype)
    body = [f"acc_t a = {identity(op, acc)};", f"const {REDUCE_OPS[op]} op;"]
    body += element_loop(kernel, [f"a = op(a, (acc_t)({value}));"])
    body += ["a = acl_block_reduce(a, op);", "if (threadIdx.x == 0) {"]
    result, source = "a", acc
    if op == "mean":
        divisor = "count" if any(name == "count" for name, _ in kernel.scalars) else "len"
        body.append(f"  a = a / (acc_t){divisor};")
    if kernel.option("log"):  # ReduceLogSum: the log of the row sum
        body.append("  a = acl_log(a);")
    if kernel.option("round_to_dtype") and dtype != kernel.operand("out").dtype:
        result = round_to("a", ctype(acc), ctype(dtype))
        source = dtype
    body.append("  " + store_as(kernel, "out", at(kernel, "out", "base"), result, source))
    body.append("}")
    return assemble(kernel, body)


def _arg_helper(largest: bool) -> list[str]:
    """The ordering of (value, index) candidates every arg kernel shares: NaN first, then value, then index."""
    better = ">" if largest else "<"
    return [
        "// true when (v, i) should replace (best, at): NaN first, then the larger (smaller), then the lower index",
        "ACL_DEV bool acl_arg_better(acc_t v, long long i, acc_t best, long long at) {",
        "  if (i < 0) return false;",
        "  if (at < 0) return true;",
        "  const bool vn = v != v, bn = best != best;",
        "  if (vn || bn) return vn && (!bn || i < at);",
        f"  if (v != best) return v {better} best;",
        "  return i < at;",
        "}",
    ]


# the block's best (best, at) candidate, left in thread 0's registers (every thread must reach it)
_ARG_COMBINE: Final = [
    "for (int offset = ACL_WARP_SIZE / 2; offset > 0; offset >>= 1) {",
    "  const acc_t v = (acc_t)ACL_SHFL_DOWN(best, offset);",
    "  const long long i = (long long)ACL_SHFL_DOWN(at, offset);",
    "  if (acl_arg_better(v, i, best, at)) { best = v; at = i; }",
    "}",
    "__shared__ acc_t s_best[32];",
    "__shared__ long long s_at[32];",
    "if (threadIdx.x % ACL_WARP_SIZE == 0) {",
    "  s_best[threadIdx.x / ACL_WARP_SIZE] = best;",
    "  s_at[threadIdx.x / ACL_WARP_SIZE] = at;",
    "}",
    "__syncthreads();",
    "if (threadIdx.x == 0) {",
    "  const int warps = (int)((blockDim.x + ACL_WARP_SIZE - 1) / ACL_WARP_SIZE);",
    "  for (int w = 1; w < warps; ++w)",
    "    if (acl_arg_better(s_best[w], s_at[w], best, at)) { best = s_best[w]; at = s_at[w]; }",
    "}",
]


def _with_helper(kernel: RowKernel, source: str) -> str:
    marker = 'extern "C"'
    return source.replace(marker, "\n".join(_arg_helper(bool(kernel.option("largest")))) + "\n" + marker, 1)


def _arg_store(kernel: RowKernel) -> list[str]:
    """Thread 0 stores the row's result (the value for MaxDim, the index always)."""
    lines = ["if (threadIdx.x == 0) {"]
    if kernel.has("out"):
        lines.append("  " + store_as(kernel, "out", at(kernel, "out", "base"), "best", kernel.acc))
    lines.append("  " + store_as(kernel, "indices", at(kernel, "indices", "base"), "at", D.ACL_INT64))
    return [*lines, "}", "__syncthreads();"]


def _arg(kernel: RowKernel) -> str:
    """The first maximum (or minimum) of the row and its index; a NaN beats every number (torch's rule).

    With option ``slices`` (S > 1) this is the split path for few long rows (decode's ArgMax over the
    vocabulary), one launch: block ``b`` takes slice ``b % S`` of row ``b / S``, writes its candidate to
    ``part_v[b]`` / ``part_i[b]`` (-1 for an empty slice) and counts itself in ``part_c[row]`` (zeroed
    before the launch, in the same stream order); the block that brings the count to S combines the row's
    S candidates with the same ordering and stores the result.
    """
    slices = int(kernel.option("slices", 0) or 0)
    value = load_as(kernel, "self", at(kernel, "self"), kernel.acc)
    scan = ["acc_t best = (acc_t)0;", "long long at = -1;"]
    step = [
        f"const acc_t v = (acc_t)({value});",
        "if (acl_arg_better(v, (long long)j, best, at)) { best = v; at = (long long)j; }",
    ]
    if slices < 2 and kernel.option("wide"):
        body = scan + _wide_scan(kernel, step) + _ARG_COMBINE + _arg_store(kernel)
        return _with_helper(kernel, assemble(kernel, body))
    if slices < 2:
        body = scan + element_loop(kernel, step) + _ARG_COMBINE + _arg_store(kernel)
        return _with_helper(kernel, assemble(kernel, body))
    body = [
        f"const idx_t slices = (idx_t){slices};",
        "const idx_t span = (len + slices - 1) / slices;",
        "for (idx_t b = (idx_t)blockIdx.x; b < m.n * slices; b += (idx_t)gridDim.x) {",
        "  const idx_t row = b / slices;",
        "  const idx_t lo = (b % slices) * span;",
        "  const idx_t hi = lo + span < len ? lo + span : len;",
        "  idx_t base[ACL_NOPS];",
        "  for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
        "  acl_offsets(m, row, 0, ACL_OUTER, base);",
        *("  " + line for line in scan + _prefetched(kernel, value, step)),
        *("  " + line for line in _ARG_COMBINE),
        "  __shared__ int s_last;",
        "  if (threadIdx.x == 0) {",
        "    p_part_v[b] = best;",
        "    p_part_i[b] = at;",
        "    ACL_FENCE();  // the candidate is visible device-wide before the count says so",
        "    s_last = ACL_ATOMIC_INC(p_part_c + row) == (unsigned)(slices - 1);",
        "  }",
        "  __syncthreads();",
        "  if (s_last) {  // the row's last block to finish combines every slice's candidate",
        "    ACL_FENCE();",
        *("    " + line for line in _FINAL_SCAN + _ARG_COMBINE + _arg_store(kernel)),
        *(
            ["    if (threadIdx.x == 0) p_part_c[row] = 0u;  // ready for the next call"]
            if kernel.option("reset")
            else []
        ),
        "  }",
        "  __syncthreads();",
        "}",
    ]
    return _with_helper(kernel, ATOMICS + assemble(kernel, body, row_loop=False))


def _wide_scan(kernel: RowKernel, step: list[str]) -> list[str]:
    """The ``wide`` arg path's walk over a whole row by one block: with ``wide`` = V > 1 the row is one aligned
    unit-stride run read V elements (16 bytes) at a time, ``unroll`` vectors a thread loaded before any
    comparison; V = 1 is the strided element walk. The comparison is a total order (value, then index), so
    the order candidates meet in does not change the result."""
    vec, unroll = int(kernel.option("wide") or 1), int(kernel.option("unroll") or 1)
    if vec < 2:
        return element_loop(kernel, step)
    src = ctype(kernel.operand("self").dtype)
    vt = f"AclVec<{src.storage}, {vec}>"
    value = convert(src.decode.format(x="t[u].v[e]"), src, ctype(kernel.acc))
    use = [
        "#pragma unroll",
        f"for (int e = 0; e < {vec}; ++e) {{",
        f"  const acc_t v = (acc_t)({value});",
        f"  const long long j = (long long)(c * {vec} + e);",
        "  if (acl_arg_better(v, j, best, at)) { best = v; at = j; }",
        "}",
    ]
    return vector_walk(vt, f"p_self + base[{kernel.index('self')}]", vec, unroll, use)


def vector_walk(vt: str, row: str, vec: int, unroll: int, use: Sequence[str]) -> list[str]:
    """A block's walk over the whole vectors of a row at ``row`` (``len / vec`` of type ``vt``): each thread loads
    ``unroll`` vectors into ``t[u]`` before ``use`` runs on each (``c``: the vector's index; ``whole`` is defined)."""
    return [
        f"const idx_t whole = len / (idx_t){vec};",
        f"const {vt}* rowv = reinterpret_cast<const {vt}*>({row});",
        f"for (idx_t c0 = (idx_t)threadIdx.x; c0 < whole; c0 += (idx_t){unroll} * (idx_t)blockDim.x) {{",
        f"  {vt} t[{unroll}];",
        "  #pragma unroll",
        f"  for (int u = 0; u < {unroll}; ++u) {{",
        "    const idx_t c = c0 + (idx_t)u * (idx_t)blockDim.x;",
        "    if (c < whole) t[u] = rowv[c];",
        "  }",
        "  #pragma unroll",
        f"  for (int u = 0; u < {unroll}; ++u) {{",
        "    const idx_t c = c0 + (idx_t)u * (idx_t)blockDim.x;",
        "    if (c < whole) {",
        *("      " + line for line in use),
        "    }",
        "  }",
        "}",
    ]


def _prefetched(kernel: RowKernel, value: str, step: list[str]) -> list[str]:
    """A block's walk over its slice ``[lo, hi)``: the first ``prefetch`` elements of each thread are all
    loaded before the first comparison (one memory latency instead of one per element), in index order;
    any further elements (a slice longer than planned for) follow one at a time."""
    q = int(kernel.option("prefetch", 0) or 0)
    if q < 1:
        return element_loop(kernel, step, start="lo + threadIdx.x", stop="hi")
    return [
        f"acc_t vals[{q}];",
        "#pragma unroll",
        f"for (int q = 0; q < {q}; ++q) {{",
        "  const idx_t j = lo + (idx_t)threadIdx.x + (idx_t)q * (idx_t)blockDim.x;",
        "  if (j < hi) {",
        "    idx_t o[ACL_NOPS];",
        "    for (int k = 0; k < ACL_NOPS; ++k) o[k] = base[k];",
        "    acl_offsets(m, j, ACL_OUTER, ACL_INNER, o);",
        f"    vals[q] = (acc_t)({value});",
        "  }",
        "}",
        "#pragma unroll",
        f"for (int q = 0; q < {q}; ++q) {{",
        "  const idx_t j = lo + (idx_t)threadIdx.x + (idx_t)q * (idx_t)blockDim.x;",
        "  if (j < hi && acl_arg_better(vals[q], (long long)j, best, at)) { best = vals[q]; at = (long long)j; }",
        "}",
        *element_loop(kernel, step, start=f"lo + threadIdx.x + {q} * blockDim.x", stop="hi"),
    ]


ATOMICS: Final = r"""
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#define ACL_FENCE() __threadfence()
#define ACL_ATOMIC_INC(p) atomicAdd((p), 1u)
#else
#define ACL_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define ACL_ATOMIC_INC(p) __atomic_fetch_add((p), 1u, __ATOMIC_ACQ_REL)
#endif
"""
"""Device-wide fence and counter increment (the emulator's host builtins where no GPU compiler runs)."""

# the last block's scan over its row's slice candidates (volatile: written by other blocks during this launch)
_FINAL_SCAN: Final = [
    "acc_t best = (acc_t)0;",
    "long long at = -1;",
    "for (idx_t j = (idx_t)threadIdx.x; j < slices; j += (idx_t)blockDim.x) {",
    "  const acc_t v = ((const volatile acc_t*)p_part_v)[row * slices + j];",
    "  const long long i = ((const volatile long long*)p_part_i)[row * slices + j];",
    "  if (acl_arg_better(v, i, best, at)) { best = v; at = i; }",
    "}",
]


def _moments(kernel: RowKernel) -> str:
    """Variance (or std) with a correction, and optionally the mean, two passes over the row."""
    value = load_as(kernel, "self", at(kernel, "self"), kernel.acc)
    body = ["const AclSum add;", "acc_t s = (acc_t)0;"]
    body += element_loop(kernel, [f"s += (acc_t)({value});"])
    body += ["s = acl_block_reduce(s, add);", "const acc_t mean = s / (acc_t)len;", "acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t d = (acc_t)({value}) - mean;", "q += d * d;"])
    body += [
        "q = acl_block_reduce(q, add);",
        "if (threadIdx.x == 0) {",
        "  acc_t var;",
        "  if (len == 0 || (long long)len <= correction) var = len <= 1 ? acl_nan((acc_t)0) : acl_inf((acc_t)0);",
        "  else var = q / (acc_t)((long long)len - correction);",
    ]
    result = "acl_sqrt(var)" if kernel.option("std") else "var"
    body.append("  " + store_as(kernel, "out", at(kernel, "out", "base"), result, kernel.acc))
    if kernel.has("mean"):
        body.append("  " + store_as(kernel, "mean", at(kernel, "mean", "base"), "mean", kernel.acc))
    body.append("}")
    return assemble(kernel, body)


def _softmax_cached(kernel: RowKernel) -> str:
    """(log-)softmax of a row read once: max, exp(x - max) kept (softmax) and summed, then each element."""
    vec = int(kernel.option("vec") or 1)
    lines, values = chunk_values(kernel, "self", kernel.acc)
    load = [*lines]
    for e in range(vec):
        load += [f"{slot(kernel, e)} = (acc_t)({values[e]});", f"top = mx(top, {slot(kernel, e)});"]
    body = [cache_decl(kernel), "const AclMax mx;", "const AclSum add;", "acc_t top = -acl_inf((acc_t)0);"]
    body += chunk_loop(kernel, load)
    body += ["top = acl_block_reduce(top, mx);", "acc_t s = (acc_t)0;"]
    log = bool(kernel.option("log"))
    # float64 data keeps the float64 exp; float32 results take the float exp with its correction
    exp = "acl_exp" if any(op.dtype == D.ACL_DOUBLE for op in kernel.operands) else "acl_exp_row"
    if log:
        body += chunk_loop(kernel, [f"s += {exp}({slot(kernel, e)} - top);" for e in range(vec)])
    else:
        exps = []
        for e in range(vec):
            exps += [f"{slot(kernel, e)} = {exp}({slot(kernel, e)} - top);", f"s += {slot(kernel, e)};"]
        body += chunk_loop(kernel, exps)
    body += ["s = acl_block_reduce(s, add);"]
    if log:
        body.append("const acc_t shift = top + acl_log(s);")
        results = [f"{slot(kernel, e)} - shift" for e in range(vec)]
    else:
        body.append("const acc_t inv = (acc_t)1 / s;")
        results = [f"{slot(kernel, e)} * inv" for e in range(vec)]
    body += chunk_loop(kernel, chunk_store(kernel, "out", results, kernel.acc))
    return assemble(kernel, body)


def _softmax(kernel: RowKernel) -> str:
    """(log-)softmax along the row: max, sum of exp(x - max), then each element."""
    if kernel.cached:
        return _softmax_cached(kernel)
    value = load_as(kernel, "self", at(kernel, "self"), kernel.acc)
    body = ["const AclMax mx;", "const AclSum add;", "acc_t top = -acl_inf((acc_t)0);"]
    body += element_loop(kernel, [f"top = mx(top, (acc_t)({value}));"])
    body += ["top = acl_block_reduce(top, mx);", "acc_t s = (acc_t)0;"]
    body += element_loop(kernel, [f"s += acl_exp((acc_t)({value}) - top);"])
    body += ["s = acl_block_reduce(s, add);", "const acc_t log_s = acl_log(s);"]
    if kernel.option("log"):
        result = f"(acc_t)({value}) - top - log_s"
    else:
        result = f"acl_exp((acc_t)({value}) - top) / s"
    body += element_loop(
        kernel, [f"const acc_t r = {result};", store_as(kernel, "out", at(kernel, "out"), "r", kernel.acc)]
    )
    return assemble(kernel, body)


def _cumsum(kernel: RowKernel) -> str:
    """Inclusive prefix sums (or products: op ``prod``), one thread per row (rows of a non-last dim are read
    coalesced across threads)."""
    dtype = D(int(kernel.option("dtype") or 0))
    op = str(kernel.option("op") or "sum")
    value = load_as(kernel, "self", at(kernel, "self"), kernel.acc, via=dtype)
    body = [
        f"const {REDUCE_OPS[op]} add;",
        "const idx_t threads = (idx_t)gridDim.x * (idx_t)blockDim.x;",
        "for (idx_t row = (idx_t)blockIdx.x * (idx_t)blockDim.x + (idx_t)threadIdx.x; row < m.n; row += threads) {",
        "  idx_t base[ACL_NOPS];",
        "  for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
        "  acl_offsets(m, row, 0, ACL_OUTER, base);",
        f"  acc_t a = {identity(op, kernel.acc)};",
        *(
            "  " + line
            for line in element_loop(
                kernel,
                [f"a = add(a, (acc_t)({value}));", store_as(kernel, "out", at(kernel, "out"), "a", kernel.acc)],
                start="0",
                step="1",
            )
        ),
        "}",
    ]
    return assemble(kernel, body, row_loop=False)


def _cum_extremum(kernel: RowKernel) -> str:
    """Running max (``largest``) or min with the index of its latest occurrence, one thread per row.

    torch's cummax / cummin rule: a NaN always takes over (and then only a later NaN), and a tie moves the
    index forward (``>=`` / ``<=``)."""
    better = ">=" if kernel.option("largest") else "<="
    value = load_as(kernel, "self", at(kernel, "self"), kernel.acc)
    step = [
        f"const acc_t v = (acc_t)({value});",
        f"if (j == 0 || v != v || (best == best && v {better} best)) {{ best = v; best_at = j; }}",
        store_as(kernel, "out", at(kernel, "out"), "best", kernel.acc),
        store_as(kernel, "indices", at(kernel, "indices"), "(long long)best_at", D.ACL_INT64),
    ]
    body = [
        "const idx_t threads = (idx_t)gridDim.x * (idx_t)blockDim.x;",
        "for (idx_t row = (idx_t)blockIdx.x * (idx_t)blockDim.x + (idx_t)threadIdx.x; row < m.n; row += threads) {",
        "  idx_t base[ACL_NOPS];",
        "  for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
        "  acl_offsets(m, row, 0, ACL_OUTER, base);",
        "  acc_t best = (acc_t)0;",
        "  idx_t best_at = 0;",
        *("  " + line for line in element_loop(kernel, step, start="0", step="1")),
        "}",
    ]
    return assemble(kernel, body, row_loop=False)


GENERATORS: dict[str, Callable[[RowKernel], str]] = {
    "reduce": _reduce,
    "arg": _arg,
    "moments": _moments,
    "softmax": _softmax,
    "cumsum": _cumsum,
    "cumext": _cum_extremum,
}
"""Source generator of each row-kernel kind (kernels/norm.py adds the norms)."""


def generate(kernel: RowKernel) -> str:
    """The complete source (prelude included) of one row kernel."""
    return GENERATORS[kernel.kind](kernel)
