"""The pyACL-shaped runtime front end: ``from acl_core import acl`` instead of ``import acl``.

Same names and convention as pyACL: out-parameters come back first and the aclError code last
(``ptr, ret = acl.rt.malloc(size, policy)``); handles and pointers are ints; errors are returned,
not raised. ``acl.get_recent_err_msg()`` tells what the last failure was about.
"""

from __future__ import annotations

from acl_core.acl import mdl, rt, util
from acl_core.acl._call import ACL_SUCCESS, call_status, recent_error, runtime


def init(config_path: str | None = None) -> int:
    """aclInit: once per process (a second call returns ACL_ERROR_REPEAT_INITIALIZE, 100002)."""
    return call_status(lambda: runtime().init(config_path))


def finalize() -> int:
    """aclFinalize: releases every device the process set."""
    return call_status(lambda: runtime().finalize())


def get_recent_err_msg() -> str:
    """aclGetRecentErrMsg: the message of this thread's last failed call."""
    return recent_error()


__all__ = ["ACL_SUCCESS", "finalize", "get_recent_err_msg", "init", "mdl", "rt", "util"]
