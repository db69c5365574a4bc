"""Kernel generators of the expert-parallel MC2 ops (MoeDistributeDispatch / Combine, every version).

Both ops exchange every rank's data with ncclAllGather first (the reference's exchange), so these kernels
see the whole EP domain in rank order and decide on the device what this rank keeps:

* :class:`DispatchRoute`, one block: checks every gathered expert id (the flag, and no table written when
  one lies outside [0, E) or when more copies arrive than expandXOut's A rows), counts the active
  copies of each (local expert, source rank) pair, turns the counts into epRecvCounts /
  expertTokenNums, and writes the received copies' flat positions ``(s·Bs + i)·K + j`` in (local
  expert, rank, token, slot) order with their expert keys and the row range: the input of the MoE
  family's :class:`~acl_rocm.kernels.moe.RangeGather` / :class:`~acl_rocm.kernels.moe.RangeQuant`.
  V1's expandIdx and V2's assistInfoForCombine (``eidx``: source rank, token, slot, zeros) are
  written here too.
* :class:`CombineRows`, one block: checks every rank's epSendCounts (running totals of at most A), finds
  each of this rank's active copies' expert-output row in the gathered rows (through assistInfoForCombine,
  the last matching row winning as in the reference, or through expandIdx and the expert rank's counts
  for V1) and flags copies without one; :class:`CombineSum` then forms ``Σ_j w[i, j]·y[row(i, j)]`` in
  double without contraction, rounded once (flag-gated: writes nothing after a failed check).

With ``ACL_MC2_ROUTE=grid`` (the default from :data:`~acl_rocm.ops.mc2.ROUTE_GRID_MIN` copies) the dispatch's
routing runs across the GPU in three launches instead: :class:`DispatchCount`, a thread per (pair, segment of
:data:`SEGMENT` copies) unit, a warp's threads on one segment for 32 pairs; :class:`DispatchScan`, one block: the
id check, the units' running starts and the tables; :class:`DispatchPlace`, a thread per unit again. The units are
the one-block kernel's, in the same order, so the tables are the same. Both write columns 0-2 of each received
copy's assistInfoForCombine row where they place the copy and every zero of the table in one coalesced sweep (16-byte
words on a dense aligned table). With ``ACL_MC2_ROWS=row`` :class:`DispatchRows` copies expandXOut's rows a block a
row at a time instead of the MoE family's RangeGather.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_core.spec.ops.mc2 import ASSIST_PER_ROW
from acl_rocm.kernels.ctypes_map import ctype, load
from acl_rocm.kernels.moe import _search
from acl_rocm.kernels.movement import HELPERS, WORDS, store_narrow
from acl_rocm.kernels.sort import kernel_name, source

_DOUBLE = ctype(D.ACL_DOUBLE)
MAX_PAIRS = 1024
"""(local expert, rank) pairs, or (pair, slice) units, one routing block holds in shared memory: moeExpertNum ≤ 1024
(with fewer pairs than threads each pair's copies are split into slices so that every thread scans)."""

_ATOMIC_MAX = r"""
__device__ __forceinline__ void acl_mc2_max(int* p, int v) {
#if defined(__HIPCC_RTC__) || defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
  atomicMax(p, v);
#else
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
#endif
}
"""


_ZERO16 = "struct alignas(16) acl_mc2_zero16 { unsigned int a, b, c, d; };\n"


def _assist_zeros(first: str, step: str, run: str, vec: bool) -> list[str]:
    """C lines: zeros into every assistInfoForCombine column past the third of the routed rows (< ``run``) and into
    every column of the rows after, a coalesced ``step``-strided sweep from ``first`` (the routing writes columns
    0-2 of the routed rows). ``vec``: the table is contiguous and 16-byte aligned, swept in 16-byte words."""
    n = ASSIST_PER_ROW
    if vec:
        words = n // 4
        return [
            f"for (long long w = {first}; w < a_rows * {words}; w += {step}) {{",
            f"  const long long r = w / {words}, c = w % {words};",
            f"  if (r >= {run} || c > 0)",
            "    reinterpret_cast<acl_mc2_zero16*>(eidx)[w] = acl_mc2_zero16{0u, 0u, 0u, 0u};",
            f"  else eidx[r * {n} + 3] = 0;",
            "}",
        ]
    return [
        f"for (long long e = {first}; e < a_rows * {n}; e += {step})",
        f"  if (e / {n} >= {run} || e % {n} >= 3) eidx[e * es] = 0;",
    ]


def _active(q: str) -> str:
    """C expression: copy ``q`` = i·K + j of this rank is active (``mask`` null: every copy)."""
    return f"(mask == 0 || mask[({q} / k) * ms0 + ({q} % k) * ms1] != 0)"


CHUNK_SCAN: Final = [
    "const long long chunk = (units + blockDim.x - 1) / blockDim.x;",
    "const long long c0 = (long long)threadIdx.x * chunk, c1 = c0 + chunk < units ? c0 + chunk : units;",
    "long long sum = 0;",
    "for (long long u = c0; u < c1; ++u) sum += start[u];",
    "part[threadIdx.x] = sum;",
    "__syncthreads();",
    "for (unsigned int off = 1; off < blockDim.x; off <<= 1) {",
    "  const long long v = threadIdx.x >= off ? part[threadIdx.x - off] : 0;",
    "  __syncthreads();",
    "  part[threadIdx.x] += v;",
    "  __syncthreads();",
    "}",
]
"""C lines of the routing kernels' unit scan: a contiguous chunk of ``units`` a thread, its sum in ``part``, then
the block's inclusive running sums of the chunks in log2(blockDim) shared-memory steps (Hillis-Steele); each
thread then derives its chunk's starts from ``part``."""


@dataclass(frozen=True)
class DispatchRoute:
    """The dispatch's routing tables from the gathered ids and masks, one block (a power of two ≤ 256 threads).

    ``vec``: V2's assistInfoForCombine is contiguous and 16-byte aligned (its zeros go as 16-byte words)."""

    v1: bool
    vec: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_dispatch_route", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const int* gid", "const unsigned char* gmask", "long long* bounds", "int* pos", "acl_key_t* keys"]
        params += ["int* recv", "long long* nums", "int* eidx", "int* flag"]
        names = ("world", "me", "local", "bs", "k", "a_rows", "cumulative", "rs", "ns", "es")
        params += [f"const long long {n}" for n in names]
        body = [
            f"__shared__ int start[{MAX_PAIRS}];",
            "__shared__ long long part[256];",
            "__shared__ int bad;",
            "const long long experts = local * world, per = bs * k, pairs = local * world;",
            "if (threadIdx.x == 0) bad = 0;",
            "__syncthreads();",
            "for (long long e = threadIdx.x; e < world * per; e += blockDim.x)",
            "  if (gid[e] < 0 || gid[e] >= experts) bad = 1;",
            "__syncthreads();",
            "if (bad) {",
            "  if (threadIdx.x == 0) { *flag = 1; bounds[0] = 0; bounds[1] = 0; }",
            "  return;",
            "}",
            # each (pair, segment) unit scans one slice of the source rank's copies, in (pair, segment) order
            "const long long segs = pairs >= (long long)blockDim.x ? 1 : (long long)blockDim.x / pairs;",
            "const long long units = pairs * segs, len = (per + segs - 1) / segs;",
            "for (long long u = threadIdx.x; u < units; u += blockDim.x) {",
            "  const long long t = u / segs, g = u % segs, s = t % world, ex = me * local + t / world;",
            "  const long long lo = s * per + g * len, hi = lo + len < (s + 1) * per ? lo + len : (s + 1) * per;",
            "  int c = 0;",
            "  for (long long q = lo; q < hi; ++q) c += (gmask[q] != 0 && gid[q] == ex) ? 1 : 0;",
            "  start[u] = c;",
            "}",
            "__syncthreads();",
            *CHUNK_SCAN,
            "const long long run = part[blockDim.x - 1];",
            "if (run > a_rows) {",  # duplicate ids in a token: more copies than expandXOut's A rows
            "  if (threadIdx.x == 0) { *flag = 1; bounds[0] = 0; bounds[1] = 0; }",
            "  return;",
            "}",
            "long long at0 = part[threadIdx.x] - sum;",
            "for (long long u = c0; u < c1; ++u) { const int c = start[u]; start[u] = (int)at0; at0 += c; }",
            "__syncthreads();",
            "if (threadIdx.x == 0) { bounds[0] = 0; bounds[1] = run; }",
            "for (long long t = threadIdx.x; t < pairs; t += blockDim.x)",
            "  recv[t * rs] = t + 1 < pairs ? start[(t + 1) * segs] : (int)run;",
            "for (long long le = threadIdx.x; le < local; le += blockDim.x) {",
            "  const long long lo = start[le * world * segs];",
            "  const long long hi = le + 1 < local ? (long long)start[(le + 1) * world * segs] : run;",
            "  nums[le * ns] = cumulative ? hi : hi - lo;",
            "}",
            "for (long long u = threadIdx.x; u < units; u += blockDim.x) {",
            "  const long long t = u / segs, g = u % segs, s = t % world, ex = me * local + t / world;",
            "  const long long lo = s * per + g * len, hi = lo + len < (s + 1) * per ? lo + len : (s + 1) * per;",
            "  int at = start[u];",
            "  for (long long q = lo; q < hi; ++q)",
            "    if (gmask[q] != 0 && gid[q] == ex) {",
            "      pos[at] = (int)q; keys[at] = acl_expert_key(ex);",
        ]
        if not self.v1:  # assistInfoForCombine: (source rank, token, slot); the zeros below
            body += [
                f"      int* row = eidx + (long long)at * {ASSIST_PER_ROW} * es;",
                "      row[0] = (int)(q / per); row[es] = (int)((q % per) / k); row[2 * es] = (int)(q % k);",
            ]
        body += [
            "      ++at;",
            "    }",
            "}",
        ]
        if not self.v1:
            body += _assist_zeros("threadIdx.x", "blockDim.x", "run", self.vec)
        if self.v1:  # expandIdx: the n-th active copy of this rank for the same expert, -1 when inactive
            body += [
                "for (long long ex = threadIdx.x; ex < experts; ex += blockDim.x) {",
                "  int seen = 0;",
                "  for (long long q = 0; q < per; ++q)",
                "    if (gmask[me * per + q] != 0 && gid[me * per + q] == ex) eidx[q * es] = seen++;",
                "}",
                "for (long long q = threadIdx.x; q < per; q += blockDim.x)",
                "  if (gmask[me * per + q] == 0) eidx[q * es] = -1;",
            ]
        return source("mc2: dispatch routing tables", "", self.kernel_name, params, body, _ZERO16 + _search(32))


SEGMENT = 64
"""Copies one thread of the grid routing kernels scans for one (local expert, source rank) pair."""


def grid_units(local: int, world: int, per: int, segment: int = SEGMENT) -> tuple[int, int]:
    """(segments a pair, units) of the grid routing: every pair's source-rank copies cut into runs of ``segment``."""
    segs = max(1, -(-per // segment))
    return segs, local * world * segs


_UNIT = [  # thread w takes pair w % pairs of segment w / pairs: a warp's threads read the same copies (broadcasts)
    "const long long t = w % (local * world), g = w / (local * world), u = t * segs + g;",
    "const long long s = t % world, ex = me * local + t / world;",
    "const long long len = (per + segs - 1) / segs;",
    "const long long lo = s * per + g * len, hi = lo + len < (s + 1) * per ? lo + len : (s + 1) * per;",
]


@dataclass(frozen=True)
class DispatchCount:
    """Grid routing, step 1: every (pair, segment) unit counts its active copies for its expert, a thread each."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_dispatch_count", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const int* gid", "const unsigned char* gmask", "int* start"]
        params += [f"const long long {n}" for n in ("world", "me", "local", "per", "segs", "units")]
        body = [
            "const long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "if (w >= units) return;",
            *_UNIT,
            "int c = 0;",
            "for (long long q = lo; q < hi; ++q) c += (gmask[q] != 0 && gid[q] == ex) ? 1 : 0;",
            "start[u] = c;",
        ]
        return source("mc2: dispatch routing counts (grid)", "", self.kernel_name, params, body)


@dataclass(frozen=True)
class DispatchScan:
    """Grid routing, step 2, one block: the id check, the units' running starts, the tables and the row range."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_dispatch_scan", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const int* gid", "int* start", "long long* bounds", "int* recv", "long long* nums", "int* state"]
        params += ["int* flag"]
        names = ("world", "local", "per", "a_rows", "cumulative", "rs", "ns", "segs", "units")
        params += [f"const long long {n}" for n in names]
        body = [
            "__shared__ long long part[256];",
            "__shared__ int bad;",
            "const long long experts = local * world, pairs = local * world;",
            "if (threadIdx.x == 0) bad = 0;",
            "__syncthreads();",
            "for (long long e = threadIdx.x; e < world * per; e += blockDim.x)",
            "  if (gid[e] < 0 || gid[e] >= experts) bad = 1;",
            "__syncthreads();",
            "if (bad) {",
            "  if (threadIdx.x == 0) { *flag = 1; *state = 1; bounds[0] = 0; bounds[1] = 0; }",
            "  return;",
            "}",
            *CHUNK_SCAN,
            "if (threadIdx.x == 0) {",
            "  const long long run = part[blockDim.x - 1];",
            "  bad = run > a_rows ? 1 : 0;",  # duplicate ids in a token: more copies than expandXOut's A rows
            "  if (bad) { *flag = 1; *state = 1; bounds[0] = 0; bounds[1] = 0; }",
            "  else { *state = 0; bounds[0] = 0; bounds[1] = run; }",
            "}",
            "__syncthreads();",
            "if (bad) return;",
            "long long at = part[threadIdx.x] - sum;",
            "for (long long u = c0; u < c1; ++u) { const int c = start[u]; start[u] = (int)at; at += c; }",
            "__syncthreads();",
            "const long long run = bounds[1];",
            "for (long long t = threadIdx.x; t < pairs; t += blockDim.x) {",
            "  const long long hi = t + 1 < pairs ? (long long)start[(t + 1) * segs] : run;",
            "  recv[t * rs] = (int)hi;",
            "}",
            "for (long long le = threadIdx.x; le < local; le += blockDim.x) {",
            "  const long long lo = start[le * world * segs];",
            "  const long long hi = le + 1 < local ? (long long)start[(le + 1) * world * segs] : run;",
            "  nums[le * ns] = cumulative ? hi : hi - lo;",
            "}",
        ]
        return source("mc2: dispatch routing scan (grid)", "", self.kernel_name, params, body)


@dataclass(frozen=True)
class DispatchPlace:
    """Grid routing, step 3: every unit writes its copies' positions, keys (and assist rows) from its start.

    ``vec``: V2's assistInfoForCombine is contiguous and 16-byte aligned (its zeros go as 16-byte words)."""

    v1: bool
    vec: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_dispatch_place", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const int* gid", "const unsigned char* gmask", "const int* start", "const long long* bounds"]
        params += ["const int* state", "int* pos", "acl_key_t* keys", "int* eidx"]
        names = ("world", "me", "local", "k", "a_rows", "per", "es", "segs", "units")
        params += [f"const long long {n}" for n in names]
        body = [
            "if (*state) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "const long long id = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "for (long long w = id; w < units; w += step) {",
            *("  " + line for line in _UNIT),
            "  int at = start[u];",
            "  for (long long q = lo; q < hi; ++q)",
            "    if (gmask[q] != 0 && gid[q] == ex) {",
            "      pos[at] = (int)q; keys[at] = acl_expert_key(ex);",
        ]
        if not self.v1:
            body += [
                f"      int* row = eidx + (long long)at * {ASSIST_PER_ROW} * es;",
                "      row[0] = (int)(q / per); row[es] = (int)((q % per) / k); row[2 * es] = (int)(q % k);",
            ]
        body += ["      ++at;", "    }", "}"]
        if not self.v1:
            body += _assist_zeros("id", "step", "bounds[1]", self.vec)
        else:  # expandIdx: a thread per expert, as the one-block kernel (V1 only)
            body += [
                "for (long long ex = id; ex < local * world; ex += step) {",
                "  int seen = 0;",
                "  for (long long q = 0; q < per; ++q)",
                "    if (gmask[me * per + q] != 0 && gid[me * per + q] == ex) eidx[q * es] = seen++;",
                "}",
                "for (long long q = id; q < per; q += step)",
                "  if (gmask[me * per + q] == 0) eidx[q * es] = -1;",
            ]
        helpers = _ZERO16 + _search(32)
        return source("mc2: dispatch routing positions (grid)", "", self.kernel_name, params, body, helpers)


@dataclass(frozen=True)
class CombineRows:
    """Each active copy's row in the gathered expert outputs (``rows``, -1 for none) and the checks, one block."""

    v1: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_combine_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const int* gcounts", "const int* gassist", "const int* ids", "const int* eidx"]
        params += ["const unsigned char* mask", "int* rows", "int* bad_out", "int* flag"]
        names = ("world", "me", "local", "bs", "k", "a_rows", "is0", "is1", "es", "ms0", "ms1")
        params += [f"const long long {n}" for n in names]
        body = [
            "__shared__ int bad;",
            "const long long experts = local * world, per = bs * k;",
            "if (threadIdx.x == 0) bad = 0;",
            "__syncthreads();",
            "for (long long t = threadIdx.x; t < world; t += blockDim.x) {",
            "  const int* c = gcounts + t * experts;",
            "  if (c[0] < 0 || c[experts - 1] > a_rows) bad = 1;",
            "  for (long long x = 1; x < experts; ++x) if (c[x] < c[x - 1]) bad = 1;",
            "}",
            "for (long long q = threadIdx.x; q < per; q += blockDim.x) rows[q] = -1;",
            "__syncthreads();",
            "if (!bad) {",
        ]
        if self.v1:
            body += [
                "  for (long long q = threadIdx.x; q < per; q += blockDim.x) {",
                f"    if (!{_active('q')}) continue;",
                "    const long long id = ids[(q / k) * is0 + (q % k) * is1];",
                "    if (id < 0 || id >= experts) { bad = 1; continue; }",
                "    const long long t = id / local, at = (id % local) * world + me;",
                "    const int* c = gcounts + t * experts;",
                "    const long long lo = at ? (long long)c[at - 1] : 0, row = lo + (long long)eidx[q * es];",
                "    if (row < lo || row >= (long long)c[at]) { bad = 1; continue; }",
                "    rows[q] = (int)(t * a_rows + row);",
                "  }",
            ]
        else:  # the last row of the (rank, row) order naming (me, i, j) wins, as the reference's overwrite
            body += [
                "  for (long long e = threadIdx.x; e < world * a_rows; e += blockDim.x) {",
                "    const long long t = e / a_rows;",
                "    if (e % a_rows >= (long long)gcounts[t * experts + experts - 1]) continue;",
                "    const int* r = gassist + e * 3;",
                "    if (r[0] == me && r[1] >= 0 && r[1] < bs && r[2] >= 0 && r[2] < k)",
                "      acl_mc2_max(&rows[(long long)r[1] * k + r[2]], (int)e);",
                "  }",
            ]
        body += [
            "}",
            "__syncthreads();",
            "if (!bad)",
            "  for (long long q = threadIdx.x; q < per; q += blockDim.x)",
            f"    if ({_active('q')} && rows[q] < 0) bad = 1;",
            "__syncthreads();",
            "if (threadIdx.x == 0 && bad) { *flag = 1; *bad_out = 1; }",
        ]
        return source("mc2: combine rows and checks", "", self.kernel_name, params, body, _ATOMIC_MAX)


@dataclass(frozen=True)
class CombineSum:
    """``out[i, h] = Σ_j w[i, j]·y[rows[i·K + j], h]`` over the active copies, in double, rounded once (flag-gated)."""

    dtype: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_combine_sum", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = [f"const {st}* gy", "const float* w", "const int* rows", "const unsigned char* mask"]
        params += ["const int* bad", f"{st}* out"]
        params += [f"const long long {n}" for n in ("n", "bs", "k", "hidden", "ws0", "ws1", "ms0", "ms1", "os0", "os1")]
        y = load("gy[(long long)rows[i * k + j] * hidden + h]", ctype(self.dtype), _DOUBLE)
        body = [
            "if (*bad) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += step) {",
            "  const long long i = e / hidden, h = e % hidden;",
            "  double acc = 0.0;",
            "  for (long long j = 0; j < k; ++j) {",
            "    if (mask != 0 && mask[i * ms0 + j * ms1] == 0) continue;",
            f"    acc = __dadd_rn(acc, __dmul_rn((double)w[i * ws0 + j * ws1], {y}));",
            "  }",
            f"  out[i * os0 + h * os1] = {store_narrow('acc', self.dtype)};",
            "}",
        ]
        return source(f"mc2: combine sum into {self.dtype.short}", "", self.kernel_name, params, body, HELPERS)


@dataclass(frozen=True)
class DispatchRows:
    """expandXOut's rows, a block a row at a time (``ACL_MC2_ROWS=row``): ``out[p] = gx[pos[lo + p] / K]`` for the
    routed rows p < hi - lo, zeros after, in ``word``-byte words (16: rows contiguous and 16-byte aligned).

    The copy's source row is found once per row and block (one division), the row's words spread over the block's
    threads; the MoE family's RangeGather (the default) divides each word's flat index instead."""

    word: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mc2_dispatch_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = "acl_mc2_word16" if self.word == 16 else WORDS[self.word]
        params = [f"const {w}* __restrict__ src", "const int* __restrict__ pos", "const long long* bounds"]
        params += [f"{w}* __restrict__ out"]
        params += [f"const long long {n}" for n in ("top_k", "words", "a_rows", "srs", "ors")]
        body = [
            "const long long lo = bounds[0], routed = bounds[1] - bounds[0];",
            "for (long long p = blockIdx.x; p < a_rows; p += gridDim.x) {",
            f"  {w}* o = out + p * ors;",
            "  if (p < routed) {",
            f"    const {w}* s = src + ((long long)pos[lo + p] / top_k) * srs;",
            "    for (long long q = threadIdx.x; q < words; q += blockDim.x) o[q] = s[q];",
            "  } else {",
            f"    const {w} zero{{}};",
            "    for (long long q = threadIdx.x; q < words; q += blockDim.x) o[q] = zero;",
            "  }",
            "}",
        ]
        helpers = "struct alignas(16) acl_mc2_word16 { unsigned long long lo, hi; };\n"
        return source(f"mc2: dispatch rows, {self.word}-byte words", "", self.kernel_name, params, body, helpers)
