"""Host cost of one MoeDistributeDispatchV2 phase-2 call on the rocm backend, without a GPU (issue 16).

The bench's case (one rank, bf16 hidden 2048, top-8 of 64 experts, no mask, no scales): the rocm backend runs
on the fake provider of tests/rocm with kernel launches and the collective library's copies stubbed out (they
are the GPU's work) and large stream-ordered temporaries handed out from kept blocks (allocating host memory
would dominate otherwise), so what a call costs here is acl-core's host path: aclnn's phase 2, the MC2 op's
planning and argument packing. It times ``--repeat`` phase-2 calls of a repeatable executor for each token
count and route, and prints a cProfile of the last configuration::

    .venv/bin/python scripts/profile_mc2_dispatch.py --tokens 64 4096 --routes block grid

Measured on the 2-core helper machine (2026-12-06, median of 5 rounds of 200-300 calls): before the per-signature
plan (c36ab33) 129 / 131 / 188 us a call at 64 tokens (default = block, block, grid) and 194 / 133 / 193 at 4,096
(default = grid, block, grid); with it 16-17 us for each.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import acl_core
from acl_core.dtypes import DataType as D
from acl_core.eager import to_device
from acl_core.spec.collective import SELF_GROUP_NAME
from acl_rocm.backend import RocmBackend
from acl_rocm.providers.nccl import NCCL_SUCCESS, CollectiveLibrary
from scripts.profile_prefill import HostOnlyProvider as KeptBlocksProvider
from scripts.profile_prefill import Plugin
from tests.rocm.test_mc2_cpu import HostNccl
from tools.bench.ops import Prepared

NAME = "rocm-fake-mc2-profile"


class _NoCopyNccl(HostNccl):
    """One-rank NCCL whose collectives return at once (the copy is the GPU's work)."""

    def _move(self, name: str, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        return NCCL_SUCCESS


class HostOnlyProvider(KeptBlocksProvider):
    """profile_prefill's host-only provider (big temporaries kept) with launches dropped and a copy-free NCCL."""

    def launch(self, function: object, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
        """Dropped: the GPU's work."""

    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        """The copy-free one-rank NCCL."""
        return _NoCopyNccl([]), ""


def prepared(backend: RocmBackend, stream: int, tokens: int, hidden: int, top_k: int, experts: int) -> Prepared:
    """The bench's DispatchV2 call after phase 1 (repeatable executor, outputs allocated)."""
    rng = np.random.default_rng(0)
    idx = np.stack([rng.permutation(experts)[:top_k] for _ in range(tokens)]).astype(np.int32)
    args: dict[str, Any] = {"x": to_device(np.zeros((tokens, hidden), np.uint16).view(D.ACL_BF16.numpy), backend)}
    args |= {"expertIds": to_device(idx, backend), "scalesOptional": None}
    args |= {"xActiveMaskOptional": None, "expertScalesOptional": None, "quantMode": 0, "expertTokenNumsType": 0}
    args |= {"groupEp": SELF_GROUP_NAME, "epWorldSize": 1, "epRankId": 0, "moeExpertNum": experts}
    args |= {"groupTp": "", "tpWorldSize": 0, "tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0}
    args |= {"sharedExpertRankNum": 0, "globalBs": 0, "commAlg": None}
    return Prepared(backend, stream, "MoeDistributeDispatchV2", args)


def per_call_us(call: Any, repeat: int) -> float:
    """Median over 5 rounds of the mean host time of ``repeat`` calls, in microseconds."""
    for _ in range(20):
        call()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            call()
        rounds.append((time.perf_counter() - t0) / repeat * 1e6)
    return float(np.median(rounds))


def main(argv: list[str] | None = None) -> int:
    """Time and profile phase 2; print the numbers."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[64, 4096])
    p.add_argument("--routes", nargs="+", default=["default", "block", "grid"])
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=200)
    p.add_argument("--top", type=int, default=30, help="profile rows printed")
    args = p.parse_args(argv)
    cache = Path(tempfile.gettempdir()) / "acl-mc2-profile-cache"
    backend = RocmBackend(HostOnlyProvider(blas=True), {"ACL_KERNEL_CACHE": str(cache)})
    backend.runtime.ensure_device(0)
    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin(backend, NAME))
    acl_core.use_backend(NAME)
    stream = backend.runtime.create_stream()
    runner = backend.runners["mc2"]
    last: Any = None
    for tokens in args.tokens:
        for route in args.routes:
            runner.forced_route = None if route == "default" else route
            call = prepared(backend, stream, tokens, args.hidden, 8, 64)
            print(f"DispatchV2 {tokens} tokens, route {route}: {per_call_us(call, args.repeat):.1f} us/call host")
            if last is not None:
                last.free()
            last = call
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(args.repeat):
        last()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    last.free()
    runner.forced_route = None
    acl_core.use_backend(None)
    acl_core.reset_plugins()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
