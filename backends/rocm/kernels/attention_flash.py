"""The fused flash-attention forward kernel on warp matrix instructions (:mod:`acl_rocm.kernels.mma`).

FlashAttention-2's schedule: a block of ``warps`` warps owns ``16 * mtiles * warps`` query rows of one
(batch, query head); each warp keeps its ``mtiles`` 16-row m-tiles' Q fragments, scores, probabilities and fp32 output
accumulator in registers, and the block walks the keys its rows' window reaches
(``acl_key_range``, the device twin of :func:`acl_rocm.ops.attention_plan.key_range`) in tiles of
``block_keys`` keys staged in shared memory. With one stage, K tile ``t + 1`` is copied (``cp.async`` on
sm_80+) while the probabilities of tile ``t`` meet V, and V tile ``t`` while its scores are formed; with
two, tile ``t + 1``'s K and V land in the second buffers while tile ``t`` is computed. Per tile: S =
Q K^T on matrix instructions, scale and mask (only on tiles that cross the window's edge, the end of
the keys, or where an explicit mask is read), the online softmax on accumulator rows in registers
(exp2 of log2-scaled scores; row maxima reduced over the lanes sharing a row), P rounded to the input
dtype as the next product's A operand, O += P V. Rows with nothing kept write zeros with max -inf and
sum 0 (with a sink: max = sink, sum = 1, as the row kernel). Blocks run the longest key ranges first
(the last query tile of each head; causal work is triangular).

It takes the row kernel's :class:`~acl_rocm.kernels.attention.AttentionMeta` and pointers (less pse)
plus :class:`FlashGrid`, so every caller of the row kernel can launch it instead. Shared memory is
dynamic (the launch passes :attr:`FlashInstance.shared_bytes`): ``max(rows, 2 * stages * block_keys)``
rows of ``head_dim + 8`` 16-bit elements (the 16-byte pad keeps ``ldmatrix`` rows conflict-free); above
48 KiB the backend opts the kernel in (``RocmBackend.function``'s ``dynamic_shared``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.attention import ATTN_STRUCT, PackedMeta, meta_struct
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.mma import MMA_SOURCE
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.ops.attention_plan import KEY_RANGE_SOURCE

HEAD_DIMS: Final = (64, 128, 256)
DTYPES: Final = frozenset({D.ACL_FLOAT16, D.ACL_BF16})


@dataclass(frozen=True)
class FlashConfig:
    """A block shape: warps, 16-row m-tiles a warp, keys a K/V tile, K/V stages (written ``w4m2k64s2``)."""

    warps: int
    mtiles: int
    block_keys: int
    stages: int
    qsmem: bool = False
    """Q stays in shared memory (suffix ``q``): its fragments are read per product, freeing the registers
    that hold them (FlashAttention-2's choice at D 128), for more shared memory."""

    def __str__(self) -> str:
        return f"w{self.warps}m{self.mtiles}k{self.block_keys}s{self.stages}{'q' if self.qsmem else ''}"

    @classmethod
    def parse(cls, text: str) -> FlashConfig:
        """``w<warps>m<m-tiles>k<keys>s<stages>``; ValueError for anything else or a shape the kernel lacks."""
        found = re.fullmatch(r"w(\d+)m(\d+)k(\d+)s(\d+)(q?)", text.strip())
        if found is None:
            raise ValueError(f"flash config {text!r} is not w<warps>m<m-tiles>k<keys>s<stages>[q] (e.g. w4m2k64s2)")
        warps, mtiles, keys, stages, q = found.groups()
        config = cls(int(warps), int(mtiles), int(keys), int(stages), qsmem=q == "q")
        if config.warps not in (1, 2, 4, 8) or config.mtiles not in (1, 2) or config.stages not in (1, 2):
            raise ValueError(f"flash config {text!r}: warps 1/2/4/8, m-tiles 1/2, stages 1/2")
        if config.block_keys not in (16, 32, 64, 128):
            raise ValueError(f"flash config {text!r}: keys a tile 16/32/64/128")
        return config


def parse_overrides(text: str) -> dict[int | None, FlashConfig]:
    """``ACL_FLASH_CONFIG``: one config for every head dim (``w4m2k32s2``) or ``D=config`` pairs (``128=w4m2k32s2``)."""
    out: dict[int | None, FlashConfig] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        dim, _, config = part.rpartition("=")
        if dim and (not dim.strip().isdigit() or int(dim) not in HEAD_DIMS):
            raise ValueError(f"flash config {part!r}: the head dim must be one of {HEAD_DIMS}")
        out[int(dim) if dim else None] = FlashConfig.parse(config)
    return out


CONFIGS: Final[dict[tuple[int, D | None, int | None], FlashConfig]] = {
    (64, None, 1): FlashConfig(4, 1, 64, 2),
    (128, None, 1): FlashConfig(4, 1, 64, 2),
    (256, None, 1): FlashConfig(4, 1, 32, 2),
    (64, None, None): FlashConfig(4, 2, 64, 1),
    (128, None, None): FlashConfig(4, 1, 64, 1),
    (256, None, None): FlashConfig(4, 1, 32, 1),
}
"""(head dim, dtype, matrix layout) -> block shape; None matches any (:func:`config_for` tries the exact key first).

Layout 1 is NVIDIA's (sm_80+: ``cp.async``); the other layouts (AMD's, and the software path) copy
synchronously, so a second K/V stage only costs them LDS: one stage. fp16 and bf16 share every entry
(same sizes, same instruction rates). Two m-tiles a warp (32 query rows) share every K and V fragment a
warp reads from shared memory, halving that traffic per FLOP. ``nvcc -Xptxas -v`` (sm_90, one stage): D 64
with two m-tiles uses 234 registers, no spills; D 128 with two spills (240 bytes at 32-key tiles, ~800 at
64: Q, S and O of two m-tiles in registers exceed 255), so D 128 and D 256 keep one (207 registers at D
128; D 256 spills ~100 bytes even so, 8 with two stages). Two K/V stages need 36 KiB at D 64, 68 KiB at
D 128 and 66 KiB at D 256: dynamic shared memory above 48 KiB, opted into per kernel; where the device
offers less, one stage.
Measured (H100, 2026-12-06 07:36, the ops bench's forced-flash rows, B4 N32 causal bf16): at D 64 one m-tile
beat two (``w4m1k64s2`` 99 TFLOP/s, ``w4m2k64s2`` 73, ``w4m2k64s1`` 72, ``w8m1k64s2`` 78), so NVIDIA's D 64
entry has one; at D 128 every shape ran 171-181 TFLOP/s (``w4m1k64s2`` the best), so neither a second stage
nor a second m-tile is what bounds the kernel there.
``ACL_FLASH_CONFIG`` (:func:`parse_overrides`) replaces the entry; the ops bench times alternatives.
"""
ALTERNATIVES: Final = {
    64: (FlashConfig(4, 2, 64, 2), FlashConfig(4, 2, 64, 1), FlashConfig(8, 1, 64, 2)),
    128: (
        FlashConfig(4, 2, 32, 2),
        FlashConfig(4, 2, 32, 2, qsmem=True),
        FlashConfig(4, 1, 64, 1),
        FlashConfig(8, 1, 64, 2),
    ),
}
"""Configs the ops bench times beside the table's at its forced-flash sizes (one GPU call tells which is fastest).

At D 128, ``w4m2k32s2q`` is the 128-row block that fits the registers (236, no spills, 68 KiB): Q read from
shared memory per product costs as many fragment loads as the second m-tile saves on K, so it is timed, not
the default; ``w4m2k32s2`` holds Q in registers and spills; ``w4m1k64s1`` is the one-stage kernel."""


def config_for(head_dim: int, dtype: D, layout: int | None) -> FlashConfig:
    """The :data:`CONFIGS` entry for a call: exact key first, then dtype, then layout as wildcards."""
    for key in ((head_dim, dtype, layout), (head_dim, None, layout), (head_dim, dtype, None), (head_dim, None, None)):
        if key in CONFIGS:
            return CONFIGS[key]
    raise ValueError(f"no flash config for head dim {head_dim}")


SHORT_ROWS: Final = 64
"""Calls with at most this many query rows keep one m-tile a warp (64-row blocks: less padding, more blocks)."""
MIN_BLOCKS: Final = 2
"""``__launch_bounds__``' blocks per multiprocessor at 4 warps or fewer: 2 x 128 threads leave the compiler 255
registers a thread (1 above 4 warps: 2 x 256 threads would cap it at 128 and spill)."""
SHARED_LIMIT: Final = 227 * 1024
"""The most shared memory a block has on any device the generator targets (sm_90's opt-in maximum)."""


@dataclass(frozen=True)
class FlashGrid(PackedMeta):
    """The launch's 1-D grid: ``tiles`` query tiles per (batch, head), ``heads`` query heads, ``sq`` query rows.

    Rows ``m.rows .. sq`` (past the actual query length) are written as zeros; rows past ``sq`` are not written.
    """

    sq: int = 0
    heads: int = 1
    tiles: int = 1


GRID_STRUCT: Final = meta_struct("FlashGrid", FlashGrid)


@dataclass(frozen=True)
class FlashInstance:
    """One compiled flash kernel: dtype, head dim, sink dtype, block shape, and whether rows load as 16-byte chunks."""

    dtype: D
    head_dim: int
    sink: D | None = None
    warps: int = 4
    block_keys: int = 64
    mtiles: int = 1
    """16-row matrix tiles of query rows per warp (each K/V fragment loaded once serves all of them)."""
    stages: int = 1
    """K/V tile buffers: 1 (K(t+1) lands while P(t) meets V(t), V(t) while S(t) forms), or 2 (tile t+1 lands
    while tile t is computed)."""
    vec: bool = True
    """Q/K/V rows are contiguous and 16-byte aligned (``cp.async`` chunks); else element loads."""
    qsmem: bool = False
    """Q fragments read from shared memory per product instead of held in registers (:class:`FlashConfig`)."""

    @property
    def rows(self) -> int:
        """Query rows per block."""
        return 16 * self.mtiles * self.warps

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of the K/V tiles (and the Q staging before them): the launch passes it."""
        kv_rows = 2 * self.stages * self.block_keys
        return (self.rows + kv_rows if self.qsmem else max(self.rows, kv_rows)) * (self.head_dim + 8) * 2

    @property
    def config(self) -> FlashConfig:
        """Its block shape."""
        return FlashConfig(self.warps, self.mtiles, self.block_keys, self.stages, self.qsmem)

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, ATTN_STRUCT, GRID_STRUCT)).encode()).hexdigest()[:12]
        sink = self.sink.short if self.sink is not None else "nosink"
        return f"acl_flash_{self.dtype.short}_d{self.head_dim}_{sink}_{self.config}_{digest}"


def flash_instance(
    dtype: D,
    head_dim: int,
    sink: D | None,
    vec: bool,
    rows: int | None = None,
    max_shared: int = SHARED_LIMIT,
    layout: int | None = 1,
    override: FlashConfig | None = None,
) -> FlashInstance:
    """The instance for a call: ``override`` as given, else :data:`CONFIGS`' entry for ``head_dim`` (one of
    :data:`HEAD_DIMS`), ``dtype`` and matrix ``layout``, with one m-tile for ``rows`` <= :data:`SHORT_ROWS` and
    one stage where two exceed the device's ``max_shared`` bytes. An override that does not fit: ValueError."""
    config = override or config_for(head_dim, dtype, layout)
    mtiles = config.mtiles if override is not None or rows is None or rows > SHORT_ROWS else 1
    inst = FlashInstance(
        dtype,
        head_dim,
        sink,
        warps=config.warps,
        block_keys=config.block_keys,
        mtiles=mtiles,
        stages=config.stages,
        vec=vec,
        qsmem=config.qsmem,
    )
    if inst.shared_bytes > max_shared:
        if override is not None:
            need = f"{inst.shared_bytes} bytes of shared memory (the device has {max_shared})"
            raise ValueError(f"flash config {override} needs {need}")
        inst = dataclasses.replace(inst, stages=1)
    return inst


_BODY: Final = r"""
#define HEAD_DIM @D@
#define WARPS @WARPS@
#define MT @MT@
#define BR (16 * MT * WARPS)
#define MIN_BLOCKS @MINB@
#define BC @BC@
#define DP (HEAD_DIM + 8)
#define THREADS (WARPS * ACL_WARP_SIZE)
#define IS_BF16 @BF16@
#define VEC @VEC@
#define KT (HEAD_DIM / 16)
#define NT (BC / 16)
#define STAGES @STAGES@
#define QSMEM @QSMEM@
#if QSMEM  // Q stays in shared memory before the K/V stages; its fragments are read per product
#define SMEM_ROWS (BR + 2 * STAGES * BC)
#define KV_ROW0 BR
#else  // Q is staged where the K/V stages go, then held in registers
#define SMEM_ROWS (BR > 2 * STAGES * BC ? BR : 2 * STAGES * BC)
#define KV_ROW0 0
#endif
typedef @S@ elem_t;
@ATTN_STRUCT@
@GRID_STRUCT@

// rows row0 .. row0+rows of a [row][dim] operand into dst[r * DP + d]; rows at or past limit are zeros
ACL_DEV void flash_load(unsigned short* dst, const elem_t* src, long long s_row, long long s_dim, long long row0,
                        int rows, long long limit) {
#if VEC
  const int chunks = HEAD_DIM / 8;
  for (int i = threadIdx.x; i < rows * chunks; i += THREADS) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool ok = row0 + r < limit;
    acl_cp_async16(dst + r * DP + c, src + (ok ? row0 + r : 0) * s_row + c, ok);
  }
#else
  for (int i = threadIdx.x; i < rows * HEAD_DIM; i += THREADS) {
    const int r = i / HEAD_DIM, c = i % HEAD_DIM;
    dst[r * DP + c] = row0 + r < limit ? (unsigned short)src[(row0 + r) * s_row + c * s_dim] : (unsigned short)0;
  }
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) @NAME@(
    const AttnMeta m, const FlashGrid g, const double scale_arg, const elem_t* __restrict__ q,
    const elem_t* __restrict__ k, const elem_t* __restrict__ v, const unsigned char* __restrict__ mask,
    elem_t* __restrict__ out, float* __restrict__ smax, float* __restrict__ ssum, float* __restrict__ lse,
    const @SINK_S@* __restrict__ sink) {
  extern __shared__ AclVec<unsigned, 4> smem_raw[];  // SMEM_ROWS * DP 16-bit elements (the launch's dynamic size)
#if ACL_MMA_SCRATCH
  __shared__ AclVec<unsigned, 4> scratch_raw[WARPS * ACL_MMA_SCRATCH / 8];
  unsigned short* const scratch = (unsigned short*)scratch_raw + (threadIdx.x / ACL_WARP_SIZE) * ACL_MMA_SCRATCH;
#else
  unsigned short* const scratch = nullptr;
#endif
  unsigned short* const qs = (unsigned short*)smem_raw;
  unsigned short* const ks = qs + KV_ROW0 * DP;
  unsigned short* const vs = ks + STAGES * BC * DP;  // K stages, then V stages
  const int warp = threadIdx.x / ACL_WARP_SIZE, lane = acl_lane();
  const float inf = __uint_as_float(0x7f800000u);
  const long long x = blockIdx.x;
  const long long bh = x / g.tiles, qt = g.tiles - 1 - x % g.tiles;  // the longest key ranges first
  const long long h = bh % g.heads, b = bh / g.heads, hk = h / m.group;
  const long long row0 = qt * BR, wrow0 = row0 + 16 * MT * warp;  // m-tile mt: rows wrow0 + 16 mt ..
  const elem_t* qh = q + b * m.q[0] + h * m.q[1];
  const elem_t* kh = k + b * m.k[0] + hk * m.k[1];
  const elem_t* vh = v + b * m.v[0] + hk * m.v[1];
  const long long valid_rows = m.rows - row0 < BR ? m.rows - row0 : BR;
  long long kv0, kv1;
  acl_key_range(row0, valid_rows, m.kv_len, m.has_window, m.win_lo, m.win_hi, m.shift, &kv0, &kv1);

  // Q: shared memory (rows past the actual length are zeros), then (unless QSMEM) each warp's 16 * MT rows
  // into registers
  flash_load(qs, qh, m.q[2], m.q[3], row0, BR, m.rows);
  acl_cp_async_commit();
  acl_cp_async_wait_all();
  __syncthreads();
#if !QSMEM
  AclMmaA qf[MT][KT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) acl_mma_load_a(qf[mt][kk], qs + 16 * (MT * warp + mt) * DP + 16 * kk, DP);
  __syncthreads();
#endif

  const float sl2 = (float)(scale_arg * 1.4426950408889634);  // scores in log2 units: exp2 is the hardware's
  float m_run[MT][ACL_MMA_C_SLOTS], l_run[MT][ACL_MMA_C_SLOTS];
  // with a sink: one more logit with no value row: max = sink, sum = 1 (counted by one lane of the row)
  const float sink_l2 = m.has_sink ? (float)(@SINK_LOAD@) * 1.4426950408889634f : -inf;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
      m_run[mt][s] = sink_l2;
      l_run[mt][s] = m.has_sink && lane % ACL_MMA_ROW_LANES == 0 ? 1.0f : 0.0f;
    }
  AclMmaC o[MT][KT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int dt = 0; dt < KT; ++dt)
#pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) o[mt][dt].x[e] = 0.0f;

  const long long tiles = kv1 > kv0 ? (kv1 - kv0 + BC - 1) / BC : 0;
  if (tiles > 0) {
    flash_load(ks, kh, m.k[2], m.k[3], kv0, BC, m.kv_len);
    acl_cp_async_commit();
#if STAGES == 2
    flash_load(vs, vh, m.v[2], m.v[3], kv0, BC, m.kv_len);
    acl_cp_async_commit();
#endif
  }
  for (long long t = 0; t < tiles; ++t) {
    const long long j0 = kv0 + t * BC;
#if STAGES == 1
    unsigned short* const kts = ks;
    unsigned short* const vts = vs;
    acl_cp_async_wait_all();
    __syncthreads();  // K(t) has landed; every warp is done with V(t-1)
    flash_load(vs, vh, m.v[2], m.v[3], j0, BC, m.kv_len);
    acl_cp_async_commit();
#else
    // two stages: tile t in buffers t & 1 while tile t + 1 lands in the others. In flight here (commit
    // order): K(t), V(t).
    unsigned short* const kts = ks + (t & 1) * BC * DP;
    unsigned short* const vts = vs + (t & 1) * BC * DP;
    acl_cp_async_wait<1>();
    __syncthreads();  // K(t) has landed; every warp is done with tile t - 1, whose buffers take tile t + 1
    if (t + 1 < tiles) {
      flash_load(ks + ((t + 1) & 1) * BC * DP, kh, m.k[2], m.k[3], j0 + BC, BC, m.kv_len);
      acl_cp_async_commit();
      flash_load(vs + ((t + 1) & 1) * BC * DP, vh, m.v[2], m.v[3], j0 + BC, BC, m.kv_len);
      acl_cp_async_commit();
    }
#endif

    // S = Q K^T: each K fragment read from shared memory once per warp, for all MT m-tiles
    AclMmaC sc[MT][NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) sc[mt][nt].x[e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KT; ++kk) {
        AclMmaB kb;
        acl_mma_load_b_nk(kb, kts + 16 * nt * DP + 16 * kk, DP);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#if QSMEM
          AclMmaA qa;
          acl_mma_load_a(qa, qs + 16 * (MT * warp + mt) * DP + 16 * kk, DP);
          acl_mma<IS_BF16>(sc[mt][nt], qa, kb);
#else
          acl_mma<IS_BF16>(sc[mt][nt], qf[mt][kk], kb);
#endif
        }
      }
    }
    // a tile inside every row's window and the keys needs no mask (block-uniform)
    const bool inside = j0 - (row0 + BR - 1) - m.shift >= m.win_lo && j0 + BC - 1 - row0 - m.shift <= m.win_hi;
    const bool full = !m.has_mask && j0 + BC <= kv1 && (!m.has_window || inside);
    AclMmaA pa[MT][NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float t_max[ACL_MMA_C_SLOTS];
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) t_max[s] = -inf;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
          float sv = sc[mt][nt].x[e] * sl2;
          if (!full) {
            const long long i = wrow0 + 16 * mt + acl_mma_c_row(lane, e), j = j0 + 16 * nt + acl_mma_c_col(lane, e);
            bool keep = j < kv1;
            if (keep && m.has_window) {
              const long long off = j - i - m.shift;
              keep = off >= m.win_lo && off <= m.win_hi;
            }
            if (keep && m.has_mask && i < m.rows)
              keep = mask[b * m.mask[0] + h * m.mask[1] + i * m.mask[2] + j * m.mask[3]] == 0;
            if (!keep) sv = -inf;
          }
          sc[mt][nt].x[e] = sv;
          const int s = acl_mma_c_slot(e);
          t_max[s] = fmaxf(t_max[s], sv);
        }
      }
      float base[ACL_MMA_C_SLOTS], t_sum[ACL_MMA_C_SLOTS], alpha[ACL_MMA_C_SLOTS];
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
#pragma unroll
        for (int off = 1; off < ACL_MMA_ROW_LANES; off <<= 1) t_max[s] = fmaxf(t_max[s], ACL_SHFL_XOR(t_max[s], off));
        const float m_new = fmaxf(m_run[mt][s], t_max[s]);
        base[s] = m_new == -inf ? 0.0f : m_new;  // a row with nothing kept yet: every p and alpha is exp2(-inf) = 0
        alpha[s] = exp2f(m_run[mt][s] - base[s]);
        m_run[mt][s] = m_new;
        t_sum[s] = 0.0f;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
          const int s = acl_mma_c_slot(e);
          const float p = exp2f(sc[mt][nt].x[e] - base[s]);
          sc[mt][nt].x[e] = p;
          t_sum[s] += p;
        }
        acl_mma_c_to_a<IS_BF16>(pa[mt][nt], sc[mt][nt], scratch);
      }
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) l_run[mt][s] = l_run[mt][s] * alpha[s] + t_sum[s];
#pragma unroll
      for (int dt = 0; dt < KT; ++dt)
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) o[mt][dt].x[e] *= alpha[acl_mma_c_slot(e)];
    }

#if STAGES == 1
    acl_cp_async_wait_all();
    __syncthreads();  // V(t) has landed; every warp is done with K(t)
    if (t + 1 < tiles) {
      flash_load(ks, kh, m.k[2], m.k[3], j0 + BC, BC, m.kv_len);
      acl_cp_async_commit();
    }
#else
    if (t + 1 < tiles) acl_cp_async_wait<2>();  // in flight: V(t), K(t + 1), V(t + 1)
    else acl_cp_async_wait<0>();
    __syncthreads();  // V(t) has landed
#endif
    // O += P V: each V fragment read once per warp, for all MT m-tiles
#pragma unroll
    for (int kt = 0; kt < NT; ++kt) {
#pragma unroll
      for (int dt = 0; dt < KT; ++dt) {
        AclMmaB vb;
        acl_mma_load_b_kn(vb, vts + 16 * kt * DP + 16 * dt, DP);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acl_mma<IS_BF16>(o[mt][dt], pa[mt][kt], vb);
      }
    }
  }

  elem_t* o_head = out + b * m.o[0] + h * m.o[1];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const long long mrow0 = wrow0 + 16 * mt;
#pragma unroll
    for (int s = 0; s < ACL_MMA_C_SLOTS; ++s)
#pragma unroll
      for (int off = 1; off < ACL_MMA_ROW_LANES; off <<= 1) l_run[mt][s] += ACL_SHFL_XOR(l_run[mt][s], off);
#pragma unroll
    for (int dt = 0; dt < KT; ++dt) {
#pragma unroll
      for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
        const long long i = mrow0 + acl_mma_c_row(lane, e);
        if (i >= g.sq) continue;
        const float l = l_run[mt][acl_mma_c_slot(e)];
        const float r = i < m.rows && l > 0.0f ? o[mt][dt].x[e] / l : 0.0f;
        o_head[i * m.o[2] + (16 * dt + acl_mma_c_col(lane, e)) * m.o[3]] = @STORE@;
      }
    }
    if (lane % ACL_MMA_ROW_LANES == 0) {
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
        const long long i = mrow0 + acl_mma_slot_row(lane, s);
        if (i >= g.sq) continue;
        const float row_max = m_run[mt][s] == -inf ? -inf : m_run[mt][s] * 0.6931471805599453f;  // natural units
        if (i < m.rows && smax != nullptr) {
          for (int c = 0; c < 8; ++c) {
            smax[b * m.smax[0] + h * m.smax[1] + i * m.smax[2] + c * m.smax[3]] = row_max;
            ssum[b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2] + c * m.ssum[3]] = l_run[mt][s];
          }
        }
        if (lse != nullptr)
          lse[b * m.lse[0] + h * m.lse[1] + i * m.lse[2]] =
              i < m.rows && l_run[mt][s] > 0.0f ? row_max + logf(l_run[mt][s]) : inf;
      }
    }
  }
}
"""


def flash_source(inst: FlashInstance) -> str:
    """The complete source (prelude, matrix layer, key range included) of one flash kernel."""
    if (
        inst.dtype not in DTYPES
        or inst.head_dim % 16
        or inst.block_keys % 16
        or inst.mtiles < 1
        or inst.stages not in (1, 2)
    ):
        raise ValueError(f"no flash kernel for {inst}")
    if inst.shared_bytes > SHARED_LIMIT:
        raise ValueError(f"{inst} needs {inst.shared_bytes} bytes of shared memory (limit {SHARED_LIMIT})")
    c = ctype(inst.dtype)
    f32 = ctype(D.ACL_FLOAT)
    sink_c = ctype(inst.sink if inst.sink is not None else D.ACL_FLOAT)
    tokens = {
        "@D@": str(inst.head_dim),
        "@WARPS@": str(inst.warps),
        "@MT@": str(inst.mtiles),
        "@STAGES@": str(inst.stages),
        "@QSMEM@": "1" if inst.qsmem else "0",
        "@MINB@": str(MIN_BLOCKS if inst.warps <= 4 else 1),
        "@BC@": str(inst.block_keys),
        "@BF16@": "true" if inst.dtype == D.ACL_BF16 else "false",
        "@VEC@": "1" if inst.vec else "0",
        "@S@": c.storage,
        "@SINK_S@": sink_c.storage,
        "@SINK_LOAD@": load("sink[h * m.sink_step]", sink_c, f32),
        "@STORE@": store("r", f32, c),
        "@NAME@": inst.kernel_name,
        "@ATTN_STRUCT@": ATTN_STRUCT,
        "@GRID_STRUCT@": GRID_STRUCT,
    }
    body = _BODY
    for token, value in tokens.items():
        body = body.replace(token, value)
    shape = f"{inst.warps} warps x {16 * inst.mtiles} rows, {inst.block_keys}-key tiles"
    header = f"// flash attention forward: {inst.dtype.short}, D={inst.head_dim}, {shape}"
    return "\n".join([PRELUDE, MMA_SOURCE, KEY_RANGE_SOURCE, header, body])
