"""Kernels of the composed attention backward (FlashAttentionScoreGrad): the dS row kernel and small helpers.

The op (:mod:`acl_rocm.ops.attention_grad`) computes ``S = Q Kᵀ`` and ``dP = dO Vᵀ`` per chunk with the vendor GEMM
into fp32 temporaries ([heads, rows, cols]); :func:`rows_source`'s kernel then turns each row into ``P =
exp(scale·(S + pse) − max) / sum`` (masked, the forward's saved statistics; 0 where masked or the sum is 0) and
``dS' = scale·P ∘ (dP − D)`` with ``D = Σ dO ∘ O`` computed from the row of dO and O. It writes both in fp32: the
products that read them (``Pᵀ dO``, ``dS K``, ``dSᵀ Q``) sum terms of both signs, so P or dS rounded to fp16/bf16
would cost dV, dQ and dK far more than their own final rounding (the table's fp16/bf16 tolerances fail at a few
elements a sample), and those GEMMs run in fp32. With a sink it writes the row's ``−p_sink·D`` to a [B, N, Sq] fp32
array that :func:`sink_source`'s kernel sums per head (no atomics: a fixed order). :func:`add_source` adds a
chunk's fp32 dK / dV partial into the call's fp32 accumulator, :func:`store_source` writes an accumulator into an
output in its dtype and layout, :func:`copy_source` / :func:`widen_source` make an operand GEMM-readable
(contiguous; fp32). One block of :data:`GRAD_THREADS` threads per row, per head for the sink sum; a thread per
element elsewhere. RotaryPositionEmbeddingGrad's two kernels (:func:`rope_grad_dx_source`, :func:`rope_grad_dcs_source`)
compute in double and round once.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, meta_struct
from acl_rocm.kernels.attention_softmax import _ZERO4, Strides
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_reduce_source

GRAD_THREADS: Final = 256
ELEMENT_THREADS: Final = 256


@dataclass(frozen=True)
class GradRowsMeta(PackedMeta):
    """One row-kernel launch (int64s in declaration order; strides in elements, (batch, head, row, col|dim))."""

    s_head: int = 0
    s_row: int = 0
    rows: int = 0
    cols: int = 0
    row0: int = 0
    kv0: int = 0
    batch: int = 0
    head0: int = 0
    head_step: int = 1
    head_dim: int = 0
    mask: Strides = _ZERO4
    pse: Strides = _ZERO4
    smax: Strides = _ZERO4
    ssum: Strides = _ZERO4
    dout: Strides = _ZERO4
    out: Strides = _ZERO4
    terms: Strides = _ZERO4
    has_mask: int = 0
    has_pse: int = 0
    has_window: int = 0
    win_lo: int = 0
    win_hi: int = 0
    shift: int = 0
    has_sink: int = 0
    sink_step: int = 0


@dataclass(frozen=True)
class ElementMeta(PackedMeta):
    """A 4-d element loop: the dims, the fp32 accumulator's strides and the other side's (elements)."""

    dims: Strides = _ZERO4
    acc: Strides = _ZERO4
    other: Strides = _ZERO4
    count: int = 0


GRAD_STRUCT: Final = meta_struct("GradMeta", GradRowsMeta)
ELEMENT_STRUCT: Final = meta_struct("ElemMeta", ElementMeta)


@dataclass(frozen=True)
class GradKernel:
    """One compiled kernel of this module: which one (a key of ``_SOURCES``) and its dtype."""

    kind: str
    dtype: D = D.ACL_FLOAT

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, GRAD_STRUCT, ELEMENT_STRUCT)).encode()).hexdigest()[:12]
        return f"acl_attn_grad_{self.kind}_{self.dtype.short}_{digest}"

    def source(self) -> str:
        """The complete source (prelude included)."""
        make = _SOURCES[self.kind]
        return "\n".join([PRELUDE, f"// attention backward: {self.kind} {self.dtype.short}", make(self)])


def rows_source(inst: GradKernel) -> str:
    """The dS row kernel: P and scale·P∘(dP − D) in ``inst.dtype``, and the sink terms."""
    c = ctype(inst.dtype)
    s = c.storage
    f32 = ctype(D.ACL_FLOAT)
    keep = """
    bool keep = live;
    if (keep && m.has_mask) keep = mask_row[j * m.mask[3]] == 0;
    if (keep && m.has_window) {
      const long long off = j - i - m.shift;
      keep = off >= m.win_lo && off <= m.win_hi;
    }"""
    return f"""
#define THREADS {GRAD_THREADS}
{GRAD_STRUCT}

{block_reduce_source("grad_reduce", "THREADS")}
extern "C" __global__ void __launch_bounds__(THREADS) {inst.kernel_name}(
    const GradMeta m, const double scale_arg, const float* __restrict__ sc, const float* __restrict__ dp,
    float* __restrict__ p, float* __restrict__ ds, const unsigned char* __restrict__ mask, const {s}* __restrict__ pse,
    const float* __restrict__ smax, const float* __restrict__ ssum, const {s}* __restrict__ dout,
    const {s}* __restrict__ out, const float* __restrict__ sink, float* __restrict__ terms) {{
  __shared__ float red[THREADS];
  const int tid = threadIdx.x;
  const long long r = blockIdx.x, t = blockIdx.y;
  const long long i = m.row0 + r, h = m.head0 + t * m.head_step, b = m.batch;
  const float scale = (float)scale_arg;
  const float* s_row = sc + t * m.s_head + r * m.s_row;
  const float* dp_row = dp + t * m.s_head + r * m.s_row;
  float* p_row = p + t * m.s_head + r * m.s_row;
  float* ds_row = ds + t * m.s_head + r * m.s_row;
  const {s}* do_row = dout + b * m.dout[0] + h * m.dout[1] + i * m.dout[2];
  const {s}* o_row = out + b * m.out[0] + h * m.out[1] + i * m.out[2];
  float part = 0.0f;
  for (long long e = tid; e < m.head_dim; e += THREADS)
    part += {load("do_row[e * m.dout[3]]", c, f32)} * {load("o_row[e * m.out[3]]", c, f32)};
  const float delta = grad_reduce(part, red, false);
  const float row_max = smax[b * m.smax[0] + h * m.smax[1] + i * m.smax[2]];
  const float row_sum = ssum[b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2]];
  const bool live = row_sum > 0.0f;
  const float inv = live ? 1.0f / row_sum : 0.0f;
  const float base = isfinite(row_max) ? row_max : 0.0f;
  const unsigned char* mask_row = m.has_mask ? mask + b * m.mask[0] + h * m.mask[1] + i * m.mask[2] : nullptr;
  const {s}* pse_row = m.has_pse ? pse + b * m.pse[0] + h * m.pse[1] + i * m.pse[2] : nullptr;
  for (long long col = tid; col < m.cols; col += THREADS) {{
    const long long j = m.kv0 + col;{keep}
    float prob = 0.0f, grad = 0.0f;
    if (keep) {{
      float x = s_row[col];
      if (m.has_pse) x += {load("pse_row[j * m.pse[3]]", c, f32)};
      prob = acl_exp(x * scale - base) * inv;
      grad = prob * (dp_row[col] - delta) * scale;
    }}
    p_row[col] = prob;
    ds_row[col] = grad;
  }}
  if (m.has_sink && tid == 0) {{
    const float p_sink = live ? acl_exp(sink[h * m.sink_step] - base) * inv : 0.0f;
    terms[b * m.terms[0] + h * m.terms[1] + i * m.terms[2]] = -p_sink * delta;
  }}
}}
"""


def _element_loop(name: str, params: str, body: str) -> str:
    """A kernel over the 4-d ``m.dims`` (one thread an element): ``a`` / ``o`` the two sides' element offsets."""
    return f"""
{ELEMENT_STRUCT}
extern "C" __global__ void __launch_bounds__({ELEMENT_THREADS}) {name}(const ElemMeta m, {params}) {{
  const long long n = (long long)blockIdx.x * {ELEMENT_THREADS} + threadIdx.x;
  if (n >= m.count) return;
  long long rest = n;
  const long long i3 = rest % m.dims[3]; rest /= m.dims[3];
  const long long i2 = rest % m.dims[2]; rest /= m.dims[2];
  const long long i1 = rest % m.dims[1]; const long long i0 = rest / m.dims[1];
  const long long a = i0 * m.acc[0] + i1 * m.acc[1] + i2 * m.acc[2] + i3 * m.acc[3];
  const long long o = i0 * m.other[0] + i1 * m.other[1] + i2 * m.other[2] + i3 * m.other[3];
  {body}
}}
"""


def add_source(inst: GradKernel) -> str:
    """``acc[a] += part[o]`` (both fp32): a chunk's dK / dV partial into the call's accumulator."""
    return _element_loop(
        inst.kernel_name, "float* __restrict__ acc, const float* __restrict__ part", "acc[a] += part[o];"
    )


def store_source(inst: GradKernel) -> str:
    """``dst[o] = acc[a]`` rounded once to ``inst.dtype``: the accumulator into the output's layout."""
    c = ctype(inst.dtype)
    return _element_loop(
        inst.kernel_name,
        f"const float* __restrict__ acc, {c.storage}* __restrict__ dst",
        f"dst[o] = {store('acc[a]', ctype(D.ACL_FLOAT), c)};",
    )


def copy_source(inst: GradKernel) -> str:
    """``dst[a] = src[o]`` in ``inst.dtype``: an operand into a contiguous temporary a GEMM can read."""
    s = ctype(inst.dtype).storage
    return _element_loop(inst.kernel_name, f"{s}* __restrict__ dst, const {s}* __restrict__ src", "dst[a] = src[o];")


def widen_source(inst: GradKernel) -> str:
    """``dst[a] = src[o]`` from ``inst.dtype`` to fp32: Q, K and dO for the fp32 products of fp16/bf16 calls."""
    c = ctype(inst.dtype)
    return _element_loop(
        inst.kernel_name,
        f"float* __restrict__ dst, const {c.storage}* __restrict__ src",
        f"dst[a] = {load('src[o]', c, ctype(D.ACL_FLOAT))};",
    )


def sink_source(inst: GradKernel) -> str:
    """``dsink[h·step] = Σ_{{b,i}} terms[b, h, i]`` (a [B, N, Sq] fp32 array), one block per head, fixed order."""
    return f"""
#define THREADS {GRAD_THREADS}
{block_reduce_source("sink_reduce", "THREADS")}
extern "C" __global__ void __launch_bounds__(THREADS) {inst.kernel_name}(
    const long long batches, const long long heads, const long long rows, const long long step,
    const float* __restrict__ terms, float* __restrict__ dsink) {{
  __shared__ float red[THREADS];
  const long long h = blockIdx.x;
  float part = 0.0f;
  for (long long n = threadIdx.x; n < batches * rows; n += THREADS)
    part += terms[(n / rows) * heads * rows + h * rows + n % rows];
  const float total = sink_reduce(part, red, false);
  if (threadIdx.x == 0) dsink[h * step] = total;
}}
"""


_SOURCES = {
    "rows": rows_source,
    "add": add_source,
    "store": store_source,
    "copy": copy_source,
    "widen": widen_source,
    "sink": sink_source,
}


# ----------------------------------------------------------------------------- RotaryPositionEmbeddingGrad
@dataclass(frozen=True)
class RopeGradMeta(PackedMeta):
    """One rotary-backward launch: dy's dims (3-d padded to 4), strides of every tensor, the mode (elements)."""

    dims: Strides = _ZERO4
    cos_dims: Strides = _ZERO4
    dy: Strides = _ZERO4
    x: Strides = _ZERO4
    cos: Strides = _ZERO4
    sin: Strides = _ZERO4
    dx: Strides = _ZERO4
    dcos: Strides = _ZERO4
    dsin: Strides = _ZERO4
    mode: int = 0
    count: int = 0


ROPE_GRAD_STRUCT: Final = meta_struct("RopeGradMeta", RopeGradMeta)

_ROPE_PAIR = """
// dx[e] = cos[a]·dy[a] + sign·sin[p]·dy[p]: the transposed rotation of the mode (a = e but in mode 3)
ACL_DEV void rope_pair(long long mode, long long d, long long e, long long* a, long long* p, double* sign) {
  const long long h = d / 2, q = d / 4;
  *a = e;
  if (mode == 0) { *p = e < h ? e + h : e - h; *sign = e < h ? 1.0 : -1.0; }
  else if (mode == 1) { *p = e % 2 == 0 ? e + 1 : e - 1; *sign = e % 2 == 0 ? 1.0 : -1.0; }
  else if (mode == 2) { const bool first = (e / q) % 2 == 0; *p = first ? e + q : e - q; *sign = first ? 1.0 : -1.0; }
  else {  // interleave-half: output 2i pairs half-rows i and i + h
    const long long i = e / 2;
    *a = e % 2 == 0 ? i : i + h;
    *p = e % 2 == 0 ? i + h : i;
    *sign = e % 2 == 0 ? 1.0 : -1.0;
  }
}
"""


def rope_grad_dx_source(inst: GradKernel) -> str:
    """``dx = dy·cos + Rᵀ(dy·sin)``, one thread an element of dy, in double, rounded once."""
    c = ctype(inst.dtype)
    s = c.storage
    f32 = ctype(D.ACL_FLOAT)

    def at(name: str, index: str) -> str:
        return f"(double){load(f'{name}[row_{name} + ({index}) * m.{name}[3]]', c, f32)}"

    rows = "\n".join(
        f"  const long long row_{n} = i0 * m.{n}[0] + i1 * m.{n}[1] + i2 * m.{n}[2];"
        for n in ("dy", "cos", "sin", "dx")
    )
    return f"""
{ROPE_GRAD_STRUCT}
{_ROPE_PAIR}
extern "C" __global__ void __launch_bounds__({ELEMENT_THREADS}) {inst.kernel_name}(
    const RopeGradMeta m, const {s}* __restrict__ dy, const {s}* __restrict__ cos, const {s}* __restrict__ sin,
    {s}* __restrict__ dx) {{
  const long long n = (long long)blockIdx.x * {ELEMENT_THREADS} + threadIdx.x;
  if (n >= m.count) return;
  const long long d = m.dims[3];
  const long long e = n % d, i2 = (n / d) % m.dims[2], i1 = (n / d / m.dims[2]) % m.dims[1];
  const long long i0 = n / d / m.dims[2] / m.dims[1];
{rows}
  long long a, p;
  double sign;
  rope_pair(m.mode, d, e, &a, &p, &sign);
  const double v = {at("cos", "a")} * {at("dy", "a")} + sign * {at("sin", "p")} * {at("dy", "p")};
  dx[row_dx + e * m.dx[3]] = {store("(float)v", f32, c)};
}}
"""


def rope_grad_dcs_source(inst: GradKernel) -> str:
    """``dcos = Σ dy·x'`` and ``dsin = Σ dy·R(x')`` over cos's broadcast dims: one thread an element of cos."""
    c = ctype(inst.dtype)
    s = c.storage
    f32 = ctype(D.ACL_FLOAT)
    dy_at = load("dy[row_dy + e * m.dy[3]]", c, f32)
    x_at = load("x[row_x + (j) * m.x[3]]", c, f32)
    return f"""
{ROPE_GRAD_STRUCT}
{_ROPE_PAIR}
ACL_DEV double rope_x(const {s}* __restrict__ x, const RopeGradMeta& m, long long row_x, long long j) {{
  return (double){x_at};
}}
extern "C" __global__ void __launch_bounds__({ELEMENT_THREADS}) {inst.kernel_name}(
    const RopeGradMeta m, const {s}* __restrict__ dy, const {s}* __restrict__ x, {s}* __restrict__ dcos,
    {s}* __restrict__ dsin) {{
  const long long n = (long long)blockIdx.x * {ELEMENT_THREADS} + threadIdx.x;
  if (n >= m.count) return;
  const long long d = m.dims[3], h = d / 2;
  const long long e = n % d, c2 = (n / d) % m.cos_dims[2], c1 = (n / d / m.cos_dims[2]) % m.cos_dims[1];
  const long long c0 = n / d / m.cos_dims[2] / m.cos_dims[1];
  const long long b0 = m.cos_dims[0] == 1 ? m.dims[0] : 1, b1 = m.cos_dims[1] == 1 ? m.dims[1] : 1;
  const long long b2 = m.cos_dims[2] == 1 ? m.dims[2] : 1;
  long long a, p;
  double sign;
  rope_pair(m.mode, d, e, &a, &p, &sign);
  double sum_cos = 0.0, sum_sin = 0.0;
  for (long long j0 = 0; j0 < b0; ++j0)
    for (long long j1 = 0; j1 < b1; ++j1)
      for (long long j2 = 0; j2 < b2; ++j2) {{
        const long long i0 = b0 > 1 ? j0 : c0, i1 = b1 > 1 ? j1 : c1, i2 = b2 > 1 ? j2 : c2;
        const long long row_dy = i0 * m.dy[0] + i1 * m.dy[1] + i2 * m.dy[2];
        const long long row_x = i0 * m.x[0] + i1 * m.x[1] + i2 * m.x[2];
        const double g = (double){dy_at};
        double straight, turned;
        if (m.mode == 3) {{  // x de-interleaved (evens, then odds), then rotated by half
          straight = e < h ? rope_x(x, m, row_x, 2 * e) : rope_x(x, m, row_x, 2 * (e - h) + 1);
          turned = e < h ? -rope_x(x, m, row_x, 2 * e + 1) : rope_x(x, m, row_x, 2 * (e - h));
        }} else {{  // R x at e is -sign·x[p]: the rotation pairs e with p
          straight = rope_x(x, m, row_x, e);
          turned = -sign * rope_x(x, m, row_x, p);
        }}
        sum_cos += g * straight;
        sum_sin += g * turned;
      }}
  const long long out_cos = c0 * m.dcos[0] + c1 * m.dcos[1] + c2 * m.dcos[2] + e * m.dcos[3];
  const long long out_sin = c0 * m.dsin[0] + c1 * m.dsin[1] + c2 * m.dsin[2] + e * m.dsin[3];
  dcos[out_cos] = {store("(float)sum_cos", f32, c)};
  dsin[out_sin] = {store("(float)sum_sin", f32, c)};
}}
"""


_SOURCES.update({"rope_dx": rope_grad_dx_source, "rope_dcs": rope_grad_dcs_source})
