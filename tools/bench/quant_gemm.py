"""Quantised GEMM cases of the ops suite: fp8 vs bf16 throughput, int8 QuantMatmul, the MX fallback's cost.

* ``QuantMatmulV5 fp8``: E4M3FN x E4M3FN, per-tensor scale, bf16 out, beside ``torch._scaled_mm``
  (per-tensor scales, bf16 out, no fast accumulation: the same problem), and the bf16 ``Matmul`` of
  the same size beside ``torch.matmul`` (issue 6's target: fp8 at least 1.5x bf16 at 8192^3).
* ``QuantMatmulV3 int8``: int8 x int8, per-channel float32 scale, bf16 out, beside ``torch._int_mm``
  followed by the same dequantisation in torch (int32 * scale, then bf16).
* ``QuantMatmulV5 MXFP8`` / ``MXFP4``: E8M0 block scales; on hardware without MX GEMMs (the H200) this is the
  dequantise-then-bf16-GEMM fallback, set beside torch's bf16 matmul of the same size (its cost).

Each row's note names the path the backend took (``QuantMatmulRunner.last_path``) where it reports one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import lowp
from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_device
from acl_core.spec.ops.quant import MX_GROUP

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

FULL_SIZES: tuple[int, ...] = (4096, 8192, 16384)
INT8_X2_ENV = "ACL_BENCH_INT8_X2"
"""The int8 row's x2 layout: ``kmajor`` (default: (n, k) with transposeX2, the K-major layout torch's
``_int_mm`` operand has, read in place: both sides get the same x2) or ``rows`` ((k, n) row-major, gathered
by the runner first: an H100 16384^3 spent 1.48 ms in that gather)."""


SIZES_ENV = "ACL_BENCH_QGEMM_SIZES"
"""Comma-separated squares for these rows (e.g. ``4096,16384``), replacing the suite's; unset: the suite's."""


def chosen_sizes(default: Sequence[int], environ: Mapping[str, str] | None = None) -> tuple[int, ...]:
    """``ACL_BENCH_QGEMM_SIZES`` as positive multiples of 64, or ``default`` when unset (ValueError otherwise)."""
    value = (os.environ if environ is None else environ).get(SIZES_ENV, "").strip()
    if not value:
        return tuple(default)
    try:
        sizes = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(n <= 0 or n % 64 for n in sizes):
        raise ValueError(f"{SIZES_ENV}={value!r}: expected comma-separated positive multiples of 64")
    return sizes


def int8_x2_layout(environ: Mapping[str, str] | None = None) -> str:
    """``ACL_BENCH_INT8_X2``: kmajor (unset) or rows (ValueError otherwise)."""
    value = (os.environ if environ is None else environ).get(INT8_X2_ENV, "").strip().lower() or "kmajor"
    if value not in ("rows", "kmajor"):
        raise ValueError(f"{INT8_X2_ENV}={value!r}: expected rows or kmajor")
    return value


def _path(suite: Suite) -> str:
    runner = getattr(suite.backend, "quant_matmul", None)
    path = getattr(runner, "last_path", None)
    return f"path {path}" if path else ""


def run_cases(suite: Suite, sizes: Sequence[int] | None = None) -> None:
    """Add the quantised GEMM cases at ``sizes`` (default: issue 6's squares on a full run, else the small size)."""
    from acl_tools.bench.ops import Case

    if sizes is None:
        sizes = FULL_SIZES if suite.sizes.matmul >= 8192 else (suite.sizes.matmul,)
        sizes = chosen_sizes(sizes)
    torch = suite.torch
    none = {"yScale": None, "x1Offset": None, "x2Offset": None, "yOffset": None, "bias": None}
    for n in sizes:
        flops = 2.0 * n**3
        shape = f"{n}^3"
        if suite.wanted("QuantMatmulV5"):

            def acl_fp8(n: int = n) -> tuple[Callable[[], None], Any]:
                x1 = suite.array((n, n), D.ACL_FLOAT8_E4M3FN)
                x2 = suite.array((n, n), D.ACL_FLOAT8_E4M3FN)  # given as (n, k): transposeX2, K-major
                scale = to_device(lowp.encode_packed_scale([0.5]).view(np.int64), suite.backend)
                out = empty((n, n), D.ACL_BF16, suite.backend)
                args = {"x1": x1, "x2": x2, "x1Scale": None, "x2Scale": scale, "out": out} | none
                args |= {"groupSize": 0, "transposeX1": False, "transposeX2": True}
                return suite.prepared("QuantMatmulV5", args)

            def torch_fp8(n: int = n) -> Callable[[], object]:
                a = torch.empty((n, n), device=suite.device).uniform_(-1, 1).to(torch.float8_e4m3fn)
                b = torch.empty((n, n), device=suite.device).uniform_(-1, 1).to(torch.float8_e4m3fn).t()
                one = torch.tensor(0.5, device=suite.device)
                return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            case = Case("QuantMatmulV5 fp8 per-tensor", shape, "e4m3fn", "TFLOP/s", flops)
            suite.case(case, _noted(suite, case, acl_fp8), torch_fp8, "QuantMatmulV5")

            for mx_dtype, label in ((D.ACL_FLOAT8_E4M3FN, "MXFP8"), (D.ACL_FLOAT4_E2M1, "MXFP4")):

                def acl_mx(n: int = n, mx_dtype: D = mx_dtype) -> tuple[Callable[[], None], Any]:
                    kb = -(-n // 64)
                    codes = suite.rng.integers(124, 130, (n, kb, 2))
                    args = {
                        "x1": suite.array((n, n), mx_dtype),
                        "x2": suite.array((n, n), mx_dtype),
                        "x1Scale": to_device(lowp.e8m0_array(codes), suite.backend),
                        "x2Scale": to_device(lowp.e8m0_array(codes), suite.backend),
                        "out": empty((n, n), D.ACL_BF16, suite.backend),
                    }
                    args |= none | {"groupSize": MX_GROUP, "transposeX1": False, "transposeX2": True}
                    return suite.prepared("QuantMatmulV5", args)

                def torch_bf16(n: int = n) -> Callable[[], object]:
                    a, b, o = (suite.tensor((n, n), D.ACL_BF16) for _ in range(3))
                    return lambda: torch.matmul(a, b, out=o)

                dtype_name = mx_dtype.short
                case = Case(f"QuantMatmulV5 {label}", shape, dtype_name, "TFLOP/s", flops, note="torch: bf16 matmul")
                suite.case(case, _noted(suite, case, acl_mx), torch_bf16, "QuantMatmulV5")

        if suite.wanted("Matmul"):

            def acl_bf16(n: int = n) -> tuple[Callable[[], None], Any]:
                a, b = suite.array((n, n), D.ACL_BF16), suite.array((n, n), D.ACL_BF16)
                out = empty((n, n), D.ACL_BF16, suite.backend)
                return suite.prepared("Matmul", {"self": a, "mat2": b, "out": out, "cubeMathType": 0})

            def torch_mm(n: int = n) -> Callable[[], object]:
                a, b, o = (suite.tensor((n, n), D.ACL_BF16) for _ in range(3))
                return lambda: torch.matmul(a, b, out=o)

            case = Case("Matmul (bf16 beside fp8)", shape, "bf16", "TFLOP/s", flops)
            suite.case(case, acl_bf16, torch_mm, "Matmul")

        if suite.wanted("QuantMatmulV3"):
            kmajor = int8_x2_layout() == "kmajor"

            def acl_int8(n: int = n, kmajor: bool = kmajor) -> tuple[Callable[[], None], Any]:
                x1 = to_device(suite.rng.integers(-128, 128, (n, n), dtype=np.int8), suite.backend)
                # kmajor: x2 given (n, k) with transposeX2, K-major like torch's b below (the GEMM reads it in
                # place); rows: x2 given (k, n), N-major, which the runner first gathers into the "TN" layout
                x2 = to_device(suite.rng.integers(-128, 128, (n, n), dtype=np.int8), suite.backend)
                scale = to_device(suite.rng.uniform(1e-4, 1e-3, n).astype(np.float32), suite.backend)
                args: dict[str, Any] = {"x1": x1, "x2": x2, "scale": scale, "offset": None, "bias": None}
                args |= {"transposeX1": False, "transposeX2": kmajor, "out": empty((n, n), D.ACL_BF16, suite.backend)}
                return suite.prepared("QuantMatmulV3", args)

            def torch_int8(n: int = n) -> Callable[[], object]:
                a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=suite.device)
                b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=suite.device).t()
                scale = torch.empty(n, device=suite.device).uniform_(1e-4, 1e-3)
                return lambda: (torch._int_mm(a, b) * scale).to(torch.bfloat16)

            x2 = "x2 K-major on both sides" if kmajor else "acl x2 N-major (gathered), torch's K-major"
            note = f"torch: _int_mm, then * scale to bf16; {x2}"
            case = Case("QuantMatmulV3 int8", shape, "int8", "TOP/s", flops, note=note)
            suite.case(case, _noted(suite, case, acl_int8), torch_int8, "QuantMatmulV3")


def _noted(
    suite: Suite, case: Any, acl: Callable[[], tuple[Callable[[], None], Any]]
) -> Callable[[], tuple[Callable[[], None], Any]]:
    """``acl`` whose first launch also writes the backend's path into the case's note."""

    def wrapped() -> tuple[Callable[[], None], Any]:
        launch, cleanup = acl()
        first = [True]

        def run() -> None:
            launch()
            if first[0]:
                first[0] = False
                path = _path(suite)
                case.note = "; ".join(x for x in (case.note, path) if x)

        return run, cleanup

    return wrapped
