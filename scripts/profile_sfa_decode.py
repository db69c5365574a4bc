"""Host cost of one SparseFlashAttention phase-2 call on the rocm backend, without a GPU (issue 16).

The bench's decode case (tools/bench/ops.py ``sparse_attention``: T4 tokens, N128 query heads, one MLA kv head,
D 512 + rope 64, 2,048 selected keys of 32,768, bf16, value = key) runs on profile_mc2_dispatch's host-only
provider (tests/rocm's fake provider with kernel launches dropped, GEMMs recorded not computed, large
stream-ordered temporaries handed out from kept blocks), so what a call costs here is acl-core's host path:
aclnn's phase 2, the program's temporaries, argument packing and the GEMM enqueues (the real provider's
cublasLtMatmul binding call is not in it). It times ``--repeat`` phase-2 calls of a repeatable executor per
path and prints a cProfile of the last one::

    .venv/bin/python scripts/profile_sfa_decode.py --paths gemm block

Measured on the 2-core helper machine (2026-12-07, shared: the fastest of 9 rounds of 300 calls, three runs each):
at main 616d72e the GEMM path 42 / 48 / 75 us a call and the block kernel 23-27; with the packed program launches,
no check launch for a call without lengths and the bound GEMMs (branch h16-sfa) 10 / 18 / 19 and 7-11.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
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
from acl_rocm.backend import RocmBackend
from scripts.profile_mc2_dispatch import HostOnlyProvider
from scripts.profile_prefill import Plugin
from tools.bench.ops import Prepared

NAME = "rocm-fake-sfa-profile"


def prepared(backend: RocmBackend, stream: int, shape: tuple[int, int, int, int, int, int]) -> Prepared:
    """The bench's SparseFlashAttention decode call after phase 1 (repeatable executor, output allocated)."""
    tokens, heads, d, dr, context, selected = shape
    rng = np.random.default_rng(0)
    picks = np.stack([rng.permutation(context)[:selected] for _ in range(tokens)]).astype(np.int32)
    bf16 = D.ACL_BF16.numpy

    def zeros(*dims: int) -> Any:
        return to_device(np.zeros(dims, np.uint16).view(bf16), backend)

    key = zeros(tokens, context, 1, d)
    args: dict[str, Any] = {"query": zeros(tokens, 1, heads, d), "key": key, "value": key}
    args |= {"sparseIndices": to_device(picks.reshape(tokens, 1, 1, selected), backend)}
    args |= {"queryRope": zeros(tokens, 1, heads, dr), "keyRope": zeros(tokens, context, 1, dr)}
    args |= {"scaleValue": 1 / math.sqrt(d + dr), "sparseBlockSize": 1, "layoutQuery": "BSND", "layoutKv": "BSND"}
    args |= {"sparseMode": 0, "attentionMode": 2, "returnSoftmaxLse": False}
    args |= {"preTokens": 2**63 - 1, "nextTokens": 2**63 - 1}
    return Prepared(backend, stream, "SparseFlashAttention", args, skip=("softmaxMaxOut", "softmaxSumOut"))


def per_call_us(call: Any, repeat: int, rounds: int = 9) -> float:
    """The fastest of ``rounds`` rounds' mean host time of ``repeat`` calls, in microseconds (the machine is
    shared: the fastest round is the one least disturbed)."""
    for _ in range(20):
        call()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeat):
            call()
        best = min(best, (time.perf_counter() - t0) / repeat * 1e6)
    return best


def main(argv: list[str] | None = None) -> int:
    """Time and profile phase 2 per path; print the numbers."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--paths", nargs="+", default=["gemm", "block"], help="ACL_SFA_PATH values timed")
    p.add_argument("--shape", type=int, nargs=6, default=[4, 128, 512, 64, 32768, 2048], metavar="N",
                   help="tokens, heads, D, Dr, context, selected (the bench's full size)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=300)
    p.add_argument("--top", type=int, default=30, help="profile rows printed")
    args = p.parse_args(argv)
    cache = Path(tempfile.gettempdir()) / "acl-sfa-profile-cache"
    backend = RocmBackend(HostOnlyProvider(blas=True, memory=1 << 32), {"ACL_KERNEL_CACHE": str(cache)})
    backend.runtime.ensure_device(0)
    acl_core.reset_plugins()
    acl_core.register_plugin(Plugin(backend, NAME))
    acl_core.use_backend(NAME)
    stream = backend.runtime.create_stream()
    saved = backend.environ
    last: Any = None
    try:
        for path in args.paths:
            backend.environ = {**saved, "ACL_SFA_PATH": path}
            if last is not None:
                last.free()
            last = prepared(backend, stream, tuple(args.shape))
            print(f"SparseFlashAttention {args.shape}, path {path}: {per_call_us(last, args.repeat):.1f} us/call host")
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.repeat):
            last()
        prof.disable()
    finally:
        backend.environ = saved
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    last.free()
    acl_core.use_backend(None)
    acl_core.reset_plugins()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
