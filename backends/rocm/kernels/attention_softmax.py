"""The row-softmax kernel of the BLAS attention path: scores in, probabilities and softmax statistics out.

The BLAS path computes a chunk of raw scores ``S = Q K^T`` (fp32, one [rows, cols] matrix per head of the
chunk) with the vendor GEMM; this kernel turns each row into ``P = softmax(scale * (S + pse))`` under the
mask (a full mask read through four strides and/or a key window, as the fused kernel reads them), writes
P in the dtype the second GEMM reads (the input dtype: fp16/bf16 probabilities, as flash attention rounds
them; fp32 for fp32 inputs), and writes the row's max and sum (the reference's softmaxMax / softmaxSum,
eight copies per row). Column ``c`` of a chunk is key ``kv0 + c``, row ``r`` is query ``row0 + r``, and
chunk head ``t`` is query head ``head0 + t * head_step`` of batch ``batch``. A row with nothing kept
writes P = 0, max -inf and sum 0. A sink (FlashAttentionScoreV3: one fp32 logit per query head, with no
value row) joins the row's max and sum after the block reduction, so every probability's denominator has
it; a row with nothing kept then writes max = sink, sum = 1. One block of :data:`SOFTMAX_THREADS` threads
per row: pass one keeps a per-thread online (max, sum), the block combines them, pass two writes P.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, meta_struct
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_reduce_source

SOFTMAX_THREADS: Final = 256
Strides = tuple[int, int, int, int]
_ZERO4: Strides = (0, 0, 0, 0)


@dataclass(frozen=True)
class SoftmaxMeta(PackedMeta):
    """One softmax launch (packed as int64s in declaration order; strides in elements)."""

    s_head: int = 0
    s_row: int = 0
    p_head: int = 0
    p_row: int = 0
    rows: int = 0
    cols: int = 0
    row0: int = 0
    kv0: int = 0
    batch: int = 0
    head0: int = 0
    head_step: int = 1
    mask: Strides = _ZERO4
    pse: Strides = _ZERO4
    smax: Strides = _ZERO4
    ssum: Strides = _ZERO4
    has_mask: int = 0
    has_pse: int = 0
    has_window: int = 0
    win_lo: int = 0
    win_hi: int = 0
    shift: int = 0
    has_sink: int = 0
    sink_step: int = 0


SOFTMAX_STRUCT: Final = meta_struct("SmMeta", SoftmaxMeta)
SOFTMAX_META_LEN: Final = len(SoftmaxMeta().values())


@dataclass(frozen=True)
class SoftmaxInstance:
    """One compiled softmax kernel: the dtype of P (and of pse)."""

    dtype: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, SOFTMAX_STRUCT)).encode()).hexdigest()[:12]
        return f"acl_attn_softmax_{self.dtype.short}_{digest}"


def softmax_source(inst: SoftmaxInstance) -> str:
    """The complete source (prelude included) of one row-softmax kernel."""
    c = ctype(inst.dtype)
    s = c.storage
    f32 = ctype(D.ACL_FLOAT)
    body = f"""
#define THREADS {SOFTMAX_THREADS}
{SOFTMAX_STRUCT}

{block_reduce_source("sm_reduce", "THREADS")}
extern "C" __global__ void __launch_bounds__(THREADS) {inst.kernel_name}(
    const SmMeta m, const double scale_arg, const float* __restrict__ sc, {s}* __restrict__ p,
    const unsigned char* __restrict__ mask, const {s}* __restrict__ pse,
    float* __restrict__ smax, float* __restrict__ ssum, const float* __restrict__ sink) {{
  __shared__ float red[THREADS];
  const int tid = threadIdx.x;
  const long long r = blockIdx.x, t = blockIdx.y;
  const long long i = m.row0 + r, h = m.head0 + t * m.head_step, b = m.batch;
  const float scale = (float)scale_arg;
  const float inf = __int_as_float(0x7f800000);
  const float* s_row = sc + t * m.s_head + r * m.s_row;
  {s}* p_row = p + t * m.p_head + r * m.p_row;
  const unsigned char* mask_row = m.has_mask ? mask + b * m.mask[0] + h * m.mask[1] + i * m.mask[2] : nullptr;
  const {s}* pse_row = m.has_pse ? pse + b * m.pse[0] + h * m.pse[1] + i * m.pse[2] : nullptr;
  float run_max = -inf, run_sum = 0.0f;
  for (long long col = tid; col < m.cols; col += THREADS) {{
    const long long j = m.kv0 + col;
    bool keep = true;
    if (m.has_mask) keep = mask_row[j * m.mask[3]] == 0;
    if (keep && m.has_window) {{
      const long long off = j - i - m.shift;
      keep = off >= m.win_lo && off <= m.win_hi;
    }}
    if (!keep) continue;
    float x = s_row[col];
    if (m.has_pse) x += {load("pse_row[j * m.pse[3]]", c, f32)};
    x *= scale;
    if (x > run_max) {{
      run_sum = run_sum * (run_max == -inf ? 0.0f : acl_exp(run_max - x)) + 1.0f;
      run_max = x;
    }} else {{
      run_sum += acl_exp(x - run_max);
    }}
  }}
  const float key_max = sm_reduce(run_max, red, true);
  const float sink_logit = m.has_sink ? sink[h * m.sink_step] : -inf;
  const float row_max = sink_logit > key_max ? sink_logit : key_max;
  const float mine = run_max == -inf ? 0.0f : run_sum * acl_exp(run_max - row_max);
  const float row_sum = sm_reduce(mine, red, false) + (m.has_sink ? acl_exp(sink_logit - row_max) : 0.0f);
  const float inv = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
  for (long long col = tid; col < m.cols; col += THREADS) {{
    const long long j = m.kv0 + col;
    bool keep = row_sum > 0.0f;
    if (keep && m.has_mask) keep = mask_row[j * m.mask[3]] == 0;
    if (keep && m.has_window) {{
      const long long off = j - i - m.shift;
      keep = off >= m.win_lo && off <= m.win_hi;
    }}
    float prob = 0.0f;
    if (keep) {{
      float x = s_row[col];
      if (m.has_pse) x += {load("pse_row[j * m.pse[3]]", c, f32)};
      prob = acl_exp(x * scale - row_max) * inv;
    }}
    p_row[col] = {store("prob", f32, c)};
  }}
  if (tid < 8) {{
    smax[b * m.smax[0] + h * m.smax[1] + i * m.smax[2] + tid * m.smax[3]] = row_max;
    ssum[b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2] + tid * m.ssum[3]] = row_sum;
  }}
}}
"""
    return "\n".join([PRELUDE, f"// attention row softmax: P {inst.dtype.short}", body])
