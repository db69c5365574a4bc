"""Fault-injecting backends: the reference with one defect each, to prove the suite notices.

Each is registered in-process through ``acl_core.register_plugin`` with a hook object exposing
``acl_core_backends``, exactly as a third-party plugin would be found through its entry point.
"""

from __future__ import annotations

import functools

import numpy as np

from acl_core import register_plugin
from acl_core.backend import BackendRegistration, Kernel, Launch
from acl_core.capabilities import Capabilities
from acl_core.dtypes import DataType
from acl_core.errors import AclError, AclnnError, AclnnStatus
from acl_core.plugin import hookimpl
from acl_core.runtime import Runtime
from acl_core.tensor import contiguous_strides
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.planted import PLANTED_PRIORITY

PERTURBED_OP = "Mul"
PERTURBATION = 1e-2
REJECTING_OP = "Sin"
REJECTED_DTYPE = DataType.ACL_FLOAT16
UNCLAIMED_OP = "Cos"
MISSING_OP = "Exp"
SCRIBBLING_OP = "Abs"
SPILLING_OP = "Neg"
CONTIGUOUS_OP = "Sqrt"


class PerturbingBackend(ReferenceBackend):
    """Adds 1e-2 to every output of one operator (integer outputs truncate it away)."""

    name = "fault-perturb"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[PERTURBED_OP]
        driver = self.driver

        def perturbed(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            for p in launch.spec.outputs:
                if k[p.name] is not None:
                    k.write(p.name, k.read(p.name, np.float64) + PERTURBATION)

        self._kernels[PERTURBED_OP] = perturbed


class _NullReportingRuntime(Runtime):
    """Reports tensor memory outside any allocation as a null pointer (161001) instead of invalid (161002)."""

    def device_range(self, address: int, nbytes: int, what: str):  # type: ignore[no-untyped-def]
        try:
            return super().device_range(address, nbytes, what)
        except AclError as exc:
            raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR, exc.message) from None


class WrongCodeBackend(ReferenceBackend):
    """Its runtime returns a different code for an invalid call (a view past the end of its allocation)."""

    name = "fault-code"

    @functools.cached_property
    def runtime(self) -> Runtime:
        """The faulty runtime."""
        return _NullReportingRuntime(self.name, self.driver)


def _rejecting(original: Kernel) -> Kernel:
    def kernel(launch: Launch) -> None:
        for value in launch.args.values():
            if getattr(value, "dtype", None) == REJECTED_DTYPE:
                raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, "this kernel has no float16 variant")
        original(launch)

    return kernel


class OverclaimingBackend(ReferenceBackend):
    """Claims float16 (the reference's capabilities) but one kernel rejects it."""

    name = "fault-claim"

    def __init__(self) -> None:
        super().__init__()
        self._kernels[REJECTING_OP] = _rejecting(self._kernels[REJECTING_OP])


class HonestBackend(OverclaimingBackend):
    """The same kernels, but capabilities that leave out float16 and one operator: nothing may fail."""

    name = "fault-honest"

    @functools.cache  # noqa: B019 - one backend object per process
    def capabilities(self) -> Capabilities:
        """The reference's claims minus float16 and minus one op."""
        caps = super().capabilities()
        return caps.model_copy(
            update={
                "dtypes": tuple(d for d in caps.dtypes if d != REJECTED_DTYPE),
                "ops": tuple(op for op in caps.ops if op != UNCLAIMED_OP),
            }
        )


class MissingKernelBackend(ReferenceBackend):
    """Claims every op (the reference's capabilities) but has no kernel for one of them."""

    name = "fault-missing"

    def __init__(self) -> None:
        super().__init__()
        del self._kernels[MISSING_OP]

    @functools.cache  # noqa: B019 - one backend object per process
    def capabilities(self) -> Capabilities:
        """Claims the op whose kernel is gone (a stale, hand-written op list)."""
        caps = super().capabilities()
        return caps.model_copy(update={"ops": tuple(sorted({*caps.ops, MISSING_OP}))})


class FlakyBackend(ReferenceBackend):
    """Perturbs one op's output on every other call: wrong once, right on replay."""

    name = "fault-flaky"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[PERTURBED_OP]
        driver = self.driver
        calls = [0]

        def sometimes(launch: Launch) -> None:
            original(launch)
            calls[0] += 1
            if calls[0] % 2:
                k = RefCall(launch, driver)
                k.write("out", k.read("out", np.float64) + PERTURBATION)

        self._kernels[PERTURBED_OP] = sometimes


class ScribblingBackend(ReferenceBackend):
    """Computes one op right, then zeroes its input ``self`` (a kernel using an input as scratch)."""

    name = "fault-scribble"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[SCRIBBLING_OP]
        driver = self.driver

        def scribbling(launch: Launch) -> None:
            original(launch)
            RefCall(launch, driver).write("self", 0)

        self._kernels[SCRIBBLING_OP] = scribbling


class SpillingBackend(ReferenceBackend):
    """Computes one op right, then flips the byte just before its output's view (when there is room)."""

    name = "fault-spill"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[SPILLING_OP]
        driver = self.driver

        def spilling(launch: Launch) -> None:
            original(launch)
            out = launch.args["out"]
            if out.offset > 0 and out.numel > 0:
                buffer, start = driver.device_buffer(out.data)
                buffer[start + out.offset * out.dtype.numpy.itemsize - 1] ^= 0xFF

        self._kernels[SPILLING_OP] = spilling


class ContiguousOnlyBackend(ReferenceBackend):
    """One kernel refuses non-contiguous inputs (161002) although the reference computes them."""

    name = "fault-contiguous"

    def __init__(self) -> None:
        super().__init__()
        original = self._kernels[CONTIGUOUS_OP]

        def contiguous_only(launch: Launch) -> None:
            t = launch.args["self"]
            if t.strides != contiguous_strides(t.view_dims) or t.offset:
                raise AclnnError(AclnnStatus.ACLNN_ERR_PARAM_INVALID, "self must be contiguous")
            original(launch)

        self._kernels[CONTIGUOUS_OP] = contiguous_only


BACKENDS = (
    ContiguousOnlyBackend,
    SpillingBackend,
    ScribblingBackend,
    PerturbingBackend,
    WrongCodeBackend,
    OverclaimingBackend,
    HonestBackend,
    MissingKernelBackend,
    FlakyBackend,
)


class FaultPlugin:
    """A plugin object offering the fault-injecting backends."""

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        """One registration per fault."""
        return [
            BackendRegistration(name=cls.name, factory=cls, summary=cls.__doc__ or "", priority=PLANTED_PRIORITY)
            for cls in BACKENDS
        ]


_PLUGIN = FaultPlugin()


def register() -> None:
    """Register the fault backends in this process (idempotent)."""
    register_plugin(_PLUGIN, "conformance-faults")
