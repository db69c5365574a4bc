"""Kernel generators of GroupedMatmulV5: a device descriptor table, its group-list pass, and the grouped GEMM.

Every group is one row of an int64 descriptor table in device memory (:data:`FIELDS`): operand
addresses, the row range ``[M0, M1)`` and inner range ``[K0, K1)`` it covers, N, element strides, and
the index of its first output tile. The host fills what it knows with :class:`GmmFill` launches
(the values travel as kernel arguments, :data:`FILL_GROUPS` groups per launch, so nothing is copied
from the host); :class:`GmmPrep` (one thread) then reads the group list where there is one, writes
the row or inner ranges it defines, checks it (non-negative, non-decreasing when cumulative, within
the grouped axis, equal to the x list's rows when both are given; a bad list sets the device flag)
and numbers every group's tiles (in the tile shape of the GEMM that follows). :class:`GmmKernel` is a
tiled shared-memory SIMT GEMM (fp32 operands, and fp16 / bf16 / INT8 where the runner does not take the
matrix-instruction kernel of :mod:`acl_rocm.kernels.grouped_matmul_mma`): block ``b`` finds
its group by binary search over the tiles' first indices, computes one
``TILE_M`` × ``TILE_N`` output tile with fp32 accumulation over ``TILE_K`` slices, adds the bias and
rounds once to the output's dtype. INT8 operands accumulate in int32 instead (exact while
K·128·128 < 2^31, i.e. K < 131072) into an INT32 output: the integer GEMM of the grouped quantised
ops (:mod:`acl_rocm.ops.gmm_quant`). The grid is an upper bound of the tile count computed on the host;
blocks past the device's count return at once, and nothing runs when the flag is set.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import ClassVar, Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
TILE_M: Final = 64
TILE_N: Final = 64
TILE_K: Final = 16
FIELDS: Final = (
    "X",
    "W",
    "BIAS",
    "OUT",
    "M0",
    "M1",
    "K0",
    "K1",
    "N",
    "XSR",
    "XSC",
    "WSK",
    "WSN",
    "OSR",
    "OSC",
    "BSN",
    "TILE",
)
"""One descriptor row: addresses (bytes), ranges, N, strides (elements), first tile."""
FIELD: Final = {name: i for i, name in enumerate(FIELDS)}
FILL_GROUPS: Final = 16
"""Descriptor rows one fill launch carries as arguments (17 × 16 int64: 2 KiB of the 4 KiB argument space)."""
PREP_SCALARS: Final = ("GROUPS", "MODE", "LIST_TYPE", "AXIS", "LIST_STRIDE", "HAS_LIST")
MODE_HOST, MODE_M, MODE_K, MODE_CHECK = 0, 1, 2, 3
"""Group-list modes: none; it sets the row ranges; it sets the inner ranges; it must equal the rows."""
_F32 = ctype(D.ACL_FLOAT)
GEMM_META: Final = "struct Meta { long long n; long long shape[1]; long long stride[1][1]; };"
GEMM_PARAMS: Final = ["const Meta m", "const long long* table", "const int* flag"]
"""The grouped GEMMs' parameters: the group count (``m.n``), the descriptor table, the bad-list flag."""
FIND_GROUP: Final = (
    "if (*flag) return;",
    "const long long groups = m.n;",
    "const long long b = blockIdx.x;",
    "if (b >= table[groups * NFIELDS + F_TILE]) return;",
    "long long lo = 0, hi = groups - 1;",
    "while (lo < hi) {",
    "  const long long mid = (lo + hi + 1) / 2;",
    "  if (table[mid * NFIELDS + F_TILE] <= b) lo = mid; else hi = mid - 1;",
    "}",
    "const long long* e = table + lo * NFIELDS;",
)
"""A grouped GEMM's first lines: nothing after a bad group list; block ``b``'s group row ``e`` (binary search over
the groups' first tiles), or an early return past the tile count."""


def hashed_name(kind: str, key: object) -> str:
    """A grouped-matmul kernel's extern "C" name: its kind and a hash of its key."""
    return f"acl_gmm_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _fields() -> list[str]:
    return [f"#define F_{name} {i}" for i, name in enumerate(FIELDS)] + [f"#define NFIELDS {len(FIELDS)}"]


def kernel_source(
    comment: str,
    meta: str,
    name: str,
    params: list[str],
    body: list[str],
    threads: int = BLOCK_THREADS,
    helpers: str = "",
    min_blocks: int = 0,
) -> str:
    """A kernel source: the prelude, ``helpers`` (device code), the descriptor field indices and ``body``.

    ``min_blocks`` > 0: the blocks an SM must hold at once (``__launch_bounds__``' second bound: fewer registers).
    """
    bounds = f"{threads}, {min_blocks}" if min_blocks > 0 else f"{threads}"
    return "\n".join(
        [
            PRELUDE,
            helpers,
            f"// grouped matmul: {comment}",
            meta,
            *_fields(),
            f'extern "C" __global__ void __launch_bounds__({bounds}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


@dataclass(frozen=True)
class GmmFill:
    """``table[(shape[0] + j) * NFIELDS + f] = stride[f][j]`` for the ``shape[1]`` groups of one launch."""

    index_type: str = "long long"

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("fill", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _fill_source()


@functools.cache
def _fill_source() -> str:
    meta = f"struct Meta {{ long long n; long long shape[2]; long long stride[{len(FIELDS)}][{FILL_GROUPS}]; }};"
    body = [
        "const long long step = (long long)gridDim.x * blockDim.x;",
        "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m.n; i += step) {",
        "  const long long f = i / m.shape[1], j = i % m.shape[1];",
        "  table[(m.shape[0] + j) * NFIELDS + f] = m.stride[f][j];",
        "}",
    ]
    return kernel_source("descriptor fill", meta, GmmFill().kernel_name, ["const Meta m", "long long* table"], body)


@dataclass(frozen=True)
class GmmPrep:
    """Group list → ranges, checks and tile numbering in ``tile_m`` × ``tile_n`` output tiles (one thread; at most
    1024 groups)."""

    tile_m: int = TILE_M
    tile_n: int = TILE_N
    index_type: str = "long long"

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("prep", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _prep_source(self)


@functools.cache
def _prep_source(k: GmmPrep) -> str:
    meta = f"struct Meta {{ long long n; long long shape[{len(PREP_SCALARS)}]; long long stride[1][1]; }};"
    defines = [f"#define {name} m.shape[{i}]" for i, name in enumerate(PREP_SCALARS)]
    body = [
        *defines,
        "if (blockIdx.x != 0 || threadIdx.x != 0) return;",
        "long long prev = 0, tiles = 0;",
        "bool bad = false;",
        "for (long long g = 0; g < GROUPS; ++g) {",
        "  long long* e = table + g * NFIELDS;",
        "  if (HAS_LIST) {",
        "    const long long v = list[g * LIST_STRIDE];",
        "    long long end = prev;",
        "    if (v < 0 || v > AXIS) bad = true;",
        "    else if (LIST_TYPE == 0) { if (v < prev) bad = true; else end = v; }",
        "    else if (prev + v > AXIS) bad = true;",
        "    else end = prev + v;",
        f"    if (MODE == {MODE_M}) {{ e[F_M0] = prev; e[F_M1] = end; }}",
        f"    if (MODE == {MODE_K}) {{ e[F_K0] = prev; e[F_K1] = end; }}",
        f"    if (MODE == {MODE_CHECK} && end - prev != e[F_M1] - e[F_M0]) bad = true;",
        "    prev = end;",
        "  }",
        "  const long long rows = e[F_M1] - e[F_M0];",
        "  e[F_TILE] = tiles;",
        f"  tiles += ((rows + {k.tile_m - 1}) / {k.tile_m}) * ((e[F_N] + {k.tile_n - 1}) / {k.tile_n});",
        "}",
        "table[GROUPS * NFIELDS + F_TILE] = bad ? 0 : tiles;",
        "if (bad) *flag = 1;",
    ]
    params = ["const Meta m", "const long long* list", "long long* table", "int* flag"]
    return kernel_source(f"group list pass, {k.tile_m}x{k.tile_n} tiles", meta, k.kernel_name, params, body)


@dataclass(frozen=True)
class GmmKernel:
    """The grouped GEMM over a descriptor table: x and weight of ``dtype``, bias of ``bias`` (None: none),
    the output of ``out`` (None: ``dtype``)."""

    dtype: D
    bias: D | None
    out: D | None = None
    index_type: str = "long long"

    path: ClassVar[str] = "simt"
    """The name the runner reports for this kernel (its debug line, ``last_path``)."""
    tile_m: ClassVar[int] = TILE_M
    tile_n: ClassVar[int] = TILE_N
    threads: ClassVar[int] = BLOCK_THREADS

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("gemm", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _gemm_source(self)


@functools.lru_cache(maxsize=64)
def _gemm_source(k: GmmKernel) -> str:
    t = ctype(k.dtype)
    s = t.storage
    o = ctype(k.dtype if k.out is None else k.out)
    integer = k.dtype == D.ACL_INT8
    if integer and (k.bias is not None or o.dtype != D.ACL_INT32):
        raise ValueError("the integer grouped GEMM takes no bias and writes INT32")
    acc_t = "int" if integer else "float"

    def element(expr: str) -> str:
        return f"(int){expr}" if integer else load(expr, t, _F32)

    rows_per_thread = TILE_M * TILE_N // BLOCK_THREADS // 4  # 4 columns per thread
    lanes_n = TILE_N // 4
    lanes_m = BLOCK_THREADS // lanes_n
    loads_a = TILE_M * TILE_K // BLOCK_THREADS
    loads_b = TILE_K * TILE_N // BLOCK_THREADS
    bias_line = []
    if k.bias is not None:
        b = ctype(k.bias)
        bias_line = [
            f"        const {b.storage}* bias = (const {b.storage}*)e[F_BIAS];",
            f"        if (bias) v += {load('bias[col * e[F_BSN]]', b, _F32)};",
        ]
    body = [
        *FIND_GROUP,
        f"const {s}* x = (const {s}*)e[F_X];",
        f"const {s}* w = (const {s}*)e[F_W];",
        f"{o.storage}* out = ({o.storage}*)e[F_OUT];",
        "const long long m1 = e[F_M1], k0 = e[F_K0], k1 = e[F_K1], n = e[F_N];",
        "const long long xsr = e[F_XSR], xsc = e[F_XSC], wsk = e[F_WSK], wsn = e[F_WSN];",
        f"const long long tiles_n = (n + {TILE_N - 1}) / {TILE_N};",
        "const long long t = b - e[F_TILE];",
        f"const long long row0 = e[F_M0] + (t / tiles_n) * {TILE_M};",
        f"const long long col0 = (t % tiles_n) * {TILE_N};",
        f"__shared__ {acc_t} As[{TILE_K}][{TILE_M + 1}];",
        f"__shared__ {acc_t} Bs[{TILE_K}][{TILE_N + 1}];",
        "const int tid = threadIdx.x;",
        f"const int tx = tid % {lanes_n}, ty = tid / {lanes_n};",
        f"{acc_t} acc[{rows_per_thread}][4];",
        "#pragma unroll",
        f"for (int i = 0; i < {rows_per_thread}; ++i) {{ acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0; }}",
        f"for (long long kb = k0; kb < k1; kb += {TILE_K}) {{",
        "  #pragma unroll",
        f"  for (int q = 0; q < {loads_a}; ++q) {{",
        f"    const int at = tid + {BLOCK_THREADS} * q, r = at / {TILE_K}, kk = at % {TILE_K};",
        "    const long long row = row0 + r, kc = kb + kk;",
        f"    As[kk][r] = (row < m1 && kc < k1) ? {element('x[row * xsr + kc * xsc]')} : 0;",
        "  }",
        "  #pragma unroll",
        f"  for (int q = 0; q < {loads_b}; ++q) {{",
        f"    const int at = tid + {BLOCK_THREADS} * q, kk = at / {TILE_N}, c = at % {TILE_N};",
        "    const long long col = col0 + c, kc = kb + kk;",
        f"    Bs[kk][c] = (col < n && kc < k1) ? {element('w[kc * wsk + col * wsn]')} : 0;",
        "  }",
        "  __syncthreads();",
        "  #pragma unroll",
        f"  for (int kk = 0; kk < {TILE_K}; ++kk) {{",
        f"    {acc_t} bv[4];",
        "    #pragma unroll",
        f"    for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + {lanes_n} * j];",
        "    #pragma unroll",
        f"    for (int i = 0; i < {rows_per_thread}; ++i) {{",
        f"      const {acc_t} av = As[kk][ty + {lanes_m} * i];",
        "      #pragma unroll",
        "      for (int j = 0; j < 4; ++j) acc[i][j] += av * bv[j];",
        "    }",
        "  }",
        "  __syncthreads();",
        "}",
        "const long long osr = e[F_OSR], osc = e[F_OSC];",
        "#pragma unroll",
        f"for (int i = 0; i < {rows_per_thread}; ++i) {{",
        f"  const long long row = row0 + ty + {lanes_m} * i;",
        "  if (row >= m1) continue;",
        "  #pragma unroll",
        "  for (int j = 0; j < 4; ++j) {",
        f"    const long long col = col0 + tx + {lanes_n} * j;",
        "    if (col < n) {",
        f"      {acc_t} v = acc[i][j];",
        *(line[4:] for line in bias_line),
        f"      out[row * osr + col * osc] = {'v' if integer else store('v', _F32, o)};",
        "    }",
        "  }",
        "}",
    ]
    bias = k.bias.short if k.bias is not None else "none"
    comment = f"tiled GEMM {k.dtype.short}, bias {bias}, out {(k.dtype if k.out is None else k.out).short}"
    return kernel_source(comment, GEMM_META, k.kernel_name, GEMM_PARAMS, body)
