"""Host cost of one GroupedMatmulV5 phase-2 call on the rocm backend, without a GPU (issue 18).

The bench's row (tools/bench/gemm_variants.py ``_grouped_v5``: 64 groups of uneven M from a device group list of
counts, K 2,048, N 1,408, bf16, one x, one [g, K, N] weight) runs on profile_mc2_dispatch's host-only provider
(tests/rocm's fake provider with kernel launches dropped, large stream-ordered temporaries handed out from kept
blocks), so what a call costs here is acl-core's host path: aclnn's phase 2, the plan, the descriptor table, the
launches' argument packing. ``--kernel`` forces the grouped GEMM (``ACL_GMM_KERNEL``; default: auto, the wgmma
kernel on the fake's sm_90, as on the H100). It times ``--repeat`` phase-2 calls of a repeatable executor and
prints a cProfile of them (``--profile-other``: of the ``--runner`` file's);
``--runner FILE`` loads another backends/rocm/ops/grouped_matmul.py as the runner (a before/after figure, the two
timed in alternating rounds since the machine is shared)::

    git show main:backends/rocm/ops/grouped_matmul.py > /tmp/gmm_main.py
    .venv/bin/python scripts/profile_grouped_matmul.py --runner /tmp/gmm_main.py

Measured on the 2-core helper machine (2026-12-08, shared, load 30-40: the fastest of 9 rounds of 100 calls, the two
runners alternated, three runs): main a477a05 783 / 798 / 869 us a call (wgmma path; 1,314 with ``--kernel mma`` in a
noisier minute), with a signature's launches kept (branch h17-gmmhost) 25 / 25 / 27 (39). main's figure is the
~800 us a call the H100 bench row spent outside the GEMM kernel (issue 18).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import acl_core
from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_device
from acl_rocm.backend import RocmBackend
from scripts.profile_mc2_dispatch import HostOnlyProvider
from scripts.profile_prefill import Plugin
from tools.bench.ops import Prepared

NAME = "rocm-fake-gmm-profile"


class CountingProvider(HostOnlyProvider):
    """The host-only provider, counting the calls a phase-2 call makes of it."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.counts: Counter[str] = Counter()

    def launch(self, function: object, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
        """Dropped (the GPU's work), counted."""
        self.counts["launch"] += 1

    def malloc_async(self, nbytes: int, stream: int) -> int:
        self.counts["malloc_async"] += 1
        return super().malloc_async(nbytes, stream)

    def free_async(self, address: int, stream: int) -> None:
        self.counts["free_async"] += 1
        super().free_async(address, stream)


def counts(groups: int, tokens: int, seed: int = 0) -> list[int]:
    """Rows per group as the bench draws them (uneven expert popularities, some experts empty)."""
    rng = np.random.default_rng(seed)
    weights = rng.gamma(0.6, size=groups)
    return [int(c) for c in rng.multinomial(tokens, weights / weights.sum())]


def prepared(backend: RocmBackend, stream: int, groups: int, tokens: int, k: int, n: int) -> Prepared:
    """The bench's GroupedMatmulV5 call after phase 1 (repeatable executor, output allocated)."""
    bf16 = D.ACL_BF16
    none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
    none |= dict.fromkeys(("antiquantOffsetOptional", "perTokenScaleOptional", "activationInputOptional"))
    none |= dict.fromkeys(("activationQuantScaleOptional", "activationQuantOffsetOptional"))
    none |= dict.fromkeys(("tuningConfigOptional", "activationFeatureOutOptional", "dynQuantScaleOutOptional"))
    args: dict[str, Any] = {"x": [empty((tokens, k), bf16, backend)], "weight": [empty((groups, k, n), bf16, backend)]}
    args |= none | {"splitItem": 3, "groupType": 0, "groupListType": 1, "actType": 0}
    args["groupListOptional"] = to_device(np.array(counts(groups, tokens), np.int64), backend)
    args["out"] = [empty((tokens, n), bf16, backend)]
    return Prepared(backend, stream, "GroupedMatmulV5", args)


def load_runner(path: Path) -> type:
    """The GroupedMatmulRunner class of another grouped_matmul.py."""
    spec = importlib.util.spec_from_file_location("gmm_runner_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.GroupedMatmulRunner


def round_us(call: Any, repeat: int) -> float:
    """The mean host time of ``repeat`` calls, in microseconds."""
    t0 = time.perf_counter()
    for _ in range(repeat):
        call()
    return (time.perf_counter() - t0) / repeat * 1e6


def main(argv: list[str] | None = None) -> int:
    """Time and profile phase 2; print the numbers."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", type=int, nargs=4, default=[64, 16384, 2048, 1408], metavar="N",
                   help="groups, rows, K, N (the bench's 16k row)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=100)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--kernel", default="auto", help="ACL_GMM_KERNEL (auto, wgmma, mma, simt)")
    p.add_argument("--runner", type=Path, help="another grouped_matmul.py, timed beside this checkout's")
    p.add_argument("--profile-other", action="store_true", help="profile the --runner file's calls instead")
    p.add_argument("--top", type=int, default=25, help="profile rows printed")
    args = p.parse_args(argv)
    cache = Path(tempfile.gettempdir()) / "acl-gmm-profile-cache"
    provider = CountingProvider(blas=True, memory=1 << 32)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(cache), "ACL_GMM_KERNEL": args.kernel})
    backend.runtime.ensure_device(0)
    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin(backend, NAME))
    acl_core.use_backend(NAME)
    stream = backend.runtime.create_stream()
    ours = backend.grouped_matmul
    kernels: Any = backend.kernels  # the op's kernel calls whichever runner is backend.grouped_matmul now
    kernels["GroupedMatmulV5"] = lambda launch: backend.grouped_matmul.run(launch)
    sides: list[tuple[str, Any]] = [("this checkout", ours)]
    if args.runner is not None:
        sides.append((str(args.runner), load_runner(args.runner)(backend)))
    call = prepared(backend, stream, *args.shape)
    best: dict[str, float] = {}
    try:
        for label, runner in sides:  # warm: compiled and planned outside the timing
            backend.grouped_matmul = runner
            for _ in range(5):
                call()
            provider.counts.clear()
            call()
            print(f"{label}: path {runner.last_path}, provider calls a call {dict(sorted(provider.counts.items()))}")
        for i in range(args.rounds):
            for label, runner in sides if i % 2 == 0 else sides[::-1]:
                backend.grouped_matmul = runner
                best[label] = min(best.get(label, float("inf")), round_us(call, args.repeat))
        for label, _ in sides:
            print(f"GroupedMatmulV5 {args.shape}, {label}: {best[label]:.1f} us/call host "
                  f"(fastest of {args.rounds} rounds of {args.repeat})")  # fmt: skip
        backend.grouped_matmul = sides[-1][1] if args.profile_other else ours
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.repeat):
            call()
        prof.disable()
    finally:
        backend.grouped_matmul = ours
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    call.free()
    acl_core.use_backend(None)
    acl_core.reset_plugins()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
