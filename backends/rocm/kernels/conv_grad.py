"""Kernel generator of ConvolutionBackward: the gather of an output-shaped operand into the GEMM's layout.

The weight gradient of a plain convolution is ``dW_g = dY_g @ col_g^T`` over one chunk of (images,
output positions) at a time: ``col`` is the forward's im2col buffer ``[C_in, Kprod, imgs, pc]`` and
``dY_g`` the chunk of the output-shaped operand, gathered from its (possibly strided) view into
``[C_out, imgs, pc]`` in the GEMM's dtype by this kernel: the forward epilogue's indexing, read
instead of written. Its integer arguments travel in the family's ``Meta`` struct
(acl_rocm.kernels.grid_stride).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.convolution import Im2col, _kernel, _name, chunk_position
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grid_stride import meta_struct, unflatten

GATHER_SCALARS: Final = ("PC", "P0", "IMGS", "YS_N", "YS_C")
GATHER_ROWS: Final = ("OSIZE", "YSTRIDE")
_F32 = ctype(D.ACL_FLOAT)


@dataclass(frozen=True)
class GatherOut(Im2col):
    """``dst[oc, img, pp] = y[img, oc, p0 + pp]`` converted to ``dst`` (HF32-rounded when asked): Im2col's fields."""

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("gather_out", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _gather_source(self)


@functools.lru_cache(maxsize=256)
def _gather_source(k: GatherOut) -> str:
    idx, s = k.index_type, k.spatial
    src, dst = ctype(k.src), ctype(k.dst)
    value = load("y[at]", src, _F32)
    if k.hf32:
        value = f"acl_round_hf32({value})"
    body = [
        *chunk_position(idx, s, "Y"),
        f"const float v = {value};",
        f"dst[i] = {store('v', _F32, dst)};",
    ]
    params = ["const Meta m", f"const {src.storage}* __restrict__ y", f"{dst.storage}* __restrict__ dst"]
    return _kernel(
        f"gather of an output-shaped operand {k.src.short} -> {k.dst.short}{' (HF32)' if k.hf32 else ''}, {s}-D",
        meta_struct(idx, GATHER_SCALARS, GATHER_ROWS, s),
        k.kernel_name,
        params,
        idx,
        body,
    )


SUM_SCALARS: Final = ("PARTS", "PART_STRIDE")
SUM_ROWS: Final = ("SIZE", "OSTRIDE")


@dataclass(frozen=True)
class SumParts:
    """``out[i] = Σ_p part[p·PART_STRIDE + i]`` over fp32 partial weight gradients, in order, rounded once into
    ``out``'s (possibly strided) view of ``rank`` dims. ``out`` may be ``part`` itself (a running sum: each
    element is read before it is written, by the same thread)."""

    out: D
    rank: int
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("sum_parts", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _sum_parts_source(self)


@functools.lru_cache(maxsize=64)
def _sum_parts_source(k: SumParts) -> str:
    idx = k.index_type
    body = [
        "float v = 0.0f;",
        f"for ({idx} p = 0; p < PARTS; ++p) v += part[p * PART_STRIDE + i];",
        *unflatten(idx, "i", "o", "SIZE", k.rank),
        f"{idx} at = 0;",
        "#pragma unroll",
        f"for (int d = 0; d < {k.rank}; ++d) at += o[d] * OSTRIDE(d);",
        f"out[at] = {store('v', _F32, ctype(k.out))};",
    ]
    params = ["const Meta m", "const float* part", f"{ctype(k.out).storage}* out"]  # may alias: no __restrict__
    return _kernel(
        f"sum of partial weight gradients -> {k.out.short}, rank {k.rank}",
        meta_struct(idx, SUM_SCALARS, SUM_ROWS, k.rank),
        k.kernel_name,
        params,
        idx,
        body,
    )
