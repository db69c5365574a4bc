"""Paged KV (page attention) for IncreFlashAttentionV3/V4 and FusedInferAttentionScore: the gather kernel.

Key row ``j`` of batch ``b`` and kv head ``h`` lives in row ``j % blockSize`` of block
``blockTable[b, j / blockSize]`` of the pool. The pool comes in three forms, each read through
(block, head, row, dim) element strides: BnBsH ``(blocks, blockSize, H)``, BnNBsD ``(blocks, KV_N,
blockSize, D)`` and NZ ``(blocks, KV_N, D/16, blockSize, 16)``, whose dim ``d`` sits at
``(d / 16) * dim_stride + (d % 16) * tile_stride``.

:func:`gather_source`: one block per (batch, kv head, key row) writes the row into a dense cache
(any strides: the query's layout), zeros past the batch's actual length (a kernel argument) and for a
table entry outside ``[0, blocks)``, which also sets the run's check flag (161002 at synchronisation).
Prefill (query S > 1), and decode where :data:`PAGED_MODES` says ``gather``, run the dense kernels on
that cache (stream-ordered temporaries: capture-safe, no host round trip).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import PackedMeta, meta_struct
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.prelude import PRELUDE

GATHER_THREADS: Final = 64
"""Threads per block of the gather kernel (a block per key row; they stride over the head dim)."""
MAX_PAGED_BATCH: Final = 256
"""Batches whose actual lengths travel in the gather kernel's arguments (as the decode kernels')."""
PAGED_MODES: Final = ("tile", "direct", "gather")
"""``ACL_PAGED_DECODE``: ``tile`` (the default) has the decode kernels (short-cache and split-KV: their paged
instances, ``attention_decode.py``) read the pool through the table, one table entry a warp's tile of keys (read
a tile ahead) where blockSize and the split chunk are multiples of the tile's keys, else as ``direct``;
``direct`` reads one table entry per key row (the H100 13:05 run: 1.8x dense's GPU time at 4k keys, 3.1x at 32k);
``gather`` first copies the batches' rows into a dense temporary and runs the dense decode on it."""


@dataclass(frozen=True)
class PoolStrides:
    """A pool's element strides as (block, head, row, dim); ``nz``: dims in 16-wide tiles, ``dim`` a tile's step."""

    block: int
    head: int
    row: int
    dim: int
    nz: int = 0
    tile: int = 0
    """NZ: the step between a 16-wide tile's elements."""


def pool_strides(form: str, shape: tuple[int, ...], strides: tuple[int, ...], nkv: int) -> PoolStrides:
    """The (block, head, row, dim) strides of a pool of ``form`` (BnBsH, BnNBsD, NZ) with these view strides."""
    if form == "BnBsH":
        d = shape[2] // nkv
        return PoolStrides(strides[0], d * strides[2], strides[1], strides[2])
    if form == "BnNBsD":
        return PoolStrides(strides[0], strides[1], strides[2], strides[3])
    # NZ [blocks, N, D/16, blockSize, 16]: the last dim must be unit-stride (16-element tiles)
    return PoolStrides(strides[0], strides[1], strides[3], strides[2], 1, strides[4])


@dataclass(frozen=True)
class GatherMeta(PackedMeta):
    """One gather launch's geometry (int64s, in order); pool and output strides in elements."""

    nkv: int
    rows: int
    d: int
    size: int
    blocks: int
    table_step: int
    table_col: int
    pb: int
    ph: int
    pr: int
    pd: int
    nz: int
    pt: int
    ob: int
    oh: int
    orow: int
    od: int


GATHER_STRUCT: Final = meta_struct("GatherMeta", GatherMeta)


def gather_name(dtype: D) -> str:
    """The gather kernel's ``extern "C"`` name for elements of ``dtype``'s size."""
    digest = hashlib.sha1(repr((GATHER_STRUCT, MAX_PAGED_BATCH, dtype.short)).encode()).hexdigest()[:12]
    return f"acl_paged_gather_{dtype.short}_{digest}"


def gather_source(dtype: D) -> str:
    """The gather kernel (prelude included): one block per (batch, kv head, row) of the dense cache."""
    st = ctype(dtype).storage
    return f"""{PRELUDE}
// paged KV gather: {dtype.short}
{GATHER_STRUCT}
struct PagedLens {{ int n[{MAX_PAGED_BATCH}]; }};
extern "C" __global__ void __launch_bounds__({GATHER_THREADS}) {gather_name(dtype)}(
    const GatherMeta m, const PagedLens lens, const {st}* __restrict__ pool, const int* __restrict__ table,
    {st}* __restrict__ out, int* flag) {{
  unsigned long long r = blockIdx.x;  // (batch, kv head, row) flattened to x
  const long long j = (long long)(r % (unsigned long long)m.rows);
  r /= (unsigned long long)m.rows;
  const long long h = (long long)(r % (unsigned long long)m.nkv), b = (long long)(r / (unsigned long long)m.nkv);
  {st}* dst = out + b * m.ob + h * m.oh + j * m.orow;
  bool ok = j < lens.n[b];
  long long blk = 0;
  if (ok) {{
    blk = table[b * m.table_step + (j / m.size) * m.table_col];
    if (blk < 0 || blk >= m.blocks) {{
      ok = false;
      if (threadIdx.x == 0) *flag = 1;
    }}
  }}
  const {st}* src = pool + blk * m.pb + h * m.ph + (j % m.size) * m.pr;
  for (long long d = threadIdx.x; d < m.d; d += {GATHER_THREADS}) {{
    const long long at = m.nz ? (d >> 4) * m.pd + (d & 15) * m.pt : d * m.pd;
    dst[d * m.od] = ok ? src[at] : ({st})0;
  }}
}}
"""
