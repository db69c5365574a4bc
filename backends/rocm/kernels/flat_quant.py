"""FlatQuant's token-tile kernel: x'' = P1 @ x[m] @ P2 per token in double, the INT4 quantisation in the block.

The spec (:mod:`acl_core.spec.ops.quant_vllm`) computes both Kronecker products in float64 and rounds
x'' once to FLOAT32; the INT4 outputs and the FLOAT32 scale must match that bit for bit (but within
float64 rounding of a tie). fp16 inputs with fp32 accumulation (the warp matrix layer) cannot: a float32
sum of 64 products misses the correctly rounded float32 in a large share of elements, and the maximum
(the scale) with it. So the products stay in double, on a register tile per thread (``simt``) or on the
FP64 warp matrix instruction of sm_80+ (``dmma``: ``mma.sync.m8n8k4`` f64; ``dmma16``: on sm_90 two row
tiles at once through ``mma.sync.m16n8k4`` f64, the m8n8k4 pair stacked, m8n8k4 on sm_80; a software
product from the same fragments elsewhere and on the CPU emulator).

One persistent block per group of tokens (grid-strided over M): P1 and P2 converted to double once per
block into dynamic shared memory, zero-padded to ``N1P x N1P`` / ``N2P x N2P`` (powers of two, at
least 8); per token, x[m] (fetched into registers during the previous token's second product) goes to
a shared double tile, ``T = x @ P2`` replaces it, ``x'' = P1 @ T`` stays in registers, rounded to
float; the block's NaN-propagating maximum gives the scale, the INT4 codes go through a shared byte
tile and leave as packed INT32 words (or nibbles) in coalesced order. Padded rows and columns hold
exact zeros and never reach the maximum or the outputs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.lowp import LOWP_PRELUDE
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.quant import HELPERS, kernel_name, load, storage

KERNELS: Final = ("simt", "dmma", "dmma16")
"""The product engines of :class:`FlatTile`."""
MAX_THREADS: Final = 256
"""Block threads at most (the simt tile: 16 outputs a thread, so N1P * N2P <= 4,096)."""
MIN_BLOCKS: Final = 2
"""Resident blocks per SM the register budget is held to (two 64x64 tiles' shared memory fit an H100's SM)."""
DMMA_WARPS: Final = 8
"""Warps of a dmma block (each owns whole 8x8 output tiles)."""


def padded(n: int) -> int:
    """The power of two (at least 8) a dimension is padded to in shared memory."""
    return max(8, 1 << max(n - 1, 0).bit_length())


@dataclass(frozen=True)
class FlatTile:
    """A block per group of tokens; ``kernel``: ``simt`` (4x4 double register tiles), ``dmma`` or ``dmma16``."""

    x: D
    dst: D
    n1: int
    n2: int
    kernel: str = "simt"

    @property
    def n1p(self) -> int:
        """N1 padded."""
        return padded(self.n1)

    @property
    def n2p(self) -> int:
        """N2 padded."""
        return padded(self.n2)

    @property
    def threads(self) -> int:
        """Threads of a block."""
        if self.kernel != "simt":
            return DMMA_WARPS * 32
        return self.n1p * self.n2p // 16

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of a block: P1, P2 and the x / T tile as doubles, the maxima, the codes."""
        n1p, n2p, pad = self.n1p, self.n2p, self._pad()
        return 8 * (n1p * (n1p + pad) + n2p * (n2p + pad) + n1p * (n2p + pad)) + 4 * self.threads + n1p * n2p

    def fits(self, max_shared: int, warp_size: int = 32) -> str | None:
        """None where this kernel runs these shapes with ``max_shared`` bytes and ``warp_size`` lanes; else why not."""
        if self.kernel != "simt" and warp_size != 32:
            return f"the f64 warp product is written for 32-lane warps, not {warp_size}"
        if self.kernel == "simt" and self.threads > MAX_THREADS:
            return f"N1P * N2P = {self.n1p * self.n2p} needs {self.threads} threads (at most {MAX_THREADS})"
        if self.kernel != "simt" and warp_grid(self.n1p // 8, self.n2p // 8) is None:
            return f"{self.n1p // 8} x {self.n2p // 8} output tiles do not split over {DMMA_WARPS} warps"
        if self.shared_bytes > max_shared:
            return f"{self.shared_bytes} B of shared memory (the device allows {max_shared})"
        return None

    def _pad(self) -> int:
        """Doubles added to every shared row: dmma's fragment loads read 4 or 8 rows at once (4: no conflicts)."""
        return 0 if self.kernel == "simt" else 4

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("flattile", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = storage(self.x)
        params = [f"const {st}* x", "const long long x0", "const long long xm", "const long long xi"]
        params += ["const long long xj", f"const {st}* p2", "const long long q0", "const long long qr"]
        params += ["const long long qc", f"const {st}* p", "const long long p0", "const long long pr"]
        params += ["const long long pc", f"{storage(self.dst)}* out", "const long long o0", "const long long om"]
        params += ["const long long oi", "const long long oj", "float* s", "const long long s0"]
        params += ["const long long sm", "const long long mcount", "const float top"]
        body = self._setup() + self._loop()
        head = [PRELUDE, LOWP_PRELUDE, HELPERS, "" if self.kernel == "simt" else _DMMA]
        return "\n".join(
            [
                *head,
                f"// FlatQuant token tile ({self.kernel}) {self.x.short} [{self.n1}, {self.n2}] -> {self.dst.short}",
                f'extern "C" __global__ void __launch_bounds__({self.threads}, {MIN_BLOCKS}) {self.kernel_name}(',
                "    " + ",\n    ".join(params) + ") {",
                *("  " + line for line in body),
                "}",
            ]
        )

    def _engine(self) -> _SimtEngine | _DmmaEngine:
        return _SimtEngine(self) if self.kernel == "simt" else _DmmaEngine(self)

    def _setup(self) -> list[str]:
        eng = self._engine()
        n1, n2, n1p, n2p, pad, threads = self.n1, self.n2, self.n1p, self.n2p, self._pad(), self.threads
        per = -(-n1 * n2 // threads)
        return [
            f"constexpr int N1 = {n1}, N2 = {n2}, N1P = {n1p}, N2P = {n2p}, THREADS = {threads};",
            f"constexpr int P1LD = {n1p + pad}, P2LD = {n2p + pad}, LD = {n2p + pad}, PER = {per};",
            "extern __shared__ AclVec<double, 2> flat_smem[];",
            "double* const p1s = (double*)flat_smem;",
            "double* const p2s = p1s + N1P * P1LD;",
            "double* const xs = p2s + N2P * P2LD;",
            "float* const red = (float*)(xs + N1P * LD);",
            "unsigned char* const qs = (unsigned char*)(red + THREADS);",
            "const int t = threadIdx.x;",
            "for (int e = t; e < N1P * N1P; e += THREADS) {",
            "  const int i = e / N1P, a = e % N1P;",
            f"  p1s[i * P1LD + a] = i < N1 && a < N1 ? (double){load(self.x, 'p', 'p0 + i * pr + a * pc')} : 0.0;",
            "}",
            "for (int e = t; e < N2P * N2P; e += THREADS) {",
            "  const int b = e / N2P, j = e % N2P;",
            f"  p2s[b * P2LD + j] = b < N2 && j < N2 ? (double){load(self.x, 'p2', 'q0 + b * qr + j * qc')} : 0.0;",
            "}",
            "for (int e = t; e < N1P * LD; e += THREADS) xs[e] = 0.0;",
            f"{storage(self.x)} pre[PER];",
            *eng.declare(),
            "long long mm = blockIdx.x;",
            "if (mm < mcount) {",
            *_fetch("mm"),
            "}",
        ]

    def _loop(self) -> list[str]:
        eng = self._engine()
        body = [
            "for (; mm < mcount; mm += gridDim.x) {",
            "  __syncthreads();  // the previous token's codes are out and its T read",
            "  for (int r = 0; r < PER; ++r) {",
            "    const int e = t + r * THREADS;",
            f"    if (e < N1 * N2) xs[(e / N2) * LD + e % N2] = (double){load(self.x, 'pre', 'r')};",
            "  }",
            "  __syncthreads();",
            *_indent(eng.product("xs", "LD", "p2s", "P2LD", "N2P")),
            "  __syncthreads();  // every thread has read x: T replaces it (padded rows and columns exact zeros)",
            *_indent(eng.store_t()),
            "  __syncthreads();",
            "  if (mm + gridDim.x < mcount) {",
            *_indent(_fetch("mm + gridDim.x"), "    "),
            "  }",
            *_indent(eng.product("p1s", "P1LD", "xs", "LD", "N1P")),
            "  float amax = 0.0f;",
            *_indent(eng.each_real("amax = acl_q_max(amax, fabsf((float)V));")),
            "  red[t] = amax;",
            "  __syncthreads();",
            "  for (int half = THREADS / 2; half > 0; half >>= 1) {",
            "    if (t < half) red[t] = acl_q_max(red[t], red[t + half]);",
            "    __syncthreads();",
            "  }",
            "  const float sv = ACL_QDIV(red[0], top);",
            "  if (t == 0) s[s0 + mm * sm] = sv;",
            *_indent(
                eng.each_real(
                    "qs[I * N2P + J] = (unsigned char)(acl_q_int((double)(sv == 0.0f ? 0.0f : ACL_QDIV((float)V, sv)),"
                    " ACL_QR_RINT, -8.0, 7.0) & 0xf);"
                )
            ),
            "  __syncthreads();",
            *_indent(self._write()),
            "}",
        ]
        return body

    def _write(self) -> list[str]:
        if self.dst == D.ACL_INT32:
            return [
                "for (int w = t; w < N1 * (N2 / 8); w += THREADS) {",
                "  const int i = w / (N2 / 8), jw = w % (N2 / 8);",
                "  unsigned word = 0u;",
                "  for (int k = 0; k < 8; ++k) word |= ((unsigned)qs[i * N2P + jw * 8 + k]) << (4 * k);",
                "  out[o0 + mm * om + i * oi + jw * oj] = (int)word;",
                "}",
            ]
        return [
            "for (int e = t; e < N1 * N2; e += THREADS) {",
            "  const int i = e / N2, j = e % N2;",
            "  acl_nib_set(out, o0 + mm * om + i * oi + j * oj, qs[i * N2P + j]);",
            "}",
        ]


def _indent(lines: list[str], pad: str = "  ") -> list[str]:
    return [pad + line for line in lines]


def _fetch(token: str) -> list[str]:
    """Lines: token ``token``'s real elements of x into ``pre`` (row-major order, coalesced along N2)."""
    return [
        "  for (int r = 0; r < PER; ++r) {",
        "    const int e = t + r * THREADS;",
        f"    if (e < N1 * N2) pre[r] = x[x0 + ({token}) * xm + (e / N2) * xi + (e % N2) * xj];",
        "  }",
    ]


class _Engine:
    """What both token-tile engines share: the accumulator walk ``_each`` (row ``I``, column ``J``, value ``V``)
    serves the T-tile store and the per-element statements."""

    def _each(self, stmt: str, real: bool) -> list[str]:
        raise NotImplementedError

    def store_t(self) -> list[str]:
        """Lines: the accumulators into the x / T tile, padded positions as 0."""
        return self._each("xs[I * LD + J] = I < N1 && J < N2 ? V : 0.0;", real=False)

    def each_real(self, stmt: str) -> list[str]:
        """Lines: ``stmt`` for every real (I < N1, J < N2) accumulator ``V`` at row ``I``, column ``J``."""
        return self._each(stmt, real=True)


class _SimtEngine(_Engine):
    """4x4 double accumulators a thread: rows ``4 ty + r``, columns ``2 tx + c`` and ``N2P / 2 + 2 tx + c``."""

    def __init__(self, tile: FlatTile) -> None:
        self.tile = tile

    def product(self, a: str, lda: str, b: str, ldb: str, k: str) -> list[str]:
        """Lines: ``acc = A @ B`` (A [N1P, K] stride lda, B [K, N2P] stride ldb), k ascending, two at a time."""
        return [
            "{",
            "  const int tx = t % (N2P / 4), ty = t / (N2P / 4);",
            "  for (int r = 0; r < 4; ++r)",
            "    for (int c = 0; c < 4; ++c) acc[r][c] = 0.0;",
            f"  for (int k = 0; k < {k}; k += 2) {{",
            "    AclVec<double, 2> av[4], bv[2][2];",
            f"    for (int r = 0; r < 4; ++r) av[r] = *(const AclVec<double, 2>*)({a} + (ty * 4 + r) * {lda} + k);",
            "    for (int kk = 0; kk < 2; ++kk) {",
            f"      bv[kk][0] = *(const AclVec<double, 2>*)({b} + (k + kk) * {ldb} + tx * 2);",
            f"      bv[kk][1] = *(const AclVec<double, 2>*)({b} + (k + kk) * {ldb} + N2P / 2 + tx * 2);",
            "    }",
            "    for (int kk = 0; kk < 2; ++kk)",
            "      for (int r = 0; r < 4; ++r)",
            "        for (int c = 0; c < 4; ++c) acc[r][c] += av[r].v[kk] * bv[kk][c / 2].v[c % 2];",
            "  }",
            "}",
        ]

    def declare(self) -> list[str]:
        """Lines: the accumulators (one set, reused by both products)."""
        return ["double acc[4][4];"]

    def _each(self, stmt: str, real: bool) -> list[str]:
        guard = "if (I < N1 && J < N2) " if real else ""
        return [
            "for (int r = 0; r < 4; ++r)",
            "  for (int c = 0; c < 4; ++c) {",
            "    const int I = (t / (N2P / 4)) * 4 + r;",
            "    const int J = (c < 2 ? 0 : N2P / 2) + (t % (N2P / 4)) * 2 + c % 2;",
            "    const double V = acc[r][c];",
            "    (void)V;",
            f"    {guard}{stmt}",
            "  }",
        ]


class _DmmaEngine(_Engine):
    """Warps in a ``WR x WC`` grid over the (N1P / 8) x (N2P / 8) grid of 8x8 output tiles, ``RB x CB`` tiles each."""

    def __init__(self, tile: FlatTile) -> None:
        self.tile = tile
        grid = warp_grid(tile.n1p // 8, tile.n2p // 8)
        assert grid is not None, tile
        self.wr, self.wc = grid
        self.rb, self.cb = tile.n1p // 8 // self.wr, tile.n2p // 8 // self.wc

    def declare(self) -> list[str]:
        """Lines: the accumulators (one set, reused by both products)."""
        return [f"double acc[{self.rb * self.cb}][2];"]

    def product(self, a: str, lda: str, b: str, ldb: str, k: str) -> list[str]:
        """Lines: ``acc = A @ B`` one 8x8x4 f64 product at a time, k ascending (A [N1P, K], B [K, N2P])."""
        rb, cb, wc = self.rb, self.cb, self.wc
        pair = "true" if self.tile.kernel == "dmma16" else "false"
        return [
            "{",
            f"  const int lane = t % 32, wr = (t / 32) / {wc}, wc = (t / 32) % {wc};",
            f"  for (int u = 0; u < {rb * cb}; ++u) acc[u][0] = acc[u][1] = 0.0;",
            f"  for (int k = 0; k < {k}; k += 4) {{",
            f"    double fa[{rb}], fb[{cb}];",
            f"    for (int ri = 0; ri < {rb}; ++ri)",
            f"      fa[ri] = {a}[((wr * {rb} + ri) * 8 + lane / 4) * {lda} + k + lane % 4];",
            f"    for (int ci = 0; ci < {cb}; ++ci)",
            f"      fb[ci] = {b}[(k + lane % 4) * {ldb} + (wc * {cb} + ci) * 8 + lane / 4];",
            f"    acl_dmma_step<{rb}, {cb}, {pair}>(acc, fa, fb, lane);",
            "  }",
            "}",
        ]

    def _each(self, stmt: str, real: bool) -> list[str]:
        guard = "if (I < N1 && J < N2) " if real else ""
        rb, cb, wc = self.rb, self.cb, self.wc
        return [
            f"for (int u = 0; u < {rb * cb}; ++u)",
            "  for (int c = 0; c < 2; ++c) {",
            f"    const int I = ((t / 32) / {wc} * {rb} + u / {cb}) * 8 + (t % 32) / 4;",
            f"    const int J = ((t / 32) % {wc} * {cb} + u % {cb}) * 8 + (t % 4) * 2 + c;",
            "    const double V = acc[u][c];",
            "    (void)V;",
            f"    {guard}{stmt}",
            "  }",
        ]


def warp_grid(rows: int, cols: int) -> tuple[int, int] | None:
    """The (WR, WC) of DMMA_WARPS warps over a rows x cols tile grid with the fewest fragment loads, or None."""
    grids = [(w, DMMA_WARPS // w) for w in (1, 2, 4, 8) if rows % w == 0 and cols % (DMMA_WARPS // w) == 0]
    return min(grids, key=lambda g: rows // g[0] + cols // g[1]) if grids else None


_DMMA: Final = r"""
#ifndef ACL_SHFL_IDX
#if defined(__CUDA_ARCH__)
#define ACL_SHFL_IDX(v, l) __shfl_sync(0xffffffffu, (v), (l))
#else
#define ACL_SHFL_IDX(v, l) __shfl((v), (l))
#endif
#endif
// c[0..1] += A[8x4] B[4x8] in double, warp-collective, in PTX's m8n8k4 f64 fragment layout: lane L holds
// fa = A(L / 4, L % 4), fb = B(L % 4, L / 4) and C(L / 4, 2 (L % 4) + {0, 1}). sm_80+: mma.sync; elsewhere
// (and on the CPU emulator) the same sums from the same fragments, gathered from their lanes by shuffles,
// so the software path checks the fragment bookkeeping the hardware path relies on.
ACL_DEV void acl_dmma_8x8x4(double* c, double fa, double fb, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  (void)lane;
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
               : "+d"(c[0]), "+d"(c[1]) : "d"(fa), "d"(fb));
#else
  const int row = lane / 4, col = (lane % 4) * 2;
  for (int kk = 0; kk < 4; ++kk) {
    const double av = ACL_SHFL_IDX(fa, row * 4 + kk);         // A(row, kk): lane 4 row + kk
    const double b0 = ACL_SHFL_IDX(fb, col * 4 + kk);         // B(kk, col): lane 4 col + kk
    const double b1 = ACL_SHFL_IDX(fb, (col + 1) * 4 + kk);
    c[0] += av * b0;
    c[1] += av * b1;
  }
#endif
}
// One k-step of a warp's RB x CB tiles (fa[ri]: A fragment of row tile ri, fb[ci]: B fragment of column tile
// ci): mma.sync per tile on sm_80+; where the CPU emulator offers ACL_WARP_ALLGATHER, every lane's fragments
// in one exchange and the same sums (same layout) from them; elsewhere acl_dmma_8x8x4's shuffles per tile.
template <int RB, int CB, bool PAIRED> struct AclDmmaStep {
  static ACL_DEV void run(double (*acc)[2], const double* fa, const double* fb, int lane) {
#if defined(ACL_WARP_ALLGATHER) && !(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)
    constexpr int W = 2 * (RB + CB);
    unsigned mine[W], all[32 * W];
    for (int i = 0; i < RB + CB; ++i) {
      const unsigned long long bits = (unsigned long long)__double_as_longlong(i < RB ? fa[i] : fb[i - RB]);
      mine[2 * i] = (unsigned)bits;
      mine[2 * i + 1] = (unsigned)(bits >> 32);
    }
    ACL_WARP_ALLGATHER(mine, all, W);
    const int row = lane / 4, col = (lane % 4) * 2;
    for (int ri = 0; ri < RB; ++ri)
      for (int ci = 0; ci < CB; ++ci)
        for (int kk = 0; kk < 4; ++kk) {
          const unsigned* a = all + (row * 4 + kk) * W + 2 * ri;          // A(row, kk): lane 4 row + kk
          const unsigned* b0 = all + (col * 4 + kk) * W + 2 * (RB + ci);  // B(kk, col): lane 4 col + kk
          const unsigned* b1 = all + ((col + 1) * 4 + kk) * W + 2 * (RB + ci);
          const double av = __longlong_as_double((long long)(((unsigned long long)a[1] << 32) | a[0]));
          acc[ri * CB + ci][0] += av * __longlong_as_double((long long)(((unsigned long long)b0[1] << 32) | b0[0]));
          acc[ri * CB + ci][1] += av * __longlong_as_double((long long)(((unsigned long long)b1[1] << 32) | b1[0]));
        }
#else
    for (int ri = 0; ri < RB; ++ri)
      for (int ci = 0; ci < CB; ++ci) acl_dmma_8x8x4(acc[ri * CB + ci], fa[ri], fb[ci], lane);
#endif
  }
};
// PAIRED (dmma16, RB even): on sm_90 row tiles ri, ri + 1 (rows 8 apart) as one m16n8k4, whose A fragment is
// the two m8n8k4 fragments {fa[ri], fa[ri + 1]} and whose D is the two tiles' C fragments, upper tile first.
template <int RB, int CB> struct AclDmmaStep<RB, CB, true> {
  static ACL_DEV void run(double (*acc)[2], const double* fa, const double* fb, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    (void)lane;
    for (int ri = 0; ri + 1 < RB; ri += 2)
      for (int ci = 0; ci < CB; ++ci) {
        double* hi = acc[ri * CB + ci];
        double* lo = acc[(ri + 1) * CB + ci];
        asm volatile(
            "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
            : "+d"(hi[0]), "+d"(hi[1]), "+d"(lo[0]), "+d"(lo[1])
            : "d"(fa[ri]), "d"(fa[ri + 1]), "d"(fb[ci]));
      }
#else
    AclDmmaStep<RB, CB, false>::run(acc, fa, fb, lane);
#endif
  }
};
template <int RB, int CB, bool PAIR>
ACL_DEV void acl_dmma_step(double (*acc)[2], const double* fa, const double* fb, int lane) {
  AclDmmaStep<RB, CB, PAIR && RB % 2 == 0>::run(acc, fa, fb, lane);
}
"""
"""The f64 warp product (``mma.sync.m8n8k4`` on sm_80+, the same sums per lane elsewhere)."""


__all__ = ["KERNELS", "FlatTile", "padded", "warp_grid"]
