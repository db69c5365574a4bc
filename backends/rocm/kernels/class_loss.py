"""Row kernels of the class-index losses (acl_core.spec.ops.class_loss) on the template of ``kernels/reduction.py``.

The iteration space is the template's ``outer × inner``: the samples outside, the class axis inside (the
gradient of a ``[N, C, H, W]`` input walks ``(N, C) × (H, W)`` instead, a row per class plane, so its
reads and writes are coalesced). Operands ``t`` (class indices), ``w`` (class weights, strided along the
class axis, absent: 1) and ``flag`` (a 4-byte device flag, strides 0) are common; a target outside
``[0, C)`` other than ``ignore`` sets the flag and contributes nothing.

* ``nll_rows`` (a thread per sample): ``term = -w[t]·x[t]``, ``tw = w[t]`` (0 for an ignored sample);
* ``ce_rows`` (a block per sample): the row's max and Σ exp(x - max) in one online pass, then ``lp = x -
  lse`` written while ``Σ w·lp`` accumulates; thread 0 writes the smoothed term, the weight, and zeros
  to the zloss outputs; with option ``vec`` the vector kernel (:func:`_ce_rows_vec`, 16-byte loads, the
  smoothing sums gathered in the statistics read);
* ``class_total`` (one row of the per-sample ``term`` / ``tw``): ``Σ term`` (mean: ``/ Σ tw``) into the
  loss, ``Σ tw`` into the total weight, zeros where asked;
* ``nll_grad``: ``out = -w[t]·g·scale`` where the element's class is the sample's target, else 0;
* ``weight_sums`` (one block): ``Σ_n w[t_n]`` and ``Σ_c w_c`` for the CE gradient;
* ``ce_grad``: ``out = s·(exp(lp)·(a + b) - ε/C·w_j - a·[j = t])`` with ``a = (1-ε)·w[t]``, ``b = ε/C·Σ w``;
* ``softmax_xent`` (a block per row of probability labels ``y``): the online max/sum pass, then
  ``backprop = exp(x - lse) - y`` written while ``-Σ y·(x - lse)`` accumulates into ``loss``.
"""

from __future__ import annotations

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import convert, ctype, store
from acl_rocm.kernels.reduction import (
    GENERATORS,
    RowKernel,
    assemble,
    at,
    element_loop,
    load_as,
    store_as,
    vector_walk,
)

CLASS_KINDS = ("nll_rows", "ce_rows", "class_total", "nll_grad", "weight_sums", "ce_grad")


def _v(kernel: RowKernel, name: str, where: str = "o") -> str:
    """Operand ``name`` at ``where`` (an offsets array) as an ``acc_t`` value."""
    return f"(acc_t)({load_as(kernel, name, at(kernel, name, where), kernel.acc)})"


def _w(kernel: RowKernel, where: str) -> str:
    return _v(kernel, "w", where) if kernel.has("w") else "(acc_t)1"


def _target(where: str = "base", classes: str = "(long long)len") -> list[str]:
    """Lines defining ``tt`` (the sample's class index), ``keep`` (not ignored) and ``ok`` (keep, in range)."""
    return [
        f"const long long tt = (long long)(p_t[{where}[ACL_T]]);",
        "const bool keep = tt != ignore;",
        f"const bool ok = keep && tt >= 0 && tt < {classes};",
        "if (keep && !ok) p_flag[0] = 1;",
    ]


def _at_target(kernel: RowKernel) -> list[str]:
    """Lines defining ``ot``: every operand's offset at the sample's target class (class 0 when not ``ok``)."""
    return [
        "idx_t ot[ACL_NOPS];",
        "for (int k = 0; k < ACL_NOPS; ++k) ot[k] = base[k];",
        "acl_offsets(m, ok ? (idx_t)tt : (idx_t)0, ACL_OUTER, ACL_INNER, ot);",
    ]


def _with_t(kernel: RowKernel, source: str) -> str:
    """``source`` with ``ACL_T`` (the target operand's stride row) defined."""
    anchor = f"typedef {kernel.index_type} idx_t;"
    assert anchor in source
    return source.replace(anchor, f"#define ACL_T {kernel.index('t')}\n{anchor}", 1)


def _store(kernel: RowKernel, name: str, where: str, value: str) -> str:
    return store_as(kernel, name, at(kernel, name, where), value, kernel.acc)


def _nll_rows(kernel: RowKernel) -> str:
    step = [
        "idx_t base[ACL_NOPS];",
        "for (int k = 0; k < ACL_NOPS; ++k) base[k] = 0;",
        "acl_offsets(m, row, 0, ACL_OUTER, base);",
        *_target(),
        *_at_target(kernel),
        f"const acc_t w = ok ? {_w(kernel, 'ot')} : (acc_t)0;",
        f"const acc_t term = ok ? -w * {_v(kernel, 'x', 'ot')} : (acc_t)0;",
        _store(kernel, "term", "base", "term"),
        _store(kernel, "tw", "base", "w"),
    ]
    body = [
        "const idx_t threads = (idx_t)gridDim.x * (idx_t)blockDim.x;",
        "for (idx_t row = (idx_t)blockIdx.x * (idx_t)blockDim.x + (idx_t)threadIdx.x; row < m.n; row += threads) {",
        *("  " + line for line in step),
        "}",
    ]
    return _with_t(kernel, assemble(kernel, body, row_loop=False))


def _ce_rows(kernel: RowKernel) -> str:
    if kernel.option("vec"):
        return _ce_rows_vec(kernel)
    x = _v(kernel, "x")
    body = [*_online_lse(kernel), "acc_t sw = (acc_t)0;"]
    body += element_loop(
        kernel,
        [f"const acc_t lp = {x} - lse;", _store(kernel, "lp", "o", "lp"), f"sw += {_w(kernel, 'o')} * lp;"],
    )
    body += ["sw = acl_block_reduce(sw, add);", *_ce_term(kernel)]
    return _with_t(kernel, assemble(kernel, body))


def _ce_rows_vec(kernel: RowKernel) -> str:
    """``ce_rows`` over rows of unit-stride logits whose starts are aligned to ``vec`` elements (option ``vec``).

    One read of the row gathers the online max / Σ exp, ``Σ w·(x - x0)`` and ``Σ w`` (x0: the row's first logit, a
    shift that keeps the float sum away from cancellation), so ``Σ w·lp = Σ w·(x - x0) + (x0 - lse)·Σ w`` needs no
    second statistics pass (gathered whatever ``eps``: a non-finite logit makes the reference's ``eps/C·Σ w·lp`` NaN
    at ``eps`` = 0 too); the writing pass walks the vectors last-read-first (their lines are
    likeliest still in L2). ``unroll`` vectors a thread are loaded before any arithmetic; a row's last ``len % vec``
    elements go one at a time. ``lpvec``: logProbOut is stored a vector at a time too (else element by element).
    """
    vec, unroll = int(kernel.option("vec") or 1), int(kernel.option("unroll") or 1)
    src = ctype(kernel.operand("x").dtype)
    vt = f"AclVec<{src.storage}, {vec}>"
    kx = kernel.index("x")
    w_at = "(acc_t)1"
    if kernel.has("w"):
        kw = kernel.index("w")
        w_at = f"(acc_t)({load_as(kernel, 'w', f'base[{kw}] + jj * m.stride[{kw}][ACL_OUTER]', kernel.acc)})"
    value = convert(src.decode.format(x="t[u].v[e]"), src, ctype(kernel.acc))
    scalar = convert(src.decode.format(x=f"p_x[base[{kx}] + jj]"), src, ctype(kernel.acc))
    sums = f"{{ const acc_t wc = {w_at}; sx += wc * (v - x0); sw1 += wc; }}" if kernel.has("w") else "sx += v - x0;"
    step = [
        "if (v > top) { s = top == -acl_inf((acc_t)0) ? (acc_t)0 : s * acl_exp(top - v); top = v; }",
        "if (top != -acl_inf((acc_t)0) || v != v) s += acl_exp(v - top);",
        sums,
    ]
    body = [
        "const AclMax mx;",
        "const AclSum add;",
        f"acc_t x0 = {convert(src.decode.format(x=f'p_x[base[{kx}]]'), src, ctype(kernel.acc))};",
        "if (!(x0 - x0 == (acc_t)0)) x0 = (acc_t)0;  // a masked (-inf) first logit shifts nothing",
        "acc_t top = -acl_inf((acc_t)0), s = (acc_t)0, sx = (acc_t)0, sw1 = (acc_t)0;",
        *vector_walk(
            vt,
            f"p_x + base[{kx}]",
            vec,
            unroll,
            [
                f"acc_t lm = ({value.replace('[e]', '[0]')});",
                "#pragma unroll",
                f"for (int e = 1; e < {vec}; ++e) lm = mx(lm, ({value}));",
                "if (lm > top) { s = top == -acl_inf((acc_t)0) ? (acc_t)0 : s * acl_exp(top - lm); top = lm; }",
                "#pragma unroll",
                f"for (int e = 0; e < {vec}; ++e) {{",
                f"  const acc_t v = ({value});",
                "  if (top != -acl_inf((acc_t)0) || v != v) s += acl_exp(v - top);",
                "  {",
                f"    const idx_t jj = c * (idx_t){vec} + (idx_t)e;",
                "    (void)jj;",
                f"    {sums}",
                "  }",
                "}",
            ],
        ),
        f"for (idx_t jj = whole * (idx_t){vec} + (idx_t)threadIdx.x; jj < len; jj += (idx_t)blockDim.x) {{",
        f"  const acc_t v = {scalar};",
        *("  " + line for line in step),
        "}",
        "const acc_t row_top = acl_block_reduce(top, mx);",
        "s = top == -acl_inf((acc_t)0) && s == s ? (acc_t)0 : s * acl_exp(top - row_top);",
        "s = acl_block_reduce(s, add);",
        "const acc_t lse = row_top + acl_log(s);",
        *_ce_vec_store(kernel, vt, value, scalar),
        "sx = acl_block_reduce(sx, add);",
        "sw1 = acl_block_reduce(sw1, add);" if kernel.has("w") else "sw1 = (acc_t)len;",
        "const acc_t sw = sx + (x0 - lse) * sw1;",
    ]
    return _with_t(kernel, assemble(kernel, [*body, *_ce_term(kernel)]))


def _ce_vec_store(kernel: RowKernel, vt: str, value: str, scalar: str) -> list[str]:
    """The writing pass of :func:`_ce_rows_vec`: ``lp = x - lse``, vectors in reverse order, then the tail."""
    vec, unroll = int(kernel.option("vec") or 1), int(kernel.option("unroll") or 1)
    dst = ctype(kernel.operand("lp").dtype)
    kl = kernel.index("lp")
    lp_at = f"base[{kl}] + (jj) * m.stride[{kl}][ACL_OUTER]"
    if kernel.option("lpvec"):
        lt = f"AclVec<{dst.storage}, {vec}>"
        put = [
            f"{lt} r;",
            "#pragma unroll",
            f"for (int e = 0; e < {vec}; ++e) r.v[e] = {store(f'({value}) - lse', ctype(kernel.acc), dst)};",
            f"*reinterpret_cast<{lt}*>(p_lp + base[{kl}] + c * (idx_t){vec}) = r;",
        ]
    else:
        put = [
            "#pragma unroll",
            f"for (int e = 0; e < {vec}; ++e) {{",
            f"  const idx_t jj = c * (idx_t){vec} + (idx_t)e;",
            f"  p_lp[{lp_at}] = {store(f'({value}) - lse', ctype(kernel.acc), dst)};",
            "}",
        ]
    return [
        f"for (idx_t k0 = (idx_t)threadIdx.x; k0 < whole; k0 += (idx_t){unroll} * (idx_t)blockDim.x) {{",
        f"  {vt} t[{unroll}];",
        "  #pragma unroll",
        f"  for (int u = 0; u < {unroll}; ++u) {{",
        "    const idx_t k = k0 + (idx_t)u * (idx_t)blockDim.x;",
        "    if (k < whole) t[u] = rowv[whole - 1 - k];",
        "  }",
        "  #pragma unroll",
        f"  for (int u = 0; u < {unroll}; ++u) {{",
        "    const idx_t k = k0 + (idx_t)u * (idx_t)blockDim.x;",
        "    if (k < whole) {",
        "      const idx_t c = whole - 1 - k;",
        *("      " + line for line in put),
        "    }",
        "  }",
        "}",
        f"for (idx_t jj = whole * (idx_t){vec} + (idx_t)threadIdx.x; jj < len; jj += (idx_t)blockDim.x)",
        f"  p_lp[{lp_at}] = {store(f'{scalar} - lse', ctype(kernel.acc), dst)};",
    ]


def _ce_term(kernel: RowKernel) -> list[str]:
    """Thread 0's sample term (smoothed by ``sw`` = Σ w·lp), weight and zeroed zloss outputs."""
    return [
        "if (threadIdx.x == 0) {",
        *("  " + line for line in _target()),
        *("  " + line for line in _at_target(kernel)),
        f"  const acc_t w = ok ? {_w(kernel, 'ot')} : (acc_t)0;",
        f"  const acc_t lpt = {_v(kernel, 'x', 'ot')} - lse;",
        "  const acc_t term = ok ? ((acc_t)1 - (acc_t)eps) * (-w * lpt) - (acc_t)eps / (acc_t)len * sw : (acc_t)0;",
        "  " + _store(kernel, "term", "base", "term"),
        "  " + _store(kernel, "tw", "base", "w"),
        *("  " + _store(kernel, name, "base", "(acc_t)0") for name in ("lse0", "z0") if kernel.has(name)),
        "}",
    ]


def _online_lse(kernel: RowKernel) -> list[str]:
    """Lines leaving ``lse``, the row's logsumexp of ``x``: a running max and a rescaled running sum, one pass."""
    body = ["const AclMax mx;", "const AclSum add;", "acc_t top = -acl_inf((acc_t)0), s = (acc_t)0;"]
    body += element_loop(
        kernel,
        [
            f"const acc_t v = {_v(kernel, 'x')};",
            # a -inf seen first adds nothing (exp(-inf - -inf) would be NaN); a NaN always reaches s
            "if (v > top) { s = s * acl_exp(top - v) + (acc_t)1; top = v; }",
            "else if (top != -acl_inf((acc_t)0) || v != v) s += acl_exp(v - top);",
        ],
    )
    return [
        *body,
        "const acc_t row_top = acl_block_reduce(top, mx);",
        "s = top == -acl_inf((acc_t)0) && s == s ? (acc_t)0 : s * acl_exp(top - row_top);",
        "s = acl_block_reduce(s, add);",
        "const acc_t lse = row_top + acl_log(s);",
    ]


def _softmax_xent(kernel: RowKernel) -> str:
    body = [*_online_lse(kernel), "acc_t sl = (acc_t)0;"]
    body += element_loop(
        kernel,
        [
            f"const acc_t lp = {_v(kernel, 'x')} - lse, y = {_v(kernel, 'y')};",
            _store(kernel, "bp", "o", "acl_exp(lp) - y"),
            "sl -= y * lp;",
        ],
    )
    body += ["sl = acl_block_reduce(sl, add);", "if (threadIdx.x == 0) " + _store(kernel, "loss", "base", "sl")]
    return assemble(kernel, body)


def _class_total(kernel: RowKernel) -> str:
    mode = str(kernel.option("mode"))
    body = ["const AclSum add;", "acc_t st = (acc_t)0, sw = (acc_t)0;"]
    loop = [f"sw += {_v(kernel, 'tw')};"]
    if kernel.has("term"):
        loop.append(f"st += {_v(kernel, 'term')};")
    body += element_loop(kernel, loop)
    body += ["sw = acl_block_reduce(sw, add);"]
    if kernel.has("term"):
        body += ["st = acl_block_reduce(st, add);"]
    body += ["if (threadIdx.x == 0) {"]
    if kernel.has("out"):
        body.append("  " + _store(kernel, "out", "base", "st / sw" if mode == "mean" else "st"))
    body.append("  " + _store(kernel, "total", "base", "(acc_t)0" if kernel.option("zero_total") else "sw"))
    if kernel.has("z0"):
        body.append("  " + _store(kernel, "z0", "base", "(acc_t)0"))
    body.append("}")
    return assemble(kernel, body)


def _nll_grad(kernel: RowKernel) -> str:
    cls = "(long long)j" if kernel.option("class_of") == "j" else "(long long)(row % (idx_t)classes)"
    scale = f" / {_v(kernel, 'tot', 'base')}" if kernel.has("tot") else ""
    step = [
        *_target("o", "classes"),
        f"const acc_t r = (ok && tt == {cls}) ? -{_w(kernel, 'o')} * {_v(kernel, 'g')}{scale} : (acc_t)0;",
        _store(kernel, "out", "o", "r"),
    ]
    return _with_t(kernel, assemble(kernel, element_loop(kernel, step)))


def _weight_sums(kernel: RowKernel) -> str:
    w_at = f"(acc_t)({load_as(kernel, 'w', '(idx_t)tt * (idx_t)wstride', kernel.acc)})" if kernel.has("w") else "1"
    w_c = f"(acc_t)({load_as(kernel, 'w', 'j * (idx_t)wstride', kernel.acc)})" if kernel.has("w") else "(acc_t)1"
    body = ["const AclSum add;", "acc_t tw = (acc_t)0, sw = (acc_t)0;"]
    body += element_loop(kernel, [*_target("o", "classes"), f"if (ok) tw += {w_at};"])
    body += element_loop(kernel, [f"sw += {w_c};"], stop="(idx_t)classes")
    body += [
        "tw = acl_block_reduce(tw, add);",
        "sw = acl_block_reduce(sw, add);",
        "if (threadIdx.x == 0) { p_sums[0] = (double)tw; p_sums[1] = (double)sw; }",
    ]
    return _with_t(kernel, assemble(kernel, body))


def _ce_grad(kernel: RowKernel) -> str:
    g = _v(kernel, "g", "base")
    body = [
        *_target(),
        *_at_target(kernel),
        "const acc_t c = (acc_t)len, e = (acc_t)eps;",
        f"const acc_t wt = ok ? {_w(kernel, 'ot')} : (acc_t)0;",
        "const acc_t a = ((acc_t)1 - e) * wt;",
        "const acc_t b = e / c * (acc_t)p_sums[1];",
        f"acc_t sc = ok ? {g} : (acc_t)0;",
    ]
    if kernel.option("mean"):
        body.append("if (ok) sc = sc / (acc_t)p_sums[0];  // an ignored row stays 0 when every row is ignored")
    step = [
        f"const acc_t v = acl_exp({_v(kernel, 'lp')}) * (a + b) - e / c * {_w(kernel, 'o')}"
        " - ((long long)j == tt ? a : (acc_t)0);",
        _store(kernel, "out", "o", "sc * v"),
    ]
    body += element_loop(kernel, step)
    return _with_t(kernel, assemble(kernel, body))


GENERATORS.update(
    {
        "nll_rows": _nll_rows,
        "ce_rows": _ce_rows,
        "class_total": _class_total,
        "nll_grad": _nll_grad,
        "weight_sums": _weight_sums,
        "ce_grad": _ce_grad,
        "softmax_xent": _softmax_xent,
    }
)

FLAG_DTYPE = D.ACL_INT32
"""The flag operand's element type (a 4-byte device flag)."""
