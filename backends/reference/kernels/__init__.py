"""Reference kernels, one module per operator family, registered by name with :func:`kernel`."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from acl_reference.call import RefCall

RefKernel = Callable[[RefCall], None]

FAMILIES: tuple[str, ...] = (
    "elementwise",
    "reduction",
    "norm",
    "matmul",
    "convolution",
    "attention",
    "moe",
    "movement",
    "quant",
    "layout",
    "mc2",
)

_KERNELS: dict[str, RefKernel] = {}


def kernel(*names: str) -> Callable[[RefKernel], RefKernel]:
    """Register a function as the reference kernel of the operators ``names``."""

    def register(fn: RefKernel) -> RefKernel:
        for name in names:
            if name in _KERNELS:
                raise RuntimeError(f"reference kernel {name} registered twice")
            _KERNELS[name] = fn
        return fn

    return register


def all_kernels() -> dict[str, RefKernel]:
    """Every reference kernel by operator name (imports the family modules once)."""
    # every family, every time (imports are cached): one family imported directly beforehand must not
    # make the registry look complete
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}")
    return dict(_KERNELS)
