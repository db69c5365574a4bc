"""Norm kernels on the row template of ``kernels/reduction.py``: statistics per row, then each element.

Operands carry internal names (``x``, ``x2``, ``addend``, ``weight``, ``shift``, ``y``, ``mean``,
``rstd``, ``xout``, running and saved statistics); the op code maps aclnn parameters onto them and
gives every one a stride vector over ``rows × row elements`` (a weight varies only along the row, a
statistic only across rows, GroupNorm's gamma along both). Absent operands are simply not there.
Statistics are in float64 when any operand is float32 (fp16/bf16-only in float32); over zero
elements the mean is 0 and rstd NaN, as the reference writes.
"""

from __future__ import annotations

from typing import Final

from acl_rocm.kernels.reduction import GENERATORS, RowKernel, assemble, at, element_loop, load_as, store_as

NORM_KINDS: Final = ("layernorm", "rmsnorm", "batchnorm")


def _x(kernel: RowKernel, *names: str) -> str:
    """The row element as the sum of the present operands among ``names`` (in acc)."""
    terms = [f"(acc_t)({load_as(kernel, n, at(kernel, n), kernel.acc)})" for n in names if kernel.has(n)]
    return " + ".join(terms)


def _affine(kernel: RowKernel, expr: str) -> str:
    if kernel.has("weight"):
        expr = f"({expr}) * (acc_t)({load_as(kernel, 'weight', at(kernel, 'weight'), kernel.acc)})"
    if kernel.has("shift"):
        expr = f"({expr}) + (acc_t)({load_as(kernel, 'shift', at(kernel, 'shift'), kernel.acc)})"
    return expr


def _row_stat(kernel: RowKernel, name: str, value: str) -> list[str]:
    return [store_as(kernel, name, at(kernel, name, "base"), value, kernel.acc)] if kernel.has(name) else []


def _layernorm(kernel: RowKernel) -> str:
    """x = x (+ x2) (+ addend); mean and rstd over the row; y = (x - mean) * rstd (* weight) (+ shift)."""
    x = _x(kernel, "x", "x2", "addend")
    body = ["const AclSum add;", "acc_t s = (acc_t)0;"]
    body += element_loop(kernel, [f"s += {x};"])
    body += ["s = acl_block_reduce(s, add);", "const acc_t mean = len > 0 ? s / (acc_t)len : (acc_t)0;"]
    body += ["acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t d = ({x}) - mean;", "q += d * d;"])
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += [
        "if (threadIdx.x == 0) {",
        *("  " + s for s in _row_stat(kernel, "mean", "mean")),
        *("  " + s for s in _row_stat(kernel, "rstd", "rstd")),
        "}",
    ]
    write = [f"const acc_t v = {x};", f"const acc_t r = {_affine(kernel, '(v - mean) * rstd')};"]
    write.append(store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc))
    if kernel.has("xout"):
        write.append(store_as(kernel, "xout", at(kernel, "xout"), "v", kernel.acc))
    body += element_loop(kernel, write)
    return assemble(kernel, body)


def _rmsnorm(kernel: RowKernel) -> str:
    """x = x (+ x2); rstd = 1 / sqrt(mean(x²) + eps); y = x * rstd * weight (xout = x, stored after reading)."""
    x = _x(kernel, "x", "x2")
    body = ["const AclSum add;", "acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t v = {x};", "q += v * v;"])
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += ["if (threadIdx.x == 0) {", *("  " + s for s in _row_stat(kernel, "rstd", "rstd")), "}"]
    write = [f"const acc_t v = {x};", f"const acc_t r = {_affine(kernel, 'v * rstd')};"]
    write.append(store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc))
    if kernel.has("xout"):
        write.append(store_as(kernel, "xout", at(kernel, "xout"), "v", kernel.acc))
    body += element_loop(kernel, write)
    return assemble(kernel, body)


def _batchnorm(kernel: RowKernel) -> str:
    """One row per channel: batch statistics (training) or running ones (inference), then each element."""
    x = _x(kernel, "x")
    training = bool(kernel.option("training"))
    body = [
        "if (len == 0) {",  # CANN returns before computing: saved statistics 0 / NaN, running ones untouched
        "  if (threadIdx.x == 0) {",
        *("    " + s for s in _row_stat(kernel, "save_mean", "(acc_t)0")),
        *("    " + s for s in _row_stat(kernel, "save_invstd", "acl_nan((acc_t)0)")),
        "  }",
        "  continue;",
        "}",
    ]
    if training:
        body += ["const AclSum add;", "acc_t s = (acc_t)0;"]
        body += element_loop(kernel, [f"s += {x};"])
        body += ["s = acl_block_reduce(s, add);", "const acc_t mean = s / (acc_t)len;", "acc_t q = (acc_t)0;"]
        body += element_loop(kernel, [f"const acc_t d = ({x}) - mean;", "q += d * d;"])
        body += [
            "q = acl_block_reduce(q, add);",
            "const acc_t var = q / (acc_t)len;",
            "const acc_t rstd = acl_rsqrt(var + (acc_t)eps);",
            "if (threadIdx.x == 0) {",
            *("  " + s for s in _row_stat(kernel, "save_mean", "mean")),
            *("  " + s for s in _row_stat(kernel, "save_invstd", "rstd")),
            "  const acc_t unbiased = len > 1 ? var * (acc_t)len / (acc_t)(len - 1) : acl_nan((acc_t)0);",
            "  const acc_t keep = (acc_t)1 - (acc_t)momentum;",
        ]
        for name, stat in (("running_mean", "mean"), ("running_var", "unbiased")):
            if kernel.has(name):
                old = load_as(kernel, name, at(kernel, name, "base"), kernel.acc)
                body.append(
                    "  "
                    + store_as(
                        kernel, name, at(kernel, name, "base"), f"keep * ({old}) + (acc_t)momentum * {stat}", kernel.acc
                    )
                )
        body.append("}")
    else:
        mean = (
            load_as(kernel, "running_mean", at(kernel, "running_mean", "base"), kernel.acc)
            if kernel.has("running_mean")
            else "0"
        )
        var = (
            load_as(kernel, "running_var", at(kernel, "running_var", "base"), kernel.acc)
            if kernel.has("running_var")
            else "1"
        )
        body += [f"const acc_t mean = (acc_t)({mean});", f"const acc_t rstd = acl_rsqrt((acc_t)({var}) + (acc_t)eps);"]
    write = [
        f"const acc_t r = {_affine(kernel, f'(({x}) - mean) * rstd')};",
        store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc),
    ]
    body += element_loop(kernel, write)
    return assemble(kernel, body)


GENERATORS.update({"layernorm": _layernorm, "rmsnorm": _rmsnorm, "batchnorm": _batchnorm})
