"""How rocm runners bind their ops to kernels and keep a signature's plan in :attr:`Launch.memo`.

A kernel is named ``rocm_<op>`` (what tracebacks and profiles show). A family plans a call once per signature:
the executor hands every call of one signature the same ``launch.memo`` (a fresh one after address rebinding), so
the plan, packed arguments included, is kept there under the family's key on the current device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, TypeVar, cast

from acl_core.backend import Kernel, Launch

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

T = TypeVar("T")

_UNSET: Final = object()


def named_kernel(name: str, run: Callable[[Launch], None]) -> Kernel:
    """``run`` as the Kernel named ``rocm_<name>``."""

    def kernel(launch: Launch) -> None:
        run(launch)

    kernel.__name__ = f"rocm_{name}"
    return kernel


def named_kernels(ops: Iterable[str], run: Callable[[str, Launch], None]) -> dict[str, Kernel]:
    """A Kernel per op of ``ops``: ``run(op, launch)``, named ``rocm_<op>``."""

    def bind(op: str) -> Kernel:
        def kernel(launch: Launch) -> None:
            run(op, launch)

        kernel.__name__ = f"rocm_{op}"
        return kernel

    return {op: bind(op) for op in ops}


def family_key(backend: RocmBackend, family: str, *variants: object) -> str:
    """``rocm.<family>@<device>``, then ``:<variant>`` for each variant that is not None (plans kept apart)."""
    key = f"rocm.{family}@{backend.provider.get_device()}"
    for variant in variants:
        if variant is not None:
            key += f":{variant}"
    return key


def memo_plan(launch: Launch, key: str, plan: Callable[[], T]) -> T:
    """``launch.memo[key]``, made by ``plan()`` on the signature's first call (a None plan is kept too)."""
    found = launch.memo.get(key, _UNSET)
    if found is _UNSET:
        found = launch.memo[key] = plan()
    return cast(T, found)
