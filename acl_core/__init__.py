"""acl-core: Ascend CANN's programming contract as typed Python interfaces, with pluggable backends.

``from acl_core import acl, aclnn, hccl`` gives the CANN-shaped front ends; ``acl_core.get_backend()``
and ``acl_core.list_backends()`` find backends by entry point (group ``acl_core.backends``).
Submodules load on first use, so ``import acl_core`` stays cheap and imports no vendor library.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from acl_core.plugin import (
    BackendStatus,
    get_backend,
    list_backends,
    register_plugin,
    reset_plugins,
    unregister_backend,
    use_backend,
)

if TYPE_CHECKING:
    from acl_core import acl, aclnn, eager, hccl
    from acl_core.capabilities import Capabilities
    from acl_core.dtypes import DataType
    from acl_core.errors import AclCoreError, AclError, AclnnError, BackendUnavailableError, HcclError
    from acl_core.formats import Format

__version__ = "0.1.0"

_LAZY = {
    "acl": ("acl_core.acl", None),
    "aclnn": ("acl_core.aclnn", None),
    "eager": ("acl_core.eager", None),
    "hccl": ("acl_core.hccl", None),
    "Capabilities": ("acl_core.capabilities", "Capabilities"),
    "DataType": ("acl_core.dtypes", "DataType"),
    "Format": ("acl_core.formats", "Format"),
    "AclCoreError": ("acl_core.errors", "AclCoreError"),
    "AclError": ("acl_core.errors", "AclError"),
    "AclnnError": ("acl_core.errors", "AclnnError"),
    "HcclError": ("acl_core.errors", "HcclError"),
    "BackendUnavailableError": ("acl_core.errors", "BackendUnavailableError"),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'acl_core' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


__all__ = [
    "AclCoreError",
    "AclError",
    "AclnnError",
    "BackendStatus",
    "BackendUnavailableError",
    "Capabilities",
    "DataType",
    "Format",
    "HcclError",
    "__version__",
    "acl",
    "aclnn",
    "eager",
    "get_backend",
    "hccl",
    "list_backends",
    "register_plugin",
    "reset_plugins",
    "unregister_backend",
    "use_backend",
]
