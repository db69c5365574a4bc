"""Host cost of eager calls with device checks, then one synchronisation, on the rocm backend without a GPU.

``--calls`` small Take calls (4,096 fp16 values, 256 int64 indices: the index range check is a device flag) of
one repeatable executor on the default stream, then one aclrtSynchronizeStream, on the fake provider of
tests/rocm with launches dropped (the GPU's work). It prints the median (and best) wall time of ``--rounds`` rounds
per call and the provider calls the flags cost (stream-ordered allocations and frees, memsets, synchronous
device-to-host copies). ``--driver FILE`` loads another backends/rocm/driver.py in place of this one
(a before/after figure)::

    git show main:backends/rocm/driver.py > /tmp/driver_main.py
    .venv/bin/python scripts/profile_eager_checks.py --driver /tmp/driver_main.py
    .venv/bin/python scripts/profile_eager_checks.py
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    """Time the calls and count the provider work their flags cost."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--driver", type=Path, help="a driver.py to load as acl_rocm.driver instead")
    args = parser.parse_args()
    if args.driver is not None:
        spec = importlib.util.spec_from_file_location("acl_rocm.driver", args.driver)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["acl_rocm.driver"] = module
        spec.loader.exec_module(module)

    import numpy as np

    from acl_core.aclnn import aclSetAclOpExecutorRepeatable, execute, get_workspace_size
    from acl_core.eager import to_device
    from acl_core.spec.ops import get_spec
    from acl_core.spec.runtime import CopyDirection
    from acl_rocm.backend import RocmBackend
    from acl_rocm.driver import handle
    from tests.rocm.fake_provider import FakeProvider

    class Counting(FakeProvider):
        """Launches dropped; the provider calls that device-check flags make, counted."""

        def __post_init__(self) -> None:
            super().__post_init__()
            self.counts: Counter[str] = Counter()

        def launch(self, function: object, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
            """Dropped: the GPU's work."""

        def malloc_async(self, nbytes: int, stream: int) -> int:
            self.counts["malloc_async"] += 1
            return super().malloc_async(nbytes, stream)

        def free_async(self, address: int, stream: int) -> None:
            self.counts["free_async"] += 1
            super().free_async(address, stream)

        def memset(self, dst: int, value: int, nbytes: int, stream: int | None) -> None:
            self.counts["memset"] += 1
            super().memset(dst, value, nbytes, stream)

        def memcpy(self, dst: int, src: int, nbytes: int, direction: CopyDirection, stream: int | None) -> None:
            if stream is None and direction is CopyDirection.DEVICE_TO_HOST:
                self.counts["sync D2H copy"] += 1
            super().memcpy(dst, src, nbytes, direction, stream)

    with tempfile.TemporaryDirectory() as cache:
        provider = Counting()
        backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": cache})
        backend.runtime.ensure_device(0)
        x = to_device(np.arange(4096, dtype=np.float16), backend)
        index = to_device(np.arange(-128, 128, dtype=np.int64), backend)
        out = to_device(np.zeros(256, np.float16), backend)
        take = get_spec("Take")
        size, executor = get_workspace_size(take, [x.tensor(), index.tensor(), out.tensor()], backend=backend)
        assert aclSetAclOpExecutorRepeatable(executor) == 0
        stream = handle(backend.runtime.stream(None))
        execute(take, None, size, executor, None)  # compiled and planned outside the timing
        backend.driver.synchronize_stream(stream)
        times = []
        for _ in range(args.rounds):
            provider.counts.clear()
            start = time.perf_counter()
            for _ in range(args.calls):
                execute(take, None, size, executor, None)
            backend.driver.synchronize_stream(stream)
            times.append(time.perf_counter() - start)
    per_call = statistics.median(times) / args.calls * 1e6
    print(f"driver: {args.driver or 'this checkout'}")
    best = min(times) / args.calls * 1e6
    head = f"{args.calls} Take calls then one sync: {per_call:.1f} us a call"
    print(f"{head} (median of {args.rounds} rounds), best {best:.1f}")
    print("provider calls a round:", dict(sorted(provider.counts.items())))


if __name__ == "__main__":
    main()
