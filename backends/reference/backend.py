"""The reference Backend object: the NumPy driver, the reference kernels and honest capabilities."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from importlib import metadata

from acl_core.backend import Backend, Kernel, Launch
from acl_core.capabilities import Capabilities, Platform
from acl_core.dtypes import DataType
from acl_core.formats import PLAIN_FORMATS
from acl_core.spec.ops import all_specs
from acl_reference.call import RefCall
from acl_reference.collectives import MpiEngine, engine_for
from acl_reference.driver import ReferenceDriver
from acl_reference.kernels import all_kernels

COMPUTE_DTYPES: tuple[DataType, ...] = tuple(
    sorted(d for d in DataType if d.numpy is not None and d not in (DataType.ACL_UINT1,))
)


class ReferenceBackend(Backend):
    """NumPy on the host: simple, obviously right, float64 where that makes results more exact."""

    name = "reference"

    def __init__(self) -> None:
        self._driver = ReferenceDriver()
        self._kernels: dict[str, Kernel] = {name: self._bind(fn) for name, fn in all_kernels().items()}

    def _bind(self, fn: object) -> Kernel:
        driver = self._driver

        def run(launch: Launch) -> None:
            fn(RefCall(launch, driver))  # type: ignore[operator]

        return run

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
        """What the reference does: every declared op it has a kernel for, on the host CPU."""
        specs = all_specs()
        ops = tuple(sorted(n for n, s in specs.items() if s.kernel_name in self._kernels))
        return Capabilities(
            backend=self.name,
            backend_version=_version(),
            platform=Platform.CPU,
            device_name=f"NumPy {__import__('numpy').__version__} on {platform.processor() or platform.machine()}",
            architecture=platform.machine(),
            device_count=self._driver.device_count(),
            compute_units=os.cpu_count() or 1,
            memory_bytes=self._driver.capacity,
            warp_size=1,
            unified_memory=True,
            dtypes=COMPUTE_DTYPES,
            formats=tuple(sorted(PLAIN_FORMATS)),
            ops=ops,
            mx_use_hw=False,
            fp8_matmul_hw=False,
            tf32_hw=False,
            tf32_enabled=False,
            attention_path="numpy",
            nz_fidelity="none",
            collective_engine=self.collectives.name,
            collective_max_ranks=self.collectives.max_ranks(),
            notes={"execution": "eager: work runs when enqueued; events stamp the host clock"},
        )


def _version() -> str:
    try:
        return metadata.version("acl-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"
