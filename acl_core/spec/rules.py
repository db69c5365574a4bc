"""Building blocks for operator rules: dtype sets, broadcasting, dimension handling, output infos."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from acl_core.dtypes import DataType as D
from acl_core.spec.opspec import Call, OutInfo, invalid
from acl_core.spec.validate import check_out
from acl_core.tensor import AclTensor, AclTensorList

FLOATS = frozenset({D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16})
"""The floating types CANN kernels commonly take (fp32, fp16, bf16)."""
FLOATS64 = FLOATS | {D.ACL_DOUBLE}
SIGNED = frozenset({D.ACL_INT8, D.ACL_INT16, D.ACL_INT32, D.ACL_INT64})
INTEGERS = SIGNED | {D.ACL_UINT8}
COMPLEX = frozenset({D.ACL_COMPLEX64, D.ACL_COMPLEX128})
REAL = FLOATS64 | INTEGERS
REAL_BOOL = REAL | {D.ACL_BOOL}
ALL = REAL_BOOL | COMPLEX
INDEX = frozenset({D.ACL_INT32, D.ACL_INT64})
ANY_STORAGE = ALL | {D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64}
"""Every byte-sized or wider type data-movement ops copy without computing."""


def tensor_arg(call: Call, name: str) -> AclTensor:
    """Argument ``name`` as a tensor (it was validated to be one)."""
    t = call.args[name]
    assert isinstance(t, AclTensor), name
    return t


def broadcast_shapes(*shapes: Sequence[int], names: Iterable[str] = ()) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``; 161002 naming the parameters when they do not broadcast."""
    labels = list(names)
    rank = max((len(s) for s in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        padded = [1] * (rank - len(shape)) + list(shape)
        for i, d in enumerate(padded):
            if d == result[i] or d == 1:
                continue
            if result[i] == 1:
                result[i] = d
                continue
            what = " and ".join(labels) if labels else "inputs"
            raise invalid(f"shapes of {what} do not broadcast: {[list(s) for s in shapes]}")
    return tuple(result)


def normalize_dim(dim: int, rank: int, name: str = "dim") -> int:
    """A dim in [-rank, rank) made non-negative (a 0-d tensor accepts -1 and 0); 161002 otherwise."""
    r = max(rank, 1)
    if not -r <= dim < r:
        raise invalid(f"{name}={dim} is out of range for a rank-{rank} tensor")
    return dim % r


def normalize_dims(dims: Iterable[int], rank: int, name: str = "dim") -> tuple[int, ...]:
    """Several dims made non-negative; duplicates are refused with 161002."""
    out = tuple(normalize_dim(d, rank, name) for d in dims)
    if len(set(out)) != len(out):
        raise invalid(f"{name} repeats a dimension: {list(dims)}")
    return out


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    """``shape`` with ``dims`` reduced (kept as 1 when ``keepdim``)."""
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def same(info_shape: Sequence[int], dtype: D) -> OutInfo:
    """An output whose dtype must be exactly ``dtype``."""
    return OutInfo(tuple(info_shape), dtype, "same")


def castable(info_shape: Sequence[int], dtype: D) -> OutInfo:
    """An output of result dtype ``dtype`` that may be any dtype ``dtype`` casts to."""
    return OutInfo(tuple(info_shape), dtype, "castable")


def listed(info_shape: Sequence[int], dtype: D) -> OutInfo:
    """An output whose dtype may be any the parameter declares (``dtype`` is the default)."""
    return OutInfo(tuple(info_shape), dtype, "listed")


def float_result(dtype: D) -> D:
    """The dtype a float-valued op returns: floats keep theirs, ints and bool become float32."""
    return dtype if dtype.is_float or dtype.is_complex else D.ACL_FLOAT


# Phase 1 stays bounded (issue 17): a rule about to build something per section, per batch or per
# row of an output first checks that the caller's output can hold that many, so an input whose
# dims are huge (a stride-0 view over a few bytes is legal input) is refused before the work.
def expect_count(call: Call, name: str, count: int) -> None:
    """Refuse (161002) an output tensor list ``name``, when given, whose length is not ``count``."""
    value = call.args.get(name)
    if isinstance(value, AclTensorList) and len(value) != count:
        raise invalid(f"{name} holds {len(value)} tensors; expected {count}")


def expect_output(call: Call, name: str, info: OutInfo) -> None:
    """Check output tensor ``name``, when given, against ``info`` now rather than after the rule."""
    value = call.args.get(name)
    if isinstance(value, AclTensor):
        check_out(call.spec.param(name), value, info, name)
