"""Kernel generators of sorting: order keys, a bitonic tile sort in shared memory, merge passes, emitters.

Every element becomes an unsigned key whose ascending order is the reference's order (NaN above
+Inf, -0.0 equal to 0.0, integers by value); descending complements the key. Ties are broken by the
element's position in its row, so the (key, position) pairs are totally ordered and any sorting
network gives the stable answer. A row that fits one tile (``tile`` elements) is sorted by one block
in shared memory; a longer row is sorted tile by tile into a global temporary and then merged in
passes (each element finds its place in the partner run by binary search), ping-ponging between two
temporaries. Every source declares the ``Meta`` struct the movement kernels use (``long long``
fields) so launches pack and record the same way.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import SUPPORTED, ctype
from acl_rocm.kernels.movement import word
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
TILE: Final = 2048
"""Elements one block sorts in shared memory (keys of 8 bytes plus 4-byte positions: 24 KiB)."""
INDEX_CTYPES: Final[dict[D, str]] = {D.ACL_INT32: "int", D.ACL_INT64: "long long"}


def key_type(dtype: D) -> str:
    """The unsigned C type of ``dtype``'s order key (64 bits for 64-bit types, else 32)."""
    return "unsigned long long" if dtype.info.storage_bits == 64 else "unsigned int"


def _ones(kt: str) -> str:
    return "0xffffffffffffffffull" if kt == "unsigned long long" else "0xffffffffu"


def key_function(dtype: D, descending: bool, nan_last: bool = False) -> str:
    """``acl_sort_key(storage)``: the order key of one stored element (``nan_last`` keeps NaN last when descending)."""
    if dtype not in SUPPORTED:
        raise ValueError(f"no order key for {dtype.short}")
    c = ctype(dtype)
    kt = key_type(dtype)
    ones = _ones(kt)
    nan = "false"
    if dtype == D.ACL_FLOAT:
        nan = "s != s"
        body = [
            "unsigned int b = __float_as_uint(s);",
            "if (s == 0.0f) b = 0u;",
            "k = (b & 0x80000000u) ? ~b : (b | 0x80000000u);",
        ]
    elif dtype == D.ACL_DOUBLE:
        nan = "s != s"
        body = [
            "unsigned long long b = (unsigned long long)__double_as_longlong(s);",
            "if (s == 0.0) b = 0ull;",
            "k = (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);",
        ]
    elif dtype in (D.ACL_FLOAT16, D.ACL_BF16):
        inf = "0x7c00u" if dtype == D.ACL_FLOAT16 else "0x7f80u"
        nan = f"((unsigned int)s & 0x7fffu) > {inf}"
        body = [
            "unsigned int b = (unsigned int)s;",
            "if ((b & 0x7fffu) == 0u) b = 0u;",
            "k = (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);",
        ]
    elif c.kind == "bool":
        body = ["k = s != 0 ? 1u : 0u;"]
    elif dtype == D.ACL_INT64:
        body = ["k = (unsigned long long)s ^ 0x8000000000000000ull;"]
    elif dtype in (D.ACL_INT8, D.ACL_INT16, D.ACL_INT32):
        body = ["k = (unsigned int)(int)s ^ 0x80000000u;"]
    elif dtype in (D.ACL_UINT8, D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64):
        body = [f"k = ({kt})s;"]
    else:
        raise ValueError(f"no order key for {dtype.short}")
    lines = [f"__device__ __forceinline__ {kt} acl_sort_key(const {c.storage} s) {{", f"  {kt} k;"]
    lines.append(f"  if ({nan}) return {ones if (nan_last or not descending) else '0'};")
    lines += ["  " + line for line in body]
    lines.append(f"  return {'~k' if descending else 'k'};")
    lines.append("}")
    return "\n".join(lines)


def meta(ndim: int, rows: int) -> str:
    """The ``Meta`` struct: ``n``, ``shape[ndim]``, ``stride[rows][ndim]`` (``long long``)."""
    return f"struct Meta {{ long long n; long long shape[{ndim}]; long long stride[{rows}][{ndim}]; }};"


def row_offsets(ndim: int, rows: int, coordinate: str = "row") -> list[str]:
    """C lines giving ``o0..o{rows-1}``: the offsets of outer position ``coordinate`` through Meta."""
    lines = [f"long long rest = {coordinate};"]
    lines += [f"long long o{r} = 0;" for r in range(rows)]
    lines.append(f"for (int d = {ndim - 1}; d >= 0; --d) {{")
    lines.append("  const long long c = rest % m.shape[d]; rest /= m.shape[d];")
    lines.append("  " + " ".join(f"o{r} += c * m.stride[{r}][d];" for r in range(rows)))
    lines.append("}")
    return lines


def kernel_name(kind: str, key: object) -> str:
    """A stable extern "C" name for a kernel of ``kind`` with parameters ``key``."""
    return f"acl_sort_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def source(comment: str, meta_struct: str, name: str, params: list[str], body: list[str], helpers: str = "") -> str:
    """A complete kernel source: prelude, helpers, Meta, one ``__launch_bounds__(256)`` kernel."""
    return "\n".join(
        [
            PRELUDE,
            helpers,
            f"// {comment}",
            meta_struct,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


def _inner(j: str) -> str:
    """Offset of row element ``j`` over up to two inner dims (``inner1`` elements in the second)."""
    return f"(({j}) / inner1) * s0 + (({j}) % inner1) * s1"


def bitonic(kt: str) -> list[str]:
    """C lines sorting ``skey``/``sidx`` [0, width) ascending by (key, position) in shared memory."""
    return [
        "for (int k = 2; k <= width; k <<= 1) {",
        "  for (int j = k >> 1; j > 0; j >>= 1) {",
        "    for (int i = (int)threadIdx.x; i < width; i += (int)blockDim.x) {",
        "      const int p = i ^ j;",
        "      if (p > i) {",
        f"        const {kt} ka = skey[i], kb = skey[p];",
        "        const int ia = sidx[i], ib = sidx[p];",
        "        const bool greater = ka > kb || (ka == kb && ia > ib);",
        "        if (greater == ((i & k) == 0)) { skey[i] = kb; skey[p] = ka; sidx[i] = ib; sidx[p] = ia; }",
        "      }",
        "    }",
        "    __syncthreads();",
        "  }",
        "}",
    ]


# ----------------------------------------------------------------------------- tile sort
@dataclass(frozen=True)
class TileSort:
    """Sort each tile of each row in shared memory (one block per tile, grid-stride over tiles).

    Source ``tensor``: elements of a strided ``dtype`` tensor (Meta rows 0 source, [1 values, 2
    indices]: outer offsets; ``s0``/``s1``/``inner1`` the inner geometry), keyed by :func:`key_function`.
    Source ``temp``: keys and positions already in a temporary of ``rows × length``. Sink ``outputs``:
    the first ``count`` of a single-tile row go to ``values`` (raw copy from the source, when
    ``values``) and ``indices`` (``index_dtype``). Sink ``temp``: the sorted tile goes to a temporary.
    """

    dtype: D
    descending: bool
    ndim: int
    src: str
    sink: str
    values: bool = False
    index_dtype: D = D.ACL_INT64
    nan_last: bool = False
    tile: int = TILE

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("tile", self)

    def source(self) -> str:
        """The complete kernel source."""
        if self.src not in ("tensor", "temp") or self.sink not in ("outputs", "temp"):
            raise ValueError(f"unknown tile sort source {self.src!r} or sink {self.sink!r}")
        kt = key_type(self.dtype)
        st = ctype(self.dtype).storage
        rows = 3 if self.sink == "outputs" else 1
        params = ["const Meta m"]
        params.append(f"const {st}* src" if self.src == "tensor" else f"const {kt}* in_keys")
        if self.src == "temp":
            params.append("const int* in_idx")
        if self.sink == "outputs":
            if self.values:
                params.append(f"{word(self.dtype.info.storage_bits // 8)}* values")
            params.append(f"{INDEX_CTYPES[self.index_dtype]}* indices")
        else:
            params += [f"{kt}* out_keys", "int* out_idx"]
        params += [
            "const long long length",
            "const long long inner1",
            "const long long s0",
            "const long long s1",
            "const long long count",
            "const long long vstride",
            "const long long istride",
            "const long long tiles",
            "const int width",
        ]
        load = (
            [f"skey[i] = acl_sort_key(src[o0 + {_inner('j')}]);", "sidx[i] = (int)j;"]
            if self.src == "tensor"
            else ["skey[i] = in_keys[row * length + j];", "sidx[i] = in_idx[row * length + j];"]
        )
        if self.sink == "outputs":
            store = ["for (long long i = threadIdx.x; i < count && i < valid; i += blockDim.x) {"]
            store.append("  const long long at = sidx[i];")
            if self.values:
                w = word(self.dtype.info.storage_bits // 8)
                store.append(f"  values[o1 + i * vstride] = ((const {w}*)src)[o0 + {_inner('at')}];")
            store.append(f"  indices[o2 + i * istride] = ({INDEX_CTYPES[self.index_dtype]})at;")
            store.append("}")
        else:
            store = [
                "for (long long i = threadIdx.x; i < valid; i += blockDim.x) {",
                "  out_keys[row * length + start + i] = skey[i];",
                "  out_idx[row * length + start + i] = sidx[i];",
                "}",
            ]
        body = [
            f"__shared__ {kt} skey[{self.tile}];",
            f"__shared__ int sidx[{self.tile}];",
            "const long long segments = m.n * tiles;",
            "for (long long seg = blockIdx.x; seg < segments; seg += gridDim.x) {",
            "  const long long row = seg / tiles, start = (seg % tiles) * " + str(self.tile) + ";",
            f"  const long long valid = length - start < {self.tile} ? length - start : {self.tile};",
            *("  " + line for line in row_offsets(self.ndim, rows)),
            "  for (int i = (int)threadIdx.x; i < width; i += (int)blockDim.x) {",
            "    if (i < valid) {",
            "      const long long j = start + i;",
            *("      " + line for line in load),
            "    } else {",
            f"      skey[i] = {_ones(kt)};",
            "      sidx[i] = 0x7fffffff;",
            "    }",
            "  }",
            "  __syncthreads();",
            *("  " + line for line in bitonic(kt)),
            *("  " + line for line in store),
            "  __syncthreads();",
            "}",
        ]
        helpers = key_function(self.dtype, self.descending, self.nan_last) if self.src == "tensor" else ""
        return source(
            f"sort: tiles of {self.tile} from {self.src} to {self.sink}, {self.dtype.short}"
            f" {'descending' if self.descending else 'ascending'}",
            meta(self.ndim, rows),
            self.kernel_name,
            params,
            body,
            helpers,
        )


# ----------------------------------------------------------------------------- merge pass
@dataclass(frozen=True)
class MergePass:
    """Merge sorted runs of ``run`` elements pairwise within rows of ``length`` (Meta ``n``: all elements)."""

    key: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("merge", self)

    def source(self) -> str:
        """The complete kernel source."""
        kt = self.key
        params = [
            "const Meta m",
            f"const {kt}* in_keys",
            "const int* in_idx",
            f"{kt}* out_keys",
            "int* out_idx",
            "const long long length",
            "const long long run",
        ]
        body = [
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < m.n; i += step) {",
            "  const long long base = (i / length) * length, p = i - base;",
            "  const long long own = (p / run) * run, partner = ((p / run) ^ 1) * run;",
            f"  const {kt} k = in_keys[i];",
            "  const int x = in_idx[i];",
            "  if (partner >= length) { out_keys[i] = k; out_idx[i] = x; continue; }",
            "  long long lo = partner, hi = partner + run < length ? partner + run : length;",
            "  while (lo < hi) {",
            "    const long long mid = (lo + hi) / 2;",
            f"    const {kt} km = in_keys[base + mid];",
            "    if (km < k || (km == k && in_idx[base + mid] < x)) lo = mid + 1; else hi = mid;",
            "  }",
            "  const long long dest = (own < partner ? own : partner) + (p - own) + (lo - partner);",
            "  out_keys[base + dest] = k;",
            "  out_idx[base + dest] = x;",
            "}",
        ]
        return source(f"sort: merge pass over {kt} keys", meta(1, 1), self.kernel_name, params, body)


# ----------------------------------------------------------------------------- emit sorted rows
@dataclass(frozen=True)
class EmitSorted:
    """From a sorted temporary (rows × length): the first ``count`` of each row to values / indices outputs.

    Meta: ``n`` rows over the outer dims (rows 0 source, 1 values, 2 indices); values are raw copies
    read from the source tensor at each position.
    """

    dtype: D
    ndim: int
    values: bool
    index_dtype: D = D.ACL_INT64

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return kernel_name("emit", self)

    def source(self) -> str:
        """The complete kernel source."""
        w = word(self.dtype.info.storage_bits // 8)
        it = INDEX_CTYPES[self.index_dtype]
        params = ["const Meta m", f"const {w}* src", "const int* sorted_idx"]
        if self.values:
            params.append(f"{w}* values")
        params += [
            f"{it}* indices",
            "const long long length",
            "const long long inner1",
            "const long long s0",
            "const long long s1",
            "const long long count",
            "const long long vstride",
            "const long long istride",
        ]
        body = [
            "const long long total = m.n * count;",
            "const long long step = (long long)gridDim.x * blockDim.x;",
            "for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += step) {",
            "  const long long row = e / count, i = e % count;",
            *("  " + line for line in row_offsets(self.ndim, 3)),
            "  const long long at = sorted_idx[row * length + i];",
        ]
        if self.values:
            body.append(f"  values[o1 + i * vstride] = src[o0 + {_inner('at')}];")
        body += [f"  indices[o2 + i * istride] = ({it})at;", "}"]
        return source(
            f"sort: emit the first count of sorted {self.dtype.short} rows",
            meta(self.ndim, 3),
            self.kernel_name,
            params,
            body,
        )
