"""The pyACL return convention in one place: run a runtime call, turn errors into codes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from acl_core.errors import AclCoreError, AclErrorCode
from acl_core.plugin import get_backend
from acl_core.runtime import Runtime

ACL_SUCCESS = 0
_T = TypeVar("_T")
_local = threading.local()


def runtime() -> Runtime:
    """The runtime of the process's backend (``acl_core.use_backend`` / ``ACL_BACKEND`` / best available)."""
    return get_backend().runtime


def _record(exc: BaseException) -> int:
    if isinstance(exc, AclCoreError):
        _local.message = exc.message
        return exc.code
    _local.message = f"internal error: {type(exc).__name__}: {exc}"
    return int(AclErrorCode.ACL_ERROR_INTERNAL_ERROR)


def recent_error() -> str:
    """The last failure's message on this thread."""
    return getattr(_local, "message", "")


def call_status(fn: Callable[[], Any]) -> int:
    """Run ``fn``; return 0 or the CANN code of the error it raised."""
    try:
        fn()
    except Exception as exc:
        return _record(exc)
    return ACL_SUCCESS


def call_value(fn: Callable[[], _T], failed: Any = 0) -> tuple[Any, int]:
    """Run ``fn``; return (value, 0) or (``failed``, code)."""
    try:
        return fn(), ACL_SUCCESS
    except Exception as exc:
        return failed, _record(exc)
