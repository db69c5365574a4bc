"""One fresh process of the plan-cache GPU test: run GEMMs (or cuDNN attention), report results and cache counters.

``python -m tests.rocm.plan_cache_probe {gemm,attention} OUT.json`` with ``ACL_KERNEL_CACHE`` naming the shared
cache; ``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator (host BLAS: no library plans there). Writes
``{"results": {name: sha256 of the output bytes}, "caches": backend.cache_stats(), "log": [plan cache lines],
"emulated": bool, "cudnn_refusal": str | None}``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops.attention import compressed_mask


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _backend(emulated: bool) -> Backend:
    if not emulated:
        import acl_core

        backend = acl_core.get_backend("rocm")
        backend.runtime.ensure_device(0)
        return backend
    from tests.rocm.kernel_emulator import EmulatedProvider, available

    reason = available()
    if reason:
        raise SystemExit(f"the kernel emulator is unavailable: {reason}")
    from acl_rocm.backend import RocmBackend

    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    EmulatedProvider.build_dir = build
    backend = RocmBackend(EmulatedProvider(blas=True), os.environ)
    backend.runtime.ensure_device(0)
    return backend


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def gemms(backend: Backend) -> dict[str, str]:
    """Matmul / BatchMatMul in fp32, fp16, bf16 (several cuBLASLt shapes), then an Add (one compiled kernel)."""
    rng = np.random.default_rng(11)
    out: dict[str, str] = {}
    cases: list[tuple[str, str, tuple[int, ...], tuple[int, ...], Any]] = [
        ("Matmul fp32", "Matmul", (96, 160), (160, 72), np.float32),
        ("Matmul fp16", "Matmul", (256, 512), (512, 128), np.float16),
        ("BatchMatMul bf16", "BatchMatMul", (3, 64, 128), (3, 128, 80), ml_dtypes.bfloat16),
    ]
    for name, op, sa, sb, dtype in cases:
        a = rng.uniform(-1, 1, sa).astype(dtype)
        b = rng.uniform(-1, 1, sb).astype(dtype)
        out[name] = _digest(eager.run(op, backend, self=a, mat2=b, cubeMathType=0)["out"])
    x = rng.uniform(-1, 1, (1000,)).astype(np.float32)
    out["Add fp32"] = _digest(eager.run("Add", backend, self=x, other=x, alpha=1.0)["out"])
    return out


def attention(backend: Backend) -> dict[str, str]:
    """FlashAttentionScore forced onto cuDNN: bf16 causal and fp16 full, two SDPA graphs."""
    runner = backend.attention  # type: ignore[attr-defined]
    rng = np.random.default_rng(5)
    out: dict[str, str] = {}
    runner.path_override = "cudnn"
    for name, dtype, mode in (("bf16 causal", ml_dtypes.bfloat16, 3), ("fp16 full", np.float16, 0)):
        b, n, s, d = 1, 4, 256, 64
        q, k, v = (rng.uniform(-1, 1, (b, n, s, d)).astype(dtype) for _ in range(3))
        args: dict[str, Any] = {
            "query": q,
            "key": k,
            "value": v,
            "scaleValue": 1 / np.sqrt(d),
            "keepProb": 1.0,
            "preTokens": 2147483647,
            "nextTokens": 2147483647,
            "headNum": n,
            "inputLayout": "BNSD",
            "innerPrecise": 0,
            "sparseMode": mode,
        }
        if mode:
            args["attenMaskOptional"] = compressed_mask()
        got = eager.run("FlashAttentionScore", backend, **args)
        assert runner.last_path == "cudnn", runner.last_path
        out[name] = _digest(got["attentionOutOut"])
    return out


def main(argv: list[str]) -> int:
    """Run ``argv[0]`` (gemm or attention) and write the report to ``argv[1]``."""
    what, target = argv
    lines = _Lines()
    logger = logging.getLogger("acl_rocm.plan_cache")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    emulated = os.environ.get("ACL_ROCM_EMULATE") == "1"
    backend = _backend(emulated)
    refusal = backend.attention.cudnn.refusal()  # type: ignore[attr-defined]
    results = gemms(backend) if what == "gemm" else attention(backend) if refusal is None else {}
    report = {
        "results": results,
        "caches": backend.cache_stats(),  # type: ignore[attr-defined]
        "log": lines.lines,
        "emulated": emulated,
        "cudnn_refusal": refusal,
    }
    Path(target).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
