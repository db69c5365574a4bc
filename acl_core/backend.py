"""The typed Backend object a plugin hands to acl-core, and the registration record that finds it."""

from __future__ import annotations

import functools
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acl_core.capabilities import Capabilities
    from acl_core.dtypes import DataType
    from acl_core.formats import Format
    from acl_core.runtime import Runtime
    from acl_core.spec.collective import CollectiveEngine
    from acl_core.spec.opspec import OpSpec
    from acl_core.spec.runtime import Driver


@dataclass
class Launch:
    """One validated operator call, as a backend kernel receives it.

    ``args`` maps each parameter name of the kernel's operator to its value in one normalised form
    (:mod:`acl_core.spec.kernel_args`): :class:`~acl_core.tensor.AclTensor` (None for an absent
    optional), ``tuple[AclTensor, ...]`` for a tensor list, :class:`~acl_core.spec.kernel_args.Scalar`
    (and tuples of them) for scalars, ``tuple[int | float | bool, ...]`` for host arrays, and int,
    float, bool, str or DataType for attributes. ``plan`` holds what validation derived (promoted
    dtype, broadcast shape, precision...), under the keys :mod:`acl_core.spec.plan` declares.
    docs/KERNELS.md lists both per operator.
    """

    spec: OpSpec
    args: dict[str, Any]
    plan: dict[str, Any]
    workspace: int
    workspace_size: int
    stream: object
    memo: dict[str, Any] = field(default_factory=dict)
    """Backend-private launch metadata for this exact signature (layouts, addresses, attributes): a
    backend may store its launch plan here on the first call and reuse it on every later one.

    Under :data:`RELAUNCH` a backend may store a callable of the driver stream that enqueues this
    signature again and returns True, or returns False (having done nothing) when it cannot, say
    because another device is current. Phase 2 of a call without workspace then calls it instead
    of building a :class:`Launch` and dispatching through :meth:`Backend.launch`."""


RELAUNCH = "acl_core.relaunch"
"""The :attr:`Launch.memo` key of a backend's bound re-launch (the per-call host path of small ops)."""


Kernel = Callable[[Launch], None]
"""A backend's implementation of one operator."""


class Backend(ABC):
    """A backend: one device driver, kernels for aclnn operators, and measured capabilities."""

    name: str

    @property
    @abstractmethod
    def driver(self) -> Driver:
        """The device primitives the shared runtime drives."""

    @property
    @abstractmethod
    def kernels(self) -> Mapping[str, Kernel]:
        """Operator name (without the aclnn prefix) to kernel."""

    @abstractmethod
    def capabilities(self) -> Capabilities:
        """Facts measured from the device (cached by the backend; frozen)."""

    @property
    def collectives(self) -> CollectiveEngine | None:
        """The engine under ``from acl_core import hccl`` for this backend's devices, or None (the default)."""
        return None

    @functools.cached_property
    def runtime(self) -> Runtime:
        """The acl runtime of this backend (one per process)."""
        from acl_core.runtime import Runtime

        runtime = Runtime(self.name, self.driver)
        runtime.capture.refused_ops = lambda: self.capabilities().capture_refused_ops
        return runtime

    def claim(self, op: str) -> tuple[frozenset[DataType], frozenset[Format]]:
        """The tensor dtypes and formats ``op`` accepts here; phase 1 refuses any other (default: capabilities()).

        Override only to answer without measuring the device (the answer must equal the capabilities').
        """
        caps = self.capabilities()
        return caps.op_claim(op), frozenset(caps.formats)

    def launch(self, call: Launch) -> None:
        """Enqueue one validated operator call on its stream (the default runs the kernel at once)."""
        self.kernels[call.spec.name](call)

    def dlpack_device(self) -> tuple[int, int] | None:
        """DLPack (DLDeviceType, device id) of device memory on the current device; None: not shareable (default)."""
        return None

    def dlpack_pointer(self, address: int, nbytes: int) -> int:
        """The pointer a DLPack consumer reads for ``nbytes`` of device memory at ``address`` (the address itself)."""
        return address


@dataclass(frozen=True)
class BackendRegistration:
    """What a plugin's ``acl_core_backends`` hook returns for each backend it offers.

    ``probe`` must be cheap and must not import vendor libraries: it returns None when the backend
    can start here, otherwise the reason it cannot (with the remedy). ``factory`` builds the
    backend and is called at most once per process, only after ``probe`` returned None.

    ``expectations`` and ``tolerance_overrides`` are what the plugin ships for the conformance
    suite: the path of its expectations file (TOML, the format of ``acl_conformance.expectations``;
    ``--expectations`` still wins) and ``acl_conformance.tolerances.Override`` entries for its
    documented accuracy, each with its reason, beside ``acl_conformance.tolerances.FlagAllowance``
    entries (a flag case's bound loosened by a bounded factor on one architecture, a hardware limit
    with its measured ratio) and ``acl_conformance.tolerances.AccumulationAllowance`` entries (a
    reduction-class value case's bound plus a bounded ``extra·M`` on one architecture, for a matrix
    instruction's short accumulator, with its measured ``|err|/M``). ``tolerance_overrides`` may be
    a callable returning them, so the plugin
    imports ``acl_conformance`` only when the suite runs. acl-core's own files never need to know the plugin.
    """

    name: str
    factory: Callable[[], Backend]
    probe: Callable[[], str | None] = lambda: None
    priority: int = 0
    summary: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)
    expectations: str | os.PathLike[str] | None = None
    tolerance_overrides: Sequence[Any] | Callable[[], Sequence[Any]] = ()
