"""Compile every kernel source the rocm backend generates for the conformance samples, with nvcc, on the CPU.

A GPU run is scarce; a kernel that does not compile under NVRTC fails every case of its operator there.
This runs each claimed operator's samples (every layout) on a backend over the fake provider, which
records the sources the backend asks it to compile without running anything, and compiles each distinct
source with ``nvcc -ptx`` for sm_90 with the backend's own options. Needs nvcc on the PATH.

Usage: python scripts/nvcc_preflight.py [OP_PATTERN ...]   (fnmatch patterns; default: every claimed op)
ACL_GEMV and ACL_DECODE_CONFIG from the environment reach the backend (``ACL_GEMV=1``: small-M products compile
the GEMV kernels; ``ACL_DECODE_CONFIG=fused``: the one-launch decode kernels).
Exit status 1 when a source fails to compile (its log is printed), 2 without nvcc.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from acl_core import eager
from acl_core.errors import AclCoreError
from acl_core.spec.ops import all_specs
from acl_rocm.backend import RocmBackend
from tests.rocm.fake_provider import FakeProvider


class Recording(FakeProvider):
    """The fake provider, keeping every source the backend compiles (name -> (source, options))."""

    def compile(self, source: str, name: str, options: tuple[str, ...], arch: str) -> bytes:
        SOURCES[name] = (source, tuple(options))
        return super().compile(source, name, options, arch)

    def collective_library(self) -> tuple[Any, str]:
        """A one-rank host NCCL, so that the MC2 ops (claimed only with a collective engine) run too."""
        from tests.rocm.test_mc2_cpu import HostNccl

        return HostNccl([]), ""


SOURCES: dict[str, tuple[str, tuple[str, ...]]] = {}


def collect(patterns: list[str]) -> list[str]:
    """Run the samples of the claimed ops matching ``patterns``; the ops whose calls raised something odd."""
    switches = {k: os.environ[k] for k in ("ACL_GEMV", "ACL_DECODE_CONFIG") if k in os.environ}
    backend = RocmBackend(Recording(blas=True), {"ACL_KERNEL_CACHE": tempfile.mkdtemp(), **switches})
    backend.runtime.ensure_device(0)
    claimed = set(backend.capabilities().ops)
    odd: list[str] = []
    for name, spec in sorted(all_specs().items()):
        if name not in claimed or spec.samples is None:
            continue
        if patterns and not any(fnmatch.fnmatch(name, p) for p in patterns):
            continue
        for sample in spec.samples(np.random.default_rng(0)):
            for layout in eager.LAYOUTS:
                try:
                    eager.run(name, backend, layout=layout, op_args=sample.args)
                except AclCoreError:
                    pass  # refusals and device checks: the sources were still generated
                except Exception as exc:
                    odd.append(f"{name} [{sample.note}] {layout}: {type(exc).__name__}: {exc}")
    return odd


def compile_one(item: tuple[str, tuple[str, tuple[str, ...]]], folder: Path) -> str | None:
    """nvcc -ptx of one source; its log when it fails or warns."""
    name, (source, options) = item
    path = folder / f"{name}.cu"
    path.write_text(source)
    flags = [o for o in options if o.startswith(("-D", "-std"))]
    done = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", *flags, str(path), "-o", str(path.with_suffix(".ptx"))],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"=== {name} (nvcc exit {done.returncode})\n{done.stderr[-3000:]}"
    return None


def main(argv: list[str]) -> int:
    """Collect, compile, report."""
    if shutil.which("nvcc") is None:
        print("nvcc is not on the PATH")
        return 2
    odd = collect(argv)
    for line in odd[:20]:
        print("call failed:", line)
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        logs = [log for log in pool.map(lambda item: compile_one(item, Path(tmp)), sorted(SOURCES.items())) if log]
    for log in logs:
        print(log)
    print(f"{len(SOURCES)} kernel sources compiled with nvcc for sm_90: {len(logs)} failed; {len(odd)} calls raised")
    return 1 if logs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
