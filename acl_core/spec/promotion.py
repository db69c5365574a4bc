"""CANN's dtype promotion for tensor-tensor and tensor-scalar operators, and the cast rule for outputs.

The tensor-tensor table follows deduction_relationship.md: PyTorch-like, with fp16 ⊕ bf16 → fp32, any
float ⊕ any integer → the float, int8 ⊕ uint8 → int16, bool ⊕ intN → intN, and the unsigned 16/32/64
types combining only with themselves. Anything outside the table is refused with 161002.
"""

from __future__ import annotations

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError, AclnnStatus

_FLOAT_RANK = {D.ACL_FLOAT16: 1, D.ACL_BF16: 1, D.ACL_FLOAT: 2, D.ACL_DOUBLE: 3}
_SIGNED_RANK = {D.ACL_INT8: 1, D.ACL_INT16: 2, D.ACL_INT32: 3, D.ACL_INT64: 4}
_SIGNED_BY_RANK = {v: k for k, v in _SIGNED_RANK.items()}
_COMPLEX_RANK = {D.ACL_COMPLEX32: 1, D.ACL_COMPLEX64: 2, D.ACL_COMPLEX128: 3}
_LONE_UNSIGNED = {D.ACL_UINT16, D.ACL_UINT32, D.ACL_UINT64}


def _refuse(a: D, b: D) -> AclnnError:
    return AclnnError(
        AclnnStatus.ACLNN_ERR_PARAM_INVALID, f"{a.short} and {b.short} cannot be promoted to a common dtype"
    )


def promote_types(a: D, b: D) -> D:
    """The dtype a tensor-tensor operator computes in for inputs of dtypes ``a`` and ``b``."""
    if a == b:
        return a
    if a in _LONE_UNSIGNED or b in _LONE_UNSIGNED:
        raise _refuse(a, b)
    if a in _COMPLEX_RANK or b in _COMPLEX_RANK:
        return _promote_complex(a, b)
    fa, fb = a in _FLOAT_RANK, b in _FLOAT_RANK
    if fa and fb:
        if {a, b} == {D.ACL_FLOAT16, D.ACL_BF16}:
            return D.ACL_FLOAT
        return a if _FLOAT_RANK[a] > _FLOAT_RANK[b] else b
    if fa or fb:
        other = b if fa else a
        if other not in _SIGNED_RANK and other not in (D.ACL_UINT8, D.ACL_BOOL):
            raise _refuse(a, b)
        return a if fa else b
    if a == D.ACL_BOOL:
        return _check_int(b, a)
    if b == D.ACL_BOOL:
        return _check_int(a, b)
    if D.ACL_UINT8 in (a, b):
        other = b if a == D.ACL_UINT8 else a
        if other not in _SIGNED_RANK:
            raise _refuse(a, b)
        return D.ACL_INT16 if other == D.ACL_INT8 else other
    if a in _SIGNED_RANK and b in _SIGNED_RANK:
        return _SIGNED_BY_RANK[max(_SIGNED_RANK[a], _SIGNED_RANK[b])]
    raise _refuse(a, b)


def _check_int(t: D, other: D) -> D:
    if t in _SIGNED_RANK or t == D.ACL_UINT8:
        return t
    raise _refuse(t, other)


def _promote_complex(a: D, b: D) -> D:
    ca, cb = a in _COMPLEX_RANK, b in _COMPLEX_RANK
    if ca and cb:
        return a if _COMPLEX_RANK[a] > _COMPLEX_RANK[b] else b
    c, other = (a, b) if ca else (b, a)
    if other == D.ACL_DOUBLE:
        return D.ACL_COMPLEX128
    if other == D.ACL_FLOAT and c == D.ACL_COMPLEX32:
        return D.ACL_COMPLEX64
    if other in _FLOAT_RANK or other in _SIGNED_RANK or other in (D.ACL_UINT8, D.ACL_BOOL):
        return c
    raise _refuse(a, b)


def scalar_category(value: object) -> str:
    """bool, int, float or complex: the category a Python scalar belongs to."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "complex"


_CATEGORY_ORDER = {"bool": 0, "int": 1, "uint": 1, "float": 2, "complex": 3}


def promote_with_scalar(tensor: D, scalar: D) -> D:
    """Tensor ⊕ scalar: a scalar only changes the dtype when its category is higher (int < float).

    An int tensor with a float scalar computes in float32; a bool tensor with an int scalar in int64;
    a float16 tensor with a float scalar stays float16.
    """
    tc = _CATEGORY_ORDER.get(tensor.info.category, 0)
    sc = _CATEGORY_ORDER.get(scalar.info.category, 0)
    if sc <= tc:
        return tensor
    if scalar.info.category == "float":
        return D.ACL_FLOAT
    if scalar.info.category == "complex":
        return D.ACL_COMPLEX64
    return D.ACL_INT64


def can_cast(src: D, dst: D) -> bool:
    """Whether a result of dtype ``src`` may be written to an output of dtype ``dst`` (torch's rule)."""
    sc, dc = src.info.category, dst.info.category
    if sc == "complex" and dc != "complex":
        return False
    if sc == "float" and dc in ("int", "uint", "bool"):
        return False
    return not (sc != "bool" and dc == "bool")
