"""Kernel generators of the convolution family: im2col, the plain epilogue, and col2im with its epilogue.

A convolution runs as im2col into a column buffer, one batched GEMM over the groups (the provider's
BLAS, fp32 results), then an epilogue kernel that adds the bias and rounds once to the output's dtype
while writing the output's (possibly strided) view. A transposed convolution runs the GEMM first
(``W_g^T @ x_g``, columns of per-offset contributions) and then col2im, which *pulls* every output
element's contributions (deterministic, no atomics) and applies the same epilogue.

Every kernel is a grid-stride loop over one chunk of the problem. Its integer arguments travel in the
``Meta`` struct the other families use (``n``, ``shape[A]`` scalars, ``stride[R][S]`` per-spatial-dim
rows); the ``#define`` names below give them meaning. Layouts (``S`` = spatial rank, all row-major):

* column buffer (plain): ``[C_in, Kprod, imgs, pc]``: channel (group-major), kernel offset, image of
  the chunk, output position ``p0 + pp`` of the chunk's range;
* GEMM result (plain): ``[C_out, imgs, pc]`` fp32;
* column buffer (transposed): ``[Gc, OCc, Kprod, imgs, Lprod]`` fp32, ``Gc`` groups and ``OCc``
  output channels per group of the chunk.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grid_stride import grid_stride_kernel, meta_struct, unflatten

IM2COL_SCALARS: Final = ("PC", "P0", "KPROD", "IMGS", "XS_N", "XS_C")
IM2COL_ROWS: Final = ("OSIZE", "KSIZE", "CSTRIDE", "PAD", "DIL", "LSIZE", "XSTRIDE")
EPILOGUE_SCALARS: Final = ("PC", "P0", "IMGS", "COUT", "OS_N", "OS_C", "BS")
EPILOGUE_ROWS: Final = ("OSIZE", "OSTRIDE")
COL2IM_SCALARS: Final = ("OPROD", "OCC", "GC", "IMGS", "KPROD", "LPROD", "OCG", "G0", "OC0", "OS_N", "OS_C", "BS")
COL2IM_ROWS: Final = ("OSIZE", "OSTRIDE", "KSIZE", "CSTRIDE", "PAD", "DIL", "LSIZE")
_F32 = ctype(D.ACL_FLOAT)


def _name(kind: str, key: object) -> str:
    return f"acl_conv_{kind}_{hashlib.sha1(repr(key).encode()).hexdigest()[:12]}"


def _kernel(comment: str, meta: list[str], name: str, params: list[str], index_type: str, body: list[str]) -> str:
    return grid_stride_kernel(f"convolution: {comment}", meta, name, params, index_type, body)


@dataclass(frozen=True)
class Im2col:
    """``col[c, kpos, img, pp] = x[img, c, o*stride - pad + k*dilation]`` (0 in the padding), as ``dst``."""

    src: D
    dst: D
    spatial: int
    index_type: str
    hf32: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("im2col", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _im2col_source(self)


@functools.lru_cache(maxsize=256)
def _im2col_source(k: Im2col) -> str:
    idx, s = k.index_type, k.spatial
    src, dst = ctype(k.src), ctype(k.dst)
    value = load("x[at]", src, _F32)
    if k.hf32:
        value = f"acl_round_hf32({value})"
    body = [
        f"const {idx} pp = i % PC;",
        f"{idx} r = i / PC;",
        f"const {idx} img = r % IMGS; r /= IMGS;",
        f"const {idx} kpos = r % KPROD;",
        f"const {idx} c = r / KPROD;",
        f"const {idx} p = P0 + pp;",
        *unflatten(idx, "p", "o", "OSIZE", s),
        *unflatten(idx, "kpos", "kk", "KSIZE", s),
        f"{idx} at = img * XS_N + c * XS_C;",
        "bool inside = true;",
        "#pragma unroll",
        f"for (int d = 0; d < {s}; ++d) {{",
        f"  const {idx} pos = o[d] * CSTRIDE(d) - PAD(d) + kk[d] * DIL(d);",
        "  inside = inside && pos >= 0 && pos < LSIZE(d);",
        "  at += pos * XSTRIDE(d);",
        "}",
        "float v = 0.0f;",
        f"if (inside) v = {value};",
        f"col[i] = {store('v', _F32, dst)};",
    ]
    params = ["const Meta m", f"const {src.storage}* __restrict__ x", f"{dst.storage}* __restrict__ col"]
    return _kernel(
        f"im2col {k.src.short} -> {k.dst.short}{' (HF32)' if k.hf32 else ''}, {s}-D",
        meta_struct(idx, IM2COL_SCALARS, IM2COL_ROWS, s),
        k.kernel_name,
        params,
        idx,
        body,
    )


def _view_offset(idx: str, s: int, view: str) -> list[str]:
    """``at``: element (``img``, ``oc``, ``o``)'s offset in view ``view`` (its ``S_N``, ``S_C``, ``STRIDE`` fields)."""
    return [
        f"{idx} at = img * {view}S_N + oc * {view}S_C;",
        "#pragma unroll",
        f"for (int d = 0; d < {s}; ++d) at += o[d] * {view}STRIDE(d);",
    ]


def chunk_position(idx: str, s: int, view: str) -> list[str]:
    """Element ``i`` of a ``[C_out, imgs, pc]`` chunk: ``img``, ``oc``, ``o`` and ``at`` in the view ``view``."""
    return [
        f"const {idx} pp = i % PC;",
        f"{idx} r = i / PC;",
        f"const {idx} img = r % IMGS;",
        f"const {idx} oc = r / IMGS;",
        *unflatten(idx, "P0 + pp", "o", "OSIZE", s),
        *_view_offset(idx, s, view),
    ]


@dataclass(frozen=True)
class Epilogue:
    """``out[img, oc, p0 + pp] = acc[oc, img, pp] + bias[oc]`` rounded once to ``out``'s dtype."""

    out: D
    bias: D | None
    spatial: int
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("epilogue", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _epilogue_source(self)


def _params(out: D, bias: D | None, source: str) -> list[str]:
    params = ["const Meta m", f"const float* __restrict__ {source}"]
    if bias is not None:
        params.append(f"const {ctype(bias).storage}* __restrict__ bias")
    params.append(f"{ctype(out).storage}* __restrict__ out")
    return params


def _bias_and_store(out: D, bias: D | None, index_type: str) -> list[str]:
    lines = []
    if bias is not None:
        lines.append(f"v += {load('bias[oc * BS]', ctype(bias), _F32)};")
    lines.append(f"out[at] = {store('v', _F32, ctype(out))};")
    return lines


@functools.lru_cache(maxsize=256)
def _epilogue_source(k: Epilogue) -> str:
    idx, s = k.index_type, k.spatial
    body = [
        *chunk_position(idx, s, "O"),
        "float v = acc[i];",
        *_bias_and_store(k.out, k.bias, idx),
    ]
    return _kernel(
        f"epilogue fp32 -> {k.out.short}, bias {k.bias.short if k.bias else 'none'}, {s}-D",
        meta_struct(idx, EPILOGUE_SCALARS, EPILOGUE_ROWS, s),
        k.kernel_name,
        _params(k.out, k.bias, "acc"),
        idx,
        body,
    )


@dataclass(frozen=True)
class Col2im:
    """Transposed convolution's output: every output element pulls its contributions from the columns.

    ``out[img, ch, o] = bias[ch] + sum_k col[g, ocl, k, img, l]`` over kernel offsets ``k`` with
    ``o = l*stride - pad + k*dilation``, where ``ch = (G0 + g)*OCG + OC0 + ocl``.
    """

    out: D
    bias: D | None
    spatial: int
    index_type: str

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return _name("col2im", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _col2im_source(self)


@functools.lru_cache(maxsize=256)
def _col2im_source(k: Col2im) -> str:
    idx, s = k.index_type, k.spatial
    body = [
        f"const {idx} op = i % OPROD;",
        f"{idx} r = i / OPROD;",
        f"const {idx} ocl = r % OCC; r /= OCC;",
        f"const {idx} g = r % GC;",
        f"const {idx} img = r / GC;",
        *unflatten(idx, "op", "o", "OSIZE", s),
        f"const {idx} base = (g * OCC + ocl) * KPROD;",
        "float v = 0.0f;",
        f"for ({idx} kpos = 0; kpos < KPROD; ++kpos) {{",
        f"  {idx} rest = kpos, l = 0, scale = 1;",
        "  bool hit = true;",
        "  #pragma unroll",
        f"  for (int d = {s - 1}; d >= 0; --d) {{",
        f"    const {idx} kd = rest % KSIZE(d); rest /= KSIZE(d);",
        f"    const {idx} t = o[d] + PAD(d) - kd * DIL(d);",
        f"    const {idx} ld = t / CSTRIDE(d);",
        "    hit = hit && t >= 0 && ld * CSTRIDE(d) == t && ld < LSIZE(d);",
        "    l += ld * scale;",
        "    scale *= LSIZE(d);",
        "  }",
        "  if (hit) v += col[((base + kpos) * IMGS + img) * LPROD + l];",
        "}",
        f"const {idx} oc = (G0 + g) * OCG + OC0 + ocl;",
        *_view_offset(idx, s, "O"),
        *_bias_and_store(k.out, k.bias, idx),
    ]
    return _kernel(
        f"col2im fp32 -> {k.out.short}, bias {k.bias.short if k.bias else 'none'}, {s}-D",
        meta_struct(idx, COL2IM_SCALARS, COL2IM_ROWS, s),
        k.kernel_name,
        _params(k.out, k.bias, "col"),
        idx,
        body,
    )
