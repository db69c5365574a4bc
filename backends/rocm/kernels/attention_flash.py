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


INNER_FLAGS: Final = {
    "e": "exp2 on the hardware's flush-to-zero approximation (ex2.approx.ftz on NVIDIA) instead of exp2f",
    "f": "the scale folded into one FMA (p = exp2(s * scale * log2 e - max)): maxima of the raw scores",
    "i": "the softmax after V's barrier, each key block's probabilities meeting V as they are formed",
    "o": "three blocks a multiprocessor at 4 warps or fewer (__launch_bounds__: at most 168 registers, not 255)",
    "u": "tiles inside the window take an unmasked softmax; edge tiles a masked one on 32-bit offsets",
}
"""Inner-loop choices (a config's ``-<letters>`` suffix, e.g. ``w4m1k64s2-efu``); none: the original loop."""


@dataclass(frozen=True)
class FlashConfig:
    """A block shape: warps, 16-row m-tiles a warp, keys a K/V tile, K/V stages (written ``w4m2k64s2``),
    and inner-loop flags (:data:`INNER_FLAGS`, written ``-efu``)."""

    warps: int
    mtiles: int
    block_keys: int
    stages: int
    qsmem: bool = False
    """Q stays in shared memory (suffix ``q``): its fragments are read per product, freeing the registers
    that hold them (FlashAttention-2's choice at D 128), for more shared memory."""
    inner: str = ""
    """Inner-loop flags, sorted letters of :data:`INNER_FLAGS` ("" : the original loop)."""

    def __str__(self) -> str:
        flags = f"-{self.inner}" if self.inner else ""
        return f"w{self.warps}m{self.mtiles}k{self.block_keys}s{self.stages}{'q' if self.qsmem else ''}{flags}"

    @classmethod
    def parse(cls, text: str) -> FlashConfig:
        """``w<warps>m<m-tiles>k<keys>s<stages>[q][-flags]``; ValueError for anything else or a shape it lacks."""
        found = re.fullmatch(r"w(\d+)m(\d+)k(\d+)s(\d+)(q?)(?:-([a-z]+))?", text.strip())
        if found is None:
            raise ValueError(
                f"flash config {text!r} is not w<warps>m<m-tiles>k<keys>s<stages>[q][-flags] (e.g. w4m2k64s2-efu)"
            )
        warps, mtiles, keys, stages, q, flags = found.groups()
        flags = flags or ""
        unknown = sorted(set(flags) - set(INNER_FLAGS))
        if unknown or len(set(flags)) != len(flags):
            raise ValueError(f"flash config {text!r}: inner-loop flags are distinct letters of {''.join(INNER_FLAGS)}")
        inner = "".join(sorted(flags))
        config = cls(int(warps), int(mtiles), int(keys), int(stages), qsmem=q == "q", inner=inner)
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
    (64, None, 1): FlashConfig(4, 1, 64, 2, inner="efiu"),
    (128, None, 1): FlashConfig(4, 2, 32, 2, qsmem=True, inner="efiu"),
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
64: Q, S and O of two m-tiles in registers exceed 255) unless Q stays in shared memory (``q``: 238), so
D 256 keeps one (D 256 spills ~100 bytes even so, 8 with two stages). Two K/V stages need 36 KiB at D 64,
68 KiB at D 128 (``w4m2k32s2q``: 128 Q rows and 2 x 2 x 32 K/V rows) and 66 KiB at D 256: dynamic shared
memory above 48 KiB, opted into per kernel; where the device offers less, :func:`flash_instance` falls
back (one stage, then the layout-independent entry).
Measured (H100, the ops bench's forced-flash rows, B4 N32 causal bf16, TFLOP/s; torch SDPA ~525 at D 128,
~295 at D 64): 2026-12-06 07:36, at D 64 one m-tile beat two (``w4m1k64s2`` 99, ``w4m2k64s2`` 73,
``w4m2k64s1`` 72, ``w8m1k64s2`` 78); at D 128 every shape of the original loop ran 171-181 (``w4m1k64s2``
the best). 2026-12-06 09:21-09:30, with the inner-loop flags (:data:`INNER_FLAGS`): D 128 ``w4m1k64s2``
180, ``-ef`` 186, ``-efu`` 191, ``-efiu`` 196, ``w4m2k32s2q-efiu`` 209 (the default since); D 64
``w4m1k64s2`` 101, ``-ef`` 106, ``-efu`` 106, ``-efiu`` 120 (the default since), ``-efiou`` 120. D 256 has
no measurement with the flags yet (:data:`ALTERNATIVES` times them).
``ACL_FLASH_CONFIG`` (:func:`parse_overrides`) replaces the entry; the ops bench times alternatives.
"""
ALTERNATIVES: Final = {
    64: (
        FlashConfig(4, 1, 64, 2),
        FlashConfig(4, 1, 32, 2, inner="efiu"),
        FlashConfig(4, 2, 32, 2, qsmem=True, inner="efiu"),
        FlashConfig(8, 1, 64, 2, inner="efiu"),
    ),
    128: (
        FlashConfig(4, 1, 64, 2),
        FlashConfig(8, 2, 32, 2, qsmem=True, inner="efiu"),
    ),
    256: (FlashConfig(4, 1, 32, 2, qsmem=True, inner="efiu"),),
}
"""Configs the ops bench times beside the table's at its forced-flash sizes (one GPU call tells which is fastest).

Round 2 (after the defaults took the measured winners): each head dim's first row is the previous default (the
gain, timed in the same run); the rest are shapes not yet timed with the flags. D 64: 32-key tiles
(``w4m1k32s2-efiu``), two m-tiles with Q in shared memory (D 128's winner), 8 warps sharing each K/V tile.
D 128: 8 warps of two m-tiles (256-row blocks: half the K/V traffic per FLOP, one block an SM). D 256 (no
flags measured yet): Q in shared memory frees the registers that spill without it, so the flags fit. Kept to
a few rows so that the whole ops bench line stays near a minute of GPU time.
Registers (``nvcc -Xptxas -v``, sm_90, bf16): D 128 ``w4m1k64s2`` 214, ``-efiu`` 216, ``w4m2k32s2q-efiu``
238 and ``-efu`` 238, ``w8m2k32s2q-efiu`` 238, none spills; ``w4m2k32s2q-efiuo`` would spill 540 bytes (168
registers for three blocks an SM) and ``w4m2k64s2q-efiu`` 112, so neither is listed. D 64 ``w4m1k64s2`` 162,
``-efiu`` 166, ``w4m1k32s2-efiu`` 206, ``w4m2k32s2q-efiu`` 195, ``w8m1k64s2-efiu`` 166, none spills. D 256
``w4m1k32s2`` 254 (8 bytes spilled), ``-efiu`` 255 (72), ``w4m1k32s2q-efiu`` 220 (none), ``-efu`` 230 (none)."""


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
    inner: str = ""
    """Inner-loop flags (:data:`INNER_FLAGS`, sorted letters; "" the original loop)."""

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
        return FlashConfig(self.warps, self.mtiles, self.block_keys, self.stages, self.qsmem, self.inner)

    @functools.cached_property
    def kernel_name(self) -> str:
        """A stable ``extern "C"`` name for this instance."""
        digest = hashlib.sha1(repr((self, ATTN_STRUCT, GRID_STRUCT)).encode()).hexdigest()[:12]
        sink = self.sink.short if self.sink is not None else "nosink"
        shape = str(self.config).replace("-", "_")
        return f"acl_flash_{self.dtype.short}_d{self.head_dim}_{sink}_{shape}_{digest}"


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
    :data:`HEAD_DIMS`), ``dtype`` and matrix ``layout``, with one m-tile for ``rows`` <= :data:`SHORT_ROWS`; where
    the entry exceeds the device's ``max_shared`` bytes, one stage, then the layout-independent entry (one stage,
    Q in registers). An override that does not fit: ValueError."""
    config = override or config_for(head_dim, dtype, layout)

    def build(config: FlashConfig, stages: int) -> FlashInstance:
        mtiles = config.mtiles if override is not None or rows is None or rows > SHORT_ROWS else 1
        return FlashInstance(
            dtype,
            head_dim,
            sink,
            warps=config.warps,
            block_keys=config.block_keys,
            mtiles=mtiles,
            stages=stages,
            vec=vec,
            qsmem=config.qsmem,
            inner=config.inner,
        )

    inst = build(config, config.stages)
    if inst.shared_bytes > max_shared:
        if override is not None:
            need = f"{inst.shared_bytes} bytes of shared memory (the device has {max_shared})"
            raise ValueError(f"flash config {override} needs {need}")
        inst = build(config, 1)
    if inst.shared_bytes > max_shared:
        fallback = config_for(head_dim, dtype, None)
        inst = build(fallback, 1)
    return inst


ROWS_SOURCE: Final = (
    "// rows row0 .. row0+rows of a [row][dim] operand into dst[r * DP + d]; rows at or past limit are zeros\n"
    "ACL_DEV void "
    + r"""flash_load(unsigned short* dst, const elem_t* src, long long s_row, long long s_dim, long long row0,
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

// exp2: the hardware's flush-to-zero approximation where FAST_EXP (NVIDIA: one MUFU.EX2), else exp2f
ACL_DEV float flash_exp2(float x) {
#if FAST_EXP && defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  return exp2f(x);
#endif
}
"""
)
"""Row staging (``flash_load``: ``cp.async`` 16-byte chunks where ``VEC``, else element loads; zeros past the limit)
and ``flash_exp2``, shared by the forward and backward flash kernels (they define ``HEAD_DIM``, ``DP``, ``THREADS``,
``VEC``, ``FAST_EXP`` and ``elem_t`` first)."""


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
#define FAST_EXP @FASTEXP@
#define FOLD @FOLD@
#define SPLIT @SPLIT@
#define INTERLEAVE @INTERLEAVE@
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

@ROWS_SOURCE@
// The online softmax's first half on one m-tile's scores sc (rows mrow0 .. mrow0 + 15, keys j0 .. j0 + BC - 1):
// the mask, the tile's row maxima, the running max updated; base (what exp2's argument subtracts) and alpha
// (the old terms' factor) out. MODE 0: the mask evaluated per element where !full (64-bit indices; the
// original loop); 1: no mask (a tile inside the window and the keys, no explicit mask); 2: the mask on 32-bit
// offsets from the tile's corner. FOLD: sc holds raw scores, sl2 = |scale| log2(e).
template <int MODE>
ACL_DEV void flash_rowmax(AclMmaC (&sc)[NT], float (&m_run)[ACL_MMA_C_SLOTS], float (&base)[ACL_MMA_C_SLOTS],
                          float (&alpha)[ACL_MMA_C_SLOTS], const float sl2, const bool full, const AttnMeta& m,
                          const unsigned char* __restrict__ mask, const long long b, const long long h,
                          const long long mrow0, const long long j0, const long long kv1, const int lane) {
  const float inf = __uint_as_float(0x7f800000u);
  // MODE 2: the tile's bounds as 32-bit offsets; column - row lies in (-16, BC), so clamping the window's
  // bounds to +-2^20 keeps every comparison exact
  int lim_j = BC, win_lo = 0, win_hi = 0, lim_i = 16;
  const unsigned char* mask_tile = mask;
  if (MODE == 2) {
    const long long left = kv1 - j0;
    lim_j = left < BC ? (int)left : BC;
    if (m.has_window) {
      const long long d0 = j0 - mrow0 - m.shift;  // j - i - shift at the tile's corner
      const long long lo = m.win_lo - d0, hi = m.win_hi - d0, cap = 1 << 20;
      win_lo = (int)(lo < -cap ? -cap : lo > cap ? cap : lo);
      win_hi = (int)(hi < -cap ? -cap : hi > cap ? cap : hi);
    }
    if (m.has_mask) {
      const long long left_i = m.rows - mrow0;
      lim_i = left_i <= 0 ? 0 : left_i < 16 ? (int)left_i : 16;
      if (lim_i > 0) mask_tile = mask + b * m.mask[0] + h * m.mask[1] + mrow0 * m.mask[2] + j0 * m.mask[3];
    }
  }
  float t_max[ACL_MMA_C_SLOTS];
#pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) t_max[s] = -inf;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
#if FOLD
      float sv = sc[nt].x[e];
#else
      float sv = sc[nt].x[e] * sl2;
#endif
      if (MODE == 0 && !full) {
        const long long i = mrow0 + acl_mma_c_row(lane, e), j = j0 + 16 * nt + acl_mma_c_col(lane, e);
        bool keep = j < kv1;
        if (keep && m.has_window) {
          const long long off = j - i - m.shift;
          keep = off >= m.win_lo && off <= m.win_hi;
        }
        if (keep && m.has_mask && i < m.rows)
          keep = mask[b * m.mask[0] + h * m.mask[1] + i * m.mask[2] + j * m.mask[3]] == 0;
        if (!keep) sv = -inf;
      }
      if (MODE == 2) {
        const int ri = acl_mma_c_row(lane, e), cj = 16 * nt + acl_mma_c_col(lane, e);
        bool keep = cj < lim_j;
        if (keep && m.has_window) keep = cj - ri >= win_lo && cj - ri <= win_hi;
        if (keep && m.has_mask && ri < lim_i) keep = mask_tile[ri * m.mask[2] + cj * m.mask[3]] == 0;
        if (!keep) sv = -inf;
      }
      sc[nt].x[e] = sv;
      const int s = acl_mma_c_slot(e);
      t_max[s] = fmaxf(t_max[s], sv);
    }
  }
#pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
#pragma unroll
    for (int off = 1; off < ACL_MMA_ROW_LANES; off <<= 1) t_max[s] = fmaxf(t_max[s], ACL_SHFL_XOR(t_max[s], off));
#if FOLD
    const float m_new = fmaxf(m_run[s], t_max[s] * sl2);  // sl2 > 0: -inf stays -inf
#else
    const float m_new = fmaxf(m_run[s], t_max[s]);
#endif
    base[s] = m_new == -inf ? 0.0f : m_new;  // a row with nothing kept yet: every p and alpha is exp2(-inf) = 0
    alpha[s] = flash_exp2(m_run[s] - base[s]);
    m_run[s] = m_new;
  }
}

// the probabilities of one 16x16 score tile (exp2 of score - base), summed into t_sum, rounded into pa
ACL_DEV void flash_probs(AclMmaC& sc, AclMmaA& pa, const float (&base)[ACL_MMA_C_SLOTS],
                         float (&t_sum)[ACL_MMA_C_SLOTS], const float sl2, unsigned short* scratch) {
#pragma unroll
  for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) {
    const int s = acl_mma_c_slot(e);
#if FOLD
    const float p = flash_exp2(fmaf(sc.x[e], sl2, -base[s]));
#else
    const float p = flash_exp2(sc.x[e] - base[s]);
#endif
    sc.x[e] = p;
    t_sum[s] += p;
  }
  acl_mma_c_to_a<IS_BF16>(pa, sc, scratch);
}

// the whole online softmax of one m-tile (flash_rowmax's MODE): P into pa, the running sum updated, O rescaled
template <int MODE>
ACL_DEV void flash_softmax(AclMmaC (&sc)[NT], AclMmaA (&pa)[NT], AclMmaC (&o)[KT], float (&m_run)[ACL_MMA_C_SLOTS],
                           float (&l_run)[ACL_MMA_C_SLOTS], const float sl2, const bool full, const AttnMeta& m,
                           const unsigned char* __restrict__ mask, const long long b, const long long h,
                           const long long mrow0, const long long j0, const long long kv1, const int lane,
                           unsigned short* scratch) {
  float base[ACL_MMA_C_SLOTS], alpha[ACL_MMA_C_SLOTS], t_sum[ACL_MMA_C_SLOTS];
  flash_rowmax<MODE>(sc, m_run, base, alpha, sl2, full, m, mask, b, h, mrow0, j0, kv1, lane);
#pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) t_sum[s] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) flash_probs(sc[nt], pa[nt], base, t_sum, sl2, scratch);
#pragma unroll
  for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) l_run[s] = l_run[s] * alpha[s] + t_sum[s];
#pragma unroll
  for (int dt = 0; dt < KT; ++dt)
#pragma unroll
    for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) o[dt].x[e] *= alpha[acl_mma_c_slot(e)];
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
#if FOLD
  if (scale_arg < 0.0) {  // Q negated (exactly), so that raw scores are scaled by |scale|
    for (int i = threadIdx.x; i < BR * HEAD_DIM; i += THREADS) qs[(i / HEAD_DIM) * DP + i % HEAD_DIM] ^= 0x8000u;
    __syncthreads();
  }
#endif
#if !QSMEM
  AclMmaA qf[MT][KT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) acl_mma_load_a(qf[mt][kk], qs + 16 * (MT * warp + mt) * DP + 16 * kk, DP);
  __syncthreads();
#endif

#if FOLD
  // the scale's sign goes into Q (exact: a sign flip), its magnitude (at least FLT_MIN: never 0 * inf) into the FMA
  const float sl2_signed = (float)(scale_arg * 1.4426950408889634);
  const float sl2 = fmaxf(sl2_signed < 0.0f ? -sl2_signed : sl2_signed, 1.17549435e-38f);
#else
  const float sl2 = (float)(scale_arg * 1.4426950408889634);  // scores in log2 units: exp2 is the hardware's
#endif
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
#if !INTERLEAVE
    AclMmaA pa[MT][NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#define FLASH_SOFTMAX_ARGS \
  sc[mt], pa[mt], o[mt], m_run[mt], l_run[mt], sl2, full, m, mask, b, h, wrow0 + 16 * mt, j0, kv1, lane, scratch
#if SPLIT
      if (full) flash_softmax<1>(FLASH_SOFTMAX_ARGS);
      else flash_softmax<2>(FLASH_SOFTMAX_ARGS);
#else
      flash_softmax<0>(FLASH_SOFTMAX_ARGS);
#endif
#undef FLASH_SOFTMAX_ARGS
    }
#endif

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
#if INTERLEAVE
    // the softmax after V's barrier: key block kt's probabilities meet V as soon as they are formed, so the
    // compiler can overlap one block's exp2s with the previous block's products (no barrier between them)
    float base[MT][ACL_MMA_C_SLOTS], t_sum[MT][ACL_MMA_C_SLOTS];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float alpha[ACL_MMA_C_SLOTS];
#define FLASH_ROWMAX_ARGS sc[mt], m_run[mt], base[mt], alpha, sl2, full, m, mask, b, h, wrow0 + 16 * mt, j0, kv1, lane
#if SPLIT
      if (full) flash_rowmax<1>(FLASH_ROWMAX_ARGS);
      else flash_rowmax<2>(FLASH_ROWMAX_ARGS);
#else
      flash_rowmax<0>(FLASH_ROWMAX_ARGS);
#endif
#undef FLASH_ROWMAX_ARGS
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) {
        l_run[mt][s] *= alpha[s];
        t_sum[mt][s] = 0.0f;
      }
#pragma unroll
      for (int dt = 0; dt < KT; ++dt)
#pragma unroll
        for (int e = 0; e < ACL_MMA_C_ELEMS; ++e) o[mt][dt].x[e] *= alpha[acl_mma_c_slot(e)];
    }
#pragma unroll
    for (int kt = 0; kt < NT; ++kt) {
      AclMmaA pk[MT];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) flash_probs(sc[mt][kt], pk[mt], base[mt], t_sum[mt], sl2, scratch);
#pragma unroll
      for (int dt = 0; dt < KT; ++dt) {
        AclMmaB vb;
        acl_mma_load_b_kn(vb, vts + 16 * kt * DP + 16 * dt, DP);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acl_mma<IS_BF16>(o[mt][dt], pk[mt], vb);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int s = 0; s < ACL_MMA_C_SLOTS; ++s) l_run[mt][s] += t_sum[mt][s];
#else
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
#endif
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


def fill_body(body: str, dtype: D, sink: D | None, name: str, tokens: dict[str, str]) -> str:
    """``body`` with ``tokens`` and the tokens every flash kernel shares (storage types, the sink's load, the output's
    store, the kernel name, the argument structs, ``@BF16@``) replaced."""
    c, f32 = ctype(dtype), ctype(D.ACL_FLOAT)
    sink_c = ctype(sink if sink is not None else D.ACL_FLOAT)
    shared = {
        "@BF16@": "true" if dtype == D.ACL_BF16 else "false",
        "@S@": c.storage,
        "@SINK_S@": sink_c.storage,
        "@SINK_LOAD@": load("sink[h * m.sink_step]", sink_c, f32),
        "@STORE@": store("r", f32, c),
        "@NAME@": name,
        "@ATTN_STRUCT@": ATTN_STRUCT,
        "@GRID_STRUCT@": GRID_STRUCT,
    }
    for token, value in {**tokens, **shared}.items():
        body = body.replace(token, value)
    return body


def flash_source(inst: FlashInstance) -> str:
    """The complete source (prelude, matrix layer, key range included) of one flash kernel."""
    if (
        inst.dtype not in DTYPES
        or inst.head_dim % 16
        or inst.block_keys % 16
        or inst.mtiles < 1
        or inst.stages not in (1, 2)
        or set(inst.inner) - set(INNER_FLAGS)
    ):
        raise ValueError(f"no flash kernel for {inst}")
    if inst.shared_bytes > SHARED_LIMIT:
        raise ValueError(f"{inst} needs {inst.shared_bytes} bytes of shared memory (limit {SHARED_LIMIT})")
    tokens = {
        "@D@": str(inst.head_dim),
        "@WARPS@": str(inst.warps),
        "@MT@": str(inst.mtiles),
        "@STAGES@": str(inst.stages),
        "@QSMEM@": "1" if inst.qsmem else "0",
        "@FASTEXP@": "1" if "e" in inst.inner else "0",
        "@FOLD@": "1" if "f" in inst.inner else "0",
        "@SPLIT@": "1" if "u" in inst.inner else "0",
        "@INTERLEAVE@": "1" if "i" in inst.inner else "0",
        "@MINB@": str((3 if "o" in inst.inner else MIN_BLOCKS) if inst.warps <= 4 else 1),
        "@BC@": str(inst.block_keys),
        "@VEC@": "1" if inst.vec else "0",
        "@ROWS_SOURCE@": ROWS_SOURCE,
    }
    body = fill_body(_BODY, inst.dtype, inst.sink, inst.kernel_name, tokens)
    shape = f"{inst.warps} warps x {16 * inst.mtiles} rows, {inst.block_keys}-key tiles"
    header = f"// flash attention forward: {inst.dtype.short}, D={inst.head_dim}, {shape}"
    return "\n".join([PRELUDE, MMA_SOURCE, KEY_RANGE_SOURCE, header, body])
