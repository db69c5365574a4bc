"""Kernel generator of QkvRmsNormRopeCache: the whole call in one launch.

A group of ``group`` lanes takes one (token, head) unit, token-major: q heads are normalised and rotated
into qOut, k heads normalised, rotated, quantised (INT8 caches) and scattered into kCache's PA_NZ slot,
v heads quantised and scattered into vCache. Each lane holds ``head_dim / group`` adjacent columns (one
16-byte access per tensor for 16 lanes of a 128-wide bf16 head under ``vec``); the sum of squares is a
butterfly over the group's lanes and the rotation's partner columns (``j ± D/2``) come from lane
``lane ^ group/2``. Every lane runs every shuffle (dead units included), so the full-warp masks hold.

The index is range-checked before the first write: by every block itself when it is short
(parameters as :class:`~acl_rocm.kernels.movement.InlineChecks`; the values load beside the data, so a decode
step waits for one memory round trip), else by a Check launch
before (the flag is read first). Arithmetic is float32; with an INT8 kCache it is double, so the value
quantised (rounded once to float32, as the reference does) does not depend on the summation order.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, fields
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.movement import HELPERS, InlineChecks, flag_param
from acl_rocm.kernels.prelude import PRELUDE
from acl_rocm.kernels.reduction import SHUFFLE_XOR

BLOCK_THREADS: Final = 128
"""Threads per block (a multiple of every group size)."""
GROUPS: Final = (8, 16, 32)
"""The lanes-per-head choices (``ACL_QKV_ROPE_CONFIG`` g8 / g16 / g32)."""


@dataclass(frozen=True)
class QkvMeta:
    """Sizes and strides (elements) of one call; ``units`` = tokens x (Nq + Nk + Nv)."""

    units: int = 0
    heads: int = 1
    nq: int = 0
    nk: int = 0
    block_size: int = 1
    epsilon_bits: int = 0
    qkv: tuple[int, int] = (0, 0)
    cos: tuple[int, int] = (0, 0)
    sin: tuple[int, int] = (0, 0)
    q_gamma: int = 0
    k_gamma: int = 0
    index: int = 0
    q_out: tuple[int, int] = (0, 0)
    q_bq: tuple[int, int] = (0, 0)
    k_bq: tuple[int, int] = (0, 0)
    v_bq: tuple[int, int] = (0, 0)
    k_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    v_cache: tuple[int, int, int, int] = (0, 0, 0, 0)
    k_scale: tuple[int, int] = (0, 0)
    v_scale: tuple[int, int] = (0, 0)
    k_offset: tuple[int, int] = (0, 0)
    v_offset: tuple[int, int] = (0, 0)


def meta_values(meta: QkvMeta) -> list[int]:
    """``meta`` flattened to the ints of its C struct, in order."""
    flat: list[int] = []
    for f in fields(meta):
        item = getattr(meta, f.name)
        flat.extend(item) if isinstance(item, tuple) else flat.append(item)
    return [int(v) for v in flat]


def _struct() -> str:
    members = []
    for f in fields(QkvMeta):
        default = f.default
        members.append(f"long long {f.name}[{len(default)}];" if isinstance(default, tuple) else f"long long {f.name};")
    return "struct QkvMeta { " + " ".join(members) + " };"


@dataclass(frozen=True)
class QkvNormRopeCache:
    """One launch of QkvRmsNormRopeCache for ``dtype`` (FLOAT16 / BFLOAT16) and the caches' quantisation."""

    dtype: D
    k_int8: bool = False
    v_int8: bool = False
    k_offset: bool = False
    v_offset: bool = False
    head_dim: int = 128
    group: int = 16
    vec: bool = True
    """Every tensor's columns unit-stride, other strides and addresses multiples of a lane's columns: one access
    of ``head_dim / group`` elements per tensor and lane; otherwise element by element."""
    inline: bool = True
    """The index is checked by every block (short index); otherwise a Check launch ran before."""
    nd: bool = False
    """ND caches ``[BlockNum, BlockSize, N, D]`` (PA / PA_BNSD) instead of PA_NZ ``[BlockNum, N*D/P, BlockSize, P]``."""

    def __post_init__(self) -> None:
        if self.group not in GROUPS or self.head_dim % (2 * self.group):
            raise ValueError(f"group {self.group} does not split head dim {self.head_dim} into two halves")

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return f"acl_qkv_norm_rope_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"

    @property
    def lanes_cols(self) -> int:
        """Columns of a head each lane holds."""
        return self.head_dim // self.group

    @property
    def checks(self) -> InlineChecks | None:
        """The index's inline range check (None: a Check launch ran before)."""
        return InlineChecks((D.ACL_INT64,)) if self.inline else None

    def _acc(self) -> str:
        return "double" if self.k_int8 else "float"

    def _decode(self, expr: str) -> str:
        return f"(acc_t)acl_{'h' if self.dtype == D.ACL_FLOAT16 else 'b'}2f({expr})"

    def _narrow(self, expr: str) -> str:
        f = "acl_f2h" if self.dtype == D.ACL_FLOAT16 else "acl_f2b"
        return f"{f}(acl_mv_odd({expr}))" if self.k_int8 else f"{f}({expr})"

    def _load(self, dst: str, ptr: str, base: str, stride: str) -> list[str]:
        """``dst[i]`` = column ``j0 + i`` of the 16-bit row at ``ptr + base`` (column stride ``stride``)."""
        if self.vec:
            return [
                "{",
                f"  const AclVec<unsigned short, V> w = *reinterpret_cast<const AclVec<unsigned short, V>*>("
                f"{ptr} + {base} + j0);",
                f"  for (int i = 0; i < V; ++i) {dst}[i] = {self._decode('w.v[i]')};",
                "}",
            ]
        return [f"for (int i = 0; i < V; ++i) {dst}[i] = {self._decode(f'{ptr}[{base} + (j0 + i) * {stride}]')};"]

    def _store(self, ptr: str, base: str, stride: str) -> list[str]:
        """Column ``j0 + i`` of the 16-bit row at ``ptr + base`` set to ``y[i]``."""
        if self.vec:
            return [
                "{",
                "  AclVec<unsigned short, V> w;",
                f"  for (int i = 0; i < V; ++i) w.v[i] = {self._narrow('y[i]')};",
                f"  *reinterpret_cast<AclVec<unsigned short, V>*>({ptr} + {base} + j0) = w;",
                "}",
            ]
        return [f"for (int i = 0; i < V; ++i) {ptr}[{base} + (j0 + i) * {stride}] = {self._narrow('y[i]')};"]

    def _cache(self, which: str, int8: bool, offset: bool) -> list[str]:
        """Row ``y`` of head ``hh`` into ``which``'s PA_NZ slot (quantised for an INT8 cache)."""
        p = 32 if int8 else 16
        c = f"m.{which}_cache"
        cache = f"{which}_cache"
        if self.nd:  # [BlockNum, BlockSize, N, D]: the lane's columns j0.. of head hh, unit-stride under vec
            lines = [f"const long long at = blk * {c}[0] + row * {c}[1] + (long long)hh * {c}[2];"]
        else:
            lines = [
                f"const long long col = (long long)hh * HD + j0;  // the lane's first column of the {which} row",
                f"const long long at = blk * {c}[0] + (col / {p}) * {c}[1] + row * {c}[2];",
            ]
        if int8:
            sc, off = f"m.{which}_scale", f"m.{which}_offset"
            lines += [
                "signed char b[V];",
                "for (int i = 0; i < V; ++i) {",
                f"  float q = (float)y[i] / {which}_scale[hh * {sc}[0] + (j0 + i) * {sc}[1]];",
                *([f"  q = q + {which}_off[hh * {off}[0] + (j0 + i) * {off}[1]];"] if offset else []),
                "  b[i] = q != q ? (signed char)0 : (signed char)fminf(fmaxf(rintf(q), -128.0f), 127.0f);",
                "}",
            ]
            value = "b[i]"
            word = "signed char"
        else:
            value = self._narrow("y[i]")
            word = "unsigned short"
        if self.vec:  # the lane's V columns sit in one fractal piece, unit-stride
            lines += [
                "{",
                f"  AclVec<{word}, V> w;",
                f"  for (int i = 0; i < V; ++i) w.v[i] = {value};",
                f"  *reinterpret_cast<AclVec<{word}, V>*>({cache} + at + {'j0' if self.nd else f'col % {p}'}) = w;",
                "}",
            ]
        elif self.nd:
            lines += [f"for (int i = 0; i < V; ++i) {cache}[at + (j0 + i) * {c}[3]] = {value};"]
        else:
            lines += [
                "for (int i = 0; i < V; ++i) {",
                "  const long long ci = col + i;",
                f"  {cache}[blk * {c}[0] + (ci / {p}) * {c}[1] + row * {c}[2] + (ci % {p}) * {c}[3]] = {value};",
                "}",
            ]
        return lines

    def source(self) -> str:
        """The complete kernel source."""
        kc = "signed char" if self.k_int8 else "unsigned short"
        vc = "signed char" if self.v_int8 else "unsigned short"
        params = [
            "const QkvMeta m",
            "const unsigned short* __restrict__ qkv",
            "const unsigned short* __restrict__ q_gamma",
            "const unsigned short* __restrict__ k_gamma",
            "const unsigned short* __restrict__ cs",
            "const unsigned short* __restrict__ sn",
            "const long long* __restrict__ index",
            "unsigned short* __restrict__ q_out",
            f"{kc}* __restrict__ k_cache",
            f"{vc}* __restrict__ v_cache",
            "const float* __restrict__ k_scale",
            "const float* __restrict__ v_scale",
            "const float* __restrict__ k_off",
            "const float* __restrict__ v_off",
            "unsigned short* __restrict__ q_bq",
            "unsigned short* __restrict__ k_bq",
            "unsigned short* __restrict__ v_bq",
            *flag_param(self.checks),
        ]
        g = self.group
        if self.checks is None:  # a Check launch ran before: its verdict is the flag
            prologue = ["if (*flag) return;"]
        else:  # every block checks the whole (short) index; the values load beside the data, one round trip
            prologue = [
                "int bad = threadIdx.x == 0 ? *flag : 0;",
                "for (long long q = threadIdx.x; q < chk0_count; q += blockDim.x) {",
                "  const long long v = chk0[q * chk0_stride];",
                "  bad |= (v < chk0_low || v >= chk0_high) ? 1 : 0;",
                "}",
                "__shared__ int acl_bad;",
                "if (threadIdx.x == 0) acl_bad = 0;",
                "__syncthreads();",
                "if (bad) acl_bad = 1;",
                "__syncthreads();",
                "if (acl_bad) {  // a value outside [-1, slots) (or the flag already set): nothing is written",
                "  if (blockIdx.x == 0 && threadIdx.x == 0) *flag = 1;",
                "  return;",
                "}",
            ]
        body = [
            "const long long gid = (long long)blockIdx.x * blockDim.x + threadIdx.x;",
            "const int lane = (int)(threadIdx.x % G);",
            "const long long unit = gid / G;",
            "const bool live = unit < m.units;",
            "// 32-bit division: units = tokens x heads < 2^31 (the host refuses more)",
            "const long long t = live ? (long long)((unsigned)unit / (unsigned)m.heads) : 0;",
            "const int h = live ? (int)((unsigned)unit % (unsigned)m.heads) : 0;",
            "const int j0 = lane * V;",
            "const int kind = h < m.nq ? 0 : (h < m.nq + m.nk ? 1 : 2);  // q, k, v",
            "// every load first (dead and v lanes read valid rows too): one memory round trip, overlapping the check",
            "acc_t x[V], y[V], p[V], gm[V], c[V], s[V];",
            "const long long xb = t * m.qkv[0] + (long long)h * HD * m.qkv[1];",
            *self._load("x", "qkv", "xb", "m.qkv[1]"),
            "const unsigned short* gamma = kind == 0 ? q_gamma : k_gamma;",
            "const long long gs = kind == 0 ? m.q_gamma : m.k_gamma;",
            *self._load("gm", "gamma", "0", "gs"),
            *self._load("c", "cs", "t * m.cos[0]", "m.cos[1]"),
            *self._load("s", "sn", "t * m.sin[0]", "m.sin[1]"),
            "const long long slot = index[t * m.index];",
            *prologue,
            "acc_t ss = 0;",
            "for (int i = 0; i < V; ++i) ss += x[i] * x[i];",
            "for (int o = G / 2; o > 0; o >>= 1) ss += ACL_SHFL_XOR(ss, o);",
            "const acc_t eps = (acc_t)__longlong_as_double(m.epsilon_bits);",
            "const acc_t r = (acc_t)1 / acl_sqrt(ss / (acc_t)HD + eps);",
            "for (int i = 0; i < V; ++i) y[i] = kind < 2 ? x[i] * r * gm[i] : x[i];",
            "for (int i = 0; i < V; ++i) p[i] = ACL_SHFL_XOR(y[i], G / 2);  // columns j -+ D/2",
            "if (kind < 2) {",
            "  const acc_t sign = lane < G / 2 ? (acc_t)-1 : (acc_t)1;  // cat(-y2, y1)",
            "  for (int i = 0; i < V; ++i) y[i] = y[i] * c[i] + sign * p[i] * s[i];",
            "}",
            "if (!live) return;  // after the last shuffle",
            "if (kind == 0) {",
            "  const long long ob = t * m.q_out[0] + (long long)h * HD * m.q_out[1];",
            *("  " + line for line in self._store("q_out", "ob", "m.q_out[1]")),
            "  if (q_bq != 0) {",
            "    const long long bb = t * m.q_bq[0] + (long long)h * HD * m.q_bq[1];",
            *("    " + line for line in self._store("q_bq", "bb", "m.q_bq[1]")),
            "  }",
            "  return;",
            "}",
            "const int hh = kind == 1 ? h - (int)m.nq : h - (int)(m.nq + m.nk);",
            "unsigned short* bq = kind == 1 ? k_bq : v_bq;",
            "if (bq != 0) {",
            "  const long long b0 = kind == 1 ? m.k_bq[0] : m.v_bq[0], b1 = kind == 1 ? m.k_bq[1] : m.v_bq[1];",
            "  const long long bb = t * b0 + (long long)hh * HD * b1;",
            *("  " + line for line in self._store("bq", "bb", "b1")),
            "}",
            "if (slot < 0) return;  // -1: the token is not cached (other values were refused by the check)",
            "long long blk, row;",
            "if (slot <= 0xffffffffLL && m.block_size <= 0xffffffffLL) {  // 32-bit division where the values fit",
            "  blk = (unsigned)slot / (unsigned)m.block_size;",
            "  row = (unsigned)slot % (unsigned)m.block_size;",
            "} else {",
            "  blk = slot / m.block_size;",
            "  row = slot % m.block_size;",
            "}",
            "if (kind == 1) {",
            *("  " + line for line in self._cache("k", self.k_int8, self.k_offset)),
            "} else {",
            *("  " + line for line in self._cache("v", self.v_int8, self.v_offset)),
            "}",
        ]
        what = (
            f"QkvRmsNormRopeCache {self.dtype.short}, k {'int8' if self.k_int8 else '16-bit'}"
            f"{' asym' if self.k_offset else ''}, v {'int8' if self.v_int8 else '16-bit'}"
            f"{' asym' if self.v_offset else ''}, {g} lanes a head{', vector access' if self.vec else ''}"
            f"{', index checked inline' if self.inline else ''}{', ND caches' if self.nd else ', PA_NZ caches'}"
        )
        return "\n".join(
            [
                PRELUDE,
                HELPERS,
                SHUFFLE_XOR,
                f"// norm_rope_cache: {what}",
                _struct(),
                f"typedef {self._acc()} acc_t;",
                f"static constexpr int G = {g};  // lanes a head",
                f"static constexpr int V = {self.lanes_cols};  // columns a lane",
                f"static constexpr int HD = {self.head_dim};  // head dim",
                f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {self.kernel_name}(',
                "    " + ",\n    ".join(params) + ") {",
                *("  " + line for line in body),
                "}",
                "",
            ]
        )
