"""Kernel sources of the quantised GEMMs: an operand kernel and an epilogue kernel (HIP/CUDA common).

``operand``: reads one matmul operand (logical ``(*batch, rows, k)``, any strides, sub-byte types by
nibble) and writes it K-major and dense into a temporary ``(batch, rows_pad, k_pad)``, zero-filled past
``rows`` and ``k``. It either copies the element's bytes unchanged (the fp8 / int8 hardware GEMM's
gather into the "TN" layout) or decodes it to bf16 / fp32, optionally times an E8M0 block scale (MX,
32 elements along k) or as ``(w + offset) * scale`` (weight antiquantisation, per channel or per group).

8-bit and 4-bit codes decode through a 256-entry float table in device memory, built on the host from
:mod:`acl_core.lowp` and ml_dtypes (the codecs the reference uses), so every code decodes exactly as
the reference decodes it; the table is staged in shared memory per block.

``epilogue``: ``out = ((acc [+ bias]) * scale [* token] [+ bias] [+ offset])`` in double precision from
the GEMM's int32 / fp32 result, rounded once to the output dtype (integers half-to-even, saturated).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Final, Literal

import ml_dtypes
import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_rocm.kernels.prelude import PRELUDE

THREADS: Final = 256
BATCH_DIMS: Final = 4
"""Batch dims the kernels index (QuantMatmul operands have rank <= 6)."""

Load = Literal["lut8", "lut4", "f16", "bf16", "f32", "raw"]
Store = Literal["raw", "bf16", "f32"]
ScaleKind = Literal["none", "e8m0", "affine"]

_LOAD_OF: Final[dict[D, Load]] = {
    D.ACL_INT8: "lut8",
    D.ACL_FLOAT8_E4M3FN: "lut8",
    D.ACL_FLOAT8_E5M2: "lut8",
    D.ACL_HIFLOAT8: "lut8",
    D.ACL_INT4: "lut4",
    D.ACL_FLOAT4_E2M1: "lut4",
    D.ACL_FLOAT16: "f16",
    D.ACL_BF16: "bf16",
    D.ACL_FLOAT: "f32",
}
"""How an operand dtype is read: through a decode table (8/4-bit codes) or converted directly."""

DECODABLE: Final = frozenset(_LOAD_OF)


def load_kind(dtype: D) -> Load:
    """The decode used for operand dtype ``dtype`` (KeyError when there is none)."""
    return _LOAD_OF[dtype]


@cache
def decode_table(dtype: D) -> np.ndarray:
    """float32[256]: the value of every code of ``dtype`` (4-bit types: codes 0..15, the rest 0)."""
    codes = np.arange(256, dtype=np.uint8)
    if dtype == D.ACL_INT8:
        values = codes.view(np.int8).astype(np.float64)
    elif dtype == D.ACL_FLOAT8_E4M3FN:
        values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    elif dtype == D.ACL_FLOAT8_E5M2:
        values = codes.view(ml_dtypes.float8_e5m2).astype(np.float64)
    elif dtype == D.ACL_HIFLOAT8:
        values = lowp.hifloat8_decode(codes)
    elif dtype == D.ACL_FLOAT8_E8M0:
        values = lowp.e8m0_decode(codes)
    elif dtype == D.ACL_INT4:
        values = np.where(codes < 16, ((codes.astype(np.int64) + 8) % 16) - 8, 0).astype(np.float64)
    elif dtype == D.ACL_FLOAT4_E2M1:
        nibbles = np.where(codes < 16, codes, 0).astype(np.uint8)
        values = np.where(codes < 16, nibbles.view(ml_dtypes.float4_e2m1fn).astype(np.float64), 0.0)
    else:
        raise KeyError(f"no decode table for {dtype.name}")
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(values.astype(np.float32))


_LOAD_EXPR: Final[dict[Load, str]] = {
    "lut8": "table[x[xi]]",
    "lut4": "table[(xi & 1) ? (x[xi >> 1] >> 4) : (x[xi >> 1] & 15)]",
    "f16": "acl_h2f(((const unsigned short*)x)[xi])",
    "bf16": "acl_b2f(((const unsigned short*)x)[xi])",
    "f32": "((const float*)x)[xi]",
    "raw": "x[xi]",
}
_STORE: Final[dict[Store, tuple[str, str, str]]] = {
    "raw": ("unsigned char", "(unsigned char)0", "v"),
    "bf16": ("unsigned short", "acl_f2b(0.0f)", "acl_f2b(v)"),
    "f32": ("float", "0.0f", "v"),
}
_PARAM_LOAD: Final[dict[D, str]] = {
    D.ACL_FLOAT: "((const float*){p})[{i}]",
    D.ACL_FLOAT16: "acl_h2f(((const unsigned short*){p})[{i}])",
    D.ACL_BF16: "acl_b2f(((const unsigned short*){p})[{i}])",
    D.ACL_INT32: "(double)((const int*){p})[{i}]",
    D.ACL_UINT64: "__uint_as_float((unsigned int)(((const unsigned long long*){p})[{i}] & 0xffffffffull))",
    D.ACL_INT64: "__uint_as_float((unsigned int)(((const unsigned long long*){p})[{i}] & 0xffffffffull))",
}
"""Reading one scale / bias / offset element (packed UINT64/INT64 scales: the float32 in the low 32 bits)."""


def param_load(dtype: D, pointer: str, index: str) -> str:
    """C expression reading element ``index`` of a parameter tensor of ``dtype`` as a float / double."""
    return _PARAM_LOAD[dtype].format(p=pointer, i=index)


PARAM_DTYPES: Final = frozenset(_PARAM_LOAD)


TILE_ROWS: Final = 32
TILE_K: Final = 64
"""The operand kernel's tile: one block writes TILE_ROWS rows by TILE_K k of the K-major temporary."""
EPI_ROWS: Final = 8
"""Output rows one epilogue block takes (its THREADS threads run along n)."""
EPI_VEC: Final = 4
"""Columns one thread of the vector epilogue takes (4 int32 / fp32 accumulators: one 16-byte load)."""


@dataclass(frozen=True)
class OperandKernel:
    """One specialisation of the operand kernel."""

    load: Load
    store: Store
    scale: ScaleKind = "none"
    scale_dtype: D | None = None
    offset: bool = False
    transpose: bool = False
    """The source runs along rows, not k: the tile is staged in shared memory so reads and writes coalesce."""

    @property
    def kernel_name(self) -> str:
        """The kernel's ``extern "C"`` symbol."""
        extra = f"_{self.scale_dtype.short}" if self.scale_dtype is not None else ""
        return (
            f"acl_qmm_operand_{self.load}_{self.store}_{self.scale}{extra}{'_off' if self.offset else ''}"
            f"{'_t' if self.transpose else ''}"
        )


def operand_source(k: OperandKernel) -> str:
    """The operand kernel: Meta n (batch entries), shape (b0..b3, rows, k, rows_pad, k_pad), strides (x, scale, offset).

    Grid (k_pad / TILE_K, rows_pad / TILE_ROWS, batch): a block splits its batch index once, so no
    element pays a 64-bit division (those dominated the kernel's time on large GEMMs).
    """
    if k.load == "raw" and (k.store != "raw" or k.scale != "none"):
        raise ValueError("a raw copy neither decodes nor scales")
    if k.scale == "affine" and k.scale_dtype is None:
        raise ValueError("an affine (antiquant) scale needs its dtype")
    storage, zero, encode = _STORE[k.store]
    lut = k.load in ("lut8", "lut4")
    lines = []
    if k.scale == "e8m0":
        lines += [
            "        const long long g = kk / 32;",
            "        const long long si = sb + r * meta.stride[1][4] + (g >> 1) * meta.stride[1][5]"
            " + (g & 1) * meta.stride[1][6];",
            "        v = v * stable[sc[si]];",
        ]
    elif k.scale == "affine":
        assert k.scale_dtype is not None
        lines.append("        const long long g = (long long)((unsigned int)kk / (unsigned int)group);")
        lines.append("        const long long si = sb + r * meta.stride[1][4] + g * meta.stride[1][5];")
        if k.offset:
            lines.append("        const long long oi = ob + r * meta.stride[2][4] + g * meta.stride[2][5];")
            lines.append(f"        v = v + (float)({param_load(k.scale_dtype, 'off', 'oi')});")
        lines.append(f"        v = v * (float)({param_load(k.scale_dtype, 'sc', 'si')});")
    value_type = "unsigned char" if k.load == "raw" else "float"
    stage = ""
    if lut or k.scale == "e8m0":
        stage = "  __shared__ float table[256];\n  __shared__ float stable[256];\n"
        stage += "  for (int i = threadIdx.x; i < 256; i += blockDim.x) {\n"
        stage += (
            "    table[i] = lut ? lut[i] : 0.0f;\n    stable[i] = slut ? slut[i] : 0.0f;\n  }\n  __syncthreads();\n"
        )
    load = _LOAD_EXPR[k.load]
    per = TILE_ROWS * TILE_K // THREADS
    if k.transpose:
        # stage the tile: reads run along rows (the source's unit stride), writes along k
        fill = f"""    for (int i = 0; i < {per}; ++i) {{
      const int e = threadIdx.x + i * {THREADS};
      const long long r = r0 + e % {TILE_ROWS}, kk = k0 + e / {TILE_ROWS};
      if (r < rows && kk < k) {{
        const long long xi = xb + r * meta.stride[0][4] + kk * meta.stride[0][5];
        tile[e / {TILE_ROWS}][e % {TILE_ROWS}] = {load};
      }}
    }}
    __syncthreads();
"""
        take = f"{value_type} v = tile[e % {TILE_K}][e / {TILE_K}];"
        after = "    __syncthreads();\n"
        stage += f"  __shared__ {value_type} tile[{TILE_K}][{TILE_ROWS + 1}];\n"
    else:
        fill, after = "", ""
        take = f"""const long long xi = xb + r * meta.stride[0][4] + kk * meta.stride[0][5];
        {value_type} v = {load};"""
    return f"""{PRELUDE}
struct Meta {{ long long n; long long shape[8]; long long stride[3][8]; }};
extern "C" __global__ void __launch_bounds__({THREADS}) {k.kernel_name}(const Meta meta, const unsigned char* x,
    const float* lut, const unsigned char* sc, const float* slut, const unsigned char* off, long long x_base,
    long long group, {storage}* out) {{
{stage}  const long long rows = meta.shape[4], k = meta.shape[5], rows_pad = meta.shape[6], k_pad = meta.shape[7];
  const long long k0 = (long long)blockIdx.x * {TILE_K};
  for (long long b = blockIdx.z; b < meta.n; b += gridDim.z) {{
    long long xb = x_base, sb = 0, ob = 0, t = b;
    for (int d = {BATCH_DIMS - 1}; d >= 0; --d) {{
      const long long c = t % meta.shape[d];
      t = t / meta.shape[d];
      xb += c * meta.stride[0][d];
      sb += c * meta.stride[1][d];
      ob += c * meta.stride[2][d];
    }}
  for (long long r0 = (long long)blockIdx.y * {TILE_ROWS}; r0 < rows_pad; r0 += (long long)gridDim.y * {TILE_ROWS}) {{
{fill}    for (int i = 0; i < {per}; ++i) {{
      const int e = threadIdx.x + i * {THREADS};
      const long long r = r0 + e / {TILE_K}, kk = k0 + e % {TILE_K};
      if (r >= rows_pad || kk >= k_pad) continue;
      const long long o = (b * rows_pad + r) * k_pad + kk;
      if (r < rows && kk < k) {{
        {take}
{chr(10).join(lines)}
        out[o] = {encode};
      }} else {{
        out[o] = {zero};
      }}
    }}
{after}  }}
  }}
}}
"""


Acc = Literal["int32", "f32"]


@dataclass(frozen=True)
class EpilogueKernel:
    """One specialisation of the epilogue: which parameters are present, their dtypes, the output dtype."""

    acc: Acc
    out: D
    scale: D | None = None
    token: bool = False
    bias: D | None = None
    bias_first: bool = False
    offset: D | None = None
    vec: bool = False
    """EPI_VEC consecutive columns a thread: one 16-byte accumulator load and one vector store per row."""

    @property
    def kernel_name(self) -> str:
        """The kernel's ``extern "C"`` symbol (``is not None``: ACL_FLOAT is 0, a falsy enum member)."""
        parts = [self.acc, self.out.short, f"s{self.scale.short}" if self.scale is not None else "s0"]
        parts += ["t" if self.token else "t0", f"b{self.bias.short}" if self.bias is not None else "b0"]
        parts += ["first" if self.bias_first else "last", f"o{self.offset.short}" if self.offset is not None else "o0"]
        return "acl_qmm_epilogue_" + "_".join(parts) + ("_v4" if self.vec else "")


_OUT_STORE: Final[dict[D, tuple[str, str]]] = {
    D.ACL_FLOAT: ("float", "(float)v"),
    D.ACL_FLOAT16: ("unsigned short", "acl_f2h((float)v)"),
    D.ACL_BF16: ("unsigned short", "acl_f2b((float)v)"),
    D.ACL_INT8: ("signed char", "(signed char)acl_f2i(rint(v), -128.0, 127.0)"),
    D.ACL_INT32: ("int", "(int)acl_f2i(rint(v), -2147483648.0, 2147483647.0)"),
}
EPILOGUE_OUT: Final = frozenset(_OUT_STORE)


def epilogue_source(k: EpilogueKernel) -> str:
    """The epilogue: Meta n (batch entries), shape (b0..b3, m, n); strides of acc, out, scale, token, bias, offset.

    Grid (n / (THREADS * V), m / EPI_ROWS, batch), threads along n: a block splits its batch index once. A
    thread takes EPI_ROWS rows of its V columns (V = 1, or EPI_VEC with ``k.vec``: one 16-byte accumulator
    load and one vector store per row, which needs n, every row stride and the bases to be multiples of V
    and ``out`` aligned to V elements): it loads every row's accumulators first (EPI_ROWS independent loads
    from memory in flight, none ordered behind a store that might alias it), then applies the (cached,
    small) parameters and stores row by row; element addresses step by a row stride (64-bit adds, no
    multiply or division per element).
    """
    storage, encode = _OUT_STORE[k.out]
    acc_type = "int" if k.acc == "int32" else "float"
    present = ((2, k.scale is not None), (3, k.token), (4, k.bias is not None), (5, k.offset is not None))
    used = [0, 1] + [a for a, there in present if there]
    vec = EPI_VEC if k.vec else 1

    def at(a: int) -> str:  # element index of parameter a at column c + j
        return f"p[{a}] + j * meta.stride[{a}][5]"

    pad = "    "
    body = [f"{pad}        double v = (double)a0[i].v[j];"]
    bias = param_load(k.bias, "bias", at(4)) if k.bias is not None else ""
    if k.bias is not None and k.bias_first:
        body.append(f"{pad}        v = v + (double)({bias});")
    if k.scale is not None:
        body.append(f"{pad}        v = v * (double)({param_load(k.scale, 'scale', at(2))});")
    if k.token:
        body.append(f"{pad}        v = v * (double)({param_load(D.ACL_FLOAT, 'token', at(3))});")
    if k.bias is not None and not k.bias_first:
        body.append(f"{pad}        v = v + (double)({bias});")
    if k.offset is not None:
        body.append(f"{pad}        v = v + (double)({param_load(k.offset, 'offset', at(5))});")
    start = "\n".join(f"      p[{a}] = base[{a}] + r * meta.stride[{a}][4] + c * meta.stride[{a}][5];" for a in used)
    step = " ".join(f"p[{a}] += meta.stride[{a}][4];" for a in used)
    return f"""{PRELUDE}
struct Meta {{ long long n; long long shape[6]; long long stride[6][6]; }};
extern "C" __global__ void __launch_bounds__({THREADS}) {k.kernel_name}(const Meta meta, const {acc_type}* acc,
    const unsigned char* scale, const unsigned char* token, const unsigned char* bias, const unsigned char* offset,
    long long out_base, {storage}* out) {{
  const long long m = meta.shape[4], n = meta.shape[5];
  const long long c = ((long long)blockIdx.x * {THREADS} + threadIdx.x) * {vec};
  if (c >= n) return;
  for (long long b = blockIdx.z; b < meta.n; b += gridDim.z) {{
    long long base[6] = {{0, out_base, 0, 0, 0, 0}};
    long long t = b;
    for (int d = {BATCH_DIMS - 1}; d >= 0; --d) {{
      const long long i = t % meta.shape[d];
      t = t / meta.shape[d];
      for (int a = 0; a < 6; ++a) base[a] += i * meta.stride[a][d];
    }}
    for (long long r = (long long)blockIdx.y * {EPI_ROWS}; r < m; r += (long long)gridDim.y * {EPI_ROWS}) {{
      const int count = r + {EPI_ROWS} < m ? {EPI_ROWS} : (int)(m - r);
      long long p[6] = {{0, 0, 0, 0, 0, 0}};
{start}
      long long q = p[0];
      AclVec<{acc_type}, {vec}> a0[{EPI_ROWS}];
#pragma unroll
      for (int i = 0; i < {EPI_ROWS}; ++i) {{
        if (i < count) a0[i] = *(const AclVec<{acc_type}, {vec}>*)(acc + q);
        q += meta.stride[0][4];
      }}
#pragma unroll
      for (int i = 0; i < {EPI_ROWS}; ++i) {{
        if (i < count) {{
          AclVec<{storage}, {vec}> y;
#pragma unroll
          for (int j = 0; j < {vec}; ++j) {{
{chr(10).join(body)}
            y.v[j] = {encode};
          }}
          *(AclVec<{storage}, {vec}>*)(out + p[1]) = y;
          {step}
        }}
      }}
    }}
  }}
}}
"""


MX_PAIR_CHUNK: Final = 8
"""Codes one thread decodes per step of the MX pair kernel: one 16-byte store of bf16 (8-byte fp8 load, 4-byte fp4)."""
MX_PAIR_UNROLL: Final = 4
"""Chunks per thread of the MX pair kernel, all loaded before the tables are staged (loads in flight)."""
MX_PAIR_LOADS: Final[dict[str, int]] = {"lut8": 8, "lut4": 4}
"""Bytes of codes per chunk: 8 fp8 codes, or 8 fp4 codes (4 bytes)."""


_MX_META: Final = (
    "struct MxMeta { long long rows[2]; long long k[2]; long long row_stride[2]; long long base[2]; "
    "long long s_row[2]; long long s_pair[2]; long long s_half[2]; long long blocks0; };"
)
"""The pair kernel's by-value parameter (on one line: the emulator reads its layout from the source)."""


def mx_pair_name(load: Load) -> str:
    """The ``extern "C"`` symbol of the MX pair kernel for ``load`` (lut8: MXFP8, lut4: MXFP4)."""
    return f"acl_qmm_mx_pair_{load}"


def mx_pair_chunks_per_block() -> int:
    """Chunks (of :data:`MX_PAIR_CHUNK` codes) one block of the MX pair kernel decodes."""
    return THREADS * MX_PAIR_UNROLL


def mx_pair_source(load: Load) -> str:
    """Both MX operands of one GEMM decoded to dense K-major bf16 in one launch, coalesced loads and stores.

    Meta per side s (0: x1, 1: x2): rows, k, row stride (elements), element offset, scale strides (row,
    k-block pair, pair element), and ``blocks0`` (the blocks of side 0; the rest do side 1). A chunk is
    8 codes (8 bytes of fp8, 4 of fp4, within one 32-element block: one scale) and one 16-byte bf16 store;
    a block takes ``THREADS * MX_PAIR_UNROLL`` consecutive chunks, step u of thread t chunk
    ``u * THREADS + t``, so consecutive lanes load and store consecutive bytes. Every thread issues its
    code and scale loads before the shared tables are staged, so the loads overlap the staging. The meta
    fields are picked by selects, never by a run-time array index (which would copy the parameter block
    to local memory). The host takes this kernel only where k is a multiple of 32, rows and element
    offsets keep 16-byte alignment, rows * k / 8 fits 31 bits (one 32-bit division per chunk) and the
    batch is 1. Values are exactly the operand kernel's: ``table[code] * stable[scale]`` rounded once.
    """
    if load not in MX_PAIR_LOADS:
        raise ValueError(f"the MX pair kernel decodes lut8 / lut4 codes, not {load}")
    unroll = MX_PAIR_UNROLL
    if load == "lut8":
        fetch = "const AclVec<unsigned, 2> q = *(const AclVec<unsigned, 2>*)(x + element);\n"
        fetch += "        w0[u] = q.v[0];\n        w1[u] = q.v[1];"
        code = "((j < 4 ? w0[u] : w1[u]) >> ((j & 3) * 8)) & 255u"
    else:
        fetch = "w0[u] = *(const unsigned*)(x + element / 2);\n        w1[u] = 0u;"
        code = "(w0[u] >> (j * 4)) & 15u"

    def pick(field: str) -> str:
        return f"(side ? meta.{field}[1] : meta.{field}[0])"

    return f"""{PRELUDE}
{_MX_META}
extern "C" __global__ void __launch_bounds__({THREADS}) {mx_pair_name(load)}(const MxMeta meta,
    const unsigned char* xa, const unsigned char* xb, const unsigned char* sa, const unsigned char* sb,
    const float* lut, const float* slut, unsigned* oa, unsigned* ob) {{
  __shared__ float table[256];
  __shared__ float stable[256];
  const int side = (long long)blockIdx.x < meta.blocks0 ? 0 : 1;
  const unsigned block = (unsigned)(side ? (long long)blockIdx.x - meta.blocks0 : (long long)blockIdx.x);
  const unsigned cpr = (unsigned)({pick("k")} >> 3);
  const unsigned total = (unsigned)({pick("rows")}) * cpr;
  const long long row_stride = {pick("row_stride")}, base = {pick("base")};
  const long long s_row = {pick("s_row")}, s_pair = {pick("s_pair")}, s_half = {pick("s_half")};
  const unsigned char* x = side ? xb : xa;
  const unsigned char* sc = side ? sb : sa;
  AclVec<unsigned, 4>* out = (AclVec<unsigned, 4>*)(side ? ob : oa);
  unsigned w0[{unroll}], w1[{unroll}], code_s[{unroll}];
  for (int u = 0; u < {unroll}; ++u) {{
    const unsigned long long c64 = ((unsigned long long)block * {unroll} + u) * {THREADS} + threadIdx.x;
    w0[u] = 0u;
    w1[u] = 0u;
    code_s[u] = 0u;
    if (c64 < total) {{
      const unsigned c = (unsigned)c64;
      const unsigned row = c / cpr, ck = c - row * cpr, g = ck >> 2;
      const long long element = base + (long long)row * row_stride + (long long)ck * {MX_PAIR_CHUNK};
      {fetch}
      code_s[u] = sc[(long long)row * s_row + (long long)(g >> 1) * s_pair + (long long)(g & 1u) * s_half];
    }}
  }}
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {{
    table[i] = lut[i];
    stable[i] = slut[i];
  }}
  __syncthreads();
  for (int u = 0; u < {unroll}; ++u) {{
    const unsigned long long c64 = ((unsigned long long)block * {unroll} + u) * {THREADS} + threadIdx.x;
    if (c64 >= total) break;
    const float s = stable[code_s[u]];
    AclVec<unsigned, 4> r;
    for (int h = 0; h < 4; ++h) {{
      const int j = h * 2;
      const unsigned lo = acl_f2b(table[{code}] * s);
      const unsigned hi = acl_f2b(table[{code.replace("j", "(j + 1)")}] * s);
      r.v[h] = lo | (hi << 16);
    }}
    out[c64] = r;
  }}
}}
"""
