"""FlashAttentionScoreGrad's cuDNN path above the frontend seam, on a CPU: routing, refusals, the log-sum-exp kernel.

cuDNN cannot run here. A stand-in frontend (:class:`FakeCudnn`) records the graph the path builds (dims, strides,
mask arguments, deselected engines) and executes it in float64 NumPy on the host buffers of the variant pack, with
cuDNN's documented mask rule (``attn_score_modifiers.h``: right bound ``row + shift + R >= col``, left bound
``col + L - shift > row``, ``shift = Skv - Sq`` bottom-right) and its P ``exp(scale·s − lse)``; the log-sum-exp
elementwise kernel runs for real on the kernel emulator, and the refused calls run the composed path there too.
Results are compared with the reference under the op's class, so the strides, the pointers, the statistics and the
mask mapping are all checked end to end.
"""

from __future__ import annotations

import ctypes
import json
import logging
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError
from acl_core.formats import Format
from acl_core.spec.ops import attention as A
from acl_core.spec.ops import attention_grad as G
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.attention import compressed_mask
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.ops.attention_grad import AttentionGradRunner
from acl_rocm.ops.attention_grad_cudnn import (
    DEFAULT_PATH,
    DEFAULT_PLAN,
    DEFAULT_SQUARE,
    PATH_ENV,
    PLAN_ENV,
    PLAN_KIND,
    SQUARE_ENV,
    CudnnSdpaGrad,
    GradMask,
    grad_mask,
    grad_path,
    grad_plan,
    grad_refusal,
    grad_square,
    square_mask,
)
from acl_rocm.ops.cudnn_graphs import TUNE_CALLS
from tests.rocm.against_reference import class_problems
from tests.rocm.fake_cudnn_frontend import FakeFrontend
from tests.rocm.prefill import sentinel_outputs
from tests.rocm.test_attention_cpu import reference as reference
from tests.rocm.test_attention_grad_cpu import _samples
from tests.rocm.test_attention_grad_cpu import emulated as emulated

BIG = 2147483647


# ----------------------------------------------------------------------------- the stand-in frontend
class _Enum:
    def __init__(self, **values: str) -> None:
        self.__dict__.update(values)


class FakeTensor:
    """A graph tensor: its name, dims, strides and dtype (chainable setters as the frontend's)."""

    def __init__(self, name: str, dim: list[int] | None = None, stride: list[int] | None = None, dtype: Any = None):
        self.name, self.dim, self.stride, self.dtype, self.output = name, dim, stride, dtype, False

    def set_output(self, value: bool) -> FakeTensor:
        self.output = value
        return self

    def set_dim(self, dim: list[int]) -> FakeTensor:
        self.dim = list(dim)
        return self

    def set_stride(self, stride: list[int]) -> FakeTensor:
        self.stride = list(stride)
        return self

    def set_data_type(self, dtype: Any) -> FakeTensor:
        self.dtype = dtype
        return self


_NUMPY = {"bf16": np.dtype(ml_dtypes.bfloat16), "half": np.dtype(np.float16), "float": np.dtype(np.float32)}


def _view(t: FakeTensor, address: int) -> np.ndarray:
    """The host array a graph tensor addresses (writable, its strides)."""
    dt = _NUMPY[t.dtype]
    assert t.dim is not None and t.stride is not None
    count = 1 + sum((n - 1) * s for n, s in zip(t.dim, t.stride))
    flat = np.frombuffer((ctypes.c_char * (count * dt.itemsize)).from_address(address), dtype=dt)
    strides = tuple(s * dt.itemsize for s in t.stride)
    return np.lib.stride_tricks.as_strided(flat, shape=tuple(t.dim), strides=strides)


class FakeGraph:
    """Records what the path builds; ``execute`` computes cuDNN's SDPA backward in float64 on the pack's buffers."""

    def __init__(self, module: FakeCudnn, io: str) -> None:
        self.module, self.io = module, io
        self.tensors: dict[str, FakeTensor] = {}
        self.options: dict[str, Any] = {}
        self.deselected: list[str] = []
        self.selected_engine = None
        self.policy: Any = None

    def tensor(self, name: str, dim: list[int], stride: list[int], data_type: Any) -> FakeTensor:
        self.tensors[name] = FakeTensor(name, list(dim), list(stride), data_type)
        return self.tensors[name]

    def sdpa_backward(self, q: Any, k: Any, v: Any, o: Any, do: Any, stats: Any, **options: Any) -> list[FakeTensor]:
        if self.module.refuse:
            raise RuntimeError(f"cudnnGraphNotSupportedError: {self.module.refuse}")
        self.options = options
        outs = [FakeTensor(n) for n in ("dQ", "dK", "dV")]
        self.tensors.update({t.name: t for t in outs})
        return outs

    def validate(self) -> None: ...
    def build_operation_graph(self) -> None: ...
    def create_execution_plans(self, modes: list[Any]) -> None: ...
    def check_support(self) -> None: ...

    def build_plans(self, policy: Any = None) -> None:
        self.policy = policy

    def get_execution_plan_count(self) -> int:
        return self.module.plan_count

    def get_workspace_size_plan_at_index(self, index: int) -> int:
        return 256 + index

    def get_plan_name_at_index(self, index: int) -> str:
        return f"eng{index}"

    def execute_plan_at_index(self, pack: dict[Any, int], workspace: int, index: int, handle: Any = None) -> None:
        if index == self.module.broken_plan:
            raise RuntimeError("cudnnBackendExecute: CUDNN_STATUS_EXECUTION_FAILED")
        self.module.plan_runs[index] = self.module.plan_runs.get(index, 0) + 1
        self.module.last_plan = index
        self.execute(pack, workspace, handle)

    def deselect_engines(self, names: list[str]) -> None:
        self.deselected = list(names)

    def get_workspace_size(self) -> int:
        return 256

    def execute(self, pack: dict[Any, int], workspace: int, handle: Any = None) -> None:
        assert workspace and len(pack) == 9
        self.module.executed += 1
        a = {t.name: _view(t, address).astype(np.float64) for t, address in pack.items() if not t.output}
        q, k, v, o, do, lse = a["q"], a["k"], a["v"], a["o"], a["dO"], a["stats"]
        group = q.shape[1] // k.shape[1]
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        sq, skv = q.shape[2], k.shape[2]
        keep = self._keep(sq, skv)
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.where(keep, np.exp(self.options["attn_scale"] * (q @ k.swapaxes(-1, -2)) - lse), 0.0)
        dp = do @ v.swapaxes(-1, -2)
        ds = p * (dp - (do * o).sum(-1, keepdims=True))
        if self.module.rounds:  # cuDNN's numerics: P and dS in the io type before the second products
            p, ds = (x.astype(_NUMPY[self.io]).astype(np.float64) for x in (p, ds))
        scale = self.options["attn_scale"]
        grads = {"dQ": scale * ds @ k, "dK": scale * ds.swapaxes(-1, -2) @ q, "dV": p.swapaxes(-1, -2) @ do}
        for name in ("dK", "dV"):
            b, n, s, d = grads[name].shape
            grads[name] = grads[name].reshape(b, n // group, group, s, d).sum(axis=2)
        for t, address in pack.items():
            if t.output:
                _view(t, address)[...] = grads[t.name].astype(_NUMPY[t.dtype])

    def _keep(self, sq: int, skv: int) -> np.ndarray:
        """cuDNN's mask from the recorded arguments (``attn_score_modifiers.h``'s comparisons)."""
        row, col = np.arange(sq)[:, None], np.arange(skv)[None, :]
        opts = self.options
        keep = np.ones((sq, skv), bool)
        if opts.get("use_causal_mask"):
            keep &= row >= col
        if opts.get("use_causal_mask_bottom_right"):
            keep &= row + (skv - sq) >= col
        if opts.get("diagonal_alignment") is not None:
            assert opts["diagonal_alignment"] == "BOTTOM_RIGHT"
            if opts.get("diagonal_band_right_bound") is not None:
                keep &= row + (skv - sq) + opts["diagonal_band_right_bound"] >= col
            if opts.get("diagonal_band_left_bound") is not None:
                keep &= col + opts["diagonal_band_left_bound"] - (skv - sq) > row
        return keep


class FakeCudnn(FakeFrontend):
    """The frontend module surface the backward's cuDNN path uses."""

    data_type = _Enum(BFLOAT16="bf16", HALF="half", FLOAT="float")
    build_plan_policy = _Enum(ALL="ALL", HEURISTICS_CHOICE="HEURISTICS_CHOICE")
    diagonal_alignment = _Enum(BOTTOM_RIGHT="BOTTOM_RIGHT", TOP_LEFT="TOP_LEFT")

    def __init__(self) -> None:
        super().__init__()
        self.graphs: list[FakeGraph] = []
        self.executed = 0
        self.refuse = ""
        self.rounds = False
        self.plan_count, self.broken_plan, self.last_plan = 3, -1, -1
        self.plan_runs: dict[int, int] = {}
        """Round P and dS to the io type before the second products, as cuDNN does (float64 throughout if not)."""

    def pygraph(self, io_data_type: Any = None, handle: Any = None, **_: Any) -> FakeGraph:
        self.graphs.append(FakeGraph(self, io_data_type))
        return self.graphs[-1]


@pytest.fixture
def cudnn_on(emulated, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, AttentionGradRunner, FakeCudnn]:
    """The emulated backend with ``ACL_ATTENTION_GRAD_PATH=cudnn`` and the stand-in frontend loaded."""
    backend, _ = emulated
    runner = backend.attention_grad
    module = FakeCudnn()
    monkeypatch.setattr(runner, "cudnn", CudnnSdpaGrad(backend, loader=lambda: module))
    monkeypatch.setattr(backend, "environ", {**backend.environ, PATH_ENV: "cudnn"})
    return backend, runner, module


def _lowp(args: dict[str, Any], dtype: Any = ml_dtypes.bfloat16) -> dict[str, Any]:
    """A float32 sample's tensors (not its statistics) as ``dtype``."""
    out = dict(args)
    for name in ("query", "keyIn", "value", "dy", "attentionInOptional"):
        out[name] = np.asarray(args[name]).astype(dtype)
    return out


def _compare(backend: Backend, reference: Backend, op: str, args: dict[str, Any], note: str, layout: str) -> None:
    """rocm's outputs under the op's class; the outputs given (sentinel-filled, in ``layout``) as a caller's are."""
    expected = eager.run(op, reference, op_args=dict(args))
    given = {**args, **sentinel_outputs(op, args, expected)}
    actual = eager.run(op, backend, layout=layout, op_args=given)
    problems = class_problems(op, args, {n: actual[n] for n in expected}, expected)
    assert not problems, f"{op} [{note}] layout={layout}: " + "; ".join(p.message for p in problems)


def _paths(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "acl_rocm.attention_grad"]


# ----------------------------------------------------------------------------- routing end to end
def test_half_samples_take_cudnn_and_match_the_reference(cudnn_on, reference: Backend, caplog) -> None:
    backend, runner, module = cudnn_on
    picks = (6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 25, 29)  # every layout, GQA, fp16 causal (MQA has D 4)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
        for note, args in _samples("FlashAttentionScoreGrad", picks):
            _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
            assert runner.last_path == "cudnn", note
    assert module.executed == len(picks) and all(g.deselected == ["sdpa_bwd"] for g in module.graphs)
    lines = _paths(caplog)
    assert len(lines) == len(picks) and all("cudnn path (cuDNN 9.19.0" in line for line in lines)


def test_cudnn_numerics_pass_every_half_sample_under_the_class(cudnn_on, reference: Backend) -> None:
    """With P and dS rounded to the io type (what cuDNN does), every fp16/bf16 sample the path takes is inside
    the op's 16-bit class: the CPU stand-in of the GPU's test_every_sample_under_the_cudnn_path."""
    backend, runner, module = cudnn_on
    module.rounds = True
    spec_samples = list(get_spec("FlashAttentionScoreGrad").samples(np.random.default_rng(2026)))  # type: ignore[misc]
    ran = 0
    for sample in spec_samples:
        args = dict(sample.args)
        if np.asarray(args["query"]).dtype == np.float32:
            continue
        runner.last_path = None
        _compare(backend, reference, "FlashAttentionScoreGrad", args, sample.note, "contiguous")
        ran += runner.last_path == "cudnn"
    assert ran >= 10 and module.executed == ran


def test_tuned_plans_are_timed_on_the_first_call_and_the_fastest_kept(
    cudnn_on, reference: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, runner, module = cudnn_on
    monkeypatch.setattr(backend, "environ", {**backend.environ, PLAN_ENV: "tune"})
    module.broken_plan = 2  # a plan that cannot run these operands is skipped
    per_call = {0: 2.0, 1: 0.7}
    monkeypatch.setattr(backend.provider, "event_elapsed_ms", lambda s, e: per_call[module.last_plan] * TUNE_CALLS)
    note, args = _samples("FlashAttentionScoreGrad", (6,))[0]
    for _ in range(2):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
        assert runner.last_path == "cudnn"
    (graph,) = module.graphs
    assert graph.policy == "ALL" and graph.deselected == ["sdpa_bwd"]
    (built,) = runner.cudnn._graphs.values()
    assert built.plans == 3 and built.index == 1 and built.workspace == 258
    # each plan once untimed then TUNE_CALLS timed; plan 1 then ran the first call's own execution and the second's
    assert module.plan_runs == {0: 1 + TUNE_CALLS, 1: 1 + TUNE_CALLS + 2}


def test_the_default_plan_is_the_heuristics_first(cudnn_on, reference: Backend) -> None:
    backend, _, module = cudnn_on
    note, args = _samples("FlashAttentionScoreGrad", (6,))[0]
    _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    assert module.graphs[0].policy is None and module.plan_runs == {}
    assert grad_plan({}) == DEFAULT_PLAN == "heuristic" and grad_plan({PLAN_ENV: " Tune-All "}) == "tune-all"
    with pytest.raises(AclError):
        grad_plan({PLAN_ENV: "fastest"})


def test_square_bottom_right_causal_may_go_as_top_left(
    cudnn_on, reference: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, runner, module = cudnn_on
    monkeypatch.setattr(backend, "environ", {**backend.environ, SQUARE_ENV: "top-left"})
    rng, causal = np.random.default_rng(4), {"attenMaskOptional": compressed_mask(), "sparseMode": 3}
    for sq, skv in ((6, 6), (5, 8)):
        fwd = A._fa_case(rng, D.ACL_BF16, "BNSD", 1, 2, 2, sq, skv, 8, **causal)
        _compare(backend, reference, "FlashAttentionScoreGrad", G.grad_case(rng, fwd), f"{sq}x{skv}", "contiguous")
        assert runner.last_path == "cudnn"
    square, other = module.graphs
    masks = [{k: v for k, v in g.options.items() if "causal" in k} for g in (square, other)]
    assert masks == [{"use_causal_mask": True}, {"use_causal_mask_bottom_right": True}]  # the same keys where Sq = Skv
    assert grad_square({}) == DEFAULT_SQUARE == "top-left"
    assert square_mask(GradMask("bottom_right"), 4, 4, "bottom-right") == GradMask("bottom_right")


def test_sparse_modes_map_onto_cudnn_masks(cudnn_on, reference: Backend) -> None:
    backend, runner, module = cudnn_on
    samples = dict(_samples("FlashAttentionScoreGrad", (21, 22)))  # sparse 2 / 3, Sq=5 Skv=8, BSH
    for note, args in samples.items():
        _compare(backend, reference, "FlashAttentionScoreGrad", _lowp(args), note, "contiguous")
        assert runner.last_path == "cudnn", note
    assert module.graphs[0].options.get("use_causal_mask") is True
    assert module.graphs[1].options.get("use_causal_mask_bottom_right") is True
    rng = np.random.default_rng(7)
    band = dict(next(iter(samples.values())))
    band |= {"sparseMode": 4, "preTokens": 2, "nextTokens": 1}
    band["keyIn"], band["value"] = (rng.uniform(-1, 1, (1, 9, 16)).astype(np.float32) for _ in range(2))
    band["attenMaskOptional"] = compressed_mask()
    fwd = {n: band[n] for n in ("query", "value", "scaleValue", "headNum", "inputLayout", "sparseMode")}
    fwd |= {"key": band["keyIn"], "attenMaskOptional": band["attenMaskOptional"], "preTokens": 2, "nextTokens": 1}
    saved = eager.run("FlashAttentionScore", reference, **fwd)
    band |= {"softmaxMaxOptional": saved["softmaxMaxOut"], "softmaxSumOptional": saved["softmaxSumOut"]}
    band["attentionInOptional"] = saved["attentionOutOut"]
    _compare(backend, reference, "FlashAttentionScoreGrad", _lowp(band), "sparse 4 band Sq=5 Skv=9", "contiguous")
    assert runner.last_path == "cudnn"
    options = module.graphs[-1].options
    assert options["diagonal_alignment"] == "BOTTOM_RIGHT"
    assert options["diagonal_band_left_bound"] == 3 and options["diagonal_band_right_bound"] == 1


def test_a_row_that_kept_nothing_gets_zero_gradients(cudnn_on, reference: Backend) -> None:
    backend, runner, _ = cudnn_on
    for note, args in _samples("FlashAttentionScoreGrad", (28,)):  # max -inf and sum 0: the log-sum-exp is +inf
        _compare(backend, reference, "FlashAttentionScoreGrad", _lowp(args), note, "contiguous")
        assert runner.last_path == "cudnn"


def test_calls_cudnn_cannot_take_run_the_composed_path_with_the_reason(cudnn_on, reference: Backend, caplog) -> None:
    backend, runner, module = cudnn_on
    cases = [
        (0, None, "float32 inputs"),
        (18, ml_dtypes.bfloat16, "sparseMode 0 with a mask"),
        (23, ml_dtypes.bfloat16, "Sq > Skv"),
        (24, ml_dtypes.bfloat16, "first rows keep no key"),
        (26, np.float16, "a pse"),
    ]
    for pick, dtype, reason in cases:
        [(note, args)] = _samples("FlashAttentionScoreGrad", (pick,))
        if dtype is not None:
            args = _lowp(args, dtype)
            if args.get("pseShiftOptional") is not None:
                args["pseShiftOptional"] = args["pseShiftOptional"].astype(dtype)
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
            _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
        assert runner.last_path == "blas", note
        [line] = _paths(caplog)
        assert "blas path (cuDNN: " in line and reason in line, line
    [(note, args)] = _samples("FlashAttentionScoreGrad", (14,))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "padded")  # rows 8 apart no longer
    assert runner.last_path == "blas" and "strides" in _paths(caplog)[0]
    module.refuse = "head dim"
    runner.cudnn._graphs.clear()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    assert (
        runner.last_path == "blas"
        and "cuDNN refused the graph (RuntimeError: cudnnGraphNotSupportedError: head dim" in (_paths(caplog)[0])
    )
    assert module.executed == 0


def test_the_default_path_is_cudnn_and_blas_never_loads_it(emulated, reference: Backend, caplog, monkeypatch) -> None:
    backend, _ = emulated
    runner = backend.attention_grad
    module = FakeCudnn()
    monkeypatch.setattr(runner, "cudnn", CudnnSdpaGrad(backend, loader=lambda: module))
    monkeypatch.setattr(backend, "environ", {k: v for k, v in backend.environ.items() if k != PATH_ENV})
    [(note, args)] = _samples("FlashAttentionScoreGrad", (16,))
    _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    assert DEFAULT_PATH == "cudnn" and runner.last_path == "cudnn" and module.executed == 1
    loads: list[int] = []
    monkeypatch.setattr(runner, "cudnn", CudnnSdpaGrad(backend, loader=lambda: loads.append(1)))
    monkeypatch.setattr(backend, "environ", {**backend.environ, PATH_ENV: "blas"})
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    assert runner.last_path == "blas" and not loads
    assert f"blas path ({PATH_ENV}=blas)" in _paths(caplog)[0]
    monkeypatch.setattr(backend, "environ", {**backend.environ, PATH_ENV: "fused"})
    with pytest.raises(AclError, match="ACL_ATTENTION_GRAD_PATH='fused'"):
        eager.run("FlashAttentionScoreGrad", backend, **args)


def test_without_cudnn_the_default_takes_the_flash_kernels(
    emulated, reference: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On AMD (no cuDNN) the default path runs the portable fused kernels where they fit, the composed path else."""
    backend, _ = emulated
    runner = backend.attention_grad
    monkeypatch.setattr(backend.provider, "platform", "amd")
    monkeypatch.setattr(backend, "environ", {k: v for k, v in backend.environ.items() if k != PATH_ENV})
    rng = np.random.default_rng(12)
    fwd = A._fa_case(rng, D.ACL_BF16, "BNSD", 1, 2, 2, 24, 40, 32, attenMaskOptional=compressed_mask(), sparseMode=3)
    _compare(backend, reference, "FlashAttentionScoreGrad", G.grad_case(rng, fwd), "bf16 causal D32", "contiguous")
    assert runner.last_path == "flash"
    fwd = A._fa_case(rng, D.ACL_FLOAT, "BNSD", 1, 2, 2, 24, 40, 32)
    _compare(backend, reference, "FlashAttentionScoreGrad", G.grad_case(rng, fwd), "float32 D32", "contiguous")
    assert runner.last_path == "blas"


def test_cudnn_is_nvidia_only(cudnn_on, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, _, _ = cudnn_on
    monkeypatch.setattr(backend.provider, "platform", "amd")
    assert "NVIDIA-only" in str(CudnnSdpaGrad(backend, loader=lambda: FakeCudnn()).refusal())


def test_graphs_are_cached_per_signature_and_counted_as_made(cudnn_on, reference: Backend) -> None:
    backend, runner, module = cudnn_on
    [(note, args)] = _samples("FlashAttentionScoreGrad", (16,))
    for _ in range(2):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    assert len(module.graphs) == 1 and module.executed == 2
    graph = module.graphs[0]
    q = graph.tensors["q"]
    assert q.dim == [1, 4, 6, 8] and q.stride == [192, 8, 32, 1]  # BSND [1, 6, 4, 8] read as BNSD
    assert graph.tensors["k"].dim == [1, 2, 6, 8] and graph.tensors["stats"].stride == [24, 6, 1, 1]
    assert graph.tensors["dK"].dim == [1, 2, 6, 8] and graph.tensors["dK"].stride == [96, 8, 16, 1]
    assert graph.options["attn_scale"] == args["scaleValue"] and graph.io == "bf16"
    assert backend.plans.stats.made.get(PLAN_KIND, 0) >= 1
    [key] = list(runner.cudnn._graphs)
    fields = runner.cudnn._plan_fields(key)  # a stored plan's key: plain JSON (the mask as a mapping)
    assert json.loads(json.dumps(fields))["graph"]["mask"] == {"kind": "none", "left": None, "right": None}
    assert fields["graph"]["dq"] == [192, 8, 32, 1] and fields["cudnn"] == "91900"


# ----------------------------------------------------------------------------- pure rules
def test_grad_path_reads_the_switch() -> None:
    assert grad_path({}) == "cudnn" and grad_path({PATH_ENV: " BLAS "}) == "blas"
    with pytest.raises(AclError):
        grad_path({PATH_ENV: "kernel"})


def test_grad_mask_maps_sparse_modes_onto_cudnn_bounds() -> None:
    assert grad_mask(3, False, 8, 5, BIG, BIG) == GradMask("none")  # no mask tensor: nothing masked
    assert grad_mask(2, True, 8, 5, BIG, BIG) == GradMask("top_left")
    assert grad_mask(3, True, 5, 8, BIG, BIG) == GradMask("bottom_right")
    assert "Sq > Skv" in str(grad_mask(3, True, 8, 5, BIG, BIG))
    assert grad_mask(4, True, 5, 9, 2, 1) == GradMask("band", 3, 1)
    assert grad_mask(4, True, 5, 9, BIG, 0) == GradMask("band", None, 0)
    assert grad_mask(4, True, 5, 9, 0, BIG) == GradMask("band", 1, None)
    assert "at least 0" in str(grad_mask(4, True, 5, 9, -1, 3))
    assert "keep no key" in str(grad_mask(4, True, 9, 7, 2, 1))
    assert grad_mask(4, True, 9, 7, 2, 2) == GradMask("band", 3, 2)
    for mode in (0, 1):
        assert "takes no mask tensor" in str(grad_mask(mode, True, 5, 5, BIG, BIG))


def _tensor(shape: tuple[int, ...], dtype: D = D.ACL_BF16, address: int = 1 << 20, **kw: Any) -> AclTensor:
    strides = kw.get("strides", contiguous_strides(shape))
    return AclTensor(shape, dtype, strides, kw.get("offset", 0), Format.ACL_FORMAT_ND, shape, address)


def test_grad_refusal_keeps_the_forwards_rules() -> None:
    q = _tensor((1, 2, 64, 64))
    roles = ("q", "k", "v", "o", "do", "dq", "dk", "dv")
    ok = {r: q for r in roles}
    dims = (1, 2, 2, 64, 64, 64)
    none = GradMask("none")
    assert grad_refusal(ok, "BNSD", dims, none, False, False) is None
    assert grad_refusal(ok, "BNSD", dims, "why not", False, False) == "why not"
    f32 = {r: _tensor((1, 2, 64, 64), D.ACL_FLOAT) for r in roles}
    assert "float32" in str(grad_refusal(f32, "BNSD", dims, "why not", False, False))  # the dtype is said first
    assert "pse" in str(grad_refusal(ok, "BNSD", dims, none, True, False))
    assert "sink" in str(grad_refusal(ok, "BNSD", dims, none, False, True))
    assert "empty" in str(grad_refusal(ok, "BNSD", (1, 2, 2, 0, 64, 64), none, False, False))
    odd = {**ok, "dk": _tensor((1, 2, 64, 64), offset=1)}
    assert "dkOut is not 16-byte aligned" in str(grad_refusal(odd, "BNSD", dims, none, False, False))
    wide = {**ok, "do": _tensor((1, 2, 64, 64), strides=(8192, 4096, 68, 1))}
    assert "dy strides" in str(grad_refusal(wide, "BNSD", dims, none, False, False))
    d12 = {r: _tensor((1, 2, 64, 12)) for r in roles}
    assert "head dim 12" in str(grad_refusal(d12, "BNSD", (1, 2, 2, 64, 64, 12), none, False, False))


# ----------------------------------------------------------------------------- the log-sum-exp kernel
def test_log_sum_exp_kernel_on_the_emulator(emulated) -> None:
    backend, provider = emulated
    b, n, s = 2, 3, 5
    rng = np.random.default_rng(3)
    smax = np.full((b, n, s, 16), np.nan, np.float32)  # every other column: a view with strides (240, 80, 16, 2)
    ssum = np.repeat(rng.uniform(0.5, 9.0, (b, n, s, 1)), 8, axis=-1).astype(np.float32)
    smax[..., ::2] = rng.uniform(-4, 4, (b, n, s, 1))
    smax[0, 1, 2, ::2], ssum[0, 1, 2] = -np.inf, 0.0  # nothing kept: +inf
    smax[1, 2, 4, ::2] = -np.inf  # a non-finite max counts as 0
    ssum[1, 0, 3] = -1.0  # not positive: +inf
    views = {
        "smax": AclTensor((b, n, s, 8), D.ACL_FLOAT, (240, 80, 16, 2), 0, Format.ACL_FORMAT_ND, smax.shape,
                          smax.ctypes.data),
        "ssum": AclTensor((b, n, s, 8), D.ACL_FLOAT, contiguous_strides(ssum.shape), 0, Format.ACL_FORMAT_ND,
                          ssum.shape, ssum.ctypes.data),
    }  # fmt: skip
    out = np.zeros((b, n, s, 1), np.float32)
    CudnnSdpaGrad(backend).lse(views["smax"], views["ssum"], out.ctypes.data, 0)
    provider.synchronize_stream(0) if hasattr(provider, "synchronize_stream") else None
    m = smax[..., :1].astype(np.float64)
    want = np.where(np.isfinite(m), m, 0.0) + np.log(np.where(ssum[..., :1] > 0, ssum[..., :1], 1.0))
    want = np.where(ssum[..., :1] > 0, want, np.inf)
    np.testing.assert_allclose(out, want.astype(np.float32), rtol=2e-7)
    assert np.isposinf(out[0, 1, 2, 0]) and np.isposinf(out[1, 0, 3, 0]) and np.isfinite(out[1, 2, 4, 0])
