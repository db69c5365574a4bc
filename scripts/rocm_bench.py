"""Quick GPU benchmark of the rocm backend: bandwidth of elementwise kernels, launch overhead, compile cost.

Runs operators through both aclnn phases on device tensors (no host copies), times them with acl
events, and compares with PyTorch on the same device when PyTorch has CUDA. Writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import acl_core
from acl_core import aclnn
from acl_core.dtypes import DataType as D
from acl_core.tensor import AclTensor, contiguous_strides


def _tensor(rt: Any, shape: tuple[int, ...], dtype: D, strides: tuple[int, ...] | None = None) -> AclTensor:
    numel = 1
    for s in shape:
        numel *= s
    address = rt.malloc(max(numel * dtype.info.storage_bits // 8, 1))
    rt.memset(address, numel * dtype.info.storage_bits // 8, 0, numel * dtype.info.storage_bits // 8)
    return AclTensor.create(shape, dtype, strides or contiguous_strides(shape), 0, 2, shape, address)


def _time(rt: Any, run: Any, iters: int) -> float:
    start, end = rt.create_event(), rt.create_event()
    run()
    rt.synchronize_device()
    rt.record_event(start, None)
    for _ in range(iters):
        run()
    rt.record_event(end, None)
    rt.synchronize_event(end)
    ms = rt.event_elapsed_time(start, end) / iters
    rt.destroy_event(start)
    rt.destroy_event(end)
    return ms


def _add(a: AclTensor, b: AclTensor, out: AclTensor) -> Any:
    alpha = aclnn.aclCreateScalar(1.0, int(D.ACL_FLOAT))

    def run() -> None:
        _, ex, ret = aclnn.aclnnAddGetWorkspaceSize(a, b, alpha, out)
        assert ret == 0, aclnn.aclGetRecentErrMsg()
        assert aclnn.aclnnAdd(None, 0, ex, None) == 0, aclnn.aclGetRecentErrMsg()

    return run


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print / write JSON."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--elements", type=int, default=1 << 26)
    args = p.parse_args(argv)
    backend = acl_core.get_backend("rocm")
    rt = backend.runtime
    rt.ensure_device(0)
    acl_core.use_backend("rocm")
    n = args.elements
    results: dict[str, Any] = {"capabilities": backend.capabilities().to_jsonable(), "cases": []}

    def record(name: str, ms: float, nbytes: int, extra: dict[str, Any] | None = None) -> None:
        row = {"case": name, "ms": round(ms, 4), "GB/s": round(nbytes / ms / 1e6, 1), **(extra or {})}
        results["cases"].append(row)
        print(json.dumps(row), flush=True)

    for dtype, item in ((D.ACL_FLOAT, 4), (D.ACL_FLOAT16, 2), (D.ACL_BF16, 2)):
        a, b, out = (_tensor(rt, (n,), dtype) for _ in range(3))
        t0 = time.perf_counter()
        _add(a, b, out)()
        rt.synchronize_device()
        first = (time.perf_counter() - t0) * 1e3
        record(
            f"Add {dtype.short} [{n}]", _time(rt, _add(a, b, out), 20), 3 * n * item, {"first_call_ms": round(first, 1)}
        )
    rows = 8192
    a = _tensor(rt, (rows, n // rows), D.ACL_FLOAT)
    bias = _tensor(rt, (n // rows,), D.ACL_FLOAT)
    out = _tensor(rt, (rows, n // rows), D.ACL_FLOAT)
    record(f"Add float32 [{rows},{n // rows}] + row bias", _time(rt, _add(a, bias, out), 20), 2 * n * 4)
    at = AclTensor.create((n // rows, rows), D.ACL_FLOAT, (1, n // rows), 0, 2, (rows, n // rows), a.data)
    outt = _tensor(rt, (n // rows, rows), D.ACL_FLOAT)
    record(
        "Add float32 transposed view + bias",
        _time(rt, _add(at, _tensor(rt, (rows,), D.ACL_FLOAT), outt), 20),
        2 * n * 4,
    )
    small = [_tensor(rt, (1024,), D.ACL_FLOAT) for _ in range(3)]
    run_small = _add(*small)
    run_small()
    rt.synchronize_device()
    t0 = time.perf_counter()
    for _ in range(2000):
        run_small()
    host_us = (time.perf_counter() - t0) / 2000 * 1e6
    rt.synchronize_device()
    results["cases"].append({"case": "Add float32 [1024] host time per call (both phases)", "us": round(host_us, 1)})
    print(json.dumps(results["cases"][-1]), flush=True)
    try:
        import torch

        if torch.cuda.is_available():
            for dtype, item in ((torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2)):
                x, y = torch.zeros(n, dtype=dtype, device="cuda"), torch.zeros(n, dtype=dtype, device="cuda")
                o = torch.empty_like(x)
                torch.add(x, y, out=o)
                torch.cuda.synchronize()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(20):
                    torch.add(x, y, out=o)
                e.record()
                e.synchronize()
                ms = s.elapsed_time(e) / 20
                row = {
                    "case": f"torch add {dtype} [{n}]",
                    "ms": round(ms, 4),
                    "GB/s": round(3 * n * item / ms / 1e6, 1),
                }
                results["cases"].append(row)
                print(json.dumps(row), flush=True)
    except ImportError:
        pass
    if "Matmul" in backend.kernels:
        for dtype in (D.ACL_BF16, D.ACL_FLOAT16, D.ACL_FLOAT):
            size = 8192
            a, b, out = (_tensor(rt, (size, size), dtype) for _ in range(3))

            def mm(a: AclTensor = a, b: AclTensor = b, out: AclTensor = out) -> None:
                _, ex, ret = aclnn.aclnnMmGetWorkspaceSize(a, b, out, 0)
                assert ret == 0, aclnn.aclGetRecentErrMsg()
                assert aclnn.aclnnMm(None, 0, ex, None) == 0, aclnn.aclGetRecentErrMsg()

            ms = _time(rt, mm, 5)
            row = {
                "case": f"Mm {dtype.short} {size}^3",
                "ms": round(ms, 3),
                "TFLOP/s": round(2 * size**3 / ms / 1e9, 1),
            }
            results["cases"].append(row)
            print(json.dumps(row), flush=True)
            for t in (a, b, out):
                rt.free(t.data)
    cache = backend.cache  # type: ignore[attr-defined]
    results["kernel_cache"] = vars(cache.stats)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
