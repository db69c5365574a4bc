"""GEMM-variant rows of the ops suite (issue 16), each beside torch's closest equivalent on the same shapes.

* ``TransposeBatchMatMul``: DeepSeek MLA's per-head projection, x (M, B, K) with permX1 [1, 0, 2]
  against w (B, K, N) into (M, B, N) (B = 128 heads, K = 512, N = 128; M = 32 tokens of decode and
  2,048 of prefill), beside ``torch.matmul(x.transpose(0, 1), w).transpose(0, 1)`` (a bmm on the
  strided view; torch's result stays a (B, M, N) buffer viewed as (M, B, N)).
* ``GroupedMatmul``: a MoE expert layer, 64 groups of uneven M (8,192 tokens in all), K = 2,048,
  N = 1,408, bf16, one x split by the host group list into one y, beside ``torch._grouped_mm`` where
  torch has it (else one ``torch.matmul`` per group); ``GroupedMatmulWeightNz`` the same with the
  weights in FRACTAL_NZ (its rows also pay the NZ gather).
* ``GroupedMatmulV5``: the same MoE expert layer as the aclnn V5 call (one x, one [g, K, N] weight, a
  device group list of counts), 64 experts of uneven M (16,384 and 32,768 rows in all, seeded), K = 2,048,
  N = 1,408, bf16 in and out, beside one ``torch.matmul`` of [M, K] x [K, N] (the same FLOPs): the
  grouped GEMM's target is at least 0.8x that GEMM's throughput. Also with the weight stored transposed
  ([g, N, K]) and, on the rocm backend, with the grouped GEMM forced onto the SIMT kernel
  (``ACL_GMM_KERNEL=simt``'s path, the kernel before the matrix-instruction one) and onto the mma.sync
  matrix-instruction kernel (``ACL_GMM_KERNEL=mma``: the default's alternative on sm_90, where the default runs the
  warpgroup-MMA kernel); each row's note names the path the runner took. In the full size, where torch has it,
  the default path at both sizes beside ``torch._grouped_mm`` on the same groups (PyTorch's own grouped GEMM).
* ``GroupedMatmulV5Configs`` (a ``--only`` name of its own, rocm only): the 16,384- and 32,768-row layers on the
  matrix kernel in each of its block configurations (``ACL_GMM_CONFIG``: the default, then the kernel's
  alternatives, ``base`` among them, or the comma-separated list in ``ACL_BENCH_GMM_CONFIGS``), the operands made
  once a size, the group counts the same for every configuration; each row's note names the configuration that ran.
* ``GroupedMatmulV5Wgmma`` (likewise, rocm on sm_90 only): the same rows for the warpgroup-MMA kernel's
  configurations (``ACL_GMM_WGMMA_CONFIG``: its default and alternatives, or ``ACL_BENCH_GMM_WGMMA_CONFIGS``).
* ``GroupedMatmulV5Blaslt`` (likewise, rocm where the provider binds a library grouped GEMM: cuBLASLt's on sm_90):
  the 16,384- and 32,768-row layers on the default path and through it (``ACL_GMM_KERNEL=blaslt``), and the
  32,768-row one with the weight stored transposed, each beside torch's one GEMM of the same FLOPs
  (:data:`BLASLT_ROWS`; the rows of one size share their group counts).
* ``GroupedMatmulSwigluQuantV2``: a W8A8 MoE expert's gate/up projection, 64 groups of uneven M (8,192
  tokens), K = 2,048, N = 2 x 1,408, int8 x and weight, per-channel and per-token float32 scales,
  SwiGLU and per-row dynamic int8 quantisation, beside torch doing the same with ``torch._grouped_mm``
  on the int8 values as bf16 (exact; fp32 accumulation) where torch has it (else a matmul per group),
  then the scales, ``silu(a) * b``, the row maximum and ``round(s / scale)`` to int8. On rocm also with the integer
  grouped GEMM forced onto the SIMT kernel (the default on NVIDIA is the int8 matrix kernel) and with two other
  matrix-kernel configurations (:data:`SWIGLU_QUANT_ROWS`).
* ``QuantMatmulWeightNz``: W8A8 at 4096^3, int8 x1 and an int8 FRACTAL_NZ x2, per-token and
  per-channel float32 scales, bf16 out, beside ``torch._int_mm`` plus the same scaling epilogue.

The small size keeps the shapes' form at a few dozen rows (the reference on a CPU, for the tests).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core import aclnn, nz
from acl_core.dtypes import DataType as D
from acl_core.eager import empty, to_device
from acl_core.formats import Format
from acl_core.tensor import AclTensor, AclTensorList

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = (
    "TransposeBatchMatMul",
    "GroupedMatmul",
    "GroupedMatmulWeightNz",
    "GroupedMatmulV5",
    "GroupedMatmulV5Configs",
    "GroupedMatmulV5Wgmma",
    "GroupedMatmulV5Blaslt",
    "GroupedMatmulSwigluQuantV2",
    "QuantMatmulWeightNz",
)


def _full(suite: Suite) -> bool:
    return suite.sizes.matmul >= 8192


def run_cases(suite: Suite) -> None:
    """Add the GEMM-variant rows (full shapes on a full run, their small forms otherwise)."""
    full = _full(suite)
    if suite.wanted("TransposeBatchMatMul"):
        for m in (32, 2048) if full else (8,):
            _transpose_batch_matmul(suite, *((128, m, 512, 128) if full else (4, m, 64, 32)))
    groups, tokens, k, n = (64, 8192, 2048, 1408) if full else (4, 40, 64, 48)
    for op in ("GroupedMatmul", "GroupedMatmulWeightNz"):
        if suite.wanted(op):
            _grouped(suite, op, groups, tokens, k, n)
    if suite.wanted("GroupedMatmulV5"):
        small = ((tokens, "kn", None), (tokens, "nk", None), (tokens, "kn", "simt"), (tokens, "kn", "mma"))
        for tokens_v5, layout, kernel in V5_ROWS if full else small:
            _grouped_v5(suite, groups, tokens_v5, k, n, layout, kernel)
        if full and hasattr(suite.torch, "_grouped_mm"):  # torch's own grouped GEMM (CUTLASS on sm_90) beside it
            for tokens_v5 in (16384, 32768):
                _grouped_v5(suite, groups, tokens_v5, k, n, "kn", None, versus_grouped=True)
    for name, kernel in (("GroupedMatmulV5Configs", "mma"), ("GroupedMatmulV5Wgmma", "wgmma")):
        if suite.wanted(name):
            for tokens_v5 in (16384, 32768) if full else (tokens,):
                _grouped_v5_configs(suite, groups, tokens_v5, k, n, kernel)
    if suite.wanted("GroupedMatmulV5Blaslt"):
        drawn: dict[int, list[int]] = {}  # one draw of group counts a size: the rows compare paths, not draws
        for tokens_v5, layout, kernel in BLASLT_ROWS if full else ((tokens, "kn", None), (tokens, "kn", "blaslt")):
            counts = drawn.setdefault(tokens_v5, _uneven(suite, groups, tokens_v5))
            _grouped_v5(suite, groups, tokens_v5, k, n, layout, kernel, counts)
    if suite.wanted("GroupedMatmulSwigluQuantV2"):
        for kernel, config in SWIGLU_QUANT_ROWS:
            _grouped_swiglu_quant(suite, groups, tokens, k, 2 * n, kernel, config)
    if suite.wanted("QuantMatmulWeightNz"):
        _quant_nz(suite, 4096 if full else 64)


def _transpose_batch_matmul(suite: Suite, b: int, m: int, k: int, n: int) -> None:
    from acl_tools.bench.ops import Case

    torch = suite.torch
    dtype = D.ACL_BF16

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"x1": suite.array((m, b, k), dtype), "x2": suite.array((b, k, n), dtype)}
        args |= {"bias": None, "scale": None, "cubeMathType": 0, "batchSplitFactor": 1}
        args |= {name: aclnn.aclCreateIntArray(p) for name, p in (("permX1", [1, 0, 2]), ("permX2", [0, 1, 2]))}
        args["permY"] = aclnn.aclCreateIntArray([1, 0, 2])
        args["out"] = empty((m, b, n), dtype, suite.backend)
        return suite.prepared("TransposeBatchMatMul", args)

    def torch_fn() -> Callable[[], object]:
        x, w = suite.tensor((m, b, k), dtype), suite.tensor((b, k, n), dtype)
        return lambda: torch.matmul(x.transpose(0, 1), w).transpose(0, 1)

    case = Case("TransposeBatchMatMul", f"M{m} B{b} K{k} N{n}", dtype.short, "TFLOP/s", 2.0 * b * m * k * n)
    case.note = "MLA: (M, B, K) x (B, K, N) -> (M, B, N); torch: matmul on the transposed view"
    suite.case(case, acl, torch_fn, "TransposeBatchMatMul")


def _uneven(suite: Suite, groups: int, total: int) -> list[int]:
    """Rows per group: a multinomial draw over uneven expert popularities (some experts get none)."""
    weights = suite.rng.gamma(0.6, size=groups)
    counts = suite.rng.multinomial(total, weights / weights.sum())
    return [int(c) for c in counts]


def _grouped(suite: Suite, op: str, groups: int, tokens: int, k: int, n: int) -> None:
    from acl_tools.bench.ops import Case

    torch = suite.torch
    dtype = D.ACL_BF16
    counts = _uneven(suite, groups, tokens)
    ends = np.cumsum(counts).tolist()

    def acl() -> tuple[Callable[[], None], Any]:
        x = suite.array((tokens, k), dtype)
        if op == "GroupedMatmul":
            weights = [suite.array((k, n), dtype) for _ in range(groups)]
            none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
            args = {"x": [x], "weight": weights, **none, "antiquantOffsetOptional": None, "splitItem": 2}
            args["groupListOptional"] = aclnn.aclCreateIntArray(ends)
            args["y"] = [empty((tokens, n), dtype, suite.backend)]
            return suite.prepared(op, args)
        host = (suite.rng.random((groups, k, n), dtype=np.float32) * 2 - 1).astype(dtype.numpy)
        weight = nz.to_device_nz(host, suite.backend)
        none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
        none |= dict.fromkeys(("antiquantOffsetOptional", "perTokenScaleOptional", "activationInputOptional"))
        none |= dict.fromkeys(("activationQuantScaleOptional", "activationQuantOffsetOptional"))
        none |= dict.fromkeys(("tuningConfigOptional", "activationFeatureOutOptional", "dynQuantScaleOutOptional"))
        args = {"x": [x], "weight": [weight], **none, "splitItem": 3, "groupType": 0, "groupListType": 1}
        args |= {"actType": 0, "quantGroupSize": 0}
        args["groupListOptional"] = to_device(np.array(counts, np.int64), suite.backend)
        args["out"] = [empty((tokens, n), dtype, suite.backend)]
        return suite.prepared(op, args)

    def torch_fn() -> Callable[[], object]:
        x, w = suite.tensor((tokens, k), dtype), suite.tensor((groups, k, n), dtype)
        offs = torch.tensor(ends, dtype=torch.int32, device=suite.device)
        grouped = getattr(torch, "_grouped_mm", None)
        if grouped is not None:
            try:
                grouped(x, w, offs=offs)
                return lambda: grouped(x, w, offs=offs)
            except (RuntimeError, TypeError):  # an architecture or build without it: the per-group loop
                pass
        starts = [0, *ends[:-1]]
        return lambda: [torch.matmul(x[s:e], w[g]) for g, (s, e) in enumerate(zip(starts, ends))]

    shape = f"G{groups} M{tokens} K{k} N{n}"
    case = Case(op, shape, dtype.short, "TFLOP/s", 2.0 * tokens * k * n)
    case.note = "uneven M groups; torch: _grouped_mm where present, else a matmul per group"
    suite.case(case, acl, torch_fn, op)


V5_ROWS: tuple[tuple[int, str, str | None], ...] = (
    (16384, "kn", None),
    (32768, "kn", None),
    (32768, "nk", None),
    (32768, "kn", "simt"),
    (16384, "kn", "mma"),
    (32768, "kn", "mma"),
    (32768, "nk", "mma"),
)
"""The full GroupedMatmulV5 rows: (rows in all, weight layout ``kn`` [g, K, N] / ``nk`` stored [g, N, K], the
grouped GEMM forced or None)."""
BLASLT_ROWS: tuple[tuple[int, str, str | None], ...] = (
    (16384, "kn", None),
    (16384, "kn", "blaslt"),
    (32768, "kn", None),
    (32768, "kn", "blaslt"),
    (32768, "nk", "blaslt"),
)
"""The GroupedMatmulV5Blaslt rows (as :data:`V5_ROWS`): the default path beside the library's grouped GEMM."""


def _grouped_v5(
    suite: Suite,
    groups: int,
    tokens: int,
    k: int,
    n: int,
    layout: str,
    kernel: str | None,
    counts: list[int] | None = None,
    versus_grouped: bool = False,
) -> None:
    """One MoE layer's GroupedMatmulV5 row beside one torch GEMM of the same FLOPs (the issue's bar) or, with
    ``versus_grouped``, beside ``torch._grouped_mm`` on the same groups."""
    from acl_tools.bench.ops import Case

    runner = getattr(suite.backend, "grouped_matmul", None)  # the rocm backend's runner (path and switch)
    if kernel is not None and runner is None:
        return
    if kernel == "wgmma" and getattr(runner, "wgmma_unavailable", lambda: "no wgmma kernel")() is not None:
        return  # sm_90 only
    if kernel == "blaslt" and getattr(runner, "blaslt_unavailable", lambda: "no library path")() is not None:
        return  # a provider binding a library grouped GEMM only
    torch = suite.torch
    dtype = D.ACL_BF16
    counts = counts or _uneven(suite, groups, tokens)

    def acl() -> tuple[Callable[[], None], Any]:
        args, stored = _v5_args(suite, counts, tokens, k, n, dtype, layout)
        launch, cleanup = suite.prepared("GroupedMatmulV5", args)

        def free() -> None:
            cleanup()
            if stored is not None:
                stored.free()

        return launch, free

    def torch_fn() -> Callable[[], object]:
        x, w, o = suite.tensor((tokens, k), dtype), suite.tensor((k, n), dtype), suite.tensor((tokens, n), dtype)
        return lambda: torch.matmul(x, w, out=o)

    def torch_grouped() -> Callable[[], object]:
        x, w = suite.tensor((tokens, k), dtype), suite.tensor((groups, k, n), dtype)
        ends = torch.tensor(np.cumsum(counts), dtype=torch.int32, device=x.device)
        return lambda: torch._grouped_mm(x, w, offs=ends)

    name = "GroupedMatmulV5" + {"kn": "", "nk": " [N,K] weight"}[layout] + (f" {kernel} kernel" if kernel else "")
    name += " vs torch._grouped_mm" if versus_grouped else ""
    case = Case(name, f"G{groups} M{tokens} K{k} N{n}", dtype.short, "TFLOP/s", 2.0 * tokens * k * n)
    if runner is not None:
        runner.last_path = None
        runner.forced_kernel = kernel
    try:
        suite.case(case, acl, torch_grouped if versus_grouped else torch_fn, "GroupedMatmulV5")
    finally:
        if runner is not None:
            runner.forced_kernel = None
    path = runner.last_path if runner is not None else None
    refused = getattr(runner, "last_refusal", None) if kernel is not None and path != kernel else None
    case.note = f"path {path or 'n/a'}" + (f" ({kernel} refused: {refused})" if refused else "")
    case.note += "; uneven M groups (device counts); torch: " + (
        "torch._grouped_mm on the same groups" if versus_grouped else "one [M, K] x [K, N] matmul, same FLOPs"
    )


def _v5_args(
    suite: Suite, counts: list[int], tokens: int, k: int, n: int, dtype: D, layout: str = "kn"
) -> tuple[dict[str, Any], Any]:
    """GroupedMatmulV5 arguments of one MoE layer: x [tokens, k], weight [g, k, n] (``nk``: the view of [g, n, k]
    storage, returned second for the caller to free), device counts, out."""
    none = dict.fromkeys(("biasOptional", "scaleOptional", "offsetOptional", "antiquantScaleOptional"))
    none |= dict.fromkeys(("antiquantOffsetOptional", "perTokenScaleOptional", "activationInputOptional"))
    none |= dict.fromkeys(("activationQuantScaleOptional", "activationQuantOffsetOptional"))
    none |= dict.fromkeys(("tuningConfigOptional", "activationFeatureOutOptional", "dynQuantScaleOutOptional"))
    args: dict[str, Any] = {"x": [suite.array((tokens, k), dtype)], **none}
    args |= {"splitItem": 3, "groupType": 0, "groupListType": 1, "actType": 0}
    args["groupListOptional"] = to_device(np.array(counts, np.int64), suite.backend)
    args["out"] = [empty((tokens, n), dtype, suite.backend)]
    groups = len(counts)
    stored = suite.array((groups, n, k) if layout == "nk" else (groups, k, n), dtype)
    if layout != "nk":
        args["weight"] = [stored]
        return args, None
    view = AclTensor((groups, k, n), dtype, (n * k, 1, k), 0, Format.ACL_FORMAT_ND, (groups, n, k), stored.address)
    args["weight"] = AclTensorList.create([view])
    return args, stored


def _grouped_v5_configs(suite: Suite, groups: int, tokens: int, k: int, n: int, kernel: str = "mma") -> None:
    """One GroupedMatmulV5 row per configuration of the ``kernel`` (``mma`` / ``wgmma``) grouped GEMM on one set of
    operands (rocm only; wgmma on sm_90 only)."""
    import os

    from acl_tools.bench.ops import Case

    runner = getattr(suite.backend, "grouped_matmul", None)
    wgmma = kernel == "wgmma"
    if runner is None or not hasattr(runner, "wgmma_alternatives" if wgmma else "forced_config"):
        return
    listed = os.environ.get("ACL_BENCH_GMM_WGMMA_CONFIGS" if wgmma else "ACL_BENCH_GMM_CONFIGS", "")
    defaults = runner.wgmma_alternatives() if wgmma else (runner.default(), *runner.alternatives())
    configs = [c.strip() for c in listed.split(",") if c.strip()] or list(defaults)
    if not configs or (wgmma and runner.wgmma_unavailable() is not None):
        return
    torch, dtype = suite.torch, D.ACL_BF16
    counts = _uneven(suite, groups, tokens)
    args, _ = _v5_args(suite, counts, tokens, k, n, dtype)
    launch, cleanup = suite.prepared("GroupedMatmulV5", args)
    attr, env = ("forced_wgmma_config", "ACL_GMM_WGMMA_CONFIG") if wgmma else ("forced_config", "ACL_GMM_CONFIG")

    def torch_fn() -> Callable[[], object]:
        x, w, o = suite.tensor((tokens, k), dtype), suite.tensor((k, n), dtype), suite.tensor((tokens, n), dtype)
        return lambda: torch.matmul(x, w, out=o)

    try:
        for config in configs:
            shape = f"G{groups} M{tokens} K{k} N{n}"
            label = f"GroupedMatmulV5 {'wgmma ' if wgmma else ''}config {config}"
            case = Case(label, shape, dtype.short, "TFLOP/s", 2.0 * tokens * k * n)
            runner.last_path, runner.last_config, runner.forced_kernel = None, None, kernel
            setattr(runner, attr, config)
            try:
                suite.case(case, lambda: (launch, lambda: None), torch_fn, "GroupedMatmulV5", interleaved=True)
            finally:
                setattr(runner, attr, None)
                runner.forced_kernel = None
            ran = runner.last_config or "n/a"
            case.note = f"{env}={config} (ran {ran}, path {runner.last_path or 'n/a'}); torch: one matmul"
    finally:
        cleanup()


SWIGLU_QUANT_ROWS: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    ("simt", None),
    ("mma", "128x128x32-w2x4-s4-b2"),
    ("mma", "64x128x32-w2x2-s4-b3"),
)
"""The GroupedMatmulSwigluQuantV2 rows: (the integer grouped GEMM forced or None, the matrix kernel's
``ACL_GMM_CONFIG`` or None); rows beyond the first are rocm only (8 warps, two blocks an SM; 64-row tiles: less
padding in groups of ~128 rows)."""


def _grouped_swiglu_quant(
    suite: Suite, groups: int, tokens: int, k: int, n: int, kernel: str | None = None, config: str | None = None
) -> None:
    from acl_tools.bench.ops import Case

    runner = getattr(suite.backend, "grouped_matmul", None)  # the rocm backend's runner (path and switch)
    if (kernel is not None or config is not None) and runner is None:
        return
    torch = suite.torch
    counts = _uneven(suite, groups, tokens)
    ends = np.cumsum(counts).tolist()
    rng = suite.rng

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"x": to_device(rng.integers(-127, 128, (tokens, k), dtype=np.int8), suite.backend)}
        args["weight"] = [to_device(rng.integers(-127, 128, (groups, k, n), dtype=np.int8), suite.backend)]
        scale = rng.uniform(0.5 / k, 2.0 / k, (groups, n)).astype(np.float32)
        args["weightScale"] = [to_device(scale, suite.backend)]
        args["xScale"] = to_device(rng.uniform(1 / 128, 4 / 128, tokens).astype(np.float32), suite.backend)
        args |= dict.fromkeys(("weightAssistMatrix", "bias", "smoothScale", "tuningConfig"))
        args["groupList"] = to_device(np.array(counts, np.int64), suite.backend)
        args |= {"dequantMode": 0, "dequantDtype": 28, "quantMode": 0, "groupListType": 1}
        args["output"] = empty((tokens, n // 2), D.ACL_INT8, suite.backend)
        args["outputScale"] = empty((tokens,), D.ACL_FLOAT, suite.backend)
        return suite.prepared("GroupedMatmulSwigluQuantV2", args)

    def torch_fn() -> Callable[[], object]:
        dev = suite.device
        x = torch.randint(-127, 128, (tokens, k), device=dev).to(torch.bfloat16)
        w = torch.randint(-127, 128, (groups, k, n), device=dev).to(torch.bfloat16)
        ws = torch.empty(groups, n, device=dev).uniform_(0.5 / k, 2.0 / k)
        xs = torch.empty(tokens, 1, device=dev).uniform_(1 / 128, 4 / 128)
        offs = torch.tensor(ends, dtype=torch.int32, device=dev)
        row_group = torch.repeat_interleave(torch.arange(groups, device=dev), torch.tensor(counts, device=dev))
        starts = [0, *ends[:-1]]

        def gemm() -> Any:
            grouped = getattr(torch, "_grouped_mm", None)
            if grouped is not None:
                try:
                    return grouped(x, w, offs=offs, out_dtype=torch.float32)
                except (RuntimeError, TypeError):  # an architecture or build without it: the per-group loop
                    pass
            parts = [torch.matmul(x[s:e].float(), w[g].float()) for g, (s, e) in enumerate(zip(starts, ends))]
            return torch.cat(parts)

        def step() -> object:
            c = gemm() * ws[row_group] * xs
            s = torch.nn.functional.silu(c[:, : n // 2]) * c[:, n // 2 :]
            scale = s.abs().amax(dim=-1, keepdim=True) / 127.0
            return torch.round(s / scale).clamp(-128, 127).to(torch.int8), scale

        step()
        return step

    name = (
        "GroupedMatmulSwigluQuantV2" + (f" {kernel} kernel" if kernel else "") + (f" config {config}" if config else "")
    )
    case = Case(name, f"G{groups} M{tokens} K{k} N{n}", "int8", "TFLOP/s", 2.0 * tokens * k * n)
    if runner is not None:
        runner.last_path = None
        runner.forced_kernel, runner.forced_config = kernel, config
    try:
        suite.case(case, acl, torch_fn, "GroupedMatmulSwigluQuantV2")
    finally:
        if runner is not None:
            runner.forced_kernel = runner.forced_config = None
    path = runner.last_path if runner is not None else None
    case.note = (
        f"path {path or 'n/a'}; W8A8 MoE gate/up + SwiGLU + per-row int8; "
        "torch: _grouped_mm (bf16, exact int8) + the same epilogue"
    )


def _quant_nz(suite: Suite, size: int) -> None:
    from acl_tools.bench.ops import Case

    torch = suite.torch
    n = size

    def acl() -> tuple[Callable[[], None], Any]:
        x1 = to_device(suite.rng.integers(-128, 128, (n, n), dtype=np.int8), suite.backend)
        x2 = nz.to_device_nz(suite.rng.integers(-128, 128, (n, n), dtype=np.int8), suite.backend)
        args: dict[str, Any] = {"x1": x1, "x2": x2}
        args["x1Scale"] = to_device(suite.rng.uniform(0.5, 2, n).astype(np.float32), suite.backend)
        args["x2Scale"] = to_device(suite.rng.uniform(1e-4, 1e-3, n).astype(np.float32), suite.backend)
        args |= dict.fromkeys(("yScale", "x1Offset", "x2Offset", "yOffset", "bias"))
        args |= {"transposeX1": False, "transposeX2": False, "groupSize": 0}
        args["out"] = empty((n, n), D.ACL_BF16, suite.backend)
        return suite.prepared("QuantMatmulWeightNz", args)

    def torch_fn() -> Callable[[], object]:
        a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=suite.device)
        b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=suite.device).t()
        s1 = torch.empty(n, 1, device=suite.device).uniform_(0.5, 2)
        s2 = torch.empty(n, device=suite.device).uniform_(1e-4, 1e-3)
        return lambda: (torch._int_mm(a, b).float() * s1 * s2).to(torch.bfloat16)

    case = Case("QuantMatmulWeightNz int8", f"{n}^3", "int8", "TFLOP/s", 2.0 * n**3)
    case.note = "W8A8, NZ x2, per-token x per-channel scales, bf16 out; torch: _int_mm + the same epilogue"
    suite.case(case, acl, torch_fn, "QuantMatmulWeightNz")
