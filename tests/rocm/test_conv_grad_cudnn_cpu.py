"""ConvolutionBackward's cuDNN path above the provider seam, on a CPU: routing, eligibility, refusals, graph keys.

cuDNN cannot run here: :class:`FakeCudnn` stands in for the frontend module, records how each graph is
built (node, geometry, tensor dims and strides, deselected notes) and executes it in float64 NumPy on the
host memory the fake provider hands out, so the role and geometry mapping of every gradient (dgrad, wgrad,
a transposed call's fprop) is checked end to end against the reference backend. The GEMM path and gradBias's
row sum run on the kernel emulator as in test_conv_grad_cpu.py.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import logging
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, RtErrorCode
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.ops.conv_grad_cudnn import EXACT_NOTES, TF32_NOTES, ConvKey, CudnnConv, cudnn_refusal
from tests.rocm.fake_cudnn_frontend import FakeFrontend
from tests.rocm.test_convolution_cpu import emulated  # noqa: F401 - the fixture
from tests.rocm.test_gpu_conv_grad import compare, grad_args
from tests.rocm.test_gpu_conv_grad_cudnn import CASES, DTYPES, case_id, spec_args

NP = {"BFLOAT16": np.dtype(ml_dtypes.bfloat16), "HALF": np.dtype(np.float16), "FLOAT": np.dtype(np.float32)}
Dims = tuple[int, ...]
NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "FFT", "WINOGRAD", "NONDETERMINISTIC")


class FakeTensor:
    """A graph tensor: dims, strides, dtype name and the node that makes it."""

    uids = itertools.count(1)

    def __init__(self, dim: list[int], stride: list[int], data_type: str) -> None:
        self.dim, self.stride, self.data_type, self.uid = dim, stride, data_type, next(self.uids)
        self.output = False

    def set_output(self, value: bool) -> FakeTensor:
        self.output = value
        return self

    def set_dim(self, dim: list[int]) -> FakeTensor:
        self.dim = dim
        return self

    def set_stride(self, stride: list[int]) -> FakeTensor:
        self.stride = stride
        return self

    def set_data_type(self, data_type: str) -> FakeTensor:
        self.data_type = data_type
        return self


class FakeGraph:
    """One convolution node; ``execute`` computes it in float64 from the variant pack's host addresses."""

    def __init__(self, module: FakeCudnn, io: str) -> None:
        self.module, self.io = module, io
        self.node: tuple[str, FakeTensor, FakeTensor, FakeTensor, dict[str, Any]] | None = None
        self.notes: list[str] = []
        self.engines: list[str] = []
        self.selected_engine = None

    def tensor(self, name: str, dim: list[int], stride: list[int], data_type: str) -> FakeTensor:
        return FakeTensor(dim, stride, data_type)

    def _node(self, op: str, a: FakeTensor, b: FakeTensor, geometry: dict[str, Any]) -> FakeTensor:
        if op in self.module.unsupported:
            raise RuntimeError(f"cudnnGraphNotSupportedError: no engine for {op}")
        out = FakeTensor([], [], self.io)
        self.node = (op, a, b, out, geometry)
        return out

    def conv_dgrad(self, loss: FakeTensor, filter: FakeTensor, **geometry: Any) -> FakeTensor:
        return self._node("dgrad", loss, filter, geometry)

    def conv_wgrad(self, image: FakeTensor, loss: FakeTensor, **geometry: Any) -> FakeTensor:
        return self._node("wgrad", image, loss, geometry)

    def conv_fprop(self, image: FakeTensor, weight: FakeTensor, **geometry: Any) -> FakeTensor:
        return self._node("fprop", image, weight, geometry)

    def validate(self) -> None:
        assert self.node is not None and self.node[3].output

    def build_operation_graph(self) -> None:
        pass

    def create_execution_plans(self, modes: list[str]) -> None:
        assert modes == ["A", "FALLBACK"]

    def deselect_engines(self, names: list[str]) -> None:
        self.engines += names

    def deselect_numeric_notes(self, notes: list[str]) -> None:
        self.notes += notes

    def check_support(self) -> None:
        pass

    def build_plans(self) -> None:
        self.module.built.append(self)

    def get_workspace_size(self) -> int:
        return 64

    def execute(self, pack: dict[Any, int], workspace: int, handle: Any = None) -> None:
        assert self.node is not None and workspace
        op, a, b, out, geometry = self.node
        va, vb, vo = (_view(pack[t], t, NP[self.io]) for t in (a, b, out))
        fa, fb = va.astype(np.float64), vb.astype(np.float64)
        pre, stride, dilation = geometry["pre_padding"], geometry["stride"], geometry["dilation"]
        if op == "fprop":
            result = _fprop(fa, fb, vo.shape, pre, stride, dilation)
        elif op == "dgrad":
            result = _dgrad(fa, fb, vo.shape, pre, stride, dilation)
        else:
            result = _wgrad(fa, fb, vo.shape, pre, stride, dilation)
        vo[...] = result.astype(NP[self.io])
        self.module.executed.append(op)


class FakeCudnn(FakeFrontend):
    """The frontend module surface the convolution path uses."""

    data_type = SimpleNamespace(BFLOAT16="BFLOAT16", HALF="HALF", FLOAT="FLOAT")
    numerical_note = SimpleNamespace(**{n: n for n in NOTES})  # the WINOGRAD_TILE_* notes absent: skipped

    def __init__(self) -> None:
        super().__init__()
        self.built: list[FakeGraph] = []
        self.executed: list[str] = []
        self.unsupported: set[str] = set()

    def pygraph(self, io_data_type: str, intermediate_data_type: str, compute_data_type: str, handle: Any) -> FakeGraph:
        assert intermediate_data_type == compute_data_type == "FLOAT"
        return FakeGraph(self, io_data_type)


def _view(address: int, t: FakeTensor, dtype: np.dtype) -> np.ndarray:
    span = sum((d - 1) * s for d, s in zip(t.dim, t.stride)) + 1
    base = np.frombuffer((ctypes.c_char * (span * dtype.itemsize)).from_address(address), dtype)
    return np.lib.stride_tricks.as_strided(base, t.dim, [s * dtype.itemsize for s in t.stride])


def _taps(src: Dims, dst: Dims, kernel: Dims, pre: list[int], stride: list[int], dil: list[int]) -> Any:
    """(kernel offset, source indices, destination indices) per tap: dst position o reads src o*stride - pre + k*dil."""
    for off in itertools.product(*map(range, kernel)):
        idx = [np.arange(o) * s - p + f * d for o, s, p, f, d in zip(dst, stride, pre, off, dil)]
        keep = [(i >= 0) & (i < n) for i, n in zip(idx, src)]
        yield off, np.ix_(*(i[k] for i, k in zip(idx, keep))), np.ix_(*(np.nonzero(k)[0] for k in keep))


def _grouped(x: np.ndarray, groups: int) -> np.ndarray:
    return x.reshape(x.shape[0], groups, x.shape[1] // groups, *x.shape[2:])


ALL = (slice(None),) * 3


def _fprop(x: np.ndarray, w: np.ndarray, shape: tuple[int, ...], *geometry: Any) -> np.ndarray:
    groups = x.shape[1] // w.shape[1]
    xg, wg = _grouped(x, groups), w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    y = np.zeros((shape[0], groups, shape[1] // groups, *shape[2:]))
    for off, src, dst in _taps(x.shape[2:], shape[2:], w.shape[2:], *geometry):
        y[ALL + dst] += np.einsum("ngc...,gkc->ngk...", xg[ALL + src], wg[ALL + off])
    return y.reshape(shape)


def _dgrad(dy: np.ndarray, w: np.ndarray, shape: tuple[int, ...], *geometry: Any) -> np.ndarray:
    groups = shape[1] // w.shape[1]
    dyg, wg = _grouped(dy, groups), w.reshape(groups, w.shape[0] // groups, *w.shape[1:])
    dx = np.zeros((shape[0], groups, shape[1] // groups, *shape[2:]))
    for off, src, dst in _taps(shape[2:], dy.shape[2:], w.shape[2:], *geometry):
        dx[ALL + src] += np.einsum("ngk...,gkc->ngc...", dyg[ALL + dst], wg[ALL + off])
    return dx.reshape(shape)


def _wgrad(x: np.ndarray, dy: np.ndarray, shape: tuple[int, ...], *geometry: Any) -> np.ndarray:
    groups = x.shape[1] // shape[1]
    xg, dyg = _grouped(x, groups), _grouped(dy, groups)
    dw = np.zeros((groups, shape[0] // groups, *shape[1:]))
    for off, src, dst in _taps(x.shape[2:], dy.shape[2:], shape[2:], *geometry):
        dyp, xp = (v.reshape(*v.shape[:3], -1) for v in (dyg[ALL + dst], xg[ALL + src]))
        dw[ALL + off] = np.einsum("ngkp,ngcp->gkc", dyp, xp)
    return dw.reshape(shape)


@pytest.fixture
def faked(emulated):  # noqa: F811
    """The emulated backend with the fake frontend loaded and the cuDNN path asked for."""
    backend, _ = emulated
    module = FakeCudnn()
    runner = backend.conv_grad  # type: ignore[attr-defined]
    runner.cudnn = CudnnConv(backend, loader=lambda: module)
    runner.path_override = "cudnn"
    return backend, runner, module


# ----------------------------------------------------------------------------- eligibility
def _t(shape: Dims, dtype: D = D.ACL_BF16, strides: Dims | None = None, at: int = 1 << 20) -> AclTensor:
    return AclTensor(shape, dtype, strides or contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, at)


def test_cudnn_takes_only_calls_it_computes_under_the_contract() -> None:
    x, w, dy = _t((2, 4, 6, 6)), _t((8, 4, 3, 3)), _t((2, 8, 6, 6))

    def why(precision: str | None = None, transposed: bool = False, out_pad: Dims = (0, 0), **over: AclTensor) -> Any:
        tensors = {"gradOutput": dy, "input": x, "weight": w, **over}
        return cudnn_refusal(tensors, precision, transposed, (2, 2), out_pad)

    assert why() is None and why(gradInput=_t((2, 4, 6, 6))) is None
    assert why(transposed=True, out_pad=(1, 0)) is None
    assert "mixed dtypes" in str(why(weight=_t((8, 4, 3, 3), D.ACL_FLOAT)))
    doubles = {n: _t(t.view_dims, D.ACL_DOUBLE) for n, t in (("gradOutput", dy), ("input", x), ("weight", w))}
    assert "float64" in str(why(**doubles))
    assert why("hf32") is None and "fp16 operands" in str(why("fp16"))
    unaligned = _t((8, 4, 3, 3), at=(1 << 20) + 4)
    assert why("hf32", weight=unaligned) is None  # read through an HF32 copy
    assert "gradInput is not" in str(why("hf32", gradInput=_t((2, 4, 6, 6), at=(1 << 20) + 4)))
    assert "outputPadding [2, 0]" in str(why(transposed=True, out_pad=(2, 0)))
    assert "input is empty" in str(why(input=_t((0, 4, 6, 6))))
    assert "zero or negative stride" in str(why(gradOutput=_t((2, 8, 6, 6), strides=(0, 36, 6, 1))))
    assert "overlap" in str(why(gradInput=_t((2, 4, 6, 6), strides=(144, 36, 6, 2))))
    assert "16-byte aligned" in str(why(weight=_t((8, 4, 3, 3), at=(1 << 20) + 2)))
    nhwc = _t((2, 4, 6, 6), strides=(144, 1, 24, 4))  # channels-last and a padded slice are cuDNN's to judge
    assert why(input=nhwc) is None and why(input=_t((2, 4, 6, 6), strides=(300, 72, 12, 1))) is None


def test_the_path_is_cudnn_unless_asked_and_unknown_values_are_refused(emulated, reference: Backend) -> None:  # noqa: F811
    backend, _ = emulated
    runner = backend.conv_grad  # type: ignore[attr-defined]
    assert runner.path() == "cudnn"
    module = FakeCudnn()
    runner.cudnn = CudnnConv(backend, loader=lambda: module)
    backend.environ = {**backend.environ, "ACL_CONV_GRAD_PATH": "gemm"}  # type: ignore[misc]
    args = grad_args(np.random.default_rng(1), (2, 4, 5, 5), (6, 4, 3, 3), np.float32, stride=[1, 1], padding=[1, 1])
    eager.run("ConvolutionBackward", backend, **args)
    assert not module.built and runner.last_path == {"gradInput": "gemm", "gradWeight": "gemm"}
    assert runner.path() == "gemm"
    runner.path_override = "numpy"
    with pytest.raises(AclError) as info:
        eager.run("ConvolutionBackward", backend, **args)
    assert info.value.code == RtErrorCode.ACL_ERROR_RT_PARAM_INVALID and "ACL_CONV_GRAD_PATH='numpy'" in str(info.value)


# ----------------------------------------------------------------------------- routing against the reference
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.short)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cudnn_graphs_compute_both_gradients(faked, reference: Backend, dtype: D, case: tuple) -> None:
    backend, runner, module = faked
    args = spec_args(np.random.default_rng(2), case, dtype)
    compare(backend, reference, args, "contiguous", str(case))
    op = "fprop" if case[6] else "dgrad"
    assert runner.last_path == {"gradInput": f"cudnn {op}", "gradWeight": "cudnn wgrad"}
    assert module.executed == [op, "wgrad"]
    fp32 = dtype == D.ACL_FLOAT
    for graph in module.built:
        assert graph.engines == ["frost_conv"]
        assert set(graph.notes) == {n for n in (*EXACT_NOTES, *TF32_NOTES * fp32, "NONDETERMINISTIC") if n in NOTES}


def test_graphs_are_keyed_without_addresses_and_reused(faked, reference: Backend) -> None:
    backend, runner, module = faked
    args = grad_args(np.random.default_rng(3), (2, 3, 11), (5, 3, 4), np.float16, stride=[2], padding=[1])
    eager.run("ConvolutionBackward", backend, **args)
    eager.run("ConvolutionBackward", backend, **{**args, "input": args["input"].copy()})
    assert len(module.built) == 2 and module.executed == ["dgrad", "wgrad"] * 2
    keys = list(runner.cudnn._graphs)
    assert all(isinstance(k, ConvKey) for k in keys) and [k.op for k in keys] == ["dgrad", "wgrad"]
    dgrad = keys[0]
    assert dgrad.a == ((2, 5, 1, 5), (25, 5, 5, 1)) and dgrad.b == ((5, 3, 1, 4), (12, 4, 4, 1))
    assert dgrad.out == ((2, 3, 1, 11), (33, 11, 11, 1)) and dgrad.pre == (0, 1) and dgrad.stride == (1, 2)
    assert dgrad.dtype == D.ACL_FLOAT16 and not dgrad.tf32 and dgrad.deterministic
    runner.path_override = "cudnn-nondet"  # atomic-sum engines allowed: other graphs
    eager.run("ConvolutionBackward", backend, **args)
    assert len(module.built) == 4 and not any(k.deterministic for k in list(runner.cudnn._graphs)[2:])
    assert all("NONDETERMINISTIC" not in g.notes for g in module.built[2:])


def test_tf32_is_allowed_only_where_the_forward_allows_it(faked) -> None:
    backend, runner, module = faked
    args = grad_args(np.random.default_rng(4), (2, 4, 5, 5), (4, 4, 3, 3), np.float32, stride=[1, 1], padding=[1, 1])
    backend.policy = SimpleNamespace(tf32_enabled=True)  # type: ignore[misc]  # CANN_FAST_TF32=1 on a TF32 device
    eager.run("ConvolutionBackward", backend, **args)
    assert all(k.tf32 for k in runner.cudnn._graphs) and not any("TENSOR_CORE" in g.notes for g in module.built)


@pytest.mark.parametrize("transposed", [False, True])
def test_hf32_operands_reach_cudnn_rounded(faked, reference: Backend, transposed: bool) -> None:
    """cubeMathType 1: gradOutput, input and weight HF32-rounded once into dense copies, float32 graphs without TF32."""
    backend, runner, module = faked
    args = spec_args(np.random.default_rng(7), CASES[5 if transposed else 1], D.ACL_FLOAT, cube=1)
    args["input"] = np.asarray(args["input"]) * np.float32(1 + 2**-13)  # values HF32 rounds differently from fp32
    compare(backend, reference, args, "contiguous", "HF32")
    op = "fprop" if transposed else "dgrad"
    assert runner.last_path == {"gradInput": f"cudnn {op} hf32", "gradWeight": "cudnn wgrad hf32"}
    keys = list(runner.cudnn._graphs)
    assert all(k.dtype == D.ACL_FLOAT and not k.tf32 for k in keys)
    assert all(k.a[1] == contiguous_strides(k.a[0]) and k.b[1] == contiguous_strides(k.b[0]) for k in keys)
    assert all("TENSOR_CORE" in g.notes for g in module.built)


def test_refusals_keep_the_gemm_path_and_say_why(faked, reference: Backend, caplog: pytest.LogCaptureFixture) -> None:
    backend, runner, module = faked
    rng = np.random.default_rng(5)
    args = grad_args(rng, (2, 4, 5, 5), (4, 4, 3, 3), np.float32, stride=[1, 1], padding=[1, 1], cube=2)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.conv_grad"):
        compare(backend, reference, args, note="fp16 operands")
    assert runner.last_path == {"gradInput": "gemm", "gradWeight": "gemm"} and not module.built
    assert "cuDNN: float32 with fp16 operands" in caplog.text
    module.unsupported.add("wgrad")
    args = grad_args(rng, (2, 4, 5, 5), (4, 4, 3, 3), np.float16, stride=[1, 1], padding=[1, 1])
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.conv_grad"):
        compare(backend, reference, args, note="wgrad refused")
    assert runner.last_path["gradInput"] == "cudnn dgrad" and runner.last_path["gradWeight"].startswith("gemm (cuDNN")
    assert "no engine for wgrad" in caplog.text and "gradInput cudnn dgrad" in caplog.text
    args["outputMask"] = [False, True, True]
    eager.run("ConvolutionBackward", backend, **args)
    assert set(runner.last_path) == {"gradWeight"} and module.executed == ["dgrad"]  # the refusal was cached


def test_no_frontend_keeps_the_gemm_path(emulated, reference: Backend, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    backend, _ = emulated
    runner = backend.conv_grad  # type: ignore[attr-defined]

    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'cudnn'")

    runner.cudnn = CudnnConv(backend, loader=missing)
    runner.path_override = "cudnn"
    args = grad_args(np.random.default_rng(6), (2, 4, 5, 5), (4, 4, 3, 3), np.float16, stride=[1, 1], padding=[1, 1])
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.conv_grad"):
        compare(backend, reference, args, note="no frontend")
    assert runner.last_path == {"gradInput": "gemm", "gradWeight": "gemm"}
    assert "the cuDNN frontend did not load (ModuleNotFoundError" in caplog.text
    backend.provider.platform = "amd"  # type: ignore[misc]
    assert "NVIDIA-only" in str(CudnnConv(backend, loader=missing).refusal())


# ----------------------------------------------------------------------------- the bench row
def test_the_bench_times_a_forced_cudnn_row_beside_the_default(
    bench_rocm: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ConvolutionBackward's ops-suite rows: the default path, then cuDNN forced while timed (skipped without it)."""
    torch = pytest.importorskip("torch")
    from acl_tools.bench import backward_rows
    from acl_tools.bench.ops import SIZES, Suite

    runner = bench_rocm.conv_grad  # type: ignore[attr-defined]
    module = FakeCudnn()
    paths: list[str | None] = []

    def pygraph(**kw: Any) -> FakeGraph:  # the fake provider's memory is not host memory: nothing is computed
        paths.append(runner.path_override)
        return FakeGraph(module, kw["io_data_type"])

    module.pygraph = pygraph  # type: ignore[method-assign]
    monkeypatch.setattr(FakeGraph, "execute", lambda self, pack, workspace, handle=None: module.executed.append("run"))
    lines: list[str] = []
    sizes = dataclasses.replace(SIZES["small"], rounds=1)
    for loader in (lambda: module, None):
        runner.cudnn = CudnnConv(bench_rocm, loader=loader) if loader else CudnnConv(bench_rocm, loader=_missing)
        suite = Suite(bench_rocm, sizes, progress=lines.append, only={"ConvolutionBackward"})
        suite.device = torch.device("cpu")
        backward_rows.run_cases(suite)
        ops = [(c.op, c.status) for c in suite.cases]
        if loader:  # the default (cuDNN's deterministic engines), then the atomic-sum ones, then the GEMM path
            expected = ["ConvolutionBackward", "ConvolutionBackward cudnn-nondet", "ConvolutionBackward gemm"]
            assert ops == [(op, "ok") for op in expected] and runner.path_override is None
            assert paths == [None, None, "cudnn-nondet", "cudnn-nondet"] and module.executed
        else:
            assert ops == [("ConvolutionBackward", "ok"), ("ConvolutionBackward gemm", "ok")]
            assert any("cudnn-nondet: skipped (the cuDNN frontend" in line for line in lines)


def _missing() -> Any:
    raise ModuleNotFoundError("No module named 'cudnn'")


# ----------------------------------------------------------------------------- plan persistence
def test_conv_plans_persist_by_key_and_role_uids(tmp_path: Any) -> None:
    """With ACL_PLAN_CACHE_CUDNN=1 a later instance deserialises a stored convolution plan (nested-tuple key fields,
    roles a / b / out by uid) instead of building one; another key is built."""
    from acl_rocm.ops.conv_grad_cudnn import PLAN_KIND
    from acl_rocm.ops.cudnn_graphs import _Built
    from acl_rocm.plan_cache import PlanCache
    from tests.rocm import test_cudnn_plan_store_cpu as store

    module = store.FakeCudnn()
    built: list[ConvKey] = []

    def instance() -> CudnnConv:
        provider = store.NamedFake(device_name="NVIDIA H100 80GB HBM3")
        backend = SimpleNamespace(provider=provider, plans=PlanCache(tmp_path), environ={"ACL_PLAN_CACHE_CUDNN": "1"})
        conv = CudnnConv(backend, loader=lambda: module)  # type: ignore[arg-type]
        assert conv.refusal() is None
        roles = {"a": store.FakeTensor(3), "b": store.FakeTensor(5), "out": store.FakeTensor(8)}
        conv._build = lambda key: (built.append(key), _Built(store.FakeGraph(module, 128), roles, 128))[1]  # type: ignore[method-assign]
        return conv

    key = ConvKey(0, "wgrad", D.ACL_BF16, ((2, 4, 6, 6), (144, 36, 6, 1)), ((2, 8, 6, 6), (288, 36, 6, 1)),
                  ((8, 4, 3, 3), (36, 9, 3, 1)), (1, 1), (1, 1), (1, 1), (1, 1), False, True)  # fmt: skip
    first = instance().graph(key)
    assert isinstance(first, _Built) and not first.restored and built == [key]
    again = instance().graph(key)
    assert isinstance(again, _Built) and again.restored and again.tensors == {"a": 3, "b": 5, "out": 8}
    assert again.workspace == 128 and built == [key]
    other = dataclasses.replace(key, deterministic=False)
    assert not instance().graph(other).restored and built == [key, other]  # type: ignore[union-attr]
    assert len(list((tmp_path / PLAN_KIND).rglob("*.plan"))) == 2


def test_only_channel_first_or_channel_last_strides_reach_cudnn() -> None:
    """Padded NCHW / NHWC views go to cuDNN; other stride orders (the transposed layout) do not (misread on an H100)."""
    from acl_rocm.ops.conv_grad_cudnn import order_refusal

    def view(dims: tuple[int, ...], strides: tuple[int, ...]) -> AclTensor:
        return AclTensor(dims, D.ACL_BF16, strides, 0, Format.ACL_FORMAT_ND, (10_000,), 0)

    assert order_refusal("x", view((2, 4, 5, 6), (120, 30, 6, 1))) is None  # NCHW
    assert order_refusal("x", view((2, 4, 5, 6), (160, 40, 8, 1))) is None  # NCHW, rows padded
    assert order_refusal("x", view((2, 4, 5, 6), (120, 1, 24, 4))) is None  # NHWC
    assert order_refusal("x", view((2, 1, 5, 6), (30, 1, 1, 5))) is not None  # W before H
    assert "neither" in (order_refusal("x", view((2, 4, 5, 6), (120, 30, 1, 5))) or "")
    assert order_refusal("x", view((2, 6, 4, 3), (1, 2, 12, 48))) is not None  # every dim reversed (eager's transposed)


def test_a_reversed_view_takes_the_gemm_path(faked, reference: Backend) -> None:
    backend, runner, module = faked
    args = spec_args(np.random.default_rng(2), CASES[0], D.ACL_BF16)
    compare(backend, reference, args, "transposed", "reversed strides")
    assert runner.last_path == {"gradInput": "gemm", "gradWeight": "gemm"} and not module.executed
