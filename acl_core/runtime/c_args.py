"""The C types of the acl entry points' parameters, and the one decorator that enforces them.

A pyACL program hands the runtime Python objects where CANN's C API takes ``int32_t``, ``size_t``,
enums and ``void*`` handles. A value C could not express (a string, a float, a bool, None where no
pointer is meant, a negative size, an int wider than the C type) is a parameter error,
``ACL_ERROR_INVALID_PARAM`` (100000), reported before any rule or driver sees it. The same
decorator refuses every entry point but ``aclInit`` / ``aclFinalize`` while the runtime is not
initialised (``ACL_ERROR_UNINITIALIZE``, 100001).

Parameters declare their C type in the signature: ``def malloc(self, size: SizeT, policy: CEnum)``.
"""

from __future__ import annotations

import functools
import operator
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar

import numpy as np

from acl_core.errors import AclError, AclErrorCode


@dataclass(frozen=True)
class CType:
    """One C parameter type: an integer range, optionally a pointer that may be null (None or 0)."""

    name: str
    low: int
    high: int
    nullable: bool = False

    def convert(self, param: str, value: object) -> int:
        """``value`` as a Python int of this C type, or AclError(100000) saying why it is not one."""
        if value is None and self.nullable:
            return 0
        if isinstance(value, (bool, np.bool_)):
            raise _invalid(param, value, f"a bool is not a {self.name}")
        try:
            number = operator.index(value)  # type: ignore[arg-type]  # int and NumPy ints; never float, str
        except TypeError:
            raise _invalid(param, value, f"{self.name} takes an integer") from None
        if not self.low <= number <= self.high:
            raise _invalid(param, value, f"outside {self.name}'s range [{self.low}, {self.high}]")
        return number


@dataclass(frozen=True)
class CString:
    """``const char*`` that may be NULL: a str or None."""

    name: str = "const char*"

    def convert(self, param: str, value: object) -> str | None:
        """``value`` if it is a str or None, else AclError(100000)."""
        if value is None or isinstance(value, str):
            return value
        raise _invalid(param, value, "const char* takes a str or None")


def _invalid(param: str, value: object, why: str) -> AclError:
    shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
    return AclError(
        AclErrorCode.ACL_ERROR_INVALID_PARAM, f"{param} = {shown} ({type(value).__name__}) is not valid: {why}"
    )


INT32 = CType("int32_t", -(2**31), 2**31 - 1)
UINT32 = CType("uint32_t", 0, 2**32 - 1)
SIZE_T = CType("size_t", 0, 2**64 - 1)
ENUM = CType("enum", -(2**31), 2**31 - 1)
POINTER = CType("void*", 0, 2**64 - 1, nullable=True)
HANDLE = CType("handle (void*)", 0, 2**64 - 1, nullable=True)
C_STRING = CString()

Int32 = Annotated[int, INT32]
UInt32 = Annotated[int, UINT32]
SizeT = Annotated[int, SIZE_T]
CEnum = Annotated[int, ENUM]
Ptr = Annotated[int | None, POINTER]
Handle = Annotated[int | None, HANDLE]
CStr = Annotated[str | None, C_STRING]

_F = TypeVar("_F", bound=Callable[..., Any])


class _Lifecycle(Protocol):
    @property
    def initialized(self) -> bool: ...


def c_converters(fn: Callable[..., Any]) -> dict[str, CType | CString | None]:
    """Each parameter of an entry point (after self) and the C type it is converted to (None: passed as is)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    result: dict[str, CType | CString | None] = {}
    for name in fn.__code__.co_varnames[1 : fn.__code__.co_argcount]:
        meta = getattr(hints.get(name), "__metadata__", ())
        result[name] = next((m for m in meta if isinstance(m, (CType, CString))), None)
    return result


_Step = tuple[str, "CType | CString | None"]


def _plan(fn: Callable[..., Any], api: str) -> tuple[list[_Step], dict[str, _Step]]:
    """Per parameter: the label its errors carry ("aclrtMalloc: size") and its C type."""
    types = c_converters(fn)
    by_position: list[_Step] = [(f"{api}: {name}", c) for name, c in types.items()]
    return by_position, dict(zip(types, by_position))


def _convert(step: _Step, value: object) -> object:
    label, ctype = step
    if ctype is None:
        return value
    if type(value) is int and isinstance(ctype, CType) and ctype.low <= value <= ctype.high:
        return value  # the common case, without the general checks
    return ctype.convert(label, value)


def acl_entry(api: str, *, needs_init: bool = True) -> Callable[[_F], _F]:
    """Mark a Runtime method as the acl entry point ``api``: C-typed arguments, aclInit required."""

    def decorate(fn: _F) -> _F:
        plan: list[tuple[list[_Step], dict[str, _Step]]] = []

        @functools.wraps(fn)
        def wrapper(self: _Lifecycle, *args: Any, **kwargs: Any) -> Any:
            if needs_init and not self.initialized:
                raise AclError(AclErrorCode.ACL_ERROR_UNINITIALIZE, f"{api}: call acl.init (aclInit) first")
            if not plan:  # annotations resolve once, at the first call, when every name exists
                plan.append(_plan(fn, api))
            by_position, by_name = plan[0]
            if len(args) > len(by_position):
                raise TypeError(f"{api} takes {len(by_position)} arguments, {len(args)} given")
            converted = [_convert(step, arg) for step, arg in zip(by_position, args)]
            for name, value in kwargs.items():
                if name in by_name:
                    kwargs[name] = _convert(by_name[name], value)
            return fn(self, *converted, **kwargs)

        wrapper.acl_api = api  # type: ignore[attr-defined]
        wrapper.needs_init = needs_init  # type: ignore[attr-defined]
        return typing.cast(_F, wrapper)

    return decorate


__all__ = [
    "C_STRING",
    "ENUM",
    "HANDLE",
    "INT32",
    "POINTER",
    "SIZE_T",
    "UINT32",
    "CEnum",
    "CStr",
    "CString",
    "CType",
    "Handle",
    "Int32",
    "Ptr",
    "SizeT",
    "UInt32",
    "acl_entry",
    "c_converters",
]
