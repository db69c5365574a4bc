"""Kernel generators of repeat-interleave with a repeats tensor, its backward, and EmbeddingDenseBackward.

:class:`RepeatScan` turns the repeat counts into start positions in one block (a chunk a thread, the
chunk sums scanned in shared memory; or coalesced tiles scanned by warp shuffles) and sets the flag on a
negative count or a total other than the caller's; :class:`RepeatChunks` does it a chunk a block in two launches
(chunk totals, then each chunk's scan from the totals ahead of it), optionally filling a row index (out slice to
group). :class:`RepeatGather` finds each output element's source by
binary search over the starts and copies its storage word (or, for RepeatInterleaveTensor, writes the group
number); :class:`RepeatRows` instead reads each source slice once and stores it into its group's out slices (or,
indexed, loads each out slice's source through the row index).
:class:`GroupSum`
adds each group's slices in float32, in order. :class:`EmbedKeys` checks the indices and writes (index,
position) keys that the row sorter orders; :class:`RowBounds` marks where each weight row's run of sorted
keys begins and ends, and :class:`EmbedRows` gives each weight row to one block, which sums the run's
grad rows in position order in float32 (16 bytes of columns a thread where rows allow): deterministic,
no atomics. Every kernel after the check reads the flag first and writes nothing when it is set.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.movement import HELPERS, load_wide, word
from acl_rocm.kernels.reduction import SHUFFLE, block_scan_lines
from acl_rocm.kernels.sort import kernel_name, meta, row_offsets, source

SCAN_THREADS: Final = 256
SIGN: Final = "0x8000000000000000ull"


def shape_struct(name: str, ndim: int) -> str:
    """A struct of one view's ``shape[ndim]`` and ``stride[ndim]`` (``long long``)."""
    return f"struct {name} {{ long long shape[{ndim}]; long long stride[{ndim}]; }};"


def unravel(struct: str, ndim: int, flat: str, out: str) -> list[str]:
    """C lines setting ``out`` to the offset of C-order element ``flat`` of the view ``struct``."""
    return [
        f"long long {out} = 0;",
        f"{{ long long r = {flat};",
        f"  for (int d = {ndim - 1}; d >= 0; --d) {{ {out} += (r % {struct}.shape[d]) * {struct}.stride[d]; "
        f"r /= {struct}.shape[d]; }} }}",
    ]


def _float(dtype: D, expr: str) -> str:
    return ctype(dtype).decode.format(x=expr)


def _store(dtype: D, expr: str) -> str:
    return ctype(dtype).encode.format(v=expr)


@dataclass(frozen=True)
class RepeatScan:
    """starts[g] = repeats[0] + ... + repeats[g - 1] for g in [0, count], in one block; flag on a bad count.

    Each thread sums a contiguous chunk, the block scans the chunk sums, and each thread writes its chunk's starts.
    """

    repeats: D
    items: int = 0
    """With ``items`` = K > 0 the tiled layout: tiles of K x SCAN_THREADS counts, thread t the K adjacent counts at
    t * K (a warp's loads one contiguous run), scanned by warp shuffles and one shared exchange a tile."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("repeat_scan", self)

    def source(self) -> str:
        """The complete kernel source."""
        rt = ctype(self.repeats).storage
        params = [f"const {rt}* repeats", "const long long stride", "const long long count", "const long long expect"]
        params += ["long long* starts", "int* flag"]
        if self.items:
            comment = f"repeat counts to starts, tiled ({self.repeats.short})"
            return source(comment, "", self.kernel_name, params, self._tiled(), SHUFFLE)
        body = [
            f"__shared__ long long part[{SCAN_THREADS}];",
            "const int t = threadIdx.x;",
            f"const long long per = (count + {SCAN_THREADS - 1}) / {SCAN_THREADS};  // a contiguous chunk a thread",
            "const long long first = t * per, last = first + per < count ? first + per : count;",
            "long long sum = 0;",
            "bool bad = false;",
            "for (long long g = first; g < last; ++g) {",
            "  const long long v = (long long)repeats[g * stride];",
            "  bad = bad || v < 0;",
            "  sum += v;",
            "}",
            "if (bad) *flag = 1;",
            "part[t] = sum;",
            "__syncthreads();",
            *block_scan_lines("part", "t", SCAN_THREADS),  # the chunks' running sums
            "long long run = part[t] - sum;",
            "for (long long g = first; g < last; ++g) {",
            "  starts[g] = run;",
            "  run += (long long)repeats[g * stride];",
            "}",
            f"if (t == {SCAN_THREADS - 1}) {{",
            f"  starts[count] = part[{SCAN_THREADS - 1}];",
            f"  if (part[{SCAN_THREADS - 1}] != expect) *flag = 1;",
            "}",
        ]
        return source(f"repeat counts to starts ({self.repeats.short})", "", self.kernel_name, params, body)

    def _tiled(self) -> list[str]:
        """The tiled layout's body: :func:`tiled_scan` over every count, then the total and its check."""
        return [
            *tiled_scan(self.items, "0", "count", "0"),
            "if (bad) *flag = 1;",
            "if (t == 0) {",
            "  starts[count] = carry;",
            "  if (carry != expect) *flag = 1;",
            "}",
        ]


def tiled_scan(k: int, begin: str, end: str, carry: str, write: bool = True, fill: bool = False) -> list[str]:
    """C lines scanning counts [begin, end) (``repeats[g * stride]``) in tiles of ``k`` x SCAN_THREADS, from ``carry``.

    Per tile, suffix sums by ``ACL_SHFL_DOWN`` give each lane's exclusive prefix within its warp (warp total minus the
    lane's inclusive suffix), warp totals meet in shared memory. Leaves ``carry`` (every thread: ``carry`` plus the
    counts' sum) and ``bad`` (a negative count seen by this thread); ``write``: ``starts[g]``; ``fill``: also
    ``rows[j] = g`` for each out slice j of group g inside [0, expect).
    """
    tile = k * SCAN_THREADS
    lines = [
        f"__shared__ long long wsum[2][{SCAN_THREADS}];  // a tile's warp totals (two tiles alternate)",
        "const int t = threadIdx.x, lane = t % ACL_WARP_SIZE, warp = t / ACL_WARP_SIZE;",
        f"const int warps = {SCAN_THREADS} / ACL_WARP_SIZE;",
        f"long long carry = {carry};",
        "bool bad = false;",
        f"for (long long base = {begin}, parity = 0; base < {end}; base += {tile}, parity ^= 1) {{",
        f"  long long v[{k}], sum = 0;",
        "  #pragma unroll",
        f"  for (int q = 0; q < {k}; ++q) {{",
        f"    const long long g = base + (long long)t * {k} + q;",
        f"    v[q] = g < {end} ? (long long)repeats[g * stride] : 0;",
        "    bad = bad || v[q] < 0;",
        "    sum += v[q];",
        "  }",
        "  long long suffix = sum;  // inclusive suffix sum over this warp's lanes",
        "  for (int off = 1; off < ACL_WARP_SIZE; off *= 2) {",
        "    const long long y = ACL_SHFL_DOWN(suffix, off);",
        "    if (lane + off < ACL_WARP_SIZE) suffix += y;",
        "  }",
        "  if (lane == 0) wsum[parity][warp] = suffix;",
        "  __syncthreads();",
        "  long long run = carry, tile_total = 0;",
        "  for (int w = 0; w < warps; ++w) {",
        "    if (w < warp) run += wsum[parity][w];",
        "    tile_total += wsum[parity][w];",
        "  }",
        "  run += wsum[parity][warp] - suffix;  // the lanes before this one in its warp",
    ]
    if write:
        lines += [
            "  #pragma unroll",
            f"  for (int q = 0; q < {k}; ++q) {{",
            f"    const long long g = base + (long long)t * {k} + q;",
            f"    if (g < {end}) starts[g] = run;",
        ]
        if fill:  # a group's out slices by its thread: a huge single count is filled serially
            lines += [
                f"    if (g < {end}) {{",
                "      const long long j1 = run + v[q] < expect ? run + v[q] : expect;",
                "      for (long long j = run > 0 ? run : 0; j < j1; ++j) rows[j] = (int)g;",
                "    }",
            ]
        lines += ["    run += v[q];", "  }"]
    lines += ["  carry += tile_total;", "}"]
    return lines


@dataclass(frozen=True)
class RepeatChunks:
    """The multi-block scan of the counts: chunks of ``chunk`` counts (whole tiles of ``items`` x SCAN_THREADS), a
    block each, in two launches.

    ``totals``: block c writes the sum of chunk c to ``totals[c]`` (flag on a negative count). Otherwise block c adds
    ``totals[0 .. c)`` (a warp-shuffle block reduce) and scans its chunk from there into the global ``starts``; the last
    block writes ``starts[count]`` and checks it against ``expect``. ``fill``: the scan also writes ``rows[j] = g``
    (int) for each out slice j of group g (the row index an output-major copy reads).
    """

    repeats: D
    items: int
    chunk: int
    totals: bool
    fill: bool = False
    pdl: bool = False
    """Launched programmatically: wait for the predecessor, then let the successor launch."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("repeat_chunks", self)

    def source(self) -> str:
        """The complete kernel source."""
        rt = ctype(self.repeats).storage
        params = [f"const {rt}* repeats", "const long long stride", "const long long count", "const long long expect"]
        params += ["long long* totals", "long long* starts", "int* rows", "int* flag"]
        c = self.chunk
        begin, end = f"(long long)blockIdx.x * {c}", f"(long long)blockIdx.x * {c} + {c} < count ? "
        end += f"(long long)blockIdx.x * {c} + {c} : count"
        body = ["ACL_PDL_WAIT();", "ACL_PDL_LAUNCH_DEPENDENTS();"] if self.pdl else []
        body += ["const long long first = " + begin + ", last = " + end + ";"]
        if self.totals:
            body += [*tiled_scan(self.items, "first", "last", "0", write=False)]
            body += ["if (bad) *flag = 1;", "if (t == 0) totals[blockIdx.x] = carry;"]
            comment = f"repeat counts: chunk totals ({self.repeats.short})"
        else:
            body += [
                f"__shared__ long long wpart[{SCAN_THREADS} / ACL_WARP_SIZE];",
                "long long before = 0;  // the chunks ahead of this one",
                f"for (long long q = threadIdx.x; q < blockIdx.x; q += {SCAN_THREADS}) before += totals[q];",
                "for (int off = ACL_WARP_SIZE / 2; off > 0; off /= 2) before += ACL_SHFL_DOWN(before, off);",
                "if (threadIdx.x % ACL_WARP_SIZE == 0) wpart[threadIdx.x / ACL_WARP_SIZE] = before;",
                "__syncthreads();",
                "before = 0;",
                f"for (int w = 0; w < {SCAN_THREADS} / ACL_WARP_SIZE; ++w) before += wpart[w];",
                *tiled_scan(self.items, "first", "last", "before", fill=self.fill),
                "if (t == 0 && blockIdx.x == gridDim.x - 1) {",
                "  starts[count] = carry;",
                "  if (carry != expect) *flag = 1;",
                "}",
            ]
            comment = f"repeat counts to starts by chunks{', row index' if self.fill else ''} ({self.repeats.short})"
        return source(comment, "", self.kernel_name, params, body, SHUFFLE)


@dataclass(frozen=True)
class RepeatGather:
    """out element (o, j, i) of an (outer, total, inner) space = source element (o, g, i), starts[g] <= j < starts[g+1].

    Meta: out's view (row 0). ``Src``: self's view, whose C-order element (o * groups + g) * inner + i is read.
    ``numbering``: RepeatInterleaveTensor, out = g in out's integer dtype (``source`` is then that dtype).
    """

    itemsize: int
    out_ndim: int
    src_ndim: int
    numbering: D | None = None

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("repeat_gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize) if self.numbering is None else ctype(self.numbering).storage
        params = ["const Meta m", "const Src s", f"const {w}* src", f"{w}* dst", "const long long* starts"]
        params += ["const long long groups", "const long long total", "const long long inner", "const int* flag"]
        body = [
            "if (*flag) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.out_ndim, 1, "q")),
            "  const long long i = q % inner, j = (q / inner) % total, o = q / inner / total;",
            "  long long lo = 0, hi = groups - 1;  // the last group starting at or before j",
            "  while (lo < hi) {",
            "    const long long mid = (lo + hi + 1) / 2;",
            "    if (starts[mid] <= j) lo = mid; else hi = mid - 1;",
            "  }",
        ]
        if self.numbering is None:
            body += ["  " + line for line in unravel("s", self.src_ndim, "(o * groups + lo) * inner + i", "so")]
            body.append("  dst[o0] = src[so];")
        else:
            body.append(f"  dst[o0] = ({w})lo;")
        body.append("}")
        structs = "\n".join([meta(self.out_ndim, 1), shape_struct("Src", self.src_ndim)])
        return source("repeat-interleave gather", structs, self.kernel_name, params, body, HELPERS)


@dataclass(frozen=True)
class RepeatRows:
    """out slice (o, j, :) = source slice (o, g, :) for starts[g] <= j < starts[g+1], a source slice read once.

    A unit is (o, g, segment): ``lanes`` adjacent threads (a power of two, at most a warp) load the segment's
    ``lanes * unroll`` items of source slice (o, g), every load issued before the first store, then store them
    into each of the group's out slices. Slices are single strided runs (``sis`` / ``dis`` items apart); ``Src`` /
    ``Dst`` are the views whose C-order element (o * groups + g) * inner (source) and (o * total + j0) * inner (out)
    starts a slice, and out slice j + 1 starts ``jstride`` items after slice j.
    """

    itemsize: int
    src_ndim: int
    out_ndim: int
    lanes: int
    unroll: int
    direct: bool = False
    """``Src`` / ``Dst`` are 2-d, (outer, groups) and (outer, total): a slice starts at o * stride[0] + g (or j0) *
    stride[1], no unravelling."""
    narrow: bool = False
    """Units fit 32 bits: the unit's (o, g, segment) split in 32-bit unsigned arithmetic."""
    indexed: bool = False
    """Output-major: a unit is (o, j, segment) over out slices, its group ``rows[j]`` (the row index
    :class:`RepeatChunks` fills), each load stored once; ``units`` counts outer x total x segs."""
    pdl: bool = False
    """Launched programmatically: wait for the predecessor (the scan) before the first read."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("repeat_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        w, per = word(self.itemsize), self.lanes * self.unroll
        index = "const int* rows" if self.indexed else "const long long* starts"
        params = ["const Src s", "const Dst ov", f"const {w}* src", f"{w}* dst", index]
        params += [f"const long long {n}" for n in ("groups", "total", "inner", "segs", "units", "sis", "dis")]
        params += ["const long long jstride", "const int* flag"]
        body = [
            *(["ACL_PDL_WAIT();"] if self.pdl else []),
            "if (*flag) return;",
            f"const long long lane = (long long)(threadIdx.x % {self.lanes}u);",
            f"const long long step = (long long)gridDim.x * (blockDim.x / {self.lanes}u);",
            f"for (long long u = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / {self.lanes}; u < units;"
            " u += step) {",
            *("  " + line for line in self._unit(per)),
            f"  {w} v[{self.unroll}];",
            "  #pragma unroll",
            f"  for (int k = 0; k < {self.unroll}; ++k) {{",
            f"    const long long i = first + (long long)k * {self.lanes};",
            "    if (i < inner) v[k] = src[so + i * sis];",
            "  }",
            "  for (long long j = j0; j < j1; ++j, dn += jstride) {",
            "    #pragma unroll",
            f"    for (int k = 0; k < {self.unroll}; ++k) {{",
            f"      const long long i = first + (long long)k * {self.lanes};",
            "      if (i < inner) dst[dn + i * dis] = v[k];",
            "    }",
            "  }",
            "}",
        ]
        structs = "\n".join([shape_struct("Src", self.src_ndim), shape_struct("Dst", self.out_ndim)])
        comment = "repeat-interleave rows, a source slice read once"
        if self.direct:
            structs = "\n".join([shape_struct("Src", 2), shape_struct("Dst", 2)])
        return source(comment, structs, self.kernel_name, params, body, HELPERS)

    def _unit(self, per: int) -> list[str]:
        """Lines splitting unit ``u`` into (o, g, segment): ``j0`` / ``j1`` its out slices, ``first`` its lane's first
        item, ``so`` / ``dn`` where its source slice and first out slice start."""
        x, span = ("j", "total") if self.indexed else ("g", "groups")  # what a unit enumerates
        if self.narrow:
            split = [
                "  const unsigned uu = (unsigned)u, us = (unsigned)segs, og = uu / us;",
                f"  const long long {x} = (long long)(og % (unsigned){span}), o = (long long)(og / (unsigned){span});",
                f"  const long long first = (long long)(uu % us) * {per} + lane;",
            ]
        else:
            split = [
                f"  const long long og = u / segs, {x} = og % {span}, o = og / {span};",
                f"  const long long first = (u % segs) * {per} + lane;",
            ]
        lines = [line[2:] for line in split]
        if self.indexed:
            lines.append("const long long g = rows[j], j0 = j, j1 = j + 1;")
        else:
            lines += ["const long long j0 = starts[g], j1 = starts[g + 1];", "if (j1 <= j0) continue;"]
        if self.direct:
            return [
                *lines,
                "const long long so = o * s.stride[0] + g * s.stride[1];",
                "long long dn = o * ov.stride[0] + j0 * ov.stride[1];",
            ]
        return [
            *lines,
            *unravel("s", self.src_ndim, "(o * groups + g) * inner", "so"),
            *unravel("ov", self.out_ndim, "(o * total + j0) * inner", "dn"),
        ]


@dataclass(frozen=True)
class GroupSum:
    """out element (o, g, i) = sum over j in [starts[g], starts[g+1]) of y element (o, j, i), in float32, in order.

    Meta: out's view (row 0; any shape holding outer x groups x inner elements). ``Src``: yGrad's view.
    """

    dtype: D
    out_ndim: int
    src_ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("group_sum", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", "const Src s", f"const {st}* y", f"{st}* out", "const long long* starts"]
        params += ["const long long groups", "const long long length", "const long long inner", "const int* flag"]
        body = [
            "if (*flag) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.out_ndim, 1, "q")),
            "  const long long i = q % inner, g = (q / inner) % groups, o = q / inner / groups;",
            "  float acc = 0.0f;",
            "  for (long long j = starts[g]; j < starts[g + 1]; ++j) {",
            *("    " + line for line in unravel("s", self.src_ndim, "(o * length + j) * inner + i", "yo")),
            f"    acc += {_float(self.dtype, 'y[yo]')};",
            "  }",
            f"  out[o0] = {_store(self.dtype, 'acc')};",
            "}",
        ]
        structs = "\n".join([meta(self.out_ndim, 1), shape_struct("Src", self.src_ndim)])
        return source(
            f"repeat-interleave backward: group sums ({self.dtype.short})", structs, self.kernel_name, params, body
        )


@dataclass(frozen=True)
class EmbedKeys:
    """keys[q] = indices element q (sign bit flipped), pos[q] = q; flag on a value outside [0, weights)."""

    index: D
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("embed_keys", self)

    def source(self) -> str:
        """The complete kernel source."""
        c = ctype(self.index)
        params = ["const Meta m", f"const {c.storage}* indices", "const long long weights"]
        params += ["unsigned long long* keys", "int* pos", "int* flag"]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.ndim, 1, "q")),
        ]
        if c.kind == "float":  # truncation toward zero; NaN and values past int64 are out of range too
            body += [
                f"  const double d = {load_wide('indices[o0]', self.index)};",
                "  const bool ok = d > -1.0 && d < (double)weights;",
                "  const long long v = ok ? (long long)d : 0;",
            ]
        else:
            body += [
                f"  const long long v = (long long){load_wide('indices[o0]', self.index)};",
                "  const bool ok = v >= 0 && v < weights;",
            ]
        body += [
            "  if (!ok) *flag = 1;",
            f"  keys[q] = (unsigned long long)(ok ? v : 0) ^ {SIGN};",
            "  pos[q] = (int)q;",
            "}",
        ]
        return source(
            f"embedding backward: keys of {self.index.short} indices",
            meta(self.ndim, 1),
            self.kernel_name,
            params,
            body,
            HELPERS,
        )


@dataclass(frozen=True)
class RowBounds:
    """For each run of equal sorted keys (one weight row w): first[w] = its start, last[w] = its end (others stay 0)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("row_bounds", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const unsigned long long* keys", "const long long n", "int* first", "int* last", "const int* flag"]
        body = [
            "if (*flag) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long u = (long long)blockIdx.x * blockDim.x + threadIdx.x; u < n; u += step) {",
            "  const unsigned long long k = keys[u];",
            f"  const long long w = (long long)(k ^ {SIGN});",
            "  if (u == 0 || keys[u - 1] != k) first[w] = (int)u;",
            "  if (u + 1 == n || keys[u + 1] != k) last[w] = (int)(u + 1);",
            "}",
        ]
        return source("embedding backward: each weight row's run of sorted indices", "", self.kernel_name, params, body)


VECTOR = "struct alignas(16) acl_is_vec { unsigned int w[4]; };"
"""Sixteen bytes moved by one load or store."""


@dataclass(frozen=True)
class EmbedRows:
    """One block per weight row w: out[w, :] = sum of grad rows whose index is w (its sorted run, position order).

    ``Src``: grad's leading dims (a sorted position is a C-order row there); scale: each term times 1 / run length.
    ``vector``: each thread moves 16 bytes of columns a step (contiguous, aligned rows), else one column.
    """

    dtype: D
    lead_ndim: int
    vector: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("embed_rows", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        width = 16 // (self.dtype.info.storage_bits // 8) if self.vector else 1
        params = ["const Src s", f"const {st}* grad", "const long long grad_col", f"{st}* out"]
        params += ["const long long out_row", "const long long out_col", "const int* first", "const int* last"]
        params += ["const int* pos", "const long long weights", "const long long hidden", "const long long padding"]
        params += ["const int scale", "const int* flag"]
        body = [
            "if (*flag) return;",
            "for (long long w = blockIdx.x; w < weights; w += gridDim.x) {",
            "  const long long lo = first[w], hi = w == padding ? lo : (long long)last[w];  // padding: no gradient",
            "  const float f = scale && hi > lo ? 1.0f / (float)(hi - lo) : 1.0f;",
            f"  const long long stride = (long long)blockDim.x * {width};",
            f"  for (long long c = (long long)threadIdx.x * {width}; c < hidden; c += stride) {{",
            f"    float acc[{width}];",
            f"    for (int k = 0; k < {width}; ++k) acc[k] = 0.0f;",
            "    for (long long u = lo; u < hi; ++u) {",
            *("      " + line for line in unravel("s", self.lead_ndim, "(long long)pos[u]", "go")),
        ]
        if self.vector:
            body += [
                "      const acl_is_vec raw = *reinterpret_cast<const acl_is_vec*>(grad + go + c);",
                f"      const {st}* e = reinterpret_cast<const {st}*>(&raw);",
                f"      for (int k = 0; k < {width}; ++k) acc[k] += {_float(self.dtype, 'e[k]')} * f;",
                "    }",
                "    acl_is_vec packed;",
                f"    {st}* o = reinterpret_cast<{st}*>(&packed);",
                f"    for (int k = 0; k < {width}; ++k) o[k] = {_store(self.dtype, 'acc[k]')};",
                "    *reinterpret_cast<acl_is_vec*>(out + w * out_row + c) = packed;",
                "  }",
            ]
        else:
            body += [
                f"      acc[0] += {_float(self.dtype, 'grad[go + c * grad_col]')} * f;",
                "    }",
                f"    out[w * out_row + c * out_col] = {_store(self.dtype, 'acc[0]')};",
                "  }",
            ]
        body.append("}")
        structs = shape_struct("Src", self.lead_ndim)
        helpers = VECTOR if self.vector else ""
        return source(
            f"embedding backward: rows ({self.dtype.short})", structs, self.kernel_name, params, body, helpers
        )
