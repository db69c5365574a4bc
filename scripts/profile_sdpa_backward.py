"""torch's SDPA backward at the FlashAttentionScoreGrad bench shape: which backend torch picks, and its kernels.

Prints torch's SDPA backend flags, then for torch's default choice and for each backend forced
(``torch.nn.attention.sdpa_kernel``: flash, cuDNN, memory-efficient) the time of one backward
(``autograd.grad`` of a causal ``scaled_dot_product_attention``, as the bench row times it), its TFLOP/s under the
bench's count, and the top kernels of a torch.profiler trace; the default's kernel names say which backend it
ran. Run on the GPU beside ``acl_core bench --only FlashAttentionScoreGrad --kernels`` (the acl side's tables)::

    python3 scripts/profile_sdpa_backward.py --shape 4 32 2048 128
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.bench import kernel_profile


def _backward(torch: Any, shape: tuple[int, int, int, int]) -> Any:
    """One causal bf16 SDPA forward; returns the backward call the bench times."""
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.autograd.grad(out, (q, k, v), dy, retain_graph=True)


def _time(torch: Any, call: Any, repeat: int) -> float:
    """Mean seconds of ``call`` over ``repeat`` calls after a warm-up."""
    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeat


def report(torch: Any, label: str, shape: tuple[int, int, int, int], repeat: int, calls: int) -> None:
    """Time and profile one backward choice (``label``), printing its kernels."""
    b, n, s, d = shape
    flops = 10.0 * b * n * s * s * d / 2  # the bench row's count
    try:
        call = _backward(torch, shape)
        seconds = _time(torch, call, repeat)
    except Exception as exc:  # a backend that refuses the shape
        print(f"{label}: refused ({type(exc).__name__}: {str(exc)[:200]})")
        return
    print(f"{label}: {seconds * 1e3:.3f} ms  {flops / seconds / 1e12:.1f} TFLOP/s")
    shares = kernel_profile.profile_calls(call, torch.cuda.synchronize, calls, top=8)
    for line in kernel_profile.describe(shares, width=110) if shares else ["    (no CUDA trace)"]:
        print(line)
    del call
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=4, default=(4, 32, 2048, 128), metavar=("B", "N", "S", "D"))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = torch.backends.cuda
    flags = {f: getattr(cuda, f"{f}_sdp_enabled")() for f in ("flash", "mem_efficient", "cudnn", "math")}
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print("SDPA backends enabled:", flags)
    shape = tuple(args.shape)
    report(torch, "torch default", shape, args.repeat, args.calls)  # type: ignore[arg-type]
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        with sdpa_kernel([getattr(SDPBackend, name)]):
            report(torch, f"forced {name}", shape, args.repeat, args.calls)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
