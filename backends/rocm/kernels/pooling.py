"""Kernel generator of the pooling family: one template for average and max pooling, forward and backward, 2-D and 3-D.

Every kernel is a grid-stride loop with one thread per element it writes, and no atomics:

* ``avg`` / ``max`` (forward): one thread per output element walks its window (nested loops, one per
  spatial dim, generated for the spatial rank) and writes the average, or the maximum and its flat
  position in the plane (torch's search: the first valid position starts it, a larger value or any
  NaN takes over);
* ``avg_backward`` / ``max_backward``: one thread per input element *gathers* from the outputs whose
  windows cover it (``gradOutput / divisor`` for an average; for a max the gradients whose index
  names this element), so a result never depends on thread timing.

Sums run in float32 (the inputs' values as loaded, rounded to HF32 or float16 where ``cubeMathType``
asks). Integer arguments travel in the ``Meta`` struct of kernels.grid_stride (``n``, ``shape[A]``
scalars, ``stride[R][S]`` per-spatial-dim rows), named by the ``#define`` lines. The leading dims are
``[N, C]`` (an unbatched input passes N's stride 0); ``P`` is a plane's output (forward) or input
(backward) element count.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grid_stride import grid_stride_kernel, locate_in_plane, meta_struct, strided_at

MODES: Final = ("avg", "max", "avg_backward", "max_backward")
SCALARS: Final = ("P", "CH", "XS_N", "XS_C", "OS_N", "OS_C", "IS_N", "IS_C", "DIVISOR", "INCLUDE")
"""``XS`` the read tensor (self, or gradOutput backward), ``OS`` the written one, ``IS`` the indices."""
ROWS: Final = ("KSIZE", "CSTRIDE", "PAD", "DIL", "LSIZE", "OSIZE", "XSTRIDE", "OSTRIDE", "ISTRIDE")
"""``LSIZE`` the input's spatial sizes, ``OSIZE`` the pooled ones; strides of the read, written and indices views."""
_F32 = ctype(D.ACL_FLOAT)
_I64 = ctype(D.ACL_INT64)


@dataclass(frozen=True)
class PoolKernel:
    """One pooling kernel: its mode, spatial rank, data and index dtypes, index type and operand rounding."""

    mode: str
    spatial: int
    dtype: D
    index_type: str
    indices: D | None = None
    rounding: str | None = None
    adaptive: bool = False
    """Windows ``[floor(o·L / O), ceil((o + 1)·L / O))`` (torch's adaptive pools) instead of kernel/stride/padding."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"pooling mode must be one of {MODES}, not {self.mode!r}")

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return f"acl_pool_{self.mode}_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"

    def source(self) -> str:
        """The complete kernel source."""
        return _source(self)


def _min(a: str, b: str) -> str:
    return f"(({a}) < ({b}) ? ({a}) : ({b}))"


def _max(a: str, b: str) -> str:
    return f"(({a}) > ({b}) ? ({a}) : ({b}))"


def _value(k: PoolKernel, at: str, array: str) -> str:
    """One element of ``array`` as a float, rounded as ``cubeMathType`` asks."""
    v = load(f"{array}[{at}]", ctype(k.dtype), _F32)
    if k.rounding == "hf32":
        return f"acl_round_hf32({v})"
    if k.rounding == "fp16":
        return f"acl_h2f(acl_f2h({v}))"
    return v


def _nest(s: int, header: str, inner: list[str]) -> list[str]:
    """``s`` nested loops (``header.format(d=d)`` each, outermost dim first) around ``inner``."""
    lines: list[str] = []
    for d in range(s):
        lines.append("  " * d + header.format(d=d) + " {")
    lines += ["  " * s + line for line in inner]
    lines += ["  " * (s - 1 - d) + "}" for d in range(s)]
    return lines


def _window(k: PoolKernel, idx: str, o: str) -> list[str]:
    """``start`` and ``end`` of output ``o``'s window along dim ``d`` (an average's clipped to the right padding)."""
    if k.adaptive:
        return [
            f"  const {idx} start = ({o} * LSIZE(d)) / OSIZE(d);",
            f"  const {idx} end = (({o} + 1) * LSIZE(d) + OSIZE(d) - 1) / OSIZE(d);",
        ]
    return [
        f"  const {idx} start = {o} * CSTRIDE(d) - PAD(d);",
        f"  const {idx} end = {_min('start + KSIZE(d)', 'LSIZE(d) + PAD(d)')};",
    ]


def _forward_avg(k: PoolKernel, idx: str, s: int) -> list[str]:
    body = [f"{idx} lo[{s}], hi[{s}];", f"{idx} window = 1, covered = 1;"]
    body += [
        "#pragma unroll",
        f"for (int d = 0; d < {s}; ++d) {{",
        *_window(k, idx, "o[d]"),
        "  window *= end - start;",
        f"  lo[d] = {_max('start', '0')}; hi[d] = {_min('end', 'LSIZE(d)')};",
        "  covered *= hi[d] - lo[d];",
        "}",
        "float acc = 0.0f;",
    ]
    at = " + ".join(["n * XS_N + c * XS_C", *(f"p{d} * XSTRIDE({d})" for d in range(s))])
    body += _nest(s, f"for ({idx} p{{d}} = lo[{{d}}]; p{{d}} < hi[{{d}}]; ++p{{d}})", [f"acc += {_value(k, at, 'x')};"])
    out_at = strided_at("n * OS_N + c * OS_C", "o", "OSTRIDE", s)
    body += [
        "const float divisor = (float)(DIVISOR != 0 ? DIVISOR : (INCLUDE ? window : covered));",
        f"out[{out_at}] = {store('acc / divisor', _F32, ctype(k.dtype))};",
    ]
    return body


def _forward_max(k: PoolKernel, idx: str, s: int) -> list[str]:
    """The window's maximum (and, with ``indices``, its flat position); integers compare exactly in 64 bits."""
    integer = ctype(k.dtype).kind != "float"
    vt = _I64 if integer else _F32
    lowest = "(-9223372036854775807LL - 1LL)" if integer else "__uint_as_float(0xff800000u)"
    body = [f"{vt.value} best = {lowest};  // the type's lowest (-inf)", f"{idx} where = -1;"]
    body += [f"{idx} first[{s}], count[{s}], step[{s}];", "#pragma unroll", f"for (int d = 0; d < {s}; ++d) {{"]
    if k.adaptive:
        body += [*_window(k, idx, "o[d]"), "  first[d] = start; count[d] = end - start; step[d] = 1;", "}"]
    else:
        body += ["  first[d] = o[d] * CSTRIDE(d) - PAD(d); count[d] = KSIZE(d); step[d] = DIL(d);", "}"]
    x_at = " + ".join(["n * XS_N + c * XS_C", *(f"p{d} * XSTRIDE({d})" for d in range(s))])
    inner = [
        f"const {idx} p{s - 1} = first[{s - 1}] + k{s - 1} * step[{s - 1}];",
        f"if (p{s - 1} < 0 || p{s - 1} >= LSIZE({s - 1})) continue;",
        f"const {idx} pos = {' + '.join(f'p{d} * span{d}' for d in range(s))};",
        f"const {vt.value} v = {load(f'x[{x_at}]', ctype(k.dtype), vt) if integer else _value(k, x_at, 'x')};",
        "if (where < 0) where = pos;",
        "if (v > best) { best = v; where = pos; }"
        if integer
        else "if (v > best || acl_isnan(v)) { best = v; where = pos; }",
    ]
    lines: list[str] = []
    for d in range(s):
        pad = "  " * d
        lines.append(f"{pad}for ({idx} k{d} = 0; k{d} < count[{d}]; ++k{d}) {{")
        if d < s - 1:
            lines.append(f"{pad}  const {idx} p{d} = first[{d}] + k{d} * step[{d}];")
            lines.append(f"{pad}  if (p{d} < 0 || p{d} >= LSIZE({d})) continue;")
    lines += ["  " * s + line for line in inner]
    lines += ["  " * (s - 1 - d) + "}" for d in range(s)]
    spans = [f"const {idx} span{s - 1} = 1;"]
    for d in range(s - 2, -1, -1):
        spans.append(f"const {idx} span{d} = span{d + 1} * LSIZE({d + 1});")
    body = spans + body + lines
    body.append(f"out[{strided_at('n * OS_N + c * OS_C', 'o', 'OSTRIDE', s)}] = {store('best', vt, ctype(k.dtype))};")
    if k.indices is not None:
        itype = ctype(k.indices).storage
        body.append(f"indices[{strided_at('n * IS_N + c * IS_C', 'o', 'ISTRIDE', s)}] = ({itype})where;")
    return body


def _backward(k: PoolKernel, idx: str, s: int) -> list[str]:
    """One input element ``p`` gathers from every output window covering it."""
    body = [f"{idx} olo[{s}], ohi[{s}];", "#pragma unroll", f"for (int d = 0; d < {s}; ++d) {{"]
    if k.adaptive:  # exactly the windows covering p
        body += [
            "  olo[d] = (p[d] * OSIZE(d)) / LSIZE(d);",
            f"  ohi[d] = {_min('((p[d] + 1) * OSIZE(d) + LSIZE(d) - 1) / LSIZE(d)', 'OSIZE(d)')};",
        ]
    else:
        body += [
            f"  const {idx} reach = p[d] + PAD(d) - (KSIZE(d) - 1) * DIL(d);  // the first window start reaching p",
            "  olo[d] = reach <= 0 ? 0 : (reach + CSTRIDE(d) - 1) / CSTRIDE(d);",
            f"  ohi[d] = {_min('(p[d] + PAD(d)) / CSTRIDE(d) + 1', 'OSIZE(d)')};",
        ]
    body += ["}", "float acc = 0.0f;"]
    g_at = " + ".join(["n * XS_N + c * XS_C", *(f"o{d} * XSTRIDE({d})" for d in range(s))])
    if k.mode == "max_backward":
        spans = " + ".join(f"p[{d}] * span{d}" for d in range(s))
        body[:0] = [f"const {idx} span{s - 1} = 1;"] + [
            f"const {idx} span{d} = span{d + 1} * LSIZE({d + 1});" for d in range(s - 2, -1, -1)
        ]
        body.append(f"const long long self_pos = {spans};")
        i_at = " + ".join(["n * IS_N + c * IS_C", *(f"o{d} * ISTRIDE({d})" for d in range(s))])
        inner = [f"if ((long long)indices[{i_at}] == self_pos) acc += {_value(k, g_at, 'x')};"]
    else:
        # an average's window (o·stride - pad, clipped to L + pad) covers p iff it starts at or before p
        inner = [
            "float divisor = (float)DIVISOR;",
            "if (DIVISOR == 0) {",
            f"  {idx} window = 1, covered = 1;",
        ]
        for d in range(s):
            if k.adaptive:
                first = f"(o{d} * LSIZE({d})) / OSIZE({d})"
                last = f"((o{d} + 1) * LSIZE({d}) + OSIZE({d}) - 1) / OSIZE({d})"
            else:
                first = f"o{d} * CSTRIDE({d}) - PAD({d})"
                last = _min(f"s{d} + KSIZE({d})", f"LSIZE({d}) + PAD({d})")
            inner += [
                f"  const {idx} s{d} = {first};",
                f"  const {idx} e{d} = {last};",
                f"  window *= e{d} - s{d};",
                f"  covered *= {_min(f'e{d}', f'LSIZE({d})')} - {_max(f's{d}', '0')};",
            ]
        inner += ["  divisor = (float)(INCLUDE ? window : covered);", "}", f"acc += {_value(k, g_at, 'x')} / divisor;"]
    body += _nest(s, f"for ({idx} o{{d}} = olo[{{d}}]; o{{d}} < ohi[{{d}}]; ++o{{d}})", inner)
    body.append(f"out[{strided_at('n * OS_N + c * OS_C', 'p', 'OSTRIDE', s)}] = {store('acc', _F32, ctype(k.dtype))};")
    return body


@functools.lru_cache(maxsize=256)
def _source(k: PoolKernel) -> str:
    idx, s = k.index_type, k.spatial
    data = ctype(k.dtype).storage
    params = ["const Meta m", f"const {data}* __restrict__ x"]
    if k.mode == "max_backward":
        assert k.indices is not None
        params.append(f"const {ctype(k.indices).storage}* __restrict__ indices")
    params.append(f"{data}* __restrict__ out")
    if k.mode == "max" and k.indices is not None:
        params.append(f"{ctype(k.indices).storage}* __restrict__ indices")
    backward = k.mode.endswith("backward")
    body = locate_in_plane(idx, s, "p" if backward else "o", "LSIZE" if backward else "OSIZE")
    if k.mode == "avg":
        body += _forward_avg(k, idx, s)
    elif k.mode == "max":
        body += _forward_max(k, idx, s)
    else:
        body += _backward(k, idx, s)
    rounding = (f", operands {k.rounding}" if k.rounding else "") + (", adaptive" if k.adaptive else "")
    comment = f"pooling: {k.mode} {s}-D, {k.dtype.short}{rounding}"
    return grid_stride_kernel(comment, meta_struct(idx, SCALARS, ROWS, s), k.kernel_name, params, idx, body)
