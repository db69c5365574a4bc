"""Row kernels of the backward ops (acl_core.spec.ops.grad) on the template of ``kernels/reduction.py``.

Four kinds, each over the template's ``outer × inner`` space with per-operand strides:

* ``softmax_grad``: a row of ``g`` (gradOutput) and ``y`` (output): ``s = Σ g·y`` (``log``: ``Σ g``),
  then ``out = y·(g - s)`` (``log``: ``g - exp(y)·s``);
* ``norm_grad``: a norm's row of ``dy``, ``x`` (+ ``x2``), the row statistics ``rstd`` (and ``mean``:
  centred norms) and a per-element ``weight``: ``g = dy·weight``, ``x̂ = (x - mean)·rstd``, two row
  sums ``Σ g`` (centred) and ``Σ g·x̂``, then ``dx = rstd·(g - Σg/n - x̂·Σg·x̂/n)`` (+ ``dsum``);
* ``col_grad``: the weight gradients, one "row" per normalised element walking the rows of the
  input: ``dgamma = Σ dy·x̂`` and ``dbeta = Σ dy`` (either may be absent), statistics read per element;
* ``swiglu_grad``: elementwise over yGrad's shape with ``a`` / ``b`` the two halves of x (and ``da`` /
  ``db`` of the output) as views: ``da = g·b·σ(a)·(1 + a·σ(-a))``, ``db = g·a·σ(a)``.

Sums accumulate in ``acc`` (float64 when an operand is float32, the template's rule).
"""

from __future__ import annotations

from acl_rocm.kernels.reduction import GENERATORS, RowKernel, assemble, at, element_loop, load_as, store_as

GRAD_KINDS = ("softmax_grad", "norm_grad", "col_grad", "swiglu_grad")


def _v(kernel: RowKernel, name: str, where: str = "o") -> str:
    """Operand ``name`` at the current element (``base``: the row's first) as an ``acc_t`` value."""
    return f"(acc_t)({load_as(kernel, name, at(kernel, name, where), kernel.acc)})"


def _softmax_grad(kernel: RowKernel) -> str:
    log = bool(kernel.option("log"))
    g, y = _v(kernel, "g"), _v(kernel, "y")
    body = ["const AclSum add;", "acc_t s = (acc_t)0;"]
    body += element_loop(kernel, [f"s += {g};" if log else f"s += {g} * {y};"])
    body += ["s = acl_block_reduce(s, add);"]
    result = f"{g} - acl_exp({y}) * s" if log else f"{y} * ({g} - s)"
    body += element_loop(
        kernel, [f"const acc_t r = {result};", store_as(kernel, "out", at(kernel, "out"), "r", kernel.acc)]
    )
    return assemble(kernel, body)


def _xhat(kernel: RowKernel, where: str) -> list[str]:
    """Lines defining ``xv`` (x (+ x2)) and ``xh`` (x̂) at the current element; statistics at ``where``."""
    x = _v(kernel, "x") + (f" + {_v(kernel, 'x2')}" if kernel.has("x2") else "")
    centred = f"(xv - {_v(kernel, 'mean', where)})" if kernel.has("mean") else "xv"
    return [f"const acc_t xv = {x};", f"const acc_t xh = {centred} * {_v(kernel, 'rstd', where)};"]


def _norm_grad(kernel: RowKernel) -> str:
    w = f" * {_v(kernel, 'weight')}" if kernel.has("weight") else ""
    centred = kernel.has("mean")
    grad = [*_xhat(kernel, "base"), f"const acc_t gv = {_v(kernel, 'dy')}{w};"]
    body = ["const AclSum add;", "acc_t sg = (acc_t)0, sgx = (acc_t)0;"]
    body += element_loop(kernel, [*grad, "sgx += gv * xh;", *(["sg += gv;"] if centred else [])])
    body += ["sgx = acl_block_reduce(sgx, add) / (acc_t)len;"]
    if centred:
        body += ["sg = acl_block_reduce(sg, add) / (acc_t)len;"]
    body += [f"const acc_t rs = {_v(kernel, 'rstd', 'base')};"]
    dsum = f" + {_v(kernel, 'dsum')}" if kernel.has("dsum") else ""
    write = [*grad, f"const acc_t r = rs * (gv - sg - xh * sgx){dsum};"]
    write.append(store_as(kernel, "dx", at(kernel, "dx"), "r", kernel.acc))
    body += element_loop(kernel, write)
    return assemble(kernel, body)


def _col_grad(kernel: RowKernel) -> str:
    body = ["const AclSum add;", "acc_t sw = (acc_t)0, sb = (acc_t)0;"]
    step = [f"const acc_t d = {_v(kernel, 'dy')};", "sb += d;"]
    if kernel.has("dgamma"):
        step = [*_xhat(kernel, "o"), *step, "sw += d * xh;"]
    body += element_loop(kernel, step)
    body += ["sw = acl_block_reduce(sw, add);", "sb = acl_block_reduce(sb, add);", "if (threadIdx.x == 0) {"]
    for name, value in (("dgamma", "sw"), ("dbeta", "sb")):
        if kernel.has(name):
            body.append("  " + store_as(kernel, name, at(kernel, name, "base"), value, kernel.acc))
    body.append("}")
    return assemble(kernel, body)


def _swiglu_grad(kernel: RowKernel) -> str:
    step = [
        f"const acc_t g = {_v(kernel, 'g')}, a = {_v(kernel, 'a')}, b = {_v(kernel, 'b')};",
        # σ(-a) for 1 - σ(a): no cancellation where σ(a) rounds to 1
        "const acc_t s = (acc_t)1 / ((acc_t)1 + acl_exp(-a)), t = (acc_t)1 / ((acc_t)1 + acl_exp(a));",
        "const acc_t da = g * b * (s * ((acc_t)1 + a * t));",
        "const acc_t db = g * (a * s);",
        store_as(kernel, "da", at(kernel, "da"), "da", kernel.acc),
        store_as(kernel, "db", at(kernel, "db"), "db", kernel.acc),
    ]
    return assemble(kernel, element_loop(kernel, step))


GENERATORS.update(
    {"softmax_grad": _softmax_grad, "norm_grad": _norm_grad, "col_grad": _col_grad, "swiglu_grad": _swiglu_grad}
)
