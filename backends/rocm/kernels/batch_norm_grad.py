"""Kernel generators of BatchNorm's backward ops: per-channel sums, a per-channel finish, an elementwise apply.

* :class:`ChannelSums`: ``gridDim.y`` blocks per channel (grid-stride over channels) sum ``dy`` and
  ``dy·(x - mean)`` over shares of the channel's N·spatial elements in fp32 (each thread a strided share, then
  a shared-memory tree) into an fp32 scratch ``[splits, 2, C]`` of partial sums;
* :class:`Finish`: a thread per channel reads the two sums (the scratch's partials added in split order, or
  sumDy / sumDyXmu tensors), the
  statistics (mean; invstd, or a variance and eps), the weight and the count (a constant, or the sum of a
  counter tensor), writes the op's per-channel outputs rounded once, and the coefficients of the apply pass,
  ``dx = alpha·dy + beta·(x - mean) + gamma``, as fp32 ``[4, C]`` (alpha, beta, gamma, mean);
* :class:`Apply`: a grid-stride loop over every element writes ``dx`` into gradInput's view.

Strided views throughout; integer arguments in a ``Meta`` struct (``n``, scalars, per-dim rows) as the
convolution family passes them.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grid_stride import meta_struct
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
_F32 = ctype(D.ACL_FLOAT)
VECTORS: Final = ("sumDy", "sumDyXmu", "gradWeight", "gradBias")
"""Finish's per-channel outputs, in the order of their pointer arguments."""


def _name(kind: str, key: object) -> str:
    return f"acl_bngrad_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _vec_param(name: str, dtype: D | None, const: bool = True) -> list[str]:
    if dtype is None:
        return []
    return [f"{'const ' if const else ''}{ctype(dtype).storage}* __restrict__ {name}"]


def _vec_load(name: str, dtype: D | None, at: str, default: str) -> str:
    return default if dtype is None else load(f"{name}[{at}]", ctype(dtype), _F32)


# ----------------------------------------------------------------------------- per-channel sums
SUMS_SCALARS: Final = ("M", "DY_C", "X_C", "MEAN_S")
SUMS_ROWS: Final = ("SIZE", "DY_S", "X_S")


@dataclass(frozen=True)
class ChannelSums:
    """``s[y, 0, c] = Σ dy``, ``s[y, 1, c] = Σ dy·(x - mean[c])`` over split ``y``'s share of channel ``c``'s ``M``
    elements (elements ``y·blockDim.x + t``, stepping ``gridDim.y·blockDim.x``), fp32."""

    dtype: D
    mean: D | None
    dims: int
    """Dims other than the channel's (the batch and the spatial ones, in order)."""
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("sums", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _sums_source(self)


@functools.lru_cache(maxsize=128)
def _sums_source(k: ChannelSums) -> str:
    idx, t = k.index_type, ctype(k.dtype)
    params = [
        "const Meta m",
        f"const {t.storage}* __restrict__ dy",
        f"const {t.storage}* __restrict__ x",
        *_vec_param("mean", k.mean),
        "float* __restrict__ sums",
    ]
    body = [
        f"__shared__ float part1[{BLOCK_THREADS}], part2[{BLOCK_THREADS}];",
        f"for ({idx} c = blockIdx.x; c < m.n; c += gridDim.x) {{",
        f"  const float mu = {_vec_load('mean', k.mean, 'c * MEAN_S', '0.0f')};",
        "  float s1 = 0.0f, s2 = 0.0f;",
        f"  for ({idx} j = ({idx})blockIdx.y * blockDim.x + threadIdx.x; j < M; j += ({idx})gridDim.y * blockDim.x) {{",
        f"    {idx} rest = j, at_dy = c * DY_C, at_x = c * X_C;",
        "    #pragma unroll",
        f"    for (int d = {k.dims - 1}; d >= 0; --d) {{",
        f"      const {idx} i = rest % SIZE(d); rest /= SIZE(d);",
        "      at_dy += i * DY_S(d); at_x += i * X_S(d);",
        "    }",
        f"    const float g = {load('dy[at_dy]', t, _F32)};",
        f"    s1 += g; s2 += g * ({load('x[at_x]', t, _F32)} - mu);",
        "  }",
        "  part1[threadIdx.x] = s1; part2[threadIdx.x] = s2;",
        "  __syncthreads();",
        "  for (int half = blockDim.x / 2; half > 0; half /= 2) {",
        "    if ((int)threadIdx.x < half) {",
        "      part1[threadIdx.x] += part1[threadIdx.x + half];",
        "      part2[threadIdx.x] += part2[threadIdx.x + half];",
        "    }",
        "    __syncthreads();",
        "  }",
        "  if (threadIdx.x == 0) {",
        f"    const {idx} row = ({idx})blockIdx.y * 2 * m.n;",
        "    sums[row + c] = part1[0]; sums[row + m.n + c] = part2[0];",
        "  }",
        "  __syncthreads();",
        "}",
    ]
    return "\n".join(
        [
            PRELUDE,
            f"// BatchNorm backward: per-channel sums of dy and dy·(x - mean), {k.dtype.short}",
            *meta_struct(idx, SUMS_SCALARS, SUMS_ROWS, k.dims),
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {k.kernel_name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


# ----------------------------------------------------------------------------- per-channel finish
FINISH_SCALARS: Final = (
    *("S1_S", "S2_S", "MEAN_S", "INV_S", "W_S", "O0_S", "O1_S", "O2_S", "O3_S", "COUNT_N", "SPLITS"),
)
FINISH_ROWS: Final = ("COUNT_SIZE", "COUNT_S")


@dataclass(frozen=True)
class Finish:
    """Per channel: the outputs named in ``outputs`` (dtype or None each, :data:`VECTORS` order) and, when
    ``coefficients``, the apply pass's fp32 ``[alpha, beta, gamma, mean]`` rows.

    ``sums``: the dtypes of sumDy and sumDyXmu when read from those tensors, None for the fp32 scratch
    (``sums[c]``, ``sums[C + c]``). ``invstd``: ``"invstd"`` (a tensor), ``"var"`` (``1/sqrt(var + eps)``) or
    ``"eps"`` (``1/sqrt(1 + eps)``: a null running variance). ``counter``: the counter's dtype (the count is
    the sum of its ``COUNT_N`` elements, ``counter_dims`` dims), or None (the count is the ``count`` argument).
    ``training``: whether beta and gamma carry the batch statistics' terms (zero in inference).
    """

    sums: tuple[D, D] | None
    mean: D | None
    invstd_kind: str
    invstd: D | None
    weight: D | None
    counter: D | None
    counter_dims: int
    outputs: tuple[D | None, D | None, D | None, D | None]
    coefficients: bool
    training: bool
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("finish", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _finish_source(self)


@functools.lru_cache(maxsize=128)
def _finish_source(k: Finish) -> str:
    idx = k.index_type
    params = ["const Meta m"]
    if k.sums is None:
        params.append("const float* __restrict__ sums")
    else:
        params += _vec_param("sum_dy", k.sums[0]) + _vec_param("sum_dy_xmu", k.sums[1])
    params += _vec_param("mean", k.mean) + _vec_param("invstd", k.invstd) + _vec_param("weight", k.weight)
    params += _vec_param("counter", k.counter)
    params += [p for i, dt in enumerate(k.outputs) for p in _vec_param(f"out{i}", dt, const=False)]
    if k.coefficients:
        params.append("float* __restrict__ coef")
    params += ["const float eps", "const float count_value"]
    if k.invstd_kind == "invstd":
        inv = _vec_load("invstd", k.invstd, "c * INV_S", "")
    elif k.invstd_kind == "var":
        inv = f"1.0f / sqrtf({_vec_load('invstd', k.invstd, 'c * INV_S', '')} + eps)"
    else:
        inv = "1.0f / sqrtf(1.0f + eps)"
    body = [
        f"for ({idx} c = ({idx})blockIdx.x * blockDim.x + threadIdx.x; c < m.n; c += ({idx})gridDim.x * blockDim.x) {{",
    ]
    if k.sums is None:
        body += [
            "  float s1 = 0.0f, s2 = 0.0f;",
            f"  for ({idx} y = 0; y < SPLITS; ++y) {{",
            "    s1 += sums[2 * y * m.n + c]; s2 += sums[(2 * y + 1) * m.n + c];",
            "  }",
        ]
    else:
        s1 = _vec_load("sum_dy", k.sums[0], "c * S1_S", "")
        body.append(f"  const float s1 = {s1}, s2 = {_vec_load('sum_dy_xmu', k.sums[1], 'c * S2_S', '')};")
    body += [
        f"  const float inv = {inv};",
        f"  const float w = {_vec_load('weight', k.weight, 'c * W_S', '1.0f')};",
    ]
    if k.counter is not None:
        body += [
            "  float count = 0.0f;",
            f"  for ({idx} j = 0; j < COUNT_N; ++j) {{",
            f"    {idx} rest = j, at = 0;",
            f"    for (int d = {k.counter_dims - 1}; d >= 0; --d) {{ at += (rest % COUNT_SIZE(d)) * COUNT_S(d); "
            "rest /= COUNT_SIZE(d); }",
            f"    count += {load('counter[at]', ctype(k.counter), _F32)};",
            "  }",
        ]
    else:
        body.append("  const float count = count_value;")
    values = ("s1", "s2", "s2 * inv", "s1")
    for i, (dt, value) in enumerate(zip(k.outputs, values)):
        if dt is not None:
            body.append(f"  out{i}[c * O{i}_S] = {store(value, _F32, ctype(dt))};")
    if k.coefficients:
        body += [
            "  const float alpha = inv * w;",
            "  coef[c] = alpha;",
            f"  coef[m.n + c] = {'-alpha * inv * inv * s2 / count' if k.training else '0.0f'};",
            f"  coef[2 * m.n + c] = {'-alpha * s1 / count' if k.training else '0.0f'};",
            f"  coef[3 * m.n + c] = {_vec_load('mean', k.mean, 'c * MEAN_S', '0.0f')};",
        ]
    body.append("}")
    return "\n".join(
        [
            PRELUDE,
            "// BatchNorm backward: per-channel outputs and the apply pass's coefficients",
            *meta_struct(idx, FINISH_SCALARS, FINISH_ROWS, k.counter_dims),
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {k.kernel_name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )


# ----------------------------------------------------------------------------- elementwise apply
APPLY_SCALARS: Final = ("C",)
APPLY_ROWS: Final = ("SIZE", "DY_S", "X_S", "DX_S")


@dataclass(frozen=True)
class Apply:
    """``dx[i] = alpha[c]·dy[i] + beta[c]·(x[i] - mean[c]) + gamma[c]`` (``c`` = dim 1 of ``i``), rounded once."""

    dtype: D
    out: D
    rank: int
    index_type: str
    centred: bool = True
    """False when beta is zero for every channel (inference): x is not read."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("apply", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _apply_source(self)


@functools.lru_cache(maxsize=128)
def _apply_source(k: Apply) -> str:
    idx, t = k.index_type, ctype(k.dtype)
    params = ["const Meta m", f"const {t.storage}* __restrict__ dy"]
    if k.centred:
        params.append(f"const {t.storage}* __restrict__ x")
    params += ["const float* __restrict__ coef", f"{ctype(k.out).storage}* __restrict__ dx"]
    value = "coef[c] * g + coef[2 * C + c]"
    if k.centred:
        value = f"coef[c] * g + coef[C + c] * ({load('x[at_x]', t, _F32)} - coef[3 * C + c]) + coef[2 * C + c]"
    body = [
        f"const {idx} grid_step = ({idx})gridDim.x * ({idx})blockDim.x;",
        f"for ({idx} i = ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < m.n; i += grid_step) {{",
        f"  {idx} rest = i, at_dy = 0, at_x = 0, at_dx = 0, c = 0;",
        "  #pragma unroll",
        f"  for (int d = {k.rank - 1}; d >= 0; --d) {{",
        f"    const {idx} j = rest % SIZE(d); rest /= SIZE(d);",
        "    if (d == 1) c = j;",
        "    at_dy += j * DY_S(d); at_x += j * X_S(d); at_dx += j * DX_S(d);",
        "  }",
        f"  const float g = {load('dy[at_dy]', t, _F32)};",
        f"  const float v = {value};",
        f"  dx[at_dx] = {store('v', _F32, ctype(k.out))};",
        "}",
    ]
    return "\n".join(
        [
            PRELUDE,
            f"// BatchNorm backward: dx = alpha·dy + beta·(x - mean) + gamma, {k.dtype.short} -> {k.out.short}",
            *meta_struct(idx, APPLY_SCALARS, APPLY_ROWS, k.rank),
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {k.kernel_name}(',
            "    " + ",\n    ".join(params) + ") {",
            *("  " + line for line in body),
            "}",
            "",
        ]
    )
