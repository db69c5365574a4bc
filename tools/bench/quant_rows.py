"""Rows of the ops suite for the quantisation operators vllm-ascend reaches (issue 16), beside torch.

Each row is one family group at a realistic shape (``--sizes full``; the small size scales them down),
set beside torch's expression of the same math on the same device (torch has none of these fused):

* ``DynamicBlockQuant`` [8192, 7168] bf16: per-token 1x128 INT8 blocks, and 128x128 FLOAT8 E4M3 blocks
  (DeepSeek's weight blocks) — torch: block ``amax``, divide, round / cast.
* ``DequantSwigluQuant`` [4096, 2x4096] INT32 GEMM output: dequantise, SwiGLU, dynamic INT8 — torch:
  the float products, ``silu(a) * b``, row ``amax``, round.
* ``AddRmsNormDynamicMxQuant`` [4096, 7168] bf16 to MXFP8 E4M3 — torch: add, ``rms_norm``, 32-element
  ``amax``, the E8M0 exponent, divide, cast.
* ``Quantize`` [8192, 8192] bf16 per-channel INT8 (bf16 zero points), ``ClippedSwiglu`` [8192, 2x4096] bf16 (GPT-OSS's,
  interleaved), ``FlatQuant`` [16384, 64, 64] fp16 to INT4 — torch: the same expressions (FlatQuant's
  two small batched GEMMs in fp16).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.eager import to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = (
    "DynamicBlockQuant",
    "DequantSwigluQuant",
    "AddRmsNormDynamicMxQuant",
    "Quantize",
    "ClippedSwiglu",
    "FlatQuant",
)
"""The ``--only`` names of these rows."""
FLAT_KERNELS: tuple[str, ...] = ("slice", "simt", "dmma", "dmma16")
"""FlatQuant's forced kernels timed beside the default row where the backend has the switch (rocm)."""


def _full(suite: Suite) -> bool:
    return suite.sizes.norm[0] >= 8192


def run_cases(suite: Suite) -> None:
    """Add every row (each only where ``--only`` lets it run)."""
    for row in (block_quant, dequant_swiglu_quant, mx_norm, quantize, clipped_swiglu, flat_quant):
        row(suite)


def block_quant(suite: Suite) -> None:
    """DynamicBlockQuant: 1x128 INT8 and 128x128 FLOAT8 E4M3 blocks over a bf16 activation."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("DynamicBlockQuant"):
        return
    torch = suite.torch
    m, n = (8192, 7168) if _full(suite) else (256, 1024)
    for rb, code in ((1, 2), (128, 36)):

        def acl(rb: int = rb, code: int = code) -> tuple[Callable[[], None], Any]:
            x = suite.array((m, n), D.ACL_BF16)
            args = {"x": x, "minScale": 0.0, "roundModeOptional": None, "dstType": code}
            return suite.prepared("DynamicBlockQuant", args | {"rowBlockSize": rb, "colBlockSize": 128})

        def torch_fn(rb: int = rb, code: int = code) -> Callable[[], object]:
            x = suite.tensor((m, n), D.ACL_BF16)
            top = 127.0 if code == 2 else 448.0

            def run() -> object:
                blocks = x.float().view(m // rb, rb, n // 128, 128)
                scale = blocks.abs().amax(dim=(1, 3), keepdim=True) / top
                y = blocks / scale
                y = y.round().clamp_(-128, 127).to(torch.int8) if code == 2 else y.to(torch.float8_e4m3fn)
                return y.view(m, n), scale

            return run

        nbytes = m * n * 3 + (m // rb) * (n // 128) * 4
        label = "1x128 int8" if rb == 1 else "128x128 e4m3fn"
        case = Case(f"DynamicBlockQuant {label}", f"[{m},{n}]", "bf16", "GB/s", nbytes)
        suite.case(case, acl, torch_fn, "DynamicBlockQuant")


def dequant_swiglu_quant(suite: Suite) -> None:
    """DequantSwigluQuant: an INT32 GEMM output, weight and per-token scales, SwiGLU, dynamic INT8."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("DequantSwigluQuant"):
        return
    torch = suite.torch
    rows, h = (4096, 4096) if _full(suite) else (256, 512)
    rng = np.random.default_rng(0)

    def acl() -> tuple[Callable[[], None], Any]:
        x = to_device(rng.integers(-20000, 20000, (rows, 2 * h)).astype(np.int32), suite.backend)
        ws = to_device(rng.uniform(1e-4, 1e-3, 2 * h).astype(np.float32), suite.backend)
        act = to_device(rng.uniform(0.5, 2, rows).astype(np.float32), suite.backend)
        args = {"x": x, "weightScaleOptional": ws, "activationScaleOptional": act, "biasOptional": None}
        args |= {"quantScaleOptional": None, "quantOffsetOptional": None, "groupIndexOptional": None}
        return suite.prepared("DequantSwigluQuant", args | {"activateLeft": True, "quantModeOptional": "dynamic"})

    def torch_fn() -> Callable[[], object]:
        x = torch.randint(-20000, 20000, (rows, 2 * h), dtype=torch.int32, device=suite.device)
        ws = torch.empty(2 * h, device=suite.device).uniform_(1e-4, 1e-3)
        act = torch.empty(rows, 1, device=suite.device).uniform_(0.5, 2)

        def run() -> object:
            xf = x.float() * ws * act
            y = torch.nn.functional.silu(xf[:, :h]) * xf[:, h:]
            scale = y.abs().amax(dim=-1, keepdim=True) / 127.0
            return (y / scale).round().clamp_(-128, 127).to(torch.int8), scale

        return run

    nbytes = rows * 2 * h * 4 + rows * h + rows * 8
    case = Case("DequantSwigluQuant int32 dynamic", f"[{rows},{2 * h}]", "int32", "GB/s", nbytes)
    suite.case(case, acl, torch_fn, "DequantSwigluQuant")


def mx_norm(suite: Suite) -> None:
    """AddRmsNormDynamicMxQuant to MXFP8 E4M3 (OCP scales) beside torch's add, rms_norm and MX quantisation."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("AddRmsNormDynamicMxQuant"):
        return
    torch = suite.torch
    rows, hidden = (4096, 7168) if _full(suite) else (256, 1024)

    def acl() -> tuple[Callable[[], None], Any]:
        x1, x2 = suite.array((rows, hidden), D.ACL_BF16), suite.array((rows, hidden), D.ACL_BF16)
        args = {"x1": x1, "x2": x2, "gamma": suite.array((hidden,), D.ACL_BF16), "beta": None, "epsilon": 1e-6}
        args |= {"scaleAlg": 0, "roundMode": "rint", "dstType": 36, "outputRstd": False}
        return suite.prepared("AddRmsNormDynamicMxQuant", args, skip=("rstdOut",))

    def torch_fn() -> Callable[[], object]:
        x1, x2 = suite.tensor((rows, hidden), D.ACL_BF16), suite.tensor((rows, hidden), D.ACL_BF16)
        w = suite.tensor((hidden,), D.ACL_BF16)

        def run() -> object:
            x = x1 + x2
            y = torch.nn.functional.rms_norm(x, (hidden,), w, 1e-6).float().view(rows, hidden // 32, 32)
            amax = y.abs().amax(dim=-1, keepdim=True)
            exponent = torch.floor(torch.log2(amax)) - 8
            q = (y / torch.exp2(exponent)).to(torch.float8_e4m3fn)
            return x, q, (exponent + 127).to(torch.uint8)

        return run

    nbytes = rows * hidden * (2 + 2 + 2 + 1) + rows * hidden // 32
    case = Case("AddRmsNormDynamicMxQuant e4m3fn", f"[{rows},{hidden}]", "bf16", "GB/s", nbytes)
    suite.case(case, acl, torch_fn, "AddRmsNormDynamicMxQuant")


def quantize(suite: Suite) -> None:
    """Quantize: per-channel INT8 with bf16 zero points (CANN: a bf16 scale needs bf16 x and zero points)."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("Quantize"):
        return
    torch = suite.torch
    rows, cols = suite.sizes.norm

    def acl() -> tuple[Callable[[], None], Any]:
        x, s = suite.array((rows, cols), D.ACL_BF16), suite.array((cols,), D.ACL_BF16)
        zp = suite.array((cols,), D.ACL_BF16)
        return suite.prepared("Quantize", {"x": x, "scales": s, "zeroPoints": zp, "dtype": D.ACL_INT8, "axis": -1})

    def torch_fn() -> Callable[[], object]:
        x, s = suite.tensor((rows, cols), D.ACL_BF16), suite.tensor((cols,), D.ACL_BF16)
        zp = suite.tensor((cols,), D.ACL_BF16)
        return lambda: (x.float() / s.float() + zp.float()).round().clamp_(-128, 127).to(torch.int8)

    case = Case("Quantize per-channel int8", f"[{rows},{cols}]", "bf16", "GB/s", rows * cols * 3)
    suite.case(case, acl, torch_fn, "Quantize")


def clipped_swiglu(suite: Suite) -> None:
    """ClippedSwiglu (GPT-OSS: alpha 1.702, limit 7, bias 1, interleaved halves)."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("ClippedSwiglu"):
        return
    torch = suite.torch
    rows, cols = suite.sizes.norm

    def acl() -> tuple[Callable[[], None], Any]:
        x = suite.array((rows, cols), D.ACL_BF16)
        args = {"x": x, "groupIndexOptional": None, "dim": -1, "alpha": 1.702, "limit": 7.0, "bias": 1.0}
        return suite.prepared("ClippedSwiglu", args | {"interleaved": True})

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor((rows, cols), D.ACL_BF16)

        def run() -> object:
            a, b = x[:, 0::2].clamp(max=7.0), x[:, 1::2].clamp(-7.0, 7.0)
            return a * torch.sigmoid(1.702 * a) * (b + 1.0)

        return run

    case = Case("ClippedSwiglu interleaved", f"[{rows},{cols}]", "bf16", "GB/s", rows * cols * 3)
    suite.case(case, acl, torch_fn, "ClippedSwiglu")


def flat_quant(suite: Suite) -> None:
    """FlatQuant: x'' = P1 @ x @ P2 per token, then per-token INT4 (packed in INT32)."""
    from acl_tools.bench.ops import Case

    if not suite.wanted("FlatQuant"):
        return
    torch = suite.torch
    m, n1, n2 = (16384, 64, 64) if _full(suite) else (256, 16, 32)

    def acl() -> tuple[Callable[[], None], Any]:
        x = suite.array((m, n1, n2), D.ACL_FLOAT16)
        p1, p2 = suite.array((n1, n1), D.ACL_FLOAT16), suite.array((n2, n2), D.ACL_FLOAT16)
        return suite.prepared("FlatQuant", {"x": x, "kroneckerP1": p1, "kroneckerP2": p2, "clipRatio": 1.0})

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor((m, n1, n2), D.ACL_FLOAT16)
        p1, p2 = suite.tensor((n1, n1), D.ACL_FLOAT16), suite.tensor((n2, n2), D.ACL_FLOAT16)

        def run() -> object:
            xpp = torch.matmul(p1, torch.matmul(x, p2)).float()
            scale = xpp.abs().amax(dim=(1, 2), keepdim=True) / 7.0
            return (xpp / scale).round().clamp_(-8, 7).to(torch.int8), scale

        return run

    nbytes = m * n1 * n2 * 2 + m * n1 * n2 // 2 + m * 4
    runners = getattr(suite.backend, "runners", {})
    runner = runners.get("quant_vllm") if isinstance(runners, dict) else None  # rocm: the kernel switch
    kernels: tuple[str | None, ...] = (None,)
    if runner is not None and hasattr(runner, "forced_flat"):
        kernels += FLAT_KERNELS
    for kernel in kernels:
        name = "FlatQuant int4" + (f" {kernel} kernel" if kernel else "")
        case = Case(name, f"[{m},{n1},{n2}]", "fp16", "GB/s", nbytes)
        if runner is not None and kernel is not None:
            runner.forced_flat = kernel
        try:
            suite.case(case, acl, torch_fn, "FlatQuant")
        finally:
            if runner is not None and kernel is not None:
                runner.forced_flat = None
        path = getattr(runner, "flat_last_path", None)
        if not case.note:
            case.note = f"path {path or 'n/a'}; torch: two fp16 batched matmuls, amax, divide, round (int8 codes)"
