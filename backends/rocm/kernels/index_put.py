"""Kernel generators of IndexPutImpl: target positions of every indexed element, then a segmented apply.

:class:`Positions` walks the indexed result space in C order and writes, for element q, the key of
its target offset in selfRef and q itself; the row sorter orders the pairs by (offset, q), so equal
targets form runs in C order. :class:`Apply` gives each run to one thread: plain assignment keeps
the run's last value (the reference's "last in C order wins"), accumulate sums the whole run onto
the old value in the wide type in C order and rounds once (the reference's ``np.add.at`` exactly).
Both read the index-check flag first and write nothing when it is set. No atomics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype
from acl_rocm.kernels.movement import HELPERS, load_wide, store_narrow, wide, word
from acl_rocm.kernels.sort import kernel_name, meta, row_offsets, source

SIGN = "0x8000000000000000ull"


@dataclass(frozen=True)
class Positions:
    """keys[q] = target offset of result element q (sign bit flipped), pos[q] = q (Meta rows: 0 self, 1.. indices)."""

    indices: tuple[D, ...]
    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("index_positions", self)

    def source(self) -> str:
        """The complete kernel source."""
        k = len(self.indices)
        params = ["const Meta m"]
        params += [f"const {ctype(dt).storage}* index{j}" for j, dt in enumerate(self.indices)]
        for j in range(k):
            params += [f"const long long dim_stride{j}", f"const long long size{j}"]
        params += ["unsigned long long* keys", "int* pos"]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.ndim, 1 + k, "q")),
            "  long long at = o0;",
        ]
        for j in range(k):
            body += [
                f"  {{ long long v = (long long)index{j}[o{1 + j}];",
                f"    if (v < 0) v += size{j};",
                f"    at += v * dim_stride{j}; }}",
            ]
        body += [f"  keys[q] = (unsigned long long)at ^ {SIGN};", "  pos[q] = (int)q;", "}"]
        return source(
            f"index put: target positions through {k} index tensor(s)",
            meta(self.ndim, 1 + k),
            self.kernel_name,
            params,
            body,
        )


@dataclass(frozen=True)
class Apply:
    """Each run of equal sorted targets written once (Meta: the result space; row 0 values' strides)."""

    dtype: D
    ndim: int
    accumulate: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("index_apply", self)

    def _value_offset(self, q: str, out: str) -> list[str]:
        return [
            f"long long {out} = 0;",
            f"{{ long long r = {q};",
            f"  for (int d = {self.ndim - 1}; d >= 0; --d) {{",
            f"    {out} += (r % m.shape[d]) * m.stride[0][d];",
            "    r /= m.shape[d];",
            "  } }",
        ]

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.dtype.info.storage_bits // 8)
        st = ctype(self.dtype).storage if self.accumulate else w
        params = ["const Meta m", "const unsigned long long* keys", "const int* pos", f"const {st}* values"]
        params += [f"{st}* self", "const int* flag"]
        body = [
            "if (*flag) return;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < m.n; s += step) {",
            "  const unsigned long long key = keys[s];",
            "  if (s + 1 < m.n && keys[s + 1] == key) continue;",
            f"  const long long at = (long long)(key ^ {SIGN});",
        ]
        if not self.accumulate:
            body += ["  " + line for line in self._value_offset("pos[s]", "vo")]
            body.append("  self[at] = values[vo];")
        else:
            wt = wide(self.dtype)
            add = "acc = acc || v;" if wt == "bool" else "acc = acc + v;"
            body += [
                "  long long t = s;",
                "  while (t > 0 && keys[t - 1] == key) --t;",
                f"  {wt} acc = {load_wide('self[at]', self.dtype)};",
                "  for (long long u = t; u <= s; ++u) {",
                *("    " + line for line in self._value_offset("pos[u]", "vo")),
                f"    const {wt} v = {load_wide('values[vo]', self.dtype)};",
                f"    {add}",
                "  }",
                f"  self[at] = {store_narrow('acc', self.dtype)};",
            ]
        body.append("}")
        mode = "accumulate" if self.accumulate else "assign"
        return source(
            f"index put: {mode} {self.dtype.short}", meta(self.ndim, 1), self.kernel_name, params, body, HELPERS
        )


# ----------------------------------------------------------------------------- bool masks
@dataclass(frozen=True)
class MaskKeys:
    """keys[i] = i for a true mask element i (C order), n + i for a false one (sign bit flipped); pos[i] = i.

    Sorted, the true elements come first in C order: a true element's sorted place is its rank.
    """

    ndim: int

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mask_keys", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const Meta m", "const unsigned char* mask", "unsigned long long* keys", "int* pos"]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.ndim, 1, "q")),
            "  const long long k = mask[o0] ? q : m.n + q;",
            f"  keys[q] = (unsigned long long)k ^ {SIGN};",
            "  pos[q] = (int)q;",
            "}",
        ]
        return source("index put: mask compaction keys", meta(self.ndim, 1), self.kernel_name, params, body)


@dataclass(frozen=True)
class MaskRank:
    """rank[i] = place of true element i among the true ones; ``*flag = 1`` when their count is not ``expect``."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mask_rank", self)

    def source(self) -> str:
        """The complete kernel source."""
        params = ["const long long n", "const unsigned long long* keys", "int* rank", "const long long expect"]
        params.append("int* flag")
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < n; s += step) {",
            f"  const long long k = (long long)(keys[s] ^ {SIGN});",
            "  const bool last = s + 1 == n;",
            f"  const bool next_false = last || (long long)(keys[s + 1 < n ? s + 1 : s] ^ {SIGN}) >= n;",
            "  if (k < n) {",
            "    rank[k] = (int)s;",
            "    if (next_false && s + 1 != expect) *flag = 1;  // the last true element gives the count",
            "  } else if (s == 0 && expect != 0) {",
            "    *flag = 1;  // no true element at all",
            "  }",
            "}",
        ]
        return source("index put: mask ranks and count check", "", self.kernel_name, params, body)


@dataclass(frozen=True)
class MaskPut:
    """selfRef[p] = (or +=) values[...] for every position p of selfRef whose mask element is true.

    Meta rows over selfRef's shape: 0 selfRef, 1 the mask (0 off its dims), 2 values (0 on the mask's
    dims), 3 the mask's C-order positions (for ``rank``). With ``ranked`` the value also moves by
    ``rank[position] * count_stride`` and the count check's ``flag`` is read first (without, no check ran
    and ``flag`` is null). A mask names each position at most once: no duplicates.
    """

    dtype: D
    ndim: int
    accumulate: bool
    ranked: bool

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("mask_put", self)

    def source(self) -> str:
        """The complete kernel source."""
        st = ctype(self.dtype).storage
        params = ["const Meta m", "const unsigned char* mask", "const int* rank", "const long long count_stride"]
        params += [f"const {st}* values", f"{st}* self", "const int* flag"]
        body = [
            *(["if (*flag) return;  // the count check failed: write nothing"] if self.ranked else []),
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {",
            *("  " + line for line in row_offsets(self.ndim, 4, "q")),
            "  if (!mask[o1]) continue;",
        ]
        if self.ranked:
            body.append("  o2 += (long long)rank[o3] * count_stride;")
        if self.accumulate:
            wt = wide(self.dtype)
            add = "||" if wt == "bool" else "+"
            total = f"{load_wide('self[o0]', self.dtype)} {add} {load_wide('values[o2]', self.dtype)}"
            body.append(f"  self[o0] = {store_narrow(f'({wt})({total})', self.dtype)};")
        else:
            body.append("  self[o0] = values[o2];")
        body.append("}")
        mode = "accumulate" if self.accumulate else "assign"
        return source(
            f"index put through a bool mask: {mode} {self.dtype.short}",
            meta(self.ndim, 4),
            self.kernel_name,
            params,
            body,
            HELPERS,
        )
