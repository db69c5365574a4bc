"""Operator benchmarks through the aclnn contract, side by side with PyTorch on the same device.

Every case prepares the operator once (phase 1, ``aclSetAclOpExecutorRepeatable``, a workspace), times
phase 2 alone on a stream with :func:`~acl_tools.bench.timing.measure` (the stream is synchronised in
each timed round), and times the PyTorch equivalent the same way (``torch.cuda.synchronize`` on a GPU).
The yardsticks are the device-to-device copy bandwidth and the host cost of a small Add.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

import acl_core
from acl_core import aclnn
from acl_core.backend import Backend
from acl_core.capabilities import Platform
from acl_core.dtypes import DataType as D
from acl_core.eager import DeviceArray, empty, to_device
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.attention import compressed_mask
from acl_core.spec.ops.random import LAYOUT_ENV, fill_layout
from acl_core.spec.opspec import OutInfo, Role
from acl_core.spec.runtime import MemcpyKind
from acl_core.spec.validate import check_inputs
from acl_core.tensor import AclTensorList
from acl_tools.bench import (
    backward_rows,
    class_loss_rows,
    gemm_variants,
    host,
    index_shape_rows,
    kernel_profile,
    moe_rows,
    norm_rope_rows,
    padding_rows,
    pooling_rows,
    quant_gemm,
    quant_rows,
    replay,
    select_rows,
)
from acl_tools.bench.timing import measure, measure_interleaved

DTYPES = (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16)
TORCH_DTYPES = {D.ACL_FLOAT: "float32", D.ACL_FLOAT16: "float16", D.ACL_BF16: "bfloat16"}
CUBE_KEEP_DTYPE, CUBE_ALLOW_FP32_DOWN_PRECISION = 0, 1


@dataclass(frozen=True)
class Sizes:
    """Shapes and timing budget of one suite size."""

    elementwise_bytes: int
    norm: tuple[int, int]
    matmul: int
    attention: tuple[int, int, int, int]
    host_bytes: int
    min_time: float
    rounds: int
    recurrent: tuple[int, int, int, int] = (64, 16, 32, 128)
    """RecurrentGatedDeltaRule decode: (sequences of one token, key heads, value heads, Dk = Dv)."""
    sparse: tuple[int, int, int, int, int, int] = (4, 128, 512, 64, 32768, 2048)
    """Sparse attention decode: (query tokens, query heads, D, rope Dr, context keys, selected keys)."""
    mla: tuple[int, int, int, int, int, int, int, int] = (32, 7168, 1536, 32, 128, 64, 512, 128)
    """MlaPrologV2WeightNz (DeepSeek-V3 decode, 32 heads a card): tokens, He, Hcq, N, D, Dr, Hckv, BlockSize."""
    kv_blocks: int = 64
    """Blocks of the paged KV cache the ScatterPaKvCache row writes into (16 token slots of 8 x 128 each)."""
    rope_tokens: int = 64
    """Tokens of the RopeWithSinCosCacheV2 row (32 query and 8 key heads of 128)."""
    attention_grad: tuple[int, int, int, int] = (1, 2, 256, 64)
    """FlashAttentionScoreGrad causal: (B, N, S, D)."""
    forced_attention: tuple[tuple[str, tuple[int, int, int, int]], ...] = (("flash", (1, 2, 256, 64)),)
    """Causal FlashAttentionScore rows with the backend's attention path forced (a rocm setting, the one
    ``ACL_ATTENTION_PATH`` sets): (path, (B, N, S, D)); backends without selectable paths skip them."""
    full: bool = False
    """The speed targets' shapes (a GPU's): rows with size tables of their own take their ``full`` entry."""

    def timed(self, min_time: float | None = None, rounds: int | None = None) -> Sizes:
        """These sizes with another timing budget (``--min-time`` / ``--rounds``; None keeps the size's)."""
        return replace(
            self,
            min_time=self.min_time if min_time is None else min_time,
            rounds=self.rounds if rounds is None else rounds,
        )


POINTWISE: dict[str, tuple[tuple[str, ...], str]] = {
    "Erfinv": (("self",), "erfinv"),
}
"""Pointwise math rows (acl_core.spec.ops.pointwise_math), one per group, declared like :data:`ACTIVATIONS`."""

BITWISE: dict[str, tuple[tuple[str, ...], str, D, dict[str, Any]]] = {
    "BitwiseAndTensor": (("self", "other"), "bitwise_and", D.ACL_INT32, {}),
    "Addcmul": (("self", "tensor1", "tensor2"), "addcmul", D.ACL_BF16, {"value": 0.5}),
}
"""Bitwise and pointwise-ternary rows (acl_core.spec.ops.bitwise, pointwise_ternary): aclnn op → (its input
tensors in order, the torch aten op taking them, the dtype, its scalar arguments)."""

OPS = (
    *("Add", "Copy", "Mul", "Silu", "Softmax", "LayerNorm", "RmsNorm", "Matmul", "FlashAttentionScore"),
    "FlashAttentionScoreV3",
    "FlashAttentionScoreGrad",
    "RecurrentGatedDeltaRule",
    "SparseFlashAttention",
    "LightningIndexer",
    *("QuantMatmulV5", "QuantMatmulV3", "Replay", "GemmaRmsNorm"),
    *("Mish", "SiluBackward", "HardswishBackwardV2"),
    *POINTWISE,
    *BITWISE,
    "AddRmsNormQuant",
    *("MseLoss", "SmoothL1Loss", "GatherNd", "Take", "ForeachAddList", "ApplyAdamWV2"),
    *("InplaceNormal", "InplaceUniform"),
    *gemm_variants.OPS,
    *moe_rows.OPS,
    "ApplyTopKTopP",
    *("ScatterPaKvCache", "RopeWithSinCosCacheV2"),
    *norm_rope_rows.OPS,
    *backward_rows.OPS,
    *pooling_rows.OPS,
    *index_shape_rows.OPS,
    *class_loss_rows.OPS,
    *padding_rows.OPS,
    *select_rows.OPS,
    *quant_rows.OPS,
    "AttentionUpdate",
    "MlaPrologV2WeightNz",
)
"""The names ``--only`` picks from: the operators the suite times (Copy is the D2D memcpy; Replay is a
captured chain of small Adds replayed beside the same chain launched eagerly, :mod:`acl_tools.bench.replay`)."""

ACTIVATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "Mish": (("self",), "mish"),
    "SiluBackward": (("gradOutput", "self"), "silu_backward"),
    "HardswishBackwardV2": (("gradOutput", "self"), "hardswish_backward"),
}
"""Activation rows: aclnn op → (its input tensors in order, the torch aten op taking the same inputs)."""

LOSSES: dict[str, tuple[str, dict[str, Any]]] = {
    "MseLoss": ("mse_loss", {}),
    "SmoothL1Loss": ("smooth_l1_loss", {"beta": 1.0}),
}
"""Loss rows (reduction mean, one 0-d result): aclnn op → (the torch.nn.functional loss, its attributes)."""
KERNEL_CALLS = 3
"""Calls of an acl row profiled by ``--kernels`` (after its timing: warm plans and kernels)."""
FOREACH_MEMBERS = 64
"""Tensors per list of the ForeachAddList rows (an optimizer step's parameter list)."""
FOREACH_CONFIGS = ("scan",)
"""rocm's ACL_FOREACH_CONFIG choices timed beside the default (forced on its foreach runner, one row each)."""
ADAMW_CONFIGS = ("scalar",)
"""rocm's ACL_ADAMW_CONFIG choices timed beside the default ApplyAdamWV2 row."""
ENV_ROWS: dict[str, tuple[str, tuple[str, ...], frozenset[D] | None]] = {
    "Mish": ("ACL_MISH_CONFIG", ("libm",), frozenset({D.ACL_FLOAT})),
    "Take": ("ACL_TAKE_CHECK", ("launch", "vec"), None),
    "LightningIndexer": ("ACL_LI_PATH", ("tiled", "sort"), None),
    "SparseFlashAttention": ("ACL_SFA_PATH", ("block",), None),
    "CrossEntropyLoss": ("ACL_CE_ROWS", ("vec", "element"), None),
    "RepeatInterleaveWithDim": ("ACL_REPEAT_ROWS", ("search", "blocks", "gather", "gather,pdl,grid"), None),
    "FlashAttentionScoreGrad": ("ACL_ATTENTION_GRAD_PATH", ("blas", "flash"), None),
}
"""rocm settings timed as extra rows beside an op's default row: op → (variable, values, dtypes or None for all).

Each value gets a row of its own with the variable set on the backend's ``environ`` while the row is planned and
timed (the note names it), torch timed again beside it; backends without ``environ`` take the default row only."""
KV_SCATTER_CONFIGS = ("vec", "row")
"""rocm's ACL_KV_SCATTER_CONFIG choices timed beside the default ScatterPaKvCache row."""
KV_DECODE = (64, 8, 128, 16)
"""The ScatterPaKvCache row's decode step: tokens, KV heads, head dim, block size (bf16, key and value)."""
ROPE_HEADS = (32, 8, 128, 8192)
"""The RopeWithSinCosCacheV2 row: query heads, key heads, head dim (= rotaryDim), cos/sin cache length (bf16)."""
GATHER_HIDDEN = 512
"""Elements per gathered row of the GatherNd rows (a table of ``elementwise_bytes``, rows picked by (i, j) pairs)."""
RANDOM_FILLS: dict[str, tuple[dict[str, float], str, tuple[float, float]]] = {
    "InplaceNormal": ({"mean": 0.0, "std": 1.0}, "normal_", (0.0, 1.0)),
    "InplaceUniform": ({"from": 0.0, "to": 1.0}, "uniform_", (0.0, 1.0)),
}
"""Random fill rows: aclnn op → (its attributes, the torch.Tensor method, that method's two arguments)."""

ATTENTION_UPDATE: dict[str, tuple[int, int, int]] = {"small": (64, 128, 2), "full": (4096, 128, 8)}
"""AttentionUpdate rows: (rows = batch × heads, headDim, sp) per suite size (full: 128 sequences × 32 heads
of a decode step whose KV is split eight ways)."""
TOP_K_TOP_P: dict[str, tuple[int, int]] = {"small": (2, 4096), "full": (8, 151936)}
"""ApplyTopKTopP rows: (sequences, vocabulary) per suite size (full: a decode batch over Qwen's vocabulary)."""

SIZES = {
    "small": Sizes(
        1 << 20,
        (256, 1024),
        256,
        (1, 2, 256, 64),
        1024,
        0.05,
        5,
        (4, 2, 4, 32),
        (1, 4, 32, 16, 512, 64),
        kv_blocks=64,
        rope_tokens=64,
        mla=(4, 256, 128, 2, 32, 32, 64, 16),
    ),
    "full": Sizes(
        1 << 28,
        (8192, 8192),
        8192,
        (4, 32, 4096, 128),
        1024,
        0.1,
        5,
        kv_blocks=4096,
        rope_tokens=4096,
        attention_grad=(4, 32, 2048, 128),
        forced_attention=(("flash", (4, 32, 4096, 128)), ("flash", (4, 32, 1024, 64)), ("flash", (4, 16, 2048, 256))),
        full=True,
    ),
}
"""``small``: seconds on a CPU, for tests; ``full``: the shapes of issue 4's targets, for a GPU."""


@dataclass
class Case:
    """One measured row: the operator through aclnn and its PyTorch equivalent."""

    op: str
    shape: str
    dtype: str
    unit: str
    work: float
    status: str = "ok"
    acl_ms: float | None = None
    torch_ms: float | None = None
    acl_first_ms: float | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further figures of the acl side (the replay rows: host_us and gpu_us per iteration; with ``--kernels``,
    ``profile``: the GPU time per call and the kernels taking most of it, :func:`kernel_profile.kernel_shares`)."""

    def rate(self, ms: float | None) -> float | None:
        """``work`` per second in ``unit`` (bytes as GB/s, flops as TFLOP/s, calls as us/call)."""
        if ms is None or ms <= 0:
            return None
        if self.unit == "us/call":
            return ms * 1e3
        return self.work / (ms * 1e-3) / (1e9 if self.unit == "GB/s" else 1e12)

    def to_json(self) -> dict[str, Any]:
        """The JSON row: times, the ratio acl/torch, and the metric on both sides."""
        ratio = self.acl_ms / self.torch_ms if self.acl_ms and self.torch_ms else None
        return {
            "op": self.op,
            "shape": self.shape,
            "dtype": self.dtype,
            "status": self.status,
            "acl_ms": self.acl_ms,
            "torch_ms": self.torch_ms,
            "ratio": ratio,
            "metric": {"unit": self.unit, "acl": self.rate(self.acl_ms), "torch": self.rate(self.torch_ms)},
            "acl_first_ms": self.acl_first_ms,
            **({"extra": self.extra} if self.extra else {}),
            "note": self.note,
        }


class Prepared:
    """An aclnn operator after phase 1, its executor repeatable, its outputs and workspace allocated."""

    def __init__(self, backend: Backend, stream: int, op: str, args: dict[str, Any], skip: Iterable[str] = ()) -> None:
        spec = get_spec(op)
        rt = backend.runtime
        self.arrays: list[DeviceArray] = []
        call: dict[str, Any] = {}
        for k, v in args.items():
            if isinstance(v, DeviceArray):
                self.arrays.append(v)
                call[k] = v.tensor()
            elif isinstance(v, list) and v and all(isinstance(a, DeviceArray) for a in v):  # an aclTensorList
                self.arrays += v
                call[k] = AclTensorList.create([a.tensor() for a in v])
            else:
                call[k] = v
        plan = check_inputs(spec, call, rt, outputs_required=False).plan["outputs"]
        for p in spec.params:
            info = plan.get(p.name)
            if p.role is Role.OUT and call.get(p.name) is None and p.name not in skip and isinstance(info, OutInfo):
                out = empty(info.shape, info.dtype, backend)
                self.arrays.append(out)
                call[p.name] = out.tensor()
        for p in spec.params:
            call.setdefault(p.name, None)
        phase1 = getattr(aclnn, f"aclnn{op}GetWorkspaceSize")
        self.phase2 = getattr(aclnn, f"aclnn{op}")
        size, executor, ret = phase1(**call)
        if ret or aclnn.aclSetAclOpExecutorRepeatable(executor):
            raise RuntimeError(f"aclnn{op}GetWorkspaceSize: {aclnn.aclGetRecentErrMsg()}")
        self.size, self.executor, self.stream, self.rt = size, executor, stream, rt
        self.workspace = rt.malloc(size) if size else 0

    def __call__(self) -> None:
        """Phase 2 on the stream."""
        if self.phase2(self.workspace or None, self.size, self.executor, self.stream):
            raise RuntimeError(aclnn.aclGetRecentErrMsg())

    def free(self) -> None:
        """Release the executor, the workspace and every device array."""
        aclnn.aclDestroyAclOpExecutor(self.executor)
        if self.workspace:
            self.rt.free(self.workspace)
        for a in self.arrays:
            a.free()


def _listed_configs(head_dim: int) -> list[str]:
    """``ACL_BENCH_FLASH_CONFIGS``' shapes for ``head_dim`` (bare ones at every head dim, ``D=shape`` at D only)."""
    out: list[str] = []
    for part in filter(None, (p.strip() for p in os.environ.get("ACL_BENCH_FLASH_CONFIGS", "").split(","))):
        dim, _, config = part.rpartition("=")
        if not dim or dim.strip() == str(head_dim):
            out.append(config.strip())
    return out


class Suite:
    """Runs the cases of one size on one backend beside PyTorch on the matching device."""

    def __init__(
        self,
        backend: Backend,
        sizes: Sizes,
        progress: Callable[[str], None] = print,
        only: set[str] | None = None,
        kernels: bool = False,
        tracer: Callable[[Callable[[], Any]], list[dict[str, Any]] | None] | None = None,
    ) -> None:
        """``kernels``: profile each timed acl side (``tracer``, default torch.profiler) into its row's extra."""
        import torch

        self.kernels = kernels
        self.tracer = tracer or kernel_profile.trace_events

        self.torch = torch
        self.backend, self.sizes, self.progress, self.only = backend, sizes, progress, only
        self.caps = backend.capabilities()
        gpu = self.caps.platform in (Platform.NVIDIA, Platform.AMD)
        if gpu and not torch.cuda.is_available():
            raise RuntimeError(f"{backend.name} runs on a {self.caps.platform.value} GPU but torch has no CUDA/HIP")
        self.device = torch.device("cuda" if gpu else "cpu")
        self.tf32 = os.environ.get("CANN_FAST_TF32") == "1"
        torch.set_float32_matmul_precision("high" if self.tf32 else "highest")
        self.rt = backend.runtime
        self.stream = self.rt.create_stream()
        self.rng = np.random.default_rng(0)
        self.cases: list[Case] = []

    # ------------------------------------------------------------------ helpers
    def torch_sync(self) -> None:
        """Wait for the torch device."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()

    def acl_sync(self) -> None:
        """Wait for the benchmark stream."""
        self.rt.synchronize_stream(self.stream)

    def time(self, fn: Callable[[], object], sync: Callable[[], object]) -> float:
        """Median milliseconds per call."""
        return measure(fn, sync, min_time=self.sizes.min_time, rounds=self.sizes.rounds).median_s * 1e3

    def array(self, shape: tuple[int, ...], dtype: D) -> DeviceArray:
        """A device array of uniform values in [-1, 1)."""
        host_values = self.rng.random(shape, dtype=np.float32) * 2 - 1
        return to_device(host_values, self.backend, dtype=dtype)

    def tensor(self, shape: tuple[int, ...], dtype: D) -> Any:
        """A torch tensor of uniform values in [-1, 1) on the torch device."""
        t = self.torch.empty(shape, dtype=getattr(self.torch, TORCH_DTYPES[dtype]), device=self.device)
        return t.uniform_(-1, 1)

    def wanted(self, op: str) -> bool:
        """True when ``--only`` lets ``op`` run."""
        return self.only is None or op in self.only

    def runner(self, family: str) -> Any:
        """The backend's runner of ``family`` (rocm's forced kernel choices live there), or None."""
        runners = getattr(self.backend, "runners", None)
        return runners.get(family) if isinstance(runners, dict) else None

    def choices(self, family: str, attr: str, configs: tuple[str, ...]) -> list[str | None]:
        """None (the backend's default) and each of ``configs`` where ``family``'s runner can be forced by ``attr``."""
        runner = self.runner(family)
        return [None, *configs] if runner is not None and hasattr(runner, attr) else [None]

    def forced(
        self, family: str, attr: str, value: str | None, make: Callable[[], tuple[Callable[[], None], Any]]
    ) -> tuple[Callable[[], None], Any]:
        """``make()``'s (launch, cleanup) with ``runner.attr = value`` from planning until cleanup (None: as is)."""
        if value is None:
            return make()
        runner = self.runner(family)
        setattr(runner, attr, value)  # read when the call is planned and at every call: kept while it is timed
        try:
            launch, free = make()
        except Exception:
            setattr(runner, attr, None)
            raise

        def cleanup() -> None:
            setattr(runner, attr, None)
            free()

        return launch, cleanup

    def case(
        self,
        case: Case,
        acl: Callable[[], tuple[Callable[[], None], Callable[[], None]]],
        torch_fn: Callable[[], Callable[[], object]],
        claim: str | None = None,
        interleaved: bool = False,
    ) -> None:
        """Run one case: ``acl`` returns (launch, cleanup); ``torch_fn`` returns the torch call.

        ``interleaved`` times both sides in alternating rounds (:func:`measure_interleaved`): for
        microsecond host figures, where the machine's drift between two measurements is as large as
        the difference being measured.
        """
        self.cases.append(case)
        if claim is not None and not self.caps.supports_op(claim):
            case.status = "not claimed"
            case.note = f"{self.backend.name} does not claim {claim}"
            self.progress(
                _line(case.op, case.dtype, case.shape, "-", "-", case.unit, f"not claimed by {self.backend.name}")
            )
            return
        if interleaved:
            self._interleaved(case, acl, torch_fn)
            return self._report(case)
        failures = []
        try:
            launch, cleanup = acl()
            try:
                start = time.perf_counter()
                launch()
                self.acl_sync()
                case.acl_first_ms = (time.perf_counter() - start) * 1e3
                case.acl_ms = self.time(launch, self.acl_sync)
                if self.kernels:
                    self._profile(case, launch)
            finally:
                cleanup()
        except Exception as exc:  # a failing side is reported, the suite goes on
            failures.append(f"acl {type(exc).__name__}: {exc}")
        try:
            call = torch_fn()
            case.torch_ms = self.time(call, self.torch_sync)
            del call
        except Exception as exc:
            failures.append(f"torch {type(exc).__name__}: {exc}")
        if failures:
            case.status = ("failed: " + "; ".join(failures))[:300]
        self._report(case)

    def _interleaved(
        self,
        case: Case,
        acl: Callable[[], tuple[Callable[[], None], Callable[[], None]]],
        torch_fn: Callable[[], Callable[[], object]],
    ) -> None:
        try:
            launch, cleanup = acl()
            try:
                call = torch_fn()
                ours, theirs = measure_interleaved(
                    (launch, self.acl_sync),
                    (call, self.torch_sync),
                    min_time=self.sizes.min_time,
                    rounds=self.sizes.rounds,
                )
                case.acl_ms, case.torch_ms = ours.median_s * 1e3, theirs.median_s * 1e3
                case.note = "timed in alternating rounds"
            finally:
                cleanup()
        except Exception as exc:  # a failing case is reported, the suite goes on
            case.status = f"failed: {type(exc).__name__}: {exc}"[:300]

    def _profile(self, case: Case, launch: Callable[[], object]) -> None:
        """Profile ``KERNEL_CALLS`` calls of the acl side; keep where its GPU time went in ``case.extra``."""
        shares = kernel_profile.profile_calls(launch, self.acl_sync, KERNEL_CALLS, self.tracer)
        if shares is None:
            case.extra["profile"] = {"unavailable": "no CUDA device for torch.profiler"}
            return
        case.extra["profile"] = shares

    def _report(self, case: Case) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()
        row = case.to_json()
        ratio = f"x{row['ratio']:.2f}" if row["ratio"] else case.status
        m = row["metric"]
        self.progress(_line(case.op, case.dtype, case.shape, _num(m["acl"]), _num(m["torch"]), case.unit, ratio))
        shares = case.extra.get("profile")
        if shares and "kernels" in shares:
            for line in kernel_profile.describe(shares):
                self.progress(line)

    def env_rows(self, op: str, dtype: D) -> list[tuple[str, str] | None]:
        """The default row (None) then one (variable, value) per :data:`ENV_ROWS` setting of ``op`` at ``dtype``
        (``ACL_BENCH_ENV_ROWS``: ``;``-separated values instead of the table's)."""
        found = ENV_ROWS.get(op)
        if found is None or not hasattr(self.backend, "environ"):
            return [None]
        name, values, dtypes = found
        listed = [v.strip() for v in os.environ.get("ACL_BENCH_ENV_ROWS", "").split(";") if v.strip()]
        values = tuple(listed) or values  # a sweep line times a few settings at a time
        return [None, *((name, v) for v in values if dtypes is None or dtype in dtypes)]

    def with_env(
        self, setting: tuple[str, str] | None, make: Callable[[], tuple[Callable[[], None], Any]]
    ) -> tuple[Callable[[], None], Any]:
        """``make()`` with ``setting`` on the backend's ``environ`` until the returned cleanup runs."""
        if setting is None:
            return make()
        backend: Any = self.backend
        saved = backend.environ
        backend.environ = {**saved, setting[0]: setting[1]}
        try:
            launch, free = make()
        except Exception:
            backend.environ = saved
            raise

        def cleanup() -> None:
            backend.environ = saved
            free()

        return launch, cleanup

    def prepared(self, op: str, args: dict[str, Any], skip: Iterable[str] = ()) -> tuple[Callable[[], None], Any]:
        """(launch, cleanup) of a prepared aclnn operator."""
        p = Prepared(self.backend, self.stream, op, args, skip)
        return p, p.free

    # ------------------------------------------------------------------ cases
    def host_overhead(self) -> None:
        """Host cost per call of Add on a small float32 tensor: two-phase, phase 2 alone, torch eager add."""
        nbytes = self.sizes.host_bytes
        n = nbytes // 4
        shape = _mib(nbytes)
        for label, pick in (("Add host two-phase", 0), ("Add host phase 2 only", 1)):
            if not self.wanted("Add"):
                return

            def acl(pick: int = pick) -> tuple[Callable[[], None], Callable[[], None]]:
                full, launch_only, sync = host._two_phase_add(self.backend, nbytes)
                return (full, launch_only)[pick], sync

            def torch_add() -> Callable[[], object]:
                a, b, o = (self.tensor((n,), D.ACL_FLOAT) for _ in range(3))
                return lambda: self.torch.add(a, b, out=o)

            self.case(Case(label, shape, "float32", "us/call", 1), acl, torch_add, "Add", interleaved=True)

    def copy(self) -> float | None:
        """Device-to-device copy bandwidth: acl memcpyAsync D2D and torch ``copy_``; returns acl's GB/s."""
        nbytes = self.sizes.elementwise_bytes
        if not self.wanted("Copy"):
            return None

        def acl() -> tuple[Callable[[], None], Callable[[], None]]:
            src, dst = empty((nbytes,), D.ACL_UINT8, self.backend), empty((nbytes,), D.ACL_UINT8, self.backend)
            self.rt.memset(src.address, nbytes, 1, nbytes)
            kind = MemcpyKind.ACL_MEMCPY_DEVICE_TO_DEVICE
            launch = lambda: self.rt.memcpy_async(dst.address, nbytes, src.address, nbytes, kind, self.stream)

            def cleanup() -> None:
                src.free()
                dst.free()

            return launch, cleanup

        def torch_copy() -> Callable[[], object]:
            src = self.torch.ones(nbytes, dtype=self.torch.uint8, device=self.device)
            dst = self.torch.empty_like(src)
            return lambda: dst.copy_(src)

        case = Case("Copy D2D", _mib(nbytes), "uint8", "GB/s", 2 * nbytes)
        self.case(case, acl, torch_copy)
        return case.rate(case.acl_ms)

    def elementwise(self) -> None:
        """Add, Mul and Silu bandwidth on tensors of ``elementwise_bytes`` each."""
        F = self.torch.nn.functional
        for op in ("Add", "Mul", "Silu"):
            if not self.wanted(op):
                continue
            for dtype in DTYPES:
                n = self.sizes.elementwise_bytes // dtype.info.storage_bits * 8
                operands = 1 if op == "Silu" else 2

                def acl(op: str = op, dtype: D = dtype, n: int = n) -> tuple[Callable[[], None], Any]:
                    args: dict[str, Any] = {"self": self.array((n,), dtype), "out": empty((n,), dtype, self.backend)}
                    if op != "Silu":
                        args["other"] = self.array((n,), dtype)
                    if op == "Add":
                        args["alpha"] = aclnn.aclCreateScalar(1.0, int(D.ACL_FLOAT))
                    return self.prepared(op, args)

                def torch_fn(op: str = op, dtype: D = dtype, n: int = n) -> Callable[[], object]:
                    a, b, o = (self.tensor((n,), dtype) for _ in range(3))
                    if op == "Add":
                        return lambda: self.torch.add(a, b, out=o)
                    if op == "Mul":
                        return lambda: self.torch.mul(a, b, out=o)
                    return lambda: F.silu(a)

                nbytes = (operands + 1) * n * dtype.info.storage_bits // 8
                self.case(
                    Case(op, _mib(n * dtype.info.storage_bits // 8), dtype.short, "GB/s", nbytes), acl, torch_fn, op
                )

    def activations(self) -> None:
        """The activation and pointwise rows (:data:`ACTIVATIONS`, :data:`POINTWISE`) at the elementwise size."""
        for op, (inputs, torch_name) in {**ACTIVATIONS, **POINTWISE}.items():
            if not self.wanted(op):
                continue
            for dtype in DTYPES:
                n = self.sizes.elementwise_bytes // dtype.info.storage_bits * 8
                result = get_spec(op).outputs[0].name

                def acl(
                    op: str = op, dtype: D = dtype, n: int = n, inputs: tuple[str, ...] = inputs, result: str = result
                ) -> tuple[Callable[[], None], Any]:
                    args: dict[str, Any] = {name: self.array((n,), dtype) for name in inputs}
                    args[result] = empty((n,), dtype, self.backend)
                    return self.prepared(op, args)

                def torch_fn(
                    dtype: D = dtype, n: int = n, inputs: tuple[str, ...] = inputs, torch_name: str = torch_name
                ) -> Callable[[], object]:
                    fn = getattr(self.torch.ops.aten, torch_name)
                    tensors = [self.tensor((n,), dtype) for _ in inputs]
                    return lambda: fn(*tensors)

                nbytes = (len(inputs) + 1) * n * dtype.info.storage_bits // 8
                for setting in self.env_rows(op, dtype):
                    note = "" if setting is None else f"{setting[0]}={setting[1]}"
                    case = Case(op, _mib(n * dtype.info.storage_bits // 8), dtype.short, "GB/s", nbytes, note=note)
                    self.case(case, functools.partial(self.with_env, setting, acl), torch_fn, op)

    def bitwise(self) -> None:
        """The :data:`BITWISE` rows at the elementwise size (integers drawn over their whole range)."""
        for op, (inputs, torch_name, dtype, scalars) in BITWISE.items():
            if not self.wanted(op):
                continue
            n = self.sizes.elementwise_bytes // dtype.info.storage_bits * 8

            def acl(
                op: str = op, dtype: D = dtype, n: int = n, inputs: tuple[str, ...] = inputs, scalars: dict = scalars
            ) -> tuple[Callable[[], None], Any]:
                args: dict[str, Any] = {name: self.bits((n,), dtype) for name in inputs}
                args[get_spec(op).outputs[0].name] = empty((n,), dtype, self.backend)
                values = {k: aclnn.aclCreateScalar(v, int(D.ACL_FLOAT)) for k, v in scalars.items()}
                return self.prepared(op, {**args, **values})

            def torch_fn(
                dtype: D = dtype,
                n: int = n,
                inputs: tuple[str, ...] = inputs,
                name: str = torch_name,
                scalars: dict = scalars,
            ) -> Callable[[], object]:
                fn = getattr(self.torch.ops.aten, name)
                tensors = [self.torch_bits((n,), dtype) for _ in inputs]
                return lambda: fn(*tensors, **scalars)

            nbytes = (len(inputs) + 1) * n * dtype.info.storage_bits // 8
            case = Case(op, _mib(n * dtype.info.storage_bits // 8), dtype.short, "GB/s", nbytes)
            self.case(case, acl, torch_fn, op)

    def bits(self, shape: tuple[int, ...], dtype: D) -> DeviceArray:
        """A device array: integers over their dtype's whole range, floats as :meth:`array`."""
        if not dtype.is_integer:
            return self.array(shape, dtype)
        info = np.iinfo(dtype.numpy)
        return to_device(self.rng.integers(info.min, info.max, shape, dtype=dtype.numpy), self.backend)

    def torch_bits(self, shape: tuple[int, ...], dtype: D) -> Any:
        """A torch tensor like :meth:`bits`."""
        if not dtype.is_integer:
            return self.tensor(shape, dtype)
        info = np.iinfo(dtype.numpy)
        torch_dtype = getattr(self.torch, np.dtype(dtype.numpy).name)
        return self.torch.randint(int(info.min), int(info.max), shape, dtype=torch_dtype, device=self.device)

    def losses(self) -> None:
        """Mean-reduced losses (:data:`LOSSES`) over two inputs of ``elementwise_bytes`` each: read bandwidth."""
        F = self.torch.nn.functional
        for op, (torch_name, attrs) in LOSSES.items():
            if not self.wanted(op):
                continue
            for dtype in DTYPES:
                n = self.sizes.elementwise_bytes // dtype.info.storage_bits * 8
                result = get_spec(op).outputs[0].name

                def acl(
                    op: str = op, dtype: D = dtype, n: int = n, attrs: dict[str, Any] = attrs, result: str = result
                ) -> tuple[Callable[[], None], Any]:
                    args: dict[str, Any] = {"self": self.array((n,), dtype), "target": self.array((n,), dtype)}
                    args |= {"reduction": 1, **attrs, result: empty((), dtype, self.backend)}
                    return self.prepared(op, args)

                def torch_fn(
                    dtype: D = dtype, n: int = n, torch_name: str = torch_name, attrs: dict[str, Any] = attrs
                ) -> Callable[[], object]:
                    fn = getattr(F, torch_name)
                    x, t = self.tensor((n,), dtype), self.tensor((n,), dtype)
                    return lambda: fn(x, t, reduction="mean", **attrs)

                nbytes = 2 * n * dtype.info.storage_bits // 8
                note = "reduction mean"
                case = Case(op, _mib(n * dtype.info.storage_bits // 8), dtype.short, "GB/s", nbytes, note=note)
                self.case(case, acl, torch_fn, op)

    def gathers(self) -> None:
        """GatherNd (rows of an [R, C, H] table by (i, j) pairs) and Take (random elements) at the elementwise size.

        Both sides get the same random int64 indices; the metric counts the bytes read and written,
        indices included.
        """
        for op in ("GatherNd", "Take"):
            if not self.wanted(op):
                continue
            for dtype in DTYPES:
                item = dtype.info.storage_bits // 8
                n = self.sizes.elementwise_bytes // item
                if op == "GatherNd":
                    rows = n // GATHER_HIDDEN
                    r = 1 << (max(rows.bit_length() - 1, 0) // 2)
                    shape: tuple[int, ...] = (r, rows // r, GATHER_HIDDEN)
                    idx = np.stack([self.rng.integers(0, d, rows) for d in shape[:2]], axis=-1)
                    label = f"[{r},{rows // r},{GATHER_HIDDEN}] by {rows} pairs"
                    nbytes = 2 * rows * GATHER_HIDDEN * item + idx.size * 8
                else:
                    shape = (n,)
                    idx = self.rng.integers(0, n, n)
                    label = f"{_mib(n * item)}, {n} picks"
                    nbytes = 2 * n * item + n * 8

                def acl(
                    op: str = op, dtype: D = dtype, shape: tuple[int, ...] = shape, idx: np.ndarray = idx
                ) -> tuple[Callable[[], None], Any]:
                    args: dict[str, Any] = {"self": self.array(shape, dtype)}
                    if op == "GatherNd":
                        args |= {"indices": to_device(idx, self.backend), "negativeIndexSupport": False}
                    else:
                        args["index"] = to_device(idx, self.backend)
                    return self.prepared(op, args)

                def torch_fn(
                    op: str = op, dtype: D = dtype, shape: tuple[int, ...] = shape, idx: np.ndarray = idx
                ) -> Callable[[], object]:
                    x = self.tensor(shape, dtype)
                    i = self.torch.from_numpy(idx).to(self.device)
                    if op == "GatherNd":
                        first, second = i[:, 0], i[:, 1]
                        return lambda: x[first, second]
                    return lambda: self.torch.take(x, i)

                for setting in self.env_rows(op, dtype):
                    note = "" if setting is None else f"{setting[0]}={setting[1]}"
                    case = Case(op, label, dtype.short, "GB/s", nbytes, note=note)
                    self.case(case, functools.partial(self.with_env, setting, acl), torch_fn, op)

    def foreach(self) -> None:
        """ForeachAddList on lists of :data:`FOREACH_MEMBERS` tensors, ``elementwise_bytes`` a list.

        torch's side is ``_foreach_add_`` in place: the same bytes read and written as acl's out-of-place call.
        """
        op = "ForeachAddList"
        if not self.wanted(op):
            return
        runners = getattr(self.backend, "runners", None)
        runner = runners.get("foreach") if isinstance(runners, dict) else None
        caps: list[int | None] = [None]
        if runner is not None and hasattr(runner, "block_alternatives"):
            caps += list(runner.block_alternatives())
        configs = self.choices("foreach", "forced_config", FOREACH_CONFIGS)[1:]
        for dtype in DTYPES:
            for cap in caps:
                self._foreach_row(op, dtype, runner, cap)
            for config in configs:
                self._foreach_row(op, dtype, runner, None, config)

    def _foreach_row(self, op: str, dtype: D, runner: Any, cap: int | None, config: str | None = None) -> None:
        """One ForeachAddList row; ``cap`` blocks a slot (or ``config``, ``ACL_FOREACH_CONFIG``) forced on rocm's
        foreach runner while it is timed."""
        item = dtype.info.storage_bits // 8
        n = self.sizes.elementwise_bytes // item // FOREACH_MEMBERS

        def acl() -> tuple[Callable[[], None], Any]:
            lists = {name: [self.array((n,), dtype) for _ in range(FOREACH_MEMBERS)] for name in ("x1", "x2")}
            out = [empty((n,), dtype, self.backend) for _ in range(FOREACH_MEMBERS)]
            alpha = to_device(np.ones(1, np.float32), self.backend)
            args = {**lists, "alpha": alpha, "out": out}
            if config is not None:
                return self.forced("foreach", "forced_config", config, lambda: self.prepared(op, args))
            launch, free = self.prepared(op, args)
            if cap is None:
                return launch, free
            runner.forced_blocks = cap  # read at every call: set while the row is timed

            def cleanup() -> None:
                runner.forced_blocks = None
                free()

            return launch, cleanup

        def torch_fn() -> Callable[[], object]:
            xs = [self.tensor((n,), dtype) for _ in range(FOREACH_MEMBERS)]
            ys = [self.tensor((n,), dtype) for _ in range(FOREACH_MEMBERS)]
            return lambda: self.torch._foreach_add_(xs, ys)

        label = f"{FOREACH_MEMBERS} x {_mib(n * item)}"
        note = "" if cap is None else f"ACL_FOREACH_BLOCKS={cap}"
        note = note if config is None else f"ACL_FOREACH_CONFIG={config}"
        self.case(Case(op, label, dtype.short, "GB/s", 3 * FOREACH_MEMBERS * n * item, note=note), acl, torch_fn, op)

    def optimizer(self) -> None:
        """ApplyAdamWV2 on one float32 parameter of ``elementwise_bytes`` beside torch's fused AdamW kernel.

        torch's side is ``_fused_adamw_`` (what ``torch.optim.AdamW(fused=True)`` launches per step) on the
        same state; the metric counts what both must move: var, m, v, grad read, var, m, v written.
        """
        op = "ApplyAdamWV2"
        if not self.wanted(op):
            return
        for config in self.choices("optim", "forced_config", ADAMW_CONFIGS):
            self._optimizer_row(op, config)

    def _optimizer_row(self, op: str, config: str | None) -> None:
        """One ApplyAdamWV2 row; ``config`` (``ACL_ADAMW_CONFIG``) forced on rocm's optim runner while it is timed."""
        dtype, n = D.ACL_FLOAT, self.sizes.elementwise_bytes // 4
        hyper = {"lr": 1e-3, "weightDecay": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

        def acl() -> tuple[Callable[[], None], Any]:
            state = {name: self.array((n,), dtype) for name in ("varRef", "mRef", "vRef", "grad")}
            step = to_device(np.array([3.0], np.float32), self.backend)
            args = {**state, "maxGradNormOptionalRef": None, "step": step, **hyper}
            make = lambda: self.prepared(op, args | {"amsgrad": False, "maximize": False})
            return self.forced("optim", "forced_config", config, make)

        def torch_fn() -> Callable[[], object]:
            p, g, m = (self.tensor((n,), dtype) for _ in range(3))
            v = self.tensor((n,), dtype).abs_()
            step = self.torch.full((), 3.0, device=self.device)
            return lambda: self.torch._fused_adamw_(
                [p],
                [g],
                [m],
                [v],
                [],
                [step],
                lr=hyper["lr"],
                beta1=hyper["beta1"],
                beta2=hyper["beta2"],
                weight_decay=hyper["weightDecay"],
                eps=hyper["eps"],
                amsgrad=False,
                maximize=False,
            )

        note = "torch: _fused_adamw_" + ("" if config is None else f", ACL_ADAMW_CONFIG={config}")
        self.case(Case(op, _mib(n * 4), dtype.short, "GB/s", 7 * n * 4, note=note), acl, torch_fn, op)

    def random_fills(self) -> None:
        """InplaceNormal and InplaceUniform on float32 ``elementwise_bytes`` beside torch's normal_ / uniform_.

        On rocm, InplaceNormal's default row is followed by one row per alternative way to the packed pair's sine
        and cosine (``ACL_RANDOM_NORMAL``, forced on the runner while the row is planned and timed).
        """
        n = self.sizes.elementwise_bytes // 4
        runners = getattr(self.backend, "runners", None)
        random = runners.get("random") if isinstance(runners, dict) else None
        for op, (attrs, method, torch_args) in RANDOM_FILLS.items():
            if not self.wanted(op):
                continue
            variants: list[str | None] = [None]
            if op == "InplaceNormal" and random is not None and fill_layout() == "packed":
                variants += list(random.trig_alternatives())
            for trig in variants:
                self._random_fill(op, attrs, method, torch_args, n, random, trig)

    def _random_fill(
        self,
        op: str,
        attrs: dict[str, float],
        method: str,
        torch_args: tuple[float, float],
        n: int,
        random: Any,
        trig: str | None,
    ) -> None:
        """One fill row; ``trig`` forced on rocm's random runner (``ACL_RANDOM_NORMAL``) while it is set."""
        dtype = D.ACL_FLOAT

        def acl() -> tuple[Callable[[], None], Any]:
            args: dict[str, Any] = {"selfRef": empty((n,), dtype, self.backend), **attrs, "seed": 1, "offset": 0}
            if trig is None:
                return self.prepared(op, args)
            random.forced_trig = trig  # the kernel is chosen when the call is first planned
            try:
                launch, free = self.prepared(op, args)
            except Exception:
                random.forced_trig = None
                raise

            def cleanup() -> None:
                random.forced_trig = None
                free()

            return launch, cleanup

        def torch_fn() -> Callable[[], object]:
            t = self.tensor((n,), dtype)
            fill = getattr(t, method)
            return lambda: fill(*torch_args)

        note = f"{LAYOUT_ENV}={fill_layout()}"
        if trig is not None:
            note += f", ACL_RANDOM_NORMAL={trig}"
        self.case(Case(op, _mib(n * 4), dtype.short, "GB/s", n * 4, note=note), acl, torch_fn, op)

    def attention_update(self) -> None:
        """AttentionUpdate (sp bf16 partial outputs and float32 lse, lseOut written) vs torch's logsumexp combine."""
        op = "AttentionUpdate"
        if not self.wanted(op):
            return
        rows, head_dim, sp = ATTENTION_UPDATE["full" if self.sizes.full else "small"]
        dtype = D.ACL_BF16

        def acl() -> tuple[Callable[[], None], Any]:
            lse = [self.array((rows,), D.ACL_FLOAT) for _ in range(sp)]
            local = [self.array((rows, head_dim), dtype) for _ in range(sp)]
            return self.prepared(op, {"lse": lse, "localOut": local, "updateType": 1})

        def torch_fn() -> Callable[[], object]:
            torch = self.torch
            lse = [self.tensor((rows,), D.ACL_FLOAT) for _ in range(sp)]
            local = [self.tensor((rows, head_dim), dtype) for _ in range(sp)]

            def run() -> object:
                stacked = torch.stack(lse)
                total = torch.logsumexp(stacked, dim=0)
                weights = torch.exp(stacked - total)
                out = (torch.stack(local).float() * weights.unsqueeze(-1)).sum(0)
                return out.to(local[0].dtype), total

            return run

        item = dtype.info.storage_bits // 8
        nbytes = sp * rows * (head_dim * item + 4) + rows * (head_dim * item + 4)
        label = f"sp={sp} x [{rows},{head_dim}]"
        note = "torch: stack, logsumexp, exp, weighted sum"
        self.case(Case(op, label, dtype.short, "GB/s", nbytes, note=note), acl, torch_fn, op)

    def sampling(self) -> None:
        """ApplyTopKTopP (top-k and top-p per sequence) vs torch's sort / softmax / cumsum / mask formulation."""
        op = "ApplyTopKTopP"
        if not self.wanted(op):
            return
        batch, vocab = TOP_K_TOP_P["full" if self.sizes.full else "small"]
        for dtype in (D.ACL_FLOAT, D.ACL_BF16):
            p_host = self.rng.uniform(0.5, 0.95, batch)
            k_host = self.rng.integers(20, 1000, batch).astype(np.int32)

            def acl(dtype: D = dtype, p_host: np.ndarray = p_host, k_host: np.ndarray = k_host) -> tuple[Any, Any]:
                p = to_device(p_host.astype(np.float32), self.backend, dtype=dtype)
                args = {"logits": self.array((batch, vocab), dtype), "p": p, "k": to_device(k_host, self.backend)}
                return self.prepared(op, args)

            def torch_fn(dtype: D = dtype, p_host: np.ndarray = p_host, k_host: np.ndarray = k_host) -> Any:
                torch = self.torch
                logits = self.tensor((batch, vocab), dtype)
                p = torch.from_numpy(p_host).to(self.device, logits.dtype)
                k = torch.from_numpy(k_host).to(self.device).long()

                def run() -> object:
                    values, order = logits.sort(dim=-1, descending=False)
                    threshold = values.gather(1, (vocab - k)[:, None])
                    values = values.masked_fill(values < threshold, float("-inf"))
                    running = values.softmax(dim=-1).cumsum(dim=-1)
                    cut = running <= 1 - p[:, None]
                    cut[:, -1] = False
                    filtered = values.masked_fill(cut, float("-inf"))
                    return torch.empty_like(filtered).scatter_(1, order, filtered)

                return run

            nbytes = 2 * batch * vocab * dtype.info.storage_bits // 8
            note = "torch: sort, gather, softmax, cumsum, masks, scatter"
            self.case(Case(op, f"[{batch},{vocab}]", dtype.short, "GB/s", nbytes, note=note), acl, torch_fn, op)

    def kv_cache(self) -> None:
        """ScatterPaKvCache of a decode step beside two index_copy_ of the same rows; RoPE beside torch's expression.

        The cache write moves ``KV_DECODE`` key and value rows (three padding slots of -1 among them) into
        caches of ``kv_blocks`` blocks; torch copies the same rows with ``index_copy_`` on the caches seen as
        [slots, heads, dim]. The rotary row rotates ``rope_tokens`` tokens' query and key heads (NeoX style,
        cos/sin gathered from a cache by position); torch computes the same with indexing and elementwise ops.
        The metric counts the bytes read and written, indices included.
        """
        dtype = D.ACL_BF16
        if self.wanted("ScatterPaKvCache"):
            slots = self.rng.permutation(self.sizes.kv_blocks * KV_DECODE[3])[: KV_DECODE[0]].astype(np.int64)
            slots[-3:] = -1  # three padding tokens
            for config in self.choices("kv_cache", "forced_scatter", KV_SCATTER_CONFIGS):
                self._kv_scatter_row(dtype, slots, config)
        self._rope_cache_row(dtype)

    def _kv_scatter_row(self, dtype: D, slots: np.ndarray, config: str | None) -> None:
        """One ScatterPaKvCache row; ``config`` (``ACL_KV_SCATTER_CONFIG``) forced on rocm's runner while timed."""
        tokens, heads, dim, bs = KV_DECODE
        blocks = self.sizes.kv_blocks

        def acl() -> tuple[Callable[[], None], Any]:
            args: dict[str, Any] = {
                "key": self.array((tokens, heads, dim), dtype),
                "keyCacheRef": empty((blocks, bs, heads, dim), dtype, self.backend),
                "slotMapping": to_device(slots, self.backend),
                "value": self.array((tokens, heads, dim), dtype),
                "valueCacheRef": empty((blocks, bs, heads, dim), dtype, self.backend),
            }
            return self.forced("kv_cache", "forced_scatter", config, lambda: self.prepared("ScatterPaKvCache", args))

        def torch_fn() -> Callable[[], object]:
            kc = self.torch.empty((blocks * bs, heads, dim), dtype=self.torch.bfloat16, device=self.device)
            vc = self.torch.empty_like(kc)
            k, v = self.tensor((tokens, heads, dim), dtype), self.tensor((tokens, heads, dim), dtype)
            keep = self.torch.from_numpy(slots >= 0).to(self.device)
            s = self.torch.from_numpy(slots).to(self.device)[keep]
            k, v = k[keep], v[keep]
            return lambda: (kc.index_copy_(0, s, k), vc.index_copy_(0, s, v))

        nbytes = 2 * 2 * tokens * heads * dim * 2 + tokens * 8
        label = f"{tokens} tok x {heads} x {dim} into {blocks} blocks of {bs}"
        note = "" if config is None else f"ACL_KV_SCATTER_CONFIG={config}"
        case = Case("ScatterPaKvCache", label, dtype.short, "GB/s", nbytes, note=note)
        self.case(case, acl, torch_fn, "ScatterPaKvCache")

    def _rope_cache_row(self, dtype: D) -> None:
        """RopeWithSinCosCacheV2 beside torch's expression (see :meth:`kv_cache`)."""
        if self.wanted("RopeWithSinCosCacheV2"):
            nq, nk, head, max_len = ROPE_HEADS
            t = self.sizes.rope_tokens
            positions = self.rng.integers(0, max_len, t).astype(np.int64)

            def acl_rope() -> tuple[Callable[[], None], Any]:
                args: dict[str, Any] = {
                    "positions": to_device(positions, self.backend),
                    "queryIn": self.array((t, nq * head), dtype),
                    "keyIn": self.array((t, nk * head), dtype),
                    "cosSinCache": self.array((max_len, head), dtype),
                    "mropeSection": None,
                    "headSize": head,
                    "isNeoxStyle": True,
                    "cacheMode": 0,
                }
                return self.prepared("RopeWithSinCosCacheV2", args)

            def torch_rope() -> Callable[[], object]:
                cache = self.tensor((max_len, head), dtype)
                pos = self.torch.from_numpy(positions).to(self.device)
                q, k = self.tensor((t, nq, head), dtype), self.tensor((t, nk, head), dtype)
                half = head // 2

                def rotate(x: Any, cos: Any, sin: Any) -> Any:
                    x1, x2 = x[..., :half], x[..., half:]
                    return self.torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

                def run() -> object:
                    cos, sin = cache[pos].unsqueeze(1).chunk(2, dim=-1)
                    return rotate(q, cos, sin), rotate(k, cos, sin)

                return run

            nbytes = 2 * t * (nq + nk) * head * 2 + t * head * 2 + t * 8
            label = f"{t} tok, {nq}/{nk} heads of {head}"
            case = Case("RopeWithSinCosCacheV2", label, dtype.short, "GB/s", nbytes, note="NeoX style")
            self.case(case, acl_rope, torch_rope, "RopeWithSinCosCacheV2")

    def norms(self) -> None:
        """Softmax, LayerNorm, RmsNorm and GemmaRmsNorm over the last dimension of rows x hidden."""
        F = self.torch.nn.functional
        rows, hidden = self.sizes.norm
        eps = 1e-5
        for op in ("Softmax", "LayerNorm", "RmsNorm", "GemmaRmsNorm"):
            if not self.wanted(op):
                continue
            for dtype in DTYPES:

                def acl(op: str = op, dtype: D = dtype) -> tuple[Callable[[], None], Any]:
                    x = self.array((rows, hidden), dtype)
                    if op == "Softmax":
                        return self.prepared(op, {"self": x, "dim": -1})
                    w = self.array((hidden,), dtype)
                    if op == "LayerNorm":
                        args: dict[str, Any] = {"input": x, "normalizedShape": aclnn.aclCreateIntArray([hidden])}
                        args |= {"weightOptional": w, "biasOptional": self.array((hidden,), dtype), "eps": eps}
                        return self.prepared(op, args, skip=("meanOutOptional", "rstdOutOptional"))
                    return self.prepared(op, {"x": x, "gamma": w, "epsilon": eps})

                def torch_fn(op: str = op, dtype: D = dtype) -> Callable[[], object]:
                    x, w, b = (
                        self.tensor((rows, hidden), dtype),
                        self.tensor((hidden,), dtype),
                        self.tensor((hidden,), dtype),
                    )
                    if op == "Softmax":
                        return lambda: self.torch.softmax(x, -1)
                    if op == "LayerNorm":
                        return lambda: F.layer_norm(x, (hidden,), w, b, eps)
                    if op == "GemmaRmsNorm":  # torch has no fused form: Gemma's (1 + weight) per call
                        return lambda: F.rms_norm(x, (hidden,), 1 + w, eps)
                    return lambda: F.rms_norm(x, (hidden,), w, eps)

                nbytes = 2 * rows * hidden * dtype.info.storage_bits // 8
                self.case(Case(op, f"[{rows},{hidden}]", dtype.short, "GB/s", nbytes), acl, torch_fn, op)

    def norm_quant(self) -> None:
        """AddRmsNormQuant (residual add, RmsNorm, int8 per-channel quant) vs torch's add + rms_norm + quantise."""
        if not self.wanted("AddRmsNormQuant"):
            return
        F = self.torch.nn.functional
        rows, hidden = self.sizes.norm
        eps = 1e-6
        for dtype in (D.ACL_FLOAT16, D.ACL_BF16):

            def acl(dtype: D = dtype) -> tuple[Callable[[], None], Any]:
                x1, x2, w = (
                    self.array((rows, hidden), dtype),
                    self.array((rows, hidden), dtype),
                    self.array((hidden,), dtype),
                )
                args: dict[str, Any] = {"x1": x1, "x2": x2, "gamma": w, "scales1": self.array((hidden,), D.ACL_FLOAT)}
                args |= {"axis": -1, "epsilon": eps, "divMode": False}
                return self.prepared("AddRmsNormQuant", args)

            def torch_fn(dtype: D = dtype) -> Callable[[], object]:
                x1, x2 = self.tensor((rows, hidden), dtype), self.tensor((rows, hidden), dtype)
                w, s = self.tensor((hidden,), dtype), self.tensor((hidden,), D.ACL_FLOAT)

                def run() -> object:
                    x = x1 + x2
                    y = F.rms_norm(x, (hidden,), w, eps).float() * s
                    return x, self.torch.round(y).clamp_(-128, 127).to(self.torch.int8)

                return run

            # read x1, x2; write xOut, y1Out and y2Out (int8)
            nbytes = rows * hidden * (3 * dtype.info.storage_bits // 8 + 2)
            case = Case("AddRmsNormQuant", f"[{rows},{hidden}]", dtype.short, "GB/s", nbytes)
            self.case(case, acl, torch_fn, "AddRmsNormQuant")

    def matmul(self) -> None:
        """Square Matmul in bf16, fp16 and fp32 (fp32 without TF32 unless CANN_FAST_TF32=1)."""
        if not self.wanted("Matmul"):
            return
        size = self.sizes.matmul
        for dtype in (D.ACL_BF16, D.ACL_FLOAT16, D.ACL_FLOAT):
            cube = CUBE_ALLOW_FP32_DOWN_PRECISION if self.tf32 else CUBE_KEEP_DTYPE

            def acl(dtype: D = dtype, cube: int = cube) -> tuple[Callable[[], None], Any]:
                a, b = self.array((size, size), dtype), self.array((size, size), dtype)
                out = empty((size, size), dtype, self.backend)
                return self.prepared("Matmul", {"self": a, "mat2": b, "out": out, "cubeMathType": cube})

            def torch_fn(dtype: D = dtype) -> Callable[[], object]:
                a, b, o = (self.tensor((size, size), dtype) for _ in range(3))
                return lambda: self.torch.matmul(a, b, out=o)

            note = "TF32 allowed on both sides" if self.tf32 and dtype == D.ACL_FLOAT else ""
            case = Case("Matmul", f"{size}^3", dtype.short, "TFLOP/s", 2.0 * size**3, note=note)
            self.case(case, acl, torch_fn, "Matmul")

    def attention(self) -> None:
        """Causal FlashAttentionScore forward (BNSD, sparseMode 3, bf16) vs scaled_dot_product_attention.

        The default row takes the backend's own path choice; each ``forced_attention`` row forces one path
        (rocm's ``ACL_ATTENTION_PATH`` setting, on the runner for the row's duration), its note naming it.
        A forced flash row is followed by one row per alternative block shape the backend lists for its head
        dim (rocm's ``ACL_FLASH_CONFIG``, set the same way), so one run tells which shape is fastest;
        ``ACL_BENCH_FLASH_CONFIGS`` (comma-separated shapes, ``D=shape`` for head dim D only) times those instead
        of the backend's list.
        """
        if not self.wanted("FlashAttentionScore"):
            return
        self._causal_attention(self.sizes.attention, None)
        runner = getattr(self.backend, "attention", None)
        if runner is None or not hasattr(runner, "path_override"):
            return
        flash = getattr(runner, "flash", None)
        for path, shape in self.sizes.forced_attention:
            self._causal_attention(shape, path)
            if path == "flash" and flash is not None and hasattr(flash, "alternatives"):
                for config in _listed_configs(shape[3]) or flash.alternatives(shape[3]):
                    self._causal_attention(shape, path, config)

    def _causal_attention(self, shape: tuple[int, int, int, int], path: str | None, config: str | None = None) -> None:
        """One causal row; ``path`` forced on the runner and, on the flash path, block shape ``config``."""
        b, n, s, d = shape
        dtype = D.ACL_BF16
        runner = getattr(self.backend, "attention", None)
        flash = getattr(runner, "flash", None)

        def acl() -> tuple[Callable[[], None], Any]:
            q, k, v = (self.array((b, n, s, d), dtype) for _ in range(3))
            args: dict[str, Any] = {
                "query": q,
                "key": k,
                "value": v,
                "attenMaskOptional": to_device(compressed_mask(), self.backend),
            }
            args |= {"scaleValue": 1 / math.sqrt(d), "keepProb": 1.0, "preTokens": 2147483647}
            args |= {"nextTokens": 2147483647, "headNum": n, "inputLayout": "BNSD", "innerPrecise": 0}
            args |= {"sparseMode": 3}
            if path is None:
                return self.prepared("FlashAttentionScore", args, skip=("softmaxOutOut",))
            saved = runner.path_override  # type: ignore[union-attr]
            runner.path_override = path  # type: ignore[union-attr]  # the route is chosen at the first launch
            if config is not None:
                flash.use_config(f"{d}={config}")  # type: ignore[union-attr]

            def restore() -> None:
                runner.path_override = saved  # type: ignore[union-attr]
                if config is not None:
                    flash.use_config(None)  # type: ignore[union-attr]

            try:
                launch, free = self.prepared("FlashAttentionScore", args, skip=("softmaxOutOut",))
            except Exception:
                restore()
                raise

            def cleanup() -> None:
                restore()
                free()

            return launch, cleanup

        def torch_fn() -> Callable[[], object]:
            q, k, v = (self.tensor((b, n, s, d), dtype) for _ in range(3))
            sdpa = self.torch.nn.functional.scaled_dot_product_attention
            return lambda: sdpa(q, k, v, is_causal=True)

        flops = 4.0 * b * n * s * s * d / 2  # two GEMMs, half the score matrix under the causal mask
        note = "" if path is None else f"ACL_ATTENTION_PATH={path}: the {path} path forced"
        if config is not None:
            note += f", ACL_FLASH_CONFIG={d}={config}"
        case = Case("FlashAttentionScore causal", f"B{b} N{n} S{s} D{d}", dtype.short, "TFLOP/s", flops, note=note)
        self.case(case, acl, torch_fn, "FlashAttentionScore")
        if path is not None and case.status == "ok" and runner is not None and runner.last_path != path:
            case.status = f"failed: the {runner.last_path} path ran, not {path}"
        ran = getattr(getattr(flash, "last_instance", None), "config", None)
        if path == "flash" and case.status == "ok" and ran is not None:
            if config is None:
                case.note += f" (block shape {ran})"
            elif str(ran) != config:
                case.status = f"failed: block shape {ran} ran, not {config}"

    def attention_sink(self) -> None:
        """FlashAttentionScoreV3 (FlashAttentionScore's row with a per-head sink) vs torch's flash SDPA + its lse.

        torch has no sink argument; its equivalent formulation takes the flash kernel's log-sum-exp and
        scales the output by ``1 / (1 + exp(sink - lse))`` (the sink's share of the denominator).
        """
        if not self.wanted("FlashAttentionScoreV3"):
            return
        b, n, s, d = self.sizes.attention
        dtype = D.ACL_BF16
        sinks = self.rng.uniform(-2, 2, n).astype(np.float32)

        def acl() -> tuple[Callable[[], None], Any]:
            q, k, v = (self.array((b, n, s, d), dtype) for _ in range(3))
            args: dict[str, Any] = {"query": q, "key": k, "value": v}
            args |= {"attenMaskOptional": to_device(compressed_mask(), self.backend)}
            args |= {"sinkOptional": to_device(sinks, self.backend), "scaleValue": 1 / math.sqrt(d)}
            args |= {"keepProb": 1.0, "preTokens": 2147483647, "nextTokens": 2147483647, "headNum": n}
            args |= {"inputLayout": "BNSD", "innerPrecise": 0, "sparseMode": 3, "pseType": 1}
            return self.prepared("FlashAttentionScoreV3", args, skip=("softmaxOutOut",))

        def torch_fn() -> Callable[[], object]:
            q, k, v = (self.tensor((b, n, s, d), dtype) for _ in range(3))
            sink = self.torch.from_numpy(sinks).to(self.device).view(1, n, 1)
            aten = self.torch.ops.aten
            scale = 1 / math.sqrt(d)

            def flash() -> tuple[Any, Any]:  # (out, lse [B,N,S] fp32): the CUDA kernel, or its CPU twin
                if self.device.type == "cuda":
                    return tuple(aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False, scale=scale)[:2])
                return tuple(aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True, scale=scale))

            def run() -> object:
                out, lse = flash()
                return out * self.torch.sigmoid(lse - sink).unsqueeze(-1).to(out.dtype)

            return run

        flops = 4.0 * b * n * s * s * d / 2
        case = Case("FlashAttentionScoreV3 causal+sink", f"B{b} N{n} S{s} D{d}", dtype.short, "TFLOP/s", flops)
        self.case(case, acl, torch_fn, "FlashAttentionScoreV3")

    def attention_grad(self) -> None:
        """Causal FlashAttentionScoreGrad (BNSD, sparseMode 3, bf16) vs the autograd backward of torch's SDPA.

        The backward's saved statistics and output come from one FlashAttentionScore call before the timing;
        torch differentiates one ``scaled_dot_product_attention(is_causal=True)`` (its flash backward on a GPU).
        """
        if not self.wanted("FlashAttentionScoreGrad"):
            return
        b, n, s, d = self.sizes.attention_grad
        dtype = D.ACL_BF16
        attrs: dict[str, Any] = {"scaleValue": 1 / math.sqrt(d), "keepProb": 1.0, "preTokens": 2147483647}
        attrs |= {"nextTokens": 2147483647, "headNum": n, "inputLayout": "BNSD", "innerPrecise": 0, "sparseMode": 3}

        def acl() -> tuple[Callable[[], None], Any]:
            q, k, v, dy = (self.array((b, n, s, d), dtype) for _ in range(4))
            mask = to_device(compressed_mask(), self.backend)
            smax, ssum = (empty((b, n, s, 8), D.ACL_FLOAT, self.backend) for _ in range(2))
            out = empty((b, n, s, d), dtype, self.backend)
            forward = Prepared(
                self.backend, self.stream, "FlashAttentionScore",
                {"query": q, "key": k, "value": v, "attenMaskOptional": mask, "softmaxMaxOut": smax,
                 "softmaxSumOut": ssum, "attentionOutOut": out, **attrs},
                skip=("softmaxOutOut",),
            )  # fmt: skip
            forward()
            self.rt.synchronize_stream(self.stream)
            aclnn.aclDestroyAclOpExecutor(forward.executor)  # its arrays are the backward's, freed with it
            if forward.workspace:
                self.rt.free(forward.workspace)
            args = {"query": q, "keyIn": k, "value": v, "dy": dy, "attenMaskOptional": mask}
            args |= {"softmaxMaxOptional": smax, "softmaxSumOptional": ssum, "attentionInOptional": out, **attrs}
            return self.prepared("FlashAttentionScoreGrad", args, skip=("dpseOut",))

        def torch_fn() -> Callable[[], object]:
            q, k, v = (self.tensor((b, n, s, d), dtype).requires_grad_() for _ in range(3))
            out = self.torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            dy = self.tensor((b, n, s, d), dtype)
            return lambda: self.torch.autograd.grad(out, (q, k, v), dy, retain_graph=True)

        flops = 10.0 * b * n * s * s * d / 2  # five GEMMs (S recomputed, dP, dV, dQ, dK), half under the causal mask
        for setting in self.env_rows("FlashAttentionScoreGrad", dtype):  # the default path, then cuDNN's, then flash
            note = "" if setting is None else f"{setting[0]}={setting[1]}"
            case = Case(
                "FlashAttentionScoreGrad causal", f"B{b} N{n} S{s} D{d}", dtype.short, "TFLOP/s", flops, note=note
            )
            self.case(case, functools.partial(self.with_env, setting, acl), torch_fn, "FlashAttentionScoreGrad")

    def recurrent(self) -> None:
        """RecurrentGatedDeltaRule decode step (one token per sequence, bf16 states of Dv x Dk per value head).

        torch's equivalent: gather the sequences' states, one gated delta-rule step in float32 as batched
        matrix-vector products, scatter the new states back (the same bytes moved as acl's call).
        """
        if not self.wanted("RecurrentGatedDeltaRule"):
            return
        from acl_core.spec.ops.linear_attention import rgdr_case

        batch, nk, nv, d = self.sizes.recurrent
        args = rgdr_case(self.rng, (1,) * batch, nk, nv, d, d, blocks=2 * batch)
        scale = float(args["scaleValue"])

        def acl() -> tuple[Callable[[], None], Any]:
            device = {n: to_device(v, self.backend) if isinstance(v, np.ndarray) else v for n, v in args.items()}
            device["out"] = empty((batch, nv, d), D.ACL_BF16, self.backend)
            return self.prepared("RecurrentGatedDeltaRule", device)

        def torch_fn() -> Callable[[], object]:
            t = self.torch
            dev = {n: t.from_numpy(np.asarray(v).astype(np.float32)).to(self.device) for n, v in args.items()
                   if isinstance(v, np.ndarray)}  # fmt: skip
            state = dev["stateRef"].to(t.bfloat16)
            q, k, v = (dev[n].to(t.bfloat16) for n in ("query", "key", "value"))
            beta, g = dev["beta"].to(t.bfloat16), dev["g"]
            slots = dev["ssmStateIndices"].long()

            def step() -> object:
                s = state[slots].float() * g.exp()[..., None, None]  # [B, Nv, Dv, Dk]
                kk = k.float().repeat_interleave(nv // nk, dim=1)
                qq = q.float().repeat_interleave(nv // nk, dim=1) * scale
                x = (s @ kk[..., None]).squeeze(-1)
                s = s + (beta.float()[..., None] * (v.float() - x))[..., None] * kk[..., None, :]
                state[slots] = s.to(t.bfloat16)
                return (s @ qq[..., None]).squeeze(-1).to(t.bfloat16)

            return step

        nbytes = 2 * batch * nv * d * d * 2  # the states read and written dominate
        case = Case("RecurrentGatedDeltaRule decode", f"B{batch} Nk{nk} Nv{nv} {d}x{d}", "bf16", "GB/s", nbytes)
        self.case(case, acl, torch_fn, "RecurrentGatedDeltaRule")

    def mla(self) -> None:
        """DeepSeek-V3 decode: MlaPrologV2WeightNz (PA_BSND) beside its steps in torch.

        torch's equivalent: the two down-projections, RmsNorm, the up-projection, one batched matmul with
        Wuk over the heads, the interleave-half rotation of q^R and k^R, and index_copy_ of the kv and k^R
        rows into the caches. Decode is bound by the weights read, so the metric is those bytes (bf16).
        """
        if not self.wanted("MlaPrologV2WeightNz"):
            return
        from acl_core.nz import to_device_nz

        tokens, he, hcq, heads, d, dr, hckv, bs = self.sizes.mla
        blocks = -(-tokens // bs) + 3
        dtype = D.ACL_BF16
        slots = self.rng.permutation(blocks * bs)[:tokens].astype(np.int64)
        angles = self.rng.uniform(0, 2 * np.pi, (tokens, dr // 2))
        cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)
        sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)

        def weight(rows: int, cols: int) -> np.ndarray:
            return ((self.rng.random((rows, cols), dtype=np.float32) * 2 - 1) / math.sqrt(rows)).astype(np.float32)

        def acl() -> tuple[Callable[[], None], Any]:
            args: dict[str, Any] = {
                "tokenX": self.array((tokens, he), dtype),
                "weightDq": to_device_nz(weight(he, hcq), self.backend, dtype=dtype),
                "weightUqQr": to_device_nz(weight(hcq, heads * (d + dr)), self.backend, dtype=dtype),
                "weightUk": self.array((heads, d, hckv), dtype),
                "weightDkvKr": to_device_nz(weight(he, hckv + dr), self.backend, dtype=dtype),
                "rmsnormGammaCq": self.array((hcq,), dtype),
                "rmsnormGammaCkv": self.array((hckv,), dtype),
                "ropeSin": to_device(sin, self.backend, dtype=dtype),
                "ropeCos": to_device(cos, self.backend, dtype=dtype),
                "cacheIndex": to_device(slots, self.backend),
                "kvCacheRef": empty((blocks, bs, 1, hckv), dtype, self.backend),
                "krCacheRef": empty((blocks, bs, 1, dr), dtype, self.backend),
                "rmsnormEpsilonCq": 1e-5,
                "rmsnormEpsilonCkv": 1e-5,
                "cacheModeOptional": "PA_BSND",
            }
            return self.prepared("MlaPrologV2WeightNz", args, skip=("dequantScaleQNopeOutOptional",))

        def torch_fn() -> Callable[[], object]:
            t = self.torch
            x = self.tensor((tokens, he), dtype)
            wdq, wuqqr = self.tensor((he, hcq), dtype), self.tensor((hcq, heads * (d + dr)), dtype)
            wuk, wdkvkr = self.tensor((heads, d, hckv), dtype), self.tensor((he, hckv + dr), dtype)
            gq, gkv = self.tensor((hcq,), dtype), self.tensor((hckv,), dtype)
            c, s_ = (t.from_numpy(v).to(self.device, t.bfloat16) for v in (cos, sin))
            kvc = t.empty((blocks * bs, hckv), dtype=t.bfloat16, device=self.device)
            krc = t.empty((blocks * bs, dr), dtype=t.bfloat16, device=self.device)
            idx = t.from_numpy(slots).to(self.device)
            norm = t.nn.functional.rms_norm

            def rope(v: Any, cs: Any, sn: Any) -> Any:
                even, odd = v[..., 0::2], v[..., 1::2]
                return t.cat((even, odd), -1) * cs + t.cat((-odd, even), -1) * sn

            def run() -> object:
                cqn = norm(x @ wdq, (hcq,), gq, 1e-5)
                qcqr = (cqn @ wuqqr).view(tokens, heads, d + dr)
                q = t.bmm(qcqr[..., :d].transpose(0, 1), wuk).transpose(0, 1)
                qr = rope(qcqr[..., d:], c[:, None], s_[:, None])
                ckvkr = x @ wdkvkr
                kvc.index_copy_(0, idx, norm(ckvkr[:, :hckv], (hckv,), gkv, 1e-5))
                krc.index_copy_(0, idx, rope(ckvkr[:, hckv:], c, s_))
                return q, qr

            return run

        nbytes = 2 * (he * hcq + hcq * heads * (d + dr) + heads * d * hckv + he * (hckv + dr))
        label = f"T{tokens} He{he} Hcq{hcq} N{heads} D{d}+{dr} Hckv{hckv}"
        note = "weights bytes read; ours gathers the three NZ weights to ND first"
        case = Case("MlaPrologV2WeightNz decode", label, dtype.short, "GB/s", nbytes, note=note)
        self.case(case, acl, torch_fn, "MlaPrologV2WeightNz")

    def sparse_attention(self) -> None:
        """DeepSeek-V3.2 decode: SparseFlashAttention over ``selected`` keys of a ``context`` cache, and the
        LightningIndexer choosing them (64 index heads of 128, fp32 weights).

        torch's equivalents: gather the selected key rows, then two matmuls around a softmax; the
        indexer as one einsum, ReLU, the weighted head sum and ``topk``.
        """
        tokens, heads, d, dr, context, selected = self.sizes.sparse
        dtype = D.ACL_BF16
        scale = 1 / math.sqrt(d + dr)
        picks = np.stack([self.rng.permutation(context)[:selected] for _ in range(tokens)]).astype(np.int32)
        if self.wanted("SparseFlashAttention"):

            def acl() -> tuple[Callable[[], None], Any]:
                key = self.array((tokens, context, 1, d), dtype)
                args: dict[str, Any] = {"query": self.array((tokens, 1, heads, d), dtype), "key": key, "value": key}
                args |= {"sparseIndices": to_device(picks.reshape(tokens, 1, 1, selected), self.backend)}
                args |= {"queryRope": self.array((tokens, 1, heads, dr), dtype)}
                args |= {"keyRope": self.array((tokens, context, 1, dr), dtype), "scaleValue": scale}
                args |= {"sparseBlockSize": 1, "layoutQuery": "BSND", "layoutKv": "BSND", "sparseMode": 0}
                args |= {"attentionMode": 2, "returnSoftmaxLse": False, "preTokens": 2**63 - 1, "nextTokens": 2**63 - 1}
                return self.prepared("SparseFlashAttention", args, skip=("softmaxMaxOut", "softmaxSumOut"))

            def torch_fn() -> Callable[[], object]:
                q = self.tensor((tokens, heads, d + dr), dtype)
                kv = self.tensor((tokens, context, d + dr), dtype)
                idx = self.torch.from_numpy(picks.astype(np.int64)).to(self.device)

                def run() -> object:
                    chosen = self.torch.gather(kv, 1, idx[..., None].expand(-1, -1, d + dr))  # [T, selected, d+dr]
                    probs = self.torch.softmax((q @ chosen.transpose(1, 2)).float() * scale, dim=-1).to(q.dtype)
                    return probs @ chosen[..., :d]

                return run

            flops = 2.0 * tokens * heads * selected * (2 * d + dr)
            label = f"T{tokens} N{heads} D{d}+{dr} {selected} of {context}"
            for setting in self.env_rows("SparseFlashAttention", dtype):  # the default (gemm) path, then block
                note = "" if setting is None else f"{setting[0]}={setting[1]}"
                case = Case("SparseFlashAttention decode", label, dtype.short, "TFLOP/s", flops, note=note)
                self.case(case, functools.partial(self.with_env, setting, acl), torch_fn, "SparseFlashAttention")
        if self.wanted("LightningIndexer"):
            index_heads, index_d = (64, 128) if heads >= 64 else (heads, d)

            def acl_li() -> tuple[Callable[[], None], Any]:
                args: dict[str, Any] = {"query": self.array((tokens, 1, index_heads, index_d), dtype)}
                args |= {"key": self.array((tokens, context, 1, index_d), dtype)}
                args |= {"weights": self.array((tokens, 1, index_heads), D.ACL_FLOAT)}
                args |= {"layoutQueryOptional": "BSND", "layoutKeyOptional": "BSND", "sparseCount": selected}
                args |= {"sparseMode": 0, "preTokens": 2**63 - 1, "nextTokens": 2**63 - 1, "returnValues": False}
                return self.prepared("LightningIndexer", args, skip=("sparseValuesOut",))

            def torch_li() -> Callable[[], object]:
                q = self.tensor((tokens, index_heads, index_d), dtype)
                k = self.tensor((tokens, context, index_d), dtype)
                w = self.tensor((tokens, index_heads), D.ACL_FLOAT)

                def run() -> object:
                    scores = (self.torch.relu((q @ k.transpose(1, 2)).float()) * w[..., None]).sum(dim=1)
                    return self.torch.topk(scores, selected, dim=-1).indices

                return run

            flops = 2.0 * tokens * index_heads * context * index_d
            label = f"T{tokens} N{index_heads} D{index_d} top {selected} of {context}"
            for setting in self.env_rows("LightningIndexer", dtype):
                note = "" if setting is None else f"{setting[0]}={setting[1]}"
                case = Case("LightningIndexer decode", label, dtype.short, "TFLOP/s", flops, note=note)
                self.case(case, functools.partial(self.with_env, setting, acl_li), torch_li, "LightningIndexer")

    def run(self) -> dict[str, Any]:
        """Every case; returns the ``cases`` list and the copy bandwidth the elementwise cases are set against.

        The C-shaped phase-1 calls run on the process's backend, so it is made this one for the run (and the
        selection is cleared afterwards: a one-shot command's state).
        """
        acl_core.use_backend(self.backend.name)
        self.progress(_line("op", "dtype", "shape", "acl", "torch", "unit", "acl/torch time"))
        try:
            self.host_overhead()
            replay.run_cases(self)
            copy_gbps = self.copy()
            self.elementwise()
            self.activations()
            self.bitwise()
            self.losses()
            class_loss_rows.run_cases(self)  # CrossEntropyLoss over a Qwen3 vocabulary
            self.gathers()
            pooling_rows.run_cases(self)  # AvgPool2d and MaxPool2dWithIndices at a ResNet-like pool
            index_shape_rows.run_cases(self)  # StridedSlice, RepeatInterleave, EmbeddingDenseBackward (issue 16)
            padding_rows.run_cases(self)  # ReflectionPad2d at N32 C256 56x56 pad 3
            select_rows.run_cases(self)  # Nonzero and MaskedSelect over a 64 MiB float32 matrix
            self.random_fills()
            self.foreach()
            self.optimizer()
            moe_rows.run_cases(self)  # MoE routing: permute, gating, init routing, unpermute, dispatch/combine, grads
            self.sampling()
            self.kv_cache()
            norm_rope_rows.run_cases(self)  # QkvRmsNormRopeCache: Qwen3's attention prologue in one call
            self.attention_update()
            self.norms()
            self.norm_quant()
            backward_rows.run_cases(self)  # training backward ops (issue 16): convolution, BatchNorm
            quant_rows.run_cases(self)  # the quantisation ops vllm-ascend reaches (issue 16)
            self.matmul()
            self.attention()
            gemm_variants.run_cases(self)
            self.attention_sink()
            self.attention_grad()
            self.recurrent()
            self.sparse_attention()
            self.mla()
            if self.device.type == "cuda":  # fp8 / int8 / MX GEMMs: a GPU's matrix hardware (issue 6)
                quant_gemm.run_cases(self)
        finally:
            self.rt.destroy_stream(self.stream)
            acl_core.use_backend(None)
        rows = [c.to_json() for c in self.cases]
        for row in rows:
            acl_gbps = row["metric"]["acl"]
            if row["op"] in ("Add", "Mul", "Silu", *ACTIVATIONS, *POINTWISE, *BITWISE) and copy_gbps and acl_gbps:
                row["fraction_of_copy"] = acl_gbps / copy_gbps
        return {"copy_GBps": copy_gbps, "cases": rows}


def _num(value: float | None) -> str:
    """A metric value for the progress line."""
    return f"{value:.3g}" if value is not None else "-"


def _line(op: str, dtype: str, shape: str, acl: str, torch: str, unit: str, ratio: str) -> str:
    """One row of the suite's table (the header row too): both sides' metric in ``unit``, then the time ratio."""
    return f"  {op:<28} {dtype:<9} {shape:<22} {acl:>9} {torch:>9}  {unit:<8} {ratio}"


def _mib(nbytes: int) -> str:
    """A byte count as MiB or KiB."""
    return f"{nbytes / (1 << 20):g} MiB" if nbytes >= 1 << 20 else f"{nbytes / 1024:g} KiB"


def run(
    backend: Backend,
    size: str = "small",
    progress: Callable[[str], None] = print,
    only: set[str] | None = None,
    kernels: bool = False,
    min_time: float | None = None,
    rounds: int | None = None,
) -> dict[str, Any]:
    """Run the ops suite of ``size`` on ``backend`` beside PyTorch; returns the JSON body (no header).

    ``kernels``: each acl row also keeps where its GPU time went (torch.profiler, ``extra.profile``);
    ``min_time`` / ``rounds`` replace the size's timing budget (seconds a round, rounds a side).
    """
    suite = Suite(backend, SIZES[size].timed(min_time, rounds), progress, only, kernels)
    body = suite.run()
    torch = suite.torch
    name = torch.cuda.get_device_name() if suite.device.type == "cuda" else "cpu"
    body["torch"] = {"version": torch.__version__, "device": f"{suite.device.type} ({name})", "tf32": suite.tf32}
    return body
