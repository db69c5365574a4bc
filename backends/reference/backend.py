"""The reference Backend object: the NumPy driver, the reference kernels and honest capabilities."""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import platform
from collections.abc import Mapping
from dataclasses import replace
from importlib import metadata
from typing import Any

from acl_core.backend import Backend, Kernel, Launch
from acl_core.capabilities import Capabilities, Platform, declared_formats, derive_op_dtypes
from acl_core.dtypes import DataType
from acl_core.formats import Format
from acl_core.runtime.view_writeback import set_view_dims
from acl_core.spec.ops import all_specs
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.collectives import MpiEngine, engine_for
from acl_reference.driver import DEFAULT_DEVICES, DEFAULT_MEMORY, ReferenceDriver
from acl_reference.kernels import all_kernels

COMPUTE_DTYPES: tuple[DataType, ...] = tuple(
    sorted(
        d for d in DataType if (d.numpy is not None or d is DataType.ACL_HIFLOAT8) and d not in (DataType.ACL_UINT1,)
    )
)
"""Every dtype the reference kernels read and write (HiFloat8, which has no NumPy type, through lowp_io)."""


class ReferenceBackend(Backend):
    """NumPy on the host: simple, obviously right, float64 where that makes results more exact."""

    name = "reference"

    def __init__(self, driver: ReferenceDriver | None = None) -> None:
        self._driver = driver or ReferenceDriver()
        self._kernels: dict[str, Kernel] = {name: self._bind(fn) for name, fn in all_kernels().items()}

    def _bind(self, fn: object) -> Kernel:
        driver = self._driver

        def run(launch: Launch) -> None:
            fn(RefCall(launch, driver))  # type: ignore[operator]

        return run

    def launch(self, call: Launch) -> None:
        """Enqueue the kernel on the call's stream: it runs when the stream is synchronised.

        The kernel gets the tensors as they are now (:func:`snapshot`): a GPU launch holds the
        addresses it was given, so re-pointing a tensor (``aclSetRawTensorAddr``, executor
        rebinding) before the work runs must not move it, and a captured launch replays them too.
        """
        kernel = self.kernels[call.spec.name]
        frozen, pairs = snapshot(call)

        def run() -> None:
            kernel(frozen)
            _keep_rewrites(pairs)

        self._driver.enqueue(call.stream, run, f"aclnn{call.spec.name}")

    @property
    def driver(self) -> ReferenceDriver:
        """The reference device driver."""
        return self._driver

    @property
    def collectives(self) -> MpiEngine:
        """HCCL over MPI on reference device memory (mpi4py is imported only for communicators of 2+ ranks)."""
        return engine_for(self._driver)

    @property
    def kernels(self) -> Mapping[str, Kernel]:
        """Reference kernels by operator name."""
        return self._kernels

    def dlpack_device(self) -> tuple[int, int]:
        """Host memory: DLPack's kDLCPU."""
        return (1, 0)

    def dlpack_pointer(self, address: int, nbytes: int) -> int:
        """The real host address of the NumPy buffer behind the simulated device address."""
        return int(self._driver.device_bytes(address, nbytes).ctypes.data)

    @functools.cache  # noqa: B019 - one backend object per process
    def capabilities(self) -> Capabilities:
        """What the reference does: every declared op it has a kernel for, in every dtype and format it declares."""
        specs = all_specs()
        ops = tuple(sorted(n for n, s in specs.items() if s.kernel_name in self._kernels))
        notes = {"execution": self._execution()}
        ranks = self.collectives.max_ranks()
        if ranks > 1 and not _importable("mpi4py"):  # a communicator of 2+ ranks moves its data over MPI
            notes["collectives"] = (
                f"an MPI world of {ranks} ranks, but without mpi4py only 1-rank communicators work: "
                "pip install 'acl-core[mpi]'"
            )
            ranks = 1
        else:
            notes["collectives"] = "one rank per MPI process: the communicator spans the MPI world (1 outside mpiexec)"
        claimed = [specs[n] for n in ops]
        return Capabilities(
            backend=self.name,
            backend_version=_version(),
            platform=Platform.CPU,
            device_name=f"NumPy {__import__('numpy').__version__} on {platform.processor() or platform.machine()}",
            architecture=platform.machine(),
            device_count=self._driver.device_count(),
            compute_units=_host_cores(),
            memory_bytes=self._driver.capacity,
            warp_size=1,
            unified_memory=True,
            dtypes=COMPUTE_DTYPES,
            formats=declared_formats(claimed),
            ops=ops,
            op_dtypes=derive_op_dtypes(claimed, COMPUTE_DTYPES),
            mx_use_hw=False,
            fp8_matmul_hw=False,
            tf32_hw=False,
            tf32_enabled=False,
            stream_capture=True,
            capture_refused_ops=tuple(n for n in ops if specs[n].writeback),
            attention_path="numpy",
            nz_fidelity="none",
            collective_engine=self.collectives.name,
            collective_max_ranks=ranks,
            notes=notes,
            nominal=self._nominal(),
        )

    def _execution(self) -> str:
        if self._driver.eager:
            return "eager (ACL_REFERENCE_EAGER=1): work runs when enqueued"
        return "deferred: stream work runs at synchronisation; events stamp the host clock when they run"

    def _nominal(self) -> dict[str, str]:
        """Why the device count and memory are configured figures: every virtual device is the host."""
        host = _host_memory()
        shared = f"the host's {host / (1 << 30):.1f} GiB of RAM" if host else "the host's RAM"
        return {
            "device_count": f"virtual devices (ACL_REFERENCE_DEVICES, default {DEFAULT_DEVICES}), all on the host CPU",
            "memory_bytes": (
                f"an allocation cap per device (ACL_REFERENCE_MEMORY, default {DEFAULT_MEMORY >> 30} GiB); "
                f"every device allocates from {shared}"
            ),
        }


def _importable(module: str) -> bool:
    """True when ``module`` can be imported (found on the path and not blocked in sys.modules)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it
        return False


def _host_cores() -> int:
    """CPU cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def _host_memory() -> int | None:
    """Physical memory of the host in bytes, where the OS says."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _version() -> str:
    try:
        return metadata.version("acl-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"


_Pairs = list[tuple[AclTensor, AclTensor, tuple[Format, tuple[int, ...]]]]


def snapshot(call: Launch) -> tuple[Launch, _Pairs]:
    """``call`` with every tensor (lists' members too) copied as it is now; (caller's, copy, descriptor) pairs.

    One tensor passed twice stays one copy, so aliasing between arguments is kept.
    """
    copies: dict[int, AclTensor] = {}
    pairs: _Pairs = []

    def frozen(value: Any) -> Any:
        if isinstance(value, AclTensor):
            found = copies.get(id(value))
            if found is None:
                found = copies[id(value)] = copy.copy(value)
                pairs.append((value, found, (value.format, value.storage_dims)))
            return found
        if isinstance(value, tuple) and any(isinstance(v, AclTensor) for v in value):
            return tuple(frozen(v) for v in value)
        return value

    args = {name: frozen(value) for name, value in call.args.items()}
    return (replace(call, args=args) if pairs else call), pairs


def _keep_rewrites(pairs: _Pairs) -> None:
    """A kernel that rewrote a tensor's storage descriptor (TransMatmulWeight marks it NZ) or wrote back its view
    shape (Nonzero, :mod:`acl_core.runtime.view_writeback`) rewrote the caller's."""
    for original, used, (fmt, dims) in pairs:
        if used.view_dims != original.view_dims:
            set_view_dims(original, used.view_dims)
        if (used.format, used.storage_dims) != (fmt, dims):
            original.format, original.storage_dims = used.format, used.storage_dims
            original.__dict__.pop("layout", None)  # the cached layout key describes the old storage
