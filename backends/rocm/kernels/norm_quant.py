"""Row kernels of the fused add + RmsNorm + quantisation ops (kind ``rmsnormquant``, on ``kernels/reduction.py``).

One block per row: the sum of squares of ``x = x1 + x2`` (in float64, so ``y`` rounded to FLOAT32 is
the reference's once-rounded value), then each element. Operands: ``x``, ``x2``, ``weight`` (gamma),
``shift`` (beta), and per ``mode`` option:

* ``static``: ``s1``/``s2`` scales, ``z1``/``z2`` zero points, ``y1``/``y2`` int8, ``xout``, ``rmsout``;
  ``div`` selects ``y / s``; a bound ``y2`` without ``s2`` is written with zeros.
* ``dynamic``: ``m1``/``m2`` smooth scales, ``y1``/``y2`` int8 and ``sc1``/``sc2`` row scales (a
  pass for each valid output's row maximum, NaN-propagating), ``xout``.
* ``cast``: ``yf`` (FLOAT32), ``yc`` (``yf`` in x1's dtype), ``rstd``, ``xout``.

Quantisation is single-rounding FLOAT32 arithmetic (the quant family's ``ACL_Q*`` macros), rounded
half to even and saturated to INT8 (NaN to 0).
"""

from __future__ import annotations

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.quant import HELPERS
from acl_rocm.kernels.reduction import GENERATORS, RowKernel, assemble, at, element_loop, load_as, store_as


def _in(kernel: RowKernel, name: str, target: D) -> str:
    return f"({load_as(kernel, name, at(kernel, name), target)})"


def _element(kernel: RowKernel) -> list[str]:
    """Lines: v = x1 + x2, n = v * rstd * gamma (float64), y = (float)(n + beta)."""
    x = " + ".join(_in(kernel, n, D.ACL_DOUBLE) for n in ("x", "x2") if kernel.has(n))
    w = f" * {_in(kernel, 'weight', D.ACL_DOUBLE)}" if kernel.has("weight") else ""
    b = f" + {_in(kernel, 'shift', D.ACL_DOUBLE)}" if kernel.has("shift") else ""
    return [f"const acc_t v = {x};", f"const acc_t n = v * rstd{w};", f"const float y = (float)(n{b});"]


def _int8(kernel: RowKernel, name: str, value: str) -> str:
    return f"p_{name}[{at(kernel, name)}] = (signed char)acl_q_int((double)({value}), ACL_QR_RINT, -128.0, 127.0);"


def _static(kernel: RowKernel) -> list[str]:
    lines: list[str] = []
    for i in (1, 2):
        y, s, z = f"y{i}", f"s{i}", f"z{i}"
        if not kernel.has(y):
            continue
        if not kernel.has(s):
            lines.append(f"p_{y}[{at(kernel, y)}] = (signed char)0;")
            continue
        scale = _in(kernel, s, D.ACL_FLOAT)
        t = f"ACL_QDIV(y, {scale})" if kernel.option("div") else f"ACL_QMUL(y, {scale})"
        if kernel.has(z):
            t = f"ACL_QADD({t}, {_in(kernel, z, D.ACL_FLOAT)})"
        lines.append(_int8(kernel, y, t))
    if kernel.has("rmsout"):
        lines.append(store_as(kernel, "rmsout", at(kernel, "rmsout"), "n", D.ACL_DOUBLE))
    return lines


def _smoothed(kernel: RowKernel, i: int) -> str:
    m = f"m{i}"
    return f"ACL_QMUL(y, {_in(kernel, m, D.ACL_FLOAT)})" if kernel.has(m) else "y"


def _dynamic(kernel: RowKernel) -> tuple[list[str], list[str]]:
    """(lines between the norm and the final pass: the row maxima and scales, the final pass's lines)."""
    valid = [i for i in (1, 2) if kernel.has(f"y{i}")]
    head = [f"float a{i} = 0.0f;" for i in valid]
    head += element_loop(
        kernel, [*_element(kernel), *(f"a{i} = acl_maximum(a{i}, fabsf({_smoothed(kernel, i)}));" for i in valid)]
    )
    head += ["const AclMax amax;"]
    for i in valid:
        head += [f"a{i} = acl_block_reduce(a{i}, amax);", f"const float sc{i} = ACL_QDIV(a{i}, 127.0f);"]
        head += [f"if (threadIdx.x == 0) p_sc{i}[{at(kernel, f'sc{i}', 'base')}] = sc{i};"]
    body = [_int8(kernel, f"y{i}", f"sc{i} == 0.0f ? 0.0f : ACL_QDIV({_smoothed(kernel, i)}, sc{i})") for i in valid]
    return head, body


def _rmsnormquant(kernel: RowKernel) -> str:
    mode = str(kernel.option("mode"))
    x = " + ".join(_in(kernel, n, D.ACL_DOUBLE) for n in ("x", "x2") if kernel.has(n))
    body = ["const AclSum add;", "acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t v = {x};", "q += v * v;"])
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    if kernel.has("rstd"):
        body.append(
            f"if (threadIdx.x == 0) {store_as(kernel, 'rstd', at(kernel, 'rstd', 'base'), 'rstd', D.ACL_DOUBLE)}"
        )
    last: list[str] = []
    if mode == "static":
        last = _static(kernel)
    elif mode == "dynamic":
        head, last = _dynamic(kernel)
        body += head
    else:
        last = [store_as(kernel, "yf", at(kernel, "yf"), "y", D.ACL_FLOAT)]
        last.append(store_as(kernel, "yc", at(kernel, "yc"), "y", D.ACL_FLOAT))
    if kernel.has("xout"):
        last.append(store_as(kernel, "xout", at(kernel, "xout"), "v", D.ACL_DOUBLE))
    body += element_loop(kernel, [*_element(kernel), *last])
    source = assemble(kernel, body)
    marker = 'extern "C"'
    return source.replace(marker, HELPERS + "\n" + marker, 1)


GENERATORS["rmsnormquant"] = _rmsnormquant
