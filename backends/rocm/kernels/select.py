"""Kernel generators of the stream compaction behind Nonzero, NonzeroV2 and MaskedSelect.

Positions ``[0, n)`` of a shape (C order) are split into one chunk a block. :class:`Compact` ``count`` has each
block count the positions whose test element is non-zero; :class:`BlockScan` (one block) turns the block
counts into each block's first output row, in place, and stores the total (the count the runtime writes back
into out's view); :class:`Compact` ``scatter`` has each block walk its chunk again in tiles of ``items``
consecutive positions a thread, scan the per-thread counts in shared memory and write each hit at its row:
Nonzero's coordinates (int64, one column each) or MaskedSelect's element. Rows come out in position order,
with no atomics. The test is on the element's bits: an integer or bool element is a hit when non-zero, a float
element when any bit but the sign is set (so NaN is a hit and -0.0 is not). Both passes read a thread's ``items``
consecutive test elements as a tile; with ``vec`` (a contiguous test operand whose address is aligned to the load)
a whole tile inside the chunk is read by 8- or 16-byte loads. Nonzero's coordinates are divided out once a thread
and tile that has hits, then stepped along with the position.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import block_scan_lines

BLOCK: Final = 256
"""Threads of every compaction kernel."""
WORDS: Final = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
"""The unsigned word an element of each byte width is read and copied as."""
MAGNITUDE: Final = {1: "0x7fu", 2: "0x7fffu", 4: "0x7fffffffu", 8: "0x7fffffffffffffffull"}
"""Every bit but a float's sign, by byte width."""


@dataclass(frozen=True)
class Operand:
    """An element read at each position: its byte width, whether it is a float, whether it is C-contiguous."""

    item: int
    is_float: bool = False
    contiguous: bool = True


def _name(kind: str, key: object) -> str:
    return f"acl_select_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _source(comment: str, helpers: list[str], name: str, params: list[str], body: list[str]) -> str:
    return "\n".join(
        [
            PRELUDE,
            f"// {comment}",
            *helpers,
            f'extern "C" __global__ void __launch_bounds__({BLOCK}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


def _offset(ndim: int, row: int, operand: Operand) -> list[str]:
    """A device function ``off{row}(i)``: the element offset of position ``i`` through Meta's stride row ``row``."""
    head = f"ACL_DEV long long off{row}(const Meta& m, long long i) {{"
    if operand.contiguous:
        return [head, "  return i;", "}"]
    return [
        head,
        "  long long o = 0;",
        f"  for (int d = {ndim - 1}; d >= 0; --d) {{ o += (i % m.shape[d]) * m.stride[{row}][d]; i /= m.shape[d]; }}",
        "  return o;",
        "}",
    ]


@dataclass(frozen=True)
class Compact:
    """One pass over positions ``[0, m.n)`` of a rank-``ndim`` shape: ``count`` hits per block, or ``scatter`` them.

    ``value`` None writes ``coords`` int64 coordinates a hit (Nonzero; 0 for a 0-d self), else copies the hit's
    ``value`` element (MaskedSelect). ``items``: consecutive positions a thread takes per tile of the scatter.
    """

    phase: str
    ndim: int
    test: Operand
    value: Operand | None = None
    coords: int = 0
    items: int = 8
    vec: bool = False
    """Whole tiles read by :func:`vector_width`-byte loads (the test operand contiguous and aligned to it)."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name(self.phase, self)

    def _helpers(self) -> list[str]:
        word = WORDS[self.test.item]
        mask = MAGNITUDE[self.test.item] if self.test.is_float else f"(({word})~({word})0)"
        lines = [
            f"struct Meta {{ long long n; long long shape[{self.ndim}]; long long stride[2][{self.ndim}]; }};",
            *_offset(self.ndim, 0, self.test),
            "ACL_DEV bool hit(const Meta& m, const void* test, long long i) {",
            f"  return (((const {word}*)test)[off0(m, i)] & {mask}) != 0;",
            "}",
            *self._tile_hits(word, mask),
        ]
        if self.value is not None:
            lines += _offset(self.ndim, 1, self.value)
        return lines

    def _tile_hits(self, word: str, mask: str) -> list[str]:
        """``tile_hits(m, test, mine, last)``: bit q set where position ``mine + q`` (< ``last``) is a hit."""
        k = self.items
        lines = ["ACL_DEV unsigned int tile_hits(const Meta& m, const void* test, long long mine, long long last) {"]
        lines.append("  unsigned int hits = 0u;")
        if self.vec:
            per = vector_width(self.test.item, k) // self.test.item
            vec = f"AclVec<{word}, {per}>"
            lines += [
                f"  if (mine + {k} <= last) {{",
                f"    const {vec}* p = (const {vec}*)((const {word}*)test + mine);",
                f"    for (int v = 0; v < {k // per}; ++v) {{",
                f"      const {vec} w = p[v];",
                f"      for (int j = 0; j < {per}; ++j) hits |= ((w.v[j] & {mask}) != 0 ? 1u : 0u) << (v * {per} + j);",
                "    }",
                "    return hits;",
                "  }",
            ]
        lines += [
            f"  for (int q = 0; q < {k}; ++q) {{",
            "    const long long i = mine + q;",
            "    if (i < last && hit(m, test, i)) hits |= 1u << q;",
            "  }",
            "  return hits;",
            "}",
        ]
        return lines

    def _emit(self) -> list[str]:
        """C lines storing the hit at position ``i`` into row ``row`` of out."""
        if self.value is not None:
            word = WORDS[self.value.item]
            return [f"(({word}*)out)[row * out_row] = ((const {word}*)value)[off1(m, i)];"]
        if not self.coords:
            return []
        return [f"for (int d = 0; d < {self.ndim}; ++d) ((long long*)out)[row * out_row + d * out_col] = cd[d];"]

    def _coords_start(self) -> list[str]:
        """C lines: ``cd``, the coordinates of position ``mine`` (Nonzero only)."""
        if not self.coords:
            return []
        return [
            f"long long cd[{self.ndim}];",
            "long long r = mine;",
            f"for (int d = {self.ndim - 1}; d >= 0; --d) {{ cd[d] = r % m.shape[d]; r /= m.shape[d]; }}",
        ]

    def _coords_step(self) -> list[str]:
        """C lines: ``cd`` one position on (the last dimension fastest)."""
        if not self.coords:
            return []
        return [f"for (int d = {self.ndim - 1}; d >= 0; --d) {{ if (++cd[d] < m.shape[d]) break; cd[d] = 0; }}"]

    def source(self) -> str:
        """The complete kernel source."""
        if self.phase not in ("count", "scatter"):
            raise ValueError(f"unknown compaction phase {self.phase!r}")
        params = ["const Meta m", "const void* test", "const void* value", "void* out"]
        params += ["const long long out_row", "const long long out_col", "const long long chunk", "long long* blocks"]
        head = [
            "const int t = threadIdx.x;",
            "const long long first = (long long)blockIdx.x * chunk;",
            "const long long last = first + chunk < m.n ? first + chunk : m.n;",
        ]
        comment = f"compaction {self.phase}: {self!r}"
        return _source(comment, self._helpers(), self.kernel_name, params, head + self._body())

    def _body(self) -> list[str]:
        k = self.items
        if self.phase == "count":
            # element loads: lanes read consecutive elements (coalesced); vector loads: a thread's tile a load
            walk = [
                f"for (long long mine = first + (long long)t * {k}; mine < last; mine += {BLOCK * k}) {{",
                "  const unsigned int hits = tile_hits(m, test, mine, last);",
                f"  for (int q = 0; q < {k}; ++q) c += (hits >> q) & 1u;",
                "}",
            ]
            if not self.vec:
                walk = [f"for (long long i = first + t; i < last; i += {BLOCK}) c += hit(m, test, i) ? 1 : 0;"]
            return [
                f"__shared__ long long part[{BLOCK}];",
                "long long c = 0;",
                *walk,
                "part[t] = c;",
                "__syncthreads();",
                f"for (int half = {BLOCK // 2}; half > 0; half >>= 1) {{",
                "  if (t < half) part[t] += part[t + half];",
                "  __syncthreads();",
                "}",
                "if (t == 0) blocks[blockIdx.x] = part[0];",
            ]
        return [
            f"__shared__ long long scan[{BLOCK}];",
            "long long base = blocks[blockIdx.x];  // this block's first row (BlockScan)",
            f"for (long long tile = first; tile < last; tile += {BLOCK * k}) {{",
            f"  const long long mine = tile + (long long)t * {k};",
            "  const unsigned int hits = tile_hits(m, test, mine, last);",
            "  long long c = 0;",
            f"  for (int q = 0; q < {k}; ++q) c += (hits >> q) & 1u;",
            "  scan[t] = c;",
            "  __syncthreads();",
            *("  " + line for line in block_scan_lines("scan", "t", BLOCK)),
            "  if (hits) {",
            "    long long row = base + scan[t] - c;",
            *("    " + line for line in self._coords_start()),
            f"    for (int q = 0; q < {k}; ++q) {{",
            "      if ((hits >> q) & 1u) {",
            "        const long long i = mine + q;",
            *("        " + line for line in self._emit()),
            "        ++row;",
            "      }",
            *("      " + line for line in self._coords_step()),
            "    }",
            "  }",
            f"  base += scan[{BLOCK - 1}];",
            "  __syncthreads();  // every thread read the scan before the next tile rewrites it",
            "}",
        ]


def vector_width(item: int, items: int) -> int:
    """Bytes of one load of a tile of ``items`` elements of ``item`` bytes: up to 16, at most the tile."""
    return min(16, item * items)


@dataclass(frozen=True)
class BlockScan:
    """One block: ``blocks[0..g)`` (hit counts) become exclusive prefix sums in place; ``*total`` their sum."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("scan", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["long long* blocks", "const long long g", "long long* total"]
        body = [
            f"__shared__ long long part[{BLOCK}];",
            "const int t = threadIdx.x;",
            f"const long long per = (g + {BLOCK - 1}) / {BLOCK};  // a contiguous run of counts a thread",
            "const long long first = t * per, last = first + per < g ? first + per : g;",
            "long long sum = 0;",
            "for (long long j = first; j < last; ++j) sum += blocks[j];",
            "part[t] = sum;",
            "__syncthreads();",
            *block_scan_lines("part", "t", BLOCK),
            "long long run = part[t] - sum;",
            "for (long long j = first; j < last; ++j) { const long long v = blocks[j]; blocks[j] = run; run += v; }",
            f"if (t == {BLOCK - 1}) *total = part[{BLOCK - 1}];",
        ]
        return _source("compaction: block counts to first rows", [], self.kernel_name, params, body)
