"""Reference kernels of the clamp variants and Addcmul / Addcdiv (acl_core.spec.ops.pointwise_ternary).

Computed wide (float64 / int64) and rounded once to ``plan["compute"]`` by the family's wide-compute rule;
Addcmul / Addcdiv's intermediates are rounded to the computation type (:func:`rounded`).
"""

from __future__ import annotations

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.spec.ops.pointwise_ternary import CLAMPS, value_in
from acl_core.spec.opspec import Kind
from acl_reference.call import RefCall
from acl_reference.kernels.elementwise import kernel
from acl_reference.tensor_io import wide

Array = np.ndarray


def clamp(x: Array, lower: Array | None, upper: Array | None) -> Array:
    """``min(max(x, lower), upper)`` with an absent bound skipped; NaN in x or a bound propagates."""
    if lower is not None:
        x = np.maximum(x, lower)
    if upper is not None:
        x = np.minimum(x, upper)
    return x


_ROWS = {r.name: r for r in CLAMPS}


def _bound(k: RefCall, name: str | None) -> Array | None:
    if name is None or k.args.get(name) is None:
        return None
    dt = wide(k.plan["compute"])
    if k.launch.spec.param(name).kind is Kind.SCALAR:
        return np.asarray(k.value(name), dtype=dt)
    return k.read(name, dt)


def _clamp(k: RefCall) -> None:
    row = _ROWS[k.launch.spec.name]
    x = k.read("self", wide(k.plan["compute"]))
    k.write("out", clamp(x, _bound(k, row.lower), _bound(k, row.upper)))


for _row in CLAMPS:
    kernel(_row.name)(_clamp)


def rounded(x: Array, compute: D) -> Array:
    """``x`` (wide) rounded to float32 and widened back where the computation is float32 or narrower, else as is.

    Addcmul / Addcdiv's intermediates are float32 values on every backend that computes in float32: a quotient
    that overflows there is infinite and a product that underflows is 0, whatever later steps make of it.
    """
    if not compute.is_float or compute == D.ACL_DOUBLE:
        return x
    with np.errstate(over="ignore", under="ignore"):
        return x.astype(np.float32).astype(x.dtype)


@kernel("Addcmul", "Addcdiv")
def addc(k: RefCall) -> None:
    """``self + (value·t1)·t2`` (Addcmul) or ``self + value·(t1/t2)`` (Addcdiv): intermediates :func:`rounded`."""
    compute = k.plan["compute"]
    dt = wide(compute)
    a, b, c = (k.read(n, dt) for n in ("self", "tensor1", "tensor2"))
    value = np.asarray(value_in(compute, k.value("value")), dtype=dt)
    with np.errstate(all="ignore"):
        if k.launch.spec.name == "Addcmul":
            term = rounded(rounded(value * b, compute) * c, compute)
        else:
            term = rounded(value * rounded(b / c, compute), compute)
        k.write("out", a + term)
