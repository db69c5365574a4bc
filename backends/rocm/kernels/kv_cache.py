"""Kernel generators of the KV-cache family: paged scatter and gather, KvRmsNormRopeCache, RopeWithSinCosCache.

Every kernel takes its sizes and strides (in elements) in one ``Meta`` struct of ``long long`` fields
passed by value, and the device check flag last: index values are range-checked by a launch before
(``acl_rocm.kernels.movement.Check`` or the checks here), and the kernels that write read the flag
first and write nothing once it is set, so a refused call leaves the caches as they were (161002 at
synchronisation). Copies move storage words of the element's size (exact for every dtype); the math
runs in double and is rounded once into the stored dtype (``store_narrow``), as the reference does.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, fields
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.movement import HELPERS, InlineChecks, flag_param, load_wide, store_narrow, word
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
"""Threads per block of every kernel here (KvRmsNormRopeCache's block reduction assumes it)."""


def _name(kind: str, key: object) -> str:
    return f"acl_kv_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _struct(cls: type) -> str:
    """The C ``Meta`` of a dataclass of ints and int tuples (arrays), fields in order."""
    members = []
    for f in fields(cls):
        default = f.default
        members.append(f"long long {f.name}[{len(default)}];" if isinstance(default, tuple) else f"long long {f.name};")
    return "struct KvMeta { " + " ".join(members) + " };"


def values_of(meta: object) -> list[int]:
    """A meta dataclass flattened to the ints of its C struct, in order."""
    flat: list[int] = []
    for f in fields(meta):  # type: ignore[arg-type]
        item = getattr(meta, f.name)
        flat.extend(item) if isinstance(item, tuple) else flat.append(item)
    return [int(v) for v in flat]


def _source(comment: str, meta: str, name: str, params: list[str], body: list[str]) -> str:
    return "\n".join(
        [
            PRELUDE,
            HELPERS,
            f"// kv_cache: {comment}",
            meta,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


GRID_LOOP = [
    "const long long step = (long long)gridDim.x * blockDim.x;",
    "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m.n; i += step) {",
]


# ----------------------------------------------------------------------------- paged scatter
@dataclass(frozen=True)
class ScatterMeta:
    """Sizes and strides of one paged scatter: ``n`` = tokens x heads x (wk + wv)."""

    n: int = 0
    heads: int = 1
    wk: int = 0
    wv: int = 0
    block_size: int = 1
    slot_stride: int = 0
    key: tuple[int, int, int] = (0, 0, 0)
    key_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    value: tuple[int, int, int] = (0, 0, 0)
    value_cache: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class PagedScatter:
    """key (and value) rows of token t to the caches' slot ``slots[t]`` (-1 skipped), one element per thread.

    ``inline``: every block range-checks the slots itself before its first write (:class:`InlineChecks`: a
    decode step's few slots need no Check launch of their own); otherwise a Check launch ran before.
    """

    itemsize: int
    index: D
    inline: bool = False
    vec: int = 1
    """Elements a thread moves as one access (``vec`` x ``itemsize`` <= 16 bytes): ``n``, ``wk`` and ``wv`` then
    count vectors, the rows' last strides are 1 and every other stride and address a multiple of ``vec``."""

    row: bool = False
    """One block per token (grid-stride over tokens): the slot is read once a block, a thread's first element is
    loaded before the slot checks resolve, and the element index splits with 32-bit math within the token."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("scatter", self)

    @property
    def checks(self) -> InlineChecks | None:
        """The slots' inline range check (None: a Check launch ran before)."""
        return InlineChecks((self.index,)) if self.inline else None

    def _copy(self, w: str) -> list[str]:
        """The body's two copies: element ``j`` (vector ``j`` of ``vec`` elements) of the key or value row."""
        if self.vec > 1:  # the rows' last strides are 1: vector j starts at element j * vec
            v, n = f"AclVec<{w}, {self.vec}>", self.vec
            key_to = f"blk * m.key_cache[0] + off * m.key_cache[1] + h * m.key_cache[2] + j * {n}"
            value_to = f"blk * m.value_cache[0] + off * m.value_cache[1] + h * m.value_cache[2] + jv * {n}"
            return [
                "  if (j < m.wk) {",
                f"    *reinterpret_cast<{v}*>(key_cache + ({key_to})) =",
                f"        *reinterpret_cast<const {v}*>(key + (t * m.key[0] + h * m.key[1] + j * {n}));",
                "  } else {",
                "    const long long jv = j - m.wk;",
                f"    *reinterpret_cast<{v}*>(value_cache + ({value_to})) =",
                f"        *reinterpret_cast<const {v}*>(value + (t * m.value[0] + h * m.value[1] + jv * {n}));",
                "  }",
            ]
        return [
            "  if (j < m.wk) {",
            "    key_cache[blk * m.key_cache[0] + off * m.key_cache[1] + h * m.key_cache[2] + j * m.key_cache[3]] =",
            "        key[t * m.key[0] + h * m.key[1] + j * m.key[2]];",
            "  } else {",
            "    const long long jv = j - m.wk;",
            "    value_cache[blk * m.value_cache[0] + off * m.value_cache[1] + h * m.value_cache[2]",
            "                + jv * m.value_cache[3]] = value[t * m.value[0] + h * m.value[1] + jv * m.value[2]];",
            "  }",
        ]

    def _row_body(self, w: str) -> list[str]:
        """The ``row`` kernel's body: block ``b`` takes tokens b, b + gridDim.x, ...; ``m.n`` counts elements."""
        v = f"AclVec<{w}, {self.vec}>" if self.vec > 1 else w
        n = self.vec

        def src(t: str, e: str) -> str:
            return (
                f"({e} < m.wk ? *reinterpret_cast<const {v}*>(key + ({t} * m.key[0] + h * m.key[1] + {e} * {n}))"
                f" : *reinterpret_cast<const {v}*>(value + ({t} * m.value[0] + h * m.value[1] + ({e} - m.wk) * {n})))"
                if n > 1
                else f"({e} < m.wk ? key[{t} * m.key[0] + h * m.key[1] + {e} * m.key[2]]"
                f" : value[{t} * m.value[0] + h * m.value[1] + ({e} - m.wk) * m.value[2]])"
            )

        last_k, last_v = ("", "") if n > 1 else (" * m.key_cache[3]", " * m.value_cache[3]")
        split = [
            "    const unsigned h = e / width, j = e % width;",
        ]
        checks = ["if (*flag) return;"] if self.checks is None else self.checks.prologue()
        return [
            "const unsigned width = (unsigned)(m.wk + m.wv);  // vectors (elements) of one head's key + value",
            "const unsigned per = (unsigned)m.heads * width;  // of one token",
            "const long long tokens = m.n / (long long)per;",
            "long long t = blockIdx.x;",
            "// the first token's slot and this thread's first vector are in flight while the checks run",
            "long long s = t < tokens ? (long long)slots[t * m.slot_stride] : -1;",
            f"{v} first{{}};",
            "if (t < tokens && threadIdx.x < per) {",
            "  const unsigned e = threadIdx.x, h = e / width, j = e % width;",
            f"  first = {src('t', 'j')};",
            "}",
            *checks,
            "for (; t < tokens; t += gridDim.x) {",
            "  if (t != (long long)blockIdx.x) s = (long long)slots[t * m.slot_stride];",
            "  if (s < 0) continue;  // -1: a padding token (other values were refused by the check)",
            "  const long long blk = s / m.block_size, off = s % m.block_size;  // once a block and token",
            "  for (unsigned e = threadIdx.x; e < per; e += blockDim.x) {",
            *split,
            f"    const {v} x = (t == (long long)blockIdx.x && e == threadIdx.x) ? first : {src('t', 'j')};",
            "    if (j < m.wk) {",
            f"      *reinterpret_cast<{v}*>(key_cache + (blk * m.key_cache[0] + off * m.key_cache[1]"
            f" + h * m.key_cache[2] + (long long)j * {n if n > 1 else 1}{last_k})) = x;",
            "    } else {",
            f"      *reinterpret_cast<{v}*>(value_cache + (blk * m.value_cache[0] + off * m.value_cache[1]"
            f" + h * m.value_cache[2] + (long long)(j - m.wk) * {n if n > 1 else 1}{last_v})) = x;",
            "    }",
            "  }",
            "}",
        ]

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        params = [
            "const KvMeta m",
            f"const {ctype(self.index).storage}* __restrict__ slots",
            f"const {w}* __restrict__ key",
            f"{w}* key_cache",
            f"const {w}* __restrict__ value",
            f"{w}* value_cache",
            *flag_param(self.checks),
        ]
        body = [
            *(["if (*flag) return;"] if self.checks is None else self.checks.prologue()),
            "const long long width = m.wk + m.wv;",
            "const bool narrow = m.n <= 0xffffffffLL;  // every element index fits 32 bits",
            *GRID_LOOP,
            "  long long j, h, t;  // 32-bit division where the values fit (64-bit is a long software sequence)",
            "  if (narrow) {",
            "    const unsigned u = (unsigned)i, rest = u / (unsigned)width;",
            "    j = u % (unsigned)width;",
            "    h = rest % (unsigned)m.heads;",
            "    t = rest / (unsigned)m.heads;",
            "  } else {",
            "    j = i % width;",
            "    const long long rest = i / width;",
            "    h = rest % m.heads;",
            "    t = rest / m.heads;",
            "  }",
            "  const long long s = (long long)slots[t * m.slot_stride];",
            "  if (s < 0) continue;  // -1: a padding token (other values were refused by the check)",
            "  long long blk, off;",
            "  if (s <= 0xffffffffLL && m.block_size <= 0xffffffffLL) {",
            "    blk = (unsigned)s / (unsigned)m.block_size;",
            "    off = (unsigned)s % (unsigned)m.block_size;",
            "  } else {",
            "    blk = s / m.block_size;",
            "    off = s % m.block_size;",
            "  }",
            *self._copy(w),
            "}",
        ]
        if self.row:
            body = self._row_body(w)
        what = f"paged scatter of {self.itemsize}-byte elements" + (" (slots checked inline)" if self.inline else "")
        if self.vec > 1:
            what += f", {self.vec} a thread as one {self.vec * self.itemsize}-byte access"
        if self.row:
            what += ", a block per token"
        return _source(what, _struct(ScatterMeta), self.kernel_name, params, body)


# ----------------------------------------------------------------------------- paged gather
@dataclass(frozen=True)
class SequenceMeta:
    """GatherPaKvCache's sequences: ``batch``, seqLens' and seqOffset's strides, whether lengths are cumulative."""

    batch: int = 0
    lens_stride: int = 0
    offset_stride: int = 0
    cumulative: int = 0
    has_offset: int = 0
    rows: int = 0
    block_size: int = 1
    num_blocks: int = 0
    width: int = 0
    table: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class SequenceStarts:
    """One thread: each sequence's start row into ``starts[batch + 1]``; flags bad lengths and offsets."""

    index: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("starts", self)

    def source(self) -> str:
        """The complete kernel source."""
        s = ctype(self.index).storage
        params = ["const KvMeta m", f"const {s}* lens", f"const {s}* offsets", "long long* starts", "int* flag"]
        body = [
            "if (blockIdx.x != 0 || threadIdx.x != 0) return;",
            "long long at = 0;",
            "if (m.cumulative) {",
            "  at = (long long)lens[0];",
            "  if (at != 0) *flag = 1;",
            "}",
            "for (long long b = 0; b < m.batch; ++b) {",
            "  starts[b] = at;",
            "  const long long len = m.cumulative ? (long long)lens[(b + 1) * m.lens_stride] - at",
            "                                     : (long long)lens[b * m.lens_stride];",
            "  if (len < 0) *flag = 1;",
            "  if (m.has_offset && (long long)offsets[b * m.offset_stride] < 0) *flag = 1;",
            "  at += len;",
            "}",
            "starts[m.batch] = at;",
        ]
        return _source("GatherPaKvCache sequence starts", _struct(SequenceMeta), self.kernel_name, params, body)


@dataclass(frozen=True)
class BlockCheck:
    """A thread per sequence: every block-table entry its kept rows read is a column in range holding a block id."""

    index: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("blocks", self)

    def source(self) -> str:
        """The complete kernel source."""
        s = ctype(self.index).storage
        params = ["const KvMeta m", f"const {s}* tables", f"const {s}* offsets", "const long long* starts", "int* flag"]
        body = [
            "if (*flag) return;  // the lengths were refused: the starts mean nothing",
            "const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "if (b >= m.batch) return;",
            "const long long start = starts[b];",
            "long long kept = starts[b + 1] - start;",
            "const long long room = m.rows - start;",
            "if (kept > room) kept = room > 0 ? room : 0;",
            "const long long first = m.has_offset ? (long long)offsets[b * m.offset_stride] / m.block_size : 0;",
            "const long long used = (kept + m.block_size - 1) / m.block_size;",
            "for (long long c = 0; c < used; ++c) {",
            "  const long long col = first + c;",
            "  if (col >= m.width) { *flag = 1; return; }",
            "  const long long id = (long long)tables[b * m.table[0] + col * m.table[1]];",
            "  if (id < 0 || id >= m.num_blocks) { *flag = 1; return; }",
            "}",
        ]
        return _source("GatherPaKvCache block-table check", _struct(SequenceMeta), self.kernel_name, params, body)


@dataclass(frozen=True)
class GatherMeta:
    """One paged gather: ``n`` = rows x heads x (wk + wv), and the strides of every operand."""

    n: int = 0
    heads: int = 1
    wk: int = 0
    wv: int = 0
    batch: int = 0
    block_size: int = 1
    has_offset: int = 0
    offset_stride: int = 0
    table: tuple[int, int] = (0, 0)
    key: tuple[int, int, int] = (0, 0, 0)
    key_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    value: tuple[int, int, int] = (0, 0, 0)
    value_cache: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True)
class PagedGather:
    """keyRef / valueRef row r from the cache row of its sequence's token (rows past every sequence untouched)."""

    itemsize: int
    index: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("gather", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.itemsize)
        s = ctype(self.index).storage
        params = [
            "const KvMeta m",
            f"const {s}* tables",
            f"const {s}* offsets",
            "const long long* starts",
            f"const {w}* __restrict__ key_cache",
            f"{w}* key",
            f"const {w}* __restrict__ value_cache",
            f"{w}* value",
            "const int* flag",
        ]
        body = [
            "if (*flag) return;",
            "const long long width = m.wk + m.wv;",
            "const bool narrow = m.n <= 0xffffffffLL;  // every element index fits 32 bits",
            *GRID_LOOP,
            "  const long long j = i % width;",
            "  const long long rest = i / width;",
            "  const long long h = rest % m.heads, r = rest / m.heads;",
            "  if (r >= starts[m.batch]) continue;  // past every sequence: left as it was",
            "  long long lo = 0, hi = m.batch;  // the sequence b with starts[b] <= r < starts[b + 1]",
            "  while (hi - lo > 1) {",
            "    const long long mid = (lo + hi) / 2;",
            "    if (starts[mid] <= r) lo = mid; else hi = mid;",
            "  }",
            "  while (starts[lo + 1] <= r) ++lo;  // step over empty sequences",
            "  const long long t = r - starts[lo];",
            "  const long long first = m.has_offset ? (long long)offsets[lo * m.offset_stride] / m.block_size : 0;",
            "  const long long col = first + t / m.block_size, within = t % m.block_size;",
            "  const long long blk = (long long)tables[lo * m.table[0] + col * m.table[1]];",
            "  if (j < m.wk) {",
            "    key[r * m.key[0] + h * m.key[1] + j * m.key[2]] = key_cache[blk * m.key_cache[0]",
            "        + within * m.key_cache[1] + h * m.key_cache[2] + j * m.key_cache[3]];",
            "  } else {",
            "    const long long jv = j - m.wk;",
            "    value[r * m.value[0] + h * m.value[1] + jv * m.value[2]] = value_cache[blk * m.value_cache[0]",
            "        + within * m.value_cache[1] + h * m.value_cache[2] + jv * m.value_cache[3]];",
            "  }",
            "}",
        ]
        return _source(
            f"paged gather of {self.itemsize}-byte elements", _struct(GatherMeta), self.kernel_name, params, body
        )


# ----------------------------------------------------------------------------- KvRmsNormRopeCache
KV_MODES: Final = {"norm": 0, "paged": 1, "paged_blocks": 2}
NO_CACHE: Final = 3
"""NormRopeMeta.mode that writes no cache: the row goes to v_out only (MlaProlog's RmsNorm of c^Q)."""


ONE_BITS: Final = 0x3FF0000000000000
"""The bits of the double 1.0."""
NZ_PIECE: Final = 16
"""Elements of one 32-byte piece of a 16-bit cache row (PA_NZ)."""


@dataclass(frozen=True)
class NormRopeMeta:
    """One KvRmsNormRopeCache launch: a block per (b, s) token row."""

    seq: int = 1
    dv: int = 0
    dk: int = 0
    mode: int = 0
    block_size: int = 1
    per_batch: int = 1
    output: int = 0
    epsilon_bits: int = 0
    kv: tuple[int, int, int] = (0, 0, 0)
    index: tuple[int, int] = (0, 0)
    gamma: int = 0
    cos: tuple[int, int, int] = (0, 0, 0)
    sin: tuple[int, int, int] = (0, 0, 0)
    k_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    v_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    k_out: tuple[int, int, int] = (0, 0, 0)
    v_out: tuple[int, int, int] = (0, 0, 0)
    scale_bits: int = ONE_BITS
    """The RmsNorm result's factor as double bits (MlaProlog's qcQrScale / kcScale; 1 for KvRmsNormRopeCache)."""
    nz: int = 0
    """1: paged caches whose blocks are stored FRACTAL_NZ in their logical order (MlaProlog's PA_NZ)."""


@dataclass(frozen=True)
class NormRopeCache:
    """RmsNorm of the first Dv elements and mode-3 RoPE of the last Dk of one token row, written to the caches."""

    dtype: D

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("norm_rope", self)

    def source(self) -> str:
        """The complete kernel source."""
        s = ctype(self.dtype).storage

        def ld(expr: str) -> str:
            return load_wide(expr, self.dtype)

        def st(expr: str) -> str:
            return store_narrow(expr, self.dtype)

        params = [
            "const KvMeta m",
            f"const {s}* __restrict__ kv",
            f"const {s}* __restrict__ gamma",
            f"const {s}* __restrict__ cs",
            f"const {s}* __restrict__ sn",
            "const long long* __restrict__ index",
            f"{s}* k_cache",
            f"{s}* v_cache",
            f"{s}* k_out",
            f"{s}* v_out",
            "const int* flag",
        ]
        body = [
            f"__shared__ double partial[{BLOCK_THREADS}];",
            "if (*flag) return;",
            "const long long row = blockIdx.x;",
            "const long long b = row / m.seq, s = row % m.seq;",
            "long long slot;",
            "if (m.mode == 3) slot = -1;  // no cache: the row goes to the outputs only",
            "else if (m.mode == 0) slot = index[b * m.index[0] + s * m.index[1]];",
            "else if (m.mode == 1) slot = index[b * m.index[0] + s * m.index[1]];",
            "else {",
            "  const long long first = index[(b * m.per_batch + s / m.block_size) * m.index[0]];",
            "  slot = first < 0 ? -1 : (first / m.block_size) * m.block_size + s % m.block_size;",
            "}",
            "long long kbase = 0, vbase = 0, kblk = 0, vblk = 0, off = 0;",
            "if (m.mode == 0) {",
            "  kbase = b * m.k_cache[0] + slot * m.k_cache[2];",
            "  vbase = b * m.v_cache[0] + slot * m.v_cache[2];",
            "} else if (slot >= 0) {",
            "  const long long blk = slot / m.block_size;",
            "  off = slot % m.block_size;",
            "  kblk = blk * m.k_cache[0];",
            "  vblk = blk * m.v_cache[0];",
            "  kbase = kblk + off * m.k_cache[1];",
            "  vbase = vblk + off * m.v_cache[1];",
            "}",
            "const long long x0 = b * m.kv[0] + s * m.kv[1];",
            "double acc = 0.0;",
            "for (long long j = threadIdx.x; j < m.dv; j += blockDim.x) {",
            f"  const double x = {ld('kv[x0 + j * m.kv[2]]')};",
            "  acc += x * x;",
            "}",
            "partial[threadIdx.x] = acc;",
            "__syncthreads();",
            f"for (int half = {BLOCK_THREADS // 2}; half > 0; half >>= 1) {{",
            "  if ((int)threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];",
            "  __syncthreads();",
            "}",
            "const double eps = __longlong_as_double(m.epsilon_bits);",
            "const double rms = sqrt(partial[0] / (double)m.dv + eps);",
            "const double scale = __longlong_as_double(m.scale_bits);",
            "for (long long j = threadIdx.x; j < m.dv; j += blockDim.x) {",
            f"  const double y = {ld('kv[x0 + j * m.kv[2]]')} / rms * {ld('gamma[j * m.gamma]')} * scale;",
            f"  const {s} out = {st('y')};",
            "  const long long at =",
            "      m.nz ? vblk + nz_at(off, j, m.block_size, m.dv, m.v_cache) : vbase + j * m.v_cache[3];",
            "  if (slot >= 0) v_cache[at] = out;",
            "  if (m.output) v_out[b * m.v_out[0] + s * m.v_out[1] + j * m.v_out[2]] = out;",
            "}",
            "const long long half = m.dk / 2;",
            "const long long c0 = b * m.cos[0] + s * m.cos[1], s0 = b * m.sin[0] + s * m.sin[1];",
            "for (long long p = threadIdx.x; p < half; p += blockDim.x) {",
            f"  const double x1 = {ld('kv[x0 + (m.dv + 2 * p) * m.kv[2]]')};",
            f"  const double x2 = {ld('kv[x0 + (m.dv + 2 * p + 1) * m.kv[2]]')};",
            f"  const double r1 = x1 * {ld('cs[c0 + p * m.cos[2]]')} - x2 * {ld('sn[s0 + p * m.sin[2]]')};",
            f"  const double r2 = x2 * {ld('cs[c0 + (p + half) * m.cos[2]]')}"
            f" + x1 * {ld('sn[s0 + (p + half) * m.sin[2]]')};",
            f"  const {s} o1 = {st('r1')}, o2 = {st('r2')};",
            "  if (slot >= 0 && m.nz) {",
            "    k_cache[kblk + nz_at(off, p, m.block_size, m.dk, m.k_cache)] = o1;",
            "    k_cache[kblk + nz_at(off, p + half, m.block_size, m.dk, m.k_cache)] = o2;",
            "  } else if (slot >= 0) {",
            "    k_cache[kbase + p * m.k_cache[3]] = o1;",
            "    k_cache[kbase + (p + half) * m.k_cache[3]] = o2;",
            "  }",
            "  if (m.output) {",
            "    k_out[b * m.k_out[0] + s * m.k_out[1] + p * m.k_out[2]] = o1;",
            "    k_out[b * m.k_out[0] + s * m.k_out[1] + (p + half) * m.k_out[2]] = o2;",
            "  }",
            "}",
        ]
        nz_at = (
            "ACL_DEV long long nz_at(long long row, long long j, long long rows, long long width,\n"
            "                        const long long* c) {\n"
            f"  const long long flat = (j / {NZ_PIECE}) * rows * {NZ_PIECE} + row * {NZ_PIECE} + j % {NZ_PIECE};\n"
            "  return (flat / width) * c[1] + (flat % width) * c[3];\n"
            "}"
        )
        meta = _struct(NormRopeMeta) + "\n" + nz_at
        return _source(f"KvRmsNormRopeCache {self.dtype.short}", meta, self.kernel_name, params, body)


# ----------------------------------------------------------------------------- RopeWithSinCosCache
@dataclass(frozen=True)
class RopeCacheMeta:
    """One RopeWithSinCosCache launch: ``n`` = tokens x (query + key heads) x tasks per head."""

    n: int = 0
    heads_q: int = 0
    heads: int = 0
    head_size: int = 0
    rotary: int = 0
    sections: int = 0
    interleaved: int = 0
    ends: tuple[int, int, int, int] = (0, 0, 0, 0)
    positions: tuple[int, int] = (0, 0)
    cache: tuple[int, int] = (0, 0)
    query: tuple[int, int] = (0, 0)
    key: tuple[int, int] = (0, 0)
    query_out: tuple[int, int] = (0, 0)
    key_out: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class RopeCache:
    """A thread per rotated pair or passed-through element of one head of one token (query and key heads)."""

    dtype: D
    neox: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("rope_cache", self)

    def source(self) -> str:
        """The complete kernel source."""
        s = ctype(self.dtype).storage

        def ld(expr: str) -> str:
            return load_wide(expr, self.dtype)

        def st(expr: str) -> str:
            return store_narrow(expr, self.dtype)

        pair = "i1 = p; i2 = p + half;" if self.neox else "i1 = 2 * p; i2 = 2 * p + 1;"
        params = [
            "const KvMeta m",
            "const long long* __restrict__ positions",
            f"const {s}* __restrict__ cache",
            f"const {s}* __restrict__ query",
            f"const {s}* __restrict__ key",
            f"{s}* query_out",
            f"{s}* key_out",
            "const int* flag",
        ]
        body = [
            "if (*flag) return;",
            "const long long half = m.rotary / 2;",
            "const long long tasks = half + m.head_size - m.rotary;",
            *GRID_LOOP,
            "  const long long w = i % tasks;",
            "  const long long rest = i / tasks;",
            "  const long long h = rest % m.heads, t = rest / m.heads;",
            "  const bool is_q = h < m.heads_q;",
            "  const long long hh = is_q ? h : h - m.heads_q;",
            f"  const {s}* x = is_q ? query : key;",
            f"  {s}* y = is_q ? query_out : key_out;",
            "  const long long xt = t * (is_q ? m.query[0] : m.key[0]), xc = is_q ? m.query[1] : m.key[1];",
            "  const long long yt = t * (is_q ? m.query_out[0] : m.key_out[0]);",
            "  const long long yc = is_q ? m.query_out[1] : m.key_out[1];",
            "  const long long base = hh * m.head_size;",
            "  if (w >= half) {  // past rotaryDim: passed through",
            "    const long long col = base + m.rotary + (w - half);",
            "    y[yt + col * yc] = x[xt + col * xc];",
            "    continue;",
            "  }",
            "  const long long p = w;",
            "  long long r = 0;  // the positions row of cos column p",
            "  if (m.interleaved) {",
            "    const long long s1 = m.ends[1] - m.ends[0], s2 = m.ends[2] - m.ends[1];",
            "    if (p % 3 == 1 && p < 3 * s1) r = 1;",
            "    else if (p % 3 == 2 && p < 3 * s2) r = 2;",
            "  } else {",
            "    for (long long k = 0; k < m.sections; ++k) r += p >= m.ends[k] ? 1 : 0;",
            "  }",
            "  const long long pos = positions[r * m.positions[0] + t * m.positions[1]];",
            f"  const double c = {ld('cache[pos * m.cache[0] + p * m.cache[1]]')};",
            f"  const double sv = {ld('cache[pos * m.cache[0] + (half + p) * m.cache[1]]')};",
            "  long long i1, i2;",
            f"  {pair}",
            f"  const double x1 = {ld('x[xt + (base + i1) * xc]')}, x2 = {ld('x[xt + (base + i2) * xc]')};",
            f"  y[yt + (base + i1) * yc] = {st('x1 * c - x2 * sv')};",
            f"  y[yt + (base + i2) * yc] = {st('x2 * c + x1 * sv')};",
            "}",
        ]
        style = "neox" if self.neox else "gpt-j"
        return _source(
            f"RopeWithSinCosCache {self.dtype.short} {style}", _struct(RopeCacheMeta), self.kernel_name, params, body
        )
