"""The rocm MC2 ops without a GPU: composition order, argument mapping and claiming, over the fake provider.

The fake provider computes GEMMs on the host in float64 (rounded once, as the reference does) and
records kernel launches; :class:`HostNccl` stands in for NCCL as one rank on host memory (a
collective of one rank copies its send buffer) and writes every call into the same event log, so
the tests see what runs, in which order, on which stream, with which addresses and counts.
:class:`~tests.rocm.kernel_emulator.EmulatedProvider` runs the elementwise kernels too, for the
end-to-end cases (bias, x3, non-contiguous outputs).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import eager, hccl
from acl_core.aclnn import execute, get_workspace_size
from acl_core.backend import BackendRegistration
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.errors import AclnnError
from acl_core.formats import Format
from acl_core.plugin import hookimpl
from acl_core.spec.collective import SELF_GROUP_NAME
from acl_core.spec.ops import all_specs, get_spec
from acl_core.tensor import AclTensor
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.mc2 import SEGMENT
from acl_rocm.ops.mc2 import rows_view
from acl_rocm.providers.nccl import NCCL_SUCCESS, CollectiveLibrary
from tests.rocm import kernel_emulator
from tests.rocm.against_reference import assert_matches_reference
from tests.rocm.fake_provider import FakeProvider

FP16, BF16, SUM = 6, 9, 0
"""ncclFloat16, ncclBfloat16, ncclSum."""
ITEM = {FP16: 2, BF16: 2, 1: 1}
MOE = tuple(sorted(name for name in all_specs() if name.startswith("MoeDistribute")))
"""Dispatch and Combine, V1 to V4."""


class HostNccl(CollectiveLibrary):
    """NCCL as one rank on host memory, logging every call into ``events``."""

    name = "nccl"
    binding = "host"

    def __init__(self, events: list[tuple[Any, ...]], fail: int = 0) -> None:
        self.events = events
        self.fail = fail
        self.comms = 0

    def version(self) -> int:
        return 22809

    def unique_id(self) -> bytes:
        return bytes(128)

    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        self.comms += 1
        return 0x5000 + self.comms, NCCL_SUCCESS

    def async_error(self, comm: int) -> int:
        return NCCL_SUCCESS

    def abort(self, comm: int) -> None:
        pass

    def destroy(self, comm: int) -> None:
        pass

    def _move(self, name: str, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        self.events.append((name, send, recv, count, dtype, comm, stream))
        if self.fail:
            return self.fail
        ctypes.memmove(recv, send, count * ITEM[dtype])
        return NCCL_SUCCESS

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        assert op == SUM
        return self._move("all_reduce", send, recv, count, dtype, comm, stream)

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        return self._move("all_gather", send, recv, count, dtype, comm, stream)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: int, stream: int) -> int:
        return self._move("broadcast", send, recv, count, dtype, comm, stream)

    def reduce_scatter(self, send: int, recv: int, count: int, dtype: int, op: int, comm: int, stream: int) -> int:
        assert op == SUM
        return self._move("reduce_scatter", send, recv, count, dtype, comm, stream)

    def send(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        raise AssertionError("MC2 ops do not send")

    def recv(self, buf: int, count: int, dtype: int, peer: int, comm: int, stream: int) -> int:
        raise AssertionError("MC2 ops do not receive")

    def group_start(self) -> int:
        return NCCL_SUCCESS

    def group_end(self) -> int:
        return NCCL_SUCCESS


class _Logged:
    """Provider mixin: GEMMs and kernel launches go into the shared event log; HostNccl is the collective library."""

    events: list[tuple[Any, ...]]
    nccl_fail: int

    def gemm(self, call: Any, workspace: int, workspace_size: int, stream: int) -> None:
        self.events.append(("gemm", call.d.address, stream))
        super().gemm(call, workspace, workspace_size, stream)  # type: ignore[misc]

    def launch(self, function: Any, grid: Any, block: Any, shared_bytes: int, stream: int, params: int) -> None:
        super().launch(function, grid, block, shared_bytes, stream, params)  # type: ignore[misc]
        self.events.append(("kernel", function[0].split("_")[2], stream, function[0]))

    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        return HostNccl(self.events, self.nccl_fail), ""


@dataclass
class LoggedProvider(_Logged, FakeProvider):
    """Recorded launches, host GEMMs, HostNccl."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    nccl_fail: int = 0


@dataclass
class EmulatedLoggedProvider(_Logged, kernel_emulator.EmulatedProvider):
    """Executed launches (g++ emulation), host GEMMs, HostNccl."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    nccl_fail: int = 0


class _Plugin:
    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend

    @hookimpl
    def acl_core_backends(self) -> list[BackendRegistration]:
        return [BackendRegistration("rocmfake", lambda: self.backend, priority=-100)]


def _backend(provider: FakeProvider, tmp_path: Path) -> Iterator[RocmBackend]:
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    acl_core.reset_plugins()
    acl_core.register_plugin(_Plugin(backend))
    acl_core.use_backend("rocmfake")
    yield backend
    acl_core.use_backend(None)
    acl_core.reset_plugins()


@pytest.fixture
def logged(tmp_path: Path) -> Iterator[tuple[RocmBackend, LoggedProvider]]:
    provider = LoggedProvider(blas=True)
    for backend in _backend(provider, tmp_path):
        yield backend, provider


def _product(x1: np.ndarray, x2: np.ndarray, dtype: Any) -> np.ndarray:
    """x1 @ x2 in float64 on the 2-D view, rounded once (the reference's and the fake BLAS's rounding)."""
    y = x1.reshape(-1, x1.shape[-1]).astype(np.float64) @ x2.astype(np.float64)
    return y.astype(dtype).reshape(*x1.shape[:-1], x2.shape[1])


def _args(rng: np.random.Generator, x1_shape: tuple[int, ...], n: int, dtype: Any = np.float16) -> dict[str, Any]:
    k = x1_shape[-1]
    return {
        "x1": rng.uniform(-1, 1, x1_shape).astype(dtype),
        "x2": rng.uniform(-1, 1, (k, n)).astype(dtype),
        "bias": None,
        "group": SELF_GROUP_NAME,
        "commTurn": 0,
        "streamMode": 1,
    }


def _ops(events: list[tuple[Any, ...]]) -> list[str]:
    return [e[1] if e[0] == "kernel" else e[0] for e in events]


# ----------------------------------------------------------------------------- claiming
def test_without_a_collective_library_the_mc2_ops_are_not_claimed_and_the_note_says_why(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(blas=True), {"ACL_KERNEL_CACHE": str(tmp_path)})
    caps = backend.capabilities()
    assert not {"MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter", *MOE} & set(caps.ops)
    assert caps.notes["mc2"] == "not claimed: no collective engine: nvidia provider has no collective library binding"
    assert "Mm" in caps.ops


def test_without_blas_the_mc2_ops_are_not_claimed(tmp_path: Path) -> None:
    backend = RocmBackend(LoggedProvider(blas=False), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert not {"MatmulAllReduce", *MOE} & set(backend.capabilities().ops)
    assert backend.capabilities().notes["mc2"].startswith("not claimed: no GEMM: ")


def test_with_blas_and_a_collective_engine_every_mc2_op_is_claimed(logged: tuple[RocmBackend, Any]) -> None:
    backend, _ = logged
    caps = backend.capabilities()
    assert {"MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter"} <= set(caps.ops)
    assert "MatmulReduceScatterV2" in caps.ops  # a version claims with its base
    assert set(MOE) <= set(caps.ops)  # expert-parallel MC2, V3/V4 through V2
    assert caps.notes["mc2"].startswith("the single ops' GEMM kernels")


def test_rows_view_folds_leading_dims_or_refuses() -> None:
    t = AclTensor((2, 3, 4), D.ACL_FLOAT16, (12, 4, 1), 5, Format.ACL_FORMAT_ND, (40,), 0x1000)
    v = rows_view(t)
    assert v is not None and (v.view_dims, v.strides, v.offset, v.data) == ((6, 4), (4, 1), 5, 0x1000)
    padded = AclTensor((2, 3, 4), D.ACL_FLOAT16, (27, 9, 1), 0, Format.ACL_FORMAT_ND, (60,), 0x1000)
    assert rows_view(padded) is not None and rows_view(padded).strides == (9, 1)  # type: ignore[union-attr]
    transposed = AclTensor((2, 3, 4), D.ACL_FLOAT16, (1, 2, 6), 0, Format.ACL_FORMAT_ND, (24,), 0x1000)
    assert rows_view(transposed) is None


# ----------------------------------------------------------------------------- composition order and arguments
def test_matmul_all_reduce_is_one_gemm_then_an_in_place_all_reduce_on_one_stream(logged: Any) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(1), (2, 3, 16), 8)
    got = eager.run("MatmulAllReduce", backend, **args, reduceOp="sum")["output"]
    ev = provider.events
    assert _ops(ev) == ["gemm", "all_reduce"]
    gemm, ar = ev
    _, send, recv, count, dtype, _comm, stream = ar
    assert send == recv == gemm[1]  # in place on the output the GEMM wrote
    assert (count, dtype, stream) == (6 * 8, FP16, gemm[2])
    np.testing.assert_array_equal(got, _product(args["x1"], args["x2"], np.float16))


def test_matmul_reduce_scatter_runs_the_gemm_into_a_temporary_then_reduce_scatters_into_the_output(
    logged: Any,
) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(2), (8, 256), 6)
    got = eager.run("MatmulReduceScatter", backend, **args, reduceOp="sum")["output"]
    gemm, rs = provider.events
    assert _ops(provider.events) == ["gemm", "reduce_scatter"]
    assert rs[1] == gemm[1] and rs[2] != gemm[1] and rs[3] == 8 * 6 and rs[6] == gemm[2]
    np.testing.assert_array_equal(got, _product(args["x1"], args["x2"], np.float16))


def test_matmul_reduce_scatter_v2_runs_its_base_and_refuses_quantisation(logged: Any) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(2), (8, 256), 6)
    extra = {"x1Scale": None, "x2Scale": None, "quantScale": None, "blockSize": 0, "groupSize": 0, "commMode": "aiv"}
    got = eager.run("MatmulReduceScatterV2", backend, **args, **extra, reduceOp="sum")["output"]
    assert _ops(provider.events) == ["gemm", "reduce_scatter"]
    np.testing.assert_array_equal(got, _product(args["x1"], args["x2"], np.float16))
    with pytest.raises(AclnnError) as err:
        eager.run("MatmulReduceScatterV2", backend, **args, **{**extra, "blockSize": 128}, reduceOp="sum")
    assert err.value.code == 161002


def test_all_gather_matmul_gathers_x1_before_the_gemm_reads_it(logged: Any) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(3), (4, 256), 5, np.float32)
    args["x1"], args["x2"] = args["x1"].astype(np.float16), args["x2"].astype(np.float16)
    out = eager.run("AllGatherMatmul", backend, **args, gatherIndex=0)
    ag, gemm = provider.events
    assert _ops(provider.events) == ["all_gather", "gemm"]
    assert ag[3] == 4 * 256 and ag[4] == FP16 and ag[6] == gemm[2]
    np.testing.assert_array_equal(out["gatherOut"], args["x1"])
    np.testing.assert_array_equal(out["output"], _product(args["x1"], args["x2"], np.float16))


def test_all_gather_matmul_without_gather_out_gathers_into_a_temporary(logged: Any) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(4), (3, 256), 4)
    x1, x2 = eager.to_device(args["x1"], backend), eager.to_device(args["x2"], backend)
    out = eager.empty((3, 4), D.ACL_FLOAT16, backend)
    spec = get_spec("AllGatherMatmul")
    call = {"x1": x1.tensor(), "x2": x2.tensor(), "output": out.tensor(), "gatherOut": None, "gatherIndex": 0}
    size, executor = get_workspace_size(spec, [], {**args, **call}, backend=backend)
    stream = backend.runtime.create_stream()
    execute(spec, 0, size, executor, stream)
    backend.runtime.synchronize_stream(stream)
    ag, _gemm = provider.events
    assert _ops(provider.events) == ["all_gather", "gemm"]
    assert ag[1] == x1.address and ag[2] not in (x1.address, out.address)  # gathered into a temporary...
    np.testing.assert_array_equal(out.numpy(), _product(args["x1"], args["x2"], np.float16))  # ...that Mm read


def test_empty_outputs_enqueue_nothing_but_an_empty_product_still_gathers(logged: Any) -> None:
    backend, provider = logged
    args = _args(np.random.default_rng(5), (0, 16), 4)
    eager.run("MatmulAllReduce", backend, **args, reduceOp="sum")
    assert provider.events == []
    args = _args(np.random.default_rng(5), (3, 256), 0)
    out = eager.run("AllGatherMatmul", backend, **args, gatherIndex=0)
    assert _ops(provider.events) == ["all_gather"]
    np.testing.assert_array_equal(out["gatherOut"], args["x1"])


def test_a_named_communicator_is_resolved_through_the_hccl_registry(logged: Any) -> None:
    backend, provider = logged
    info, ret = hccl.HcclGetRootInfo()
    assert ret == 0, hccl.last_error_message()
    comm, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == 0, hccl.last_error_message()
    try:
        name, ret = hccl.HcclGetCommName(comm)
        assert ret == 0
        args = {**_args(np.random.default_rng(6), (4, 16), 8), "group": name}
        eager.run("MatmulAllReduce", backend, **args, reduceOp="sum")
        (ar,) = [e for e in provider.events if e[0] == "all_reduce"]
        assert ar[5] == comm.comm.comm  # the NCCL communicator that HcclCommInitRootInfo made
    finally:
        assert hccl.HcclCommDestroy(comm) == 0
    with pytest.raises(AclnnError) as info_:
        eager.run("MatmulAllReduce", backend, **args, reduceOp="sum")
    assert info_.value.code == 161002  # the name no longer names a live communicator


def test_a_failed_collective_is_a_runtime_error(tmp_path: Path) -> None:
    provider = LoggedProvider(blas=True, nccl_fail=5)
    for backend in _backend(provider, tmp_path):
        with pytest.raises(AclnnError) as info:
            eager.run("MatmulAllReduce", backend, **_args(np.random.default_rng(7), (4, 16), 8), reduceOp="sum")
        assert info.value.code == 361001 and "ncclAllReduce" in str(info.value)


# ----------------------------------------------------------------------------- end to end, kernels emulated
def emulated_backend(tmp_path: Path) -> Iterator[tuple[RocmBackend, EmulatedLoggedProvider]]:
    """A rocm backend on the kernel emulator with NCCL replayed, and its provider (skips without a compiler)."""
    why = kernel_emulator.available()
    if why:
        pytest.skip(why)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    kernel_emulator.EmulatedProvider.build_dir = build
    provider = EmulatedLoggedProvider(blas=True)
    for backend in _backend(provider, tmp_path):
        yield backend, provider


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[tuple[RocmBackend, EmulatedLoggedProvider]]:
    yield from emulated_backend(tmp_path)


@pytest.mark.parametrize("dtype", [D.ACL_FLOAT16, D.ACL_BF16])
def test_v2_with_bias_and_x3_composes_addmm_add_then_all_reduce(emulated: Any, dtype: D) -> None:
    backend, provider = emulated
    rng = np.random.default_rng(8)
    np_dtype = dtype.numpy
    args = _args(rng, (2, 3, 16), 8, np_dtype)
    args["bias"] = rng.uniform(-1, 1, 8).astype(np_dtype)
    args["x3"] = rng.uniform(-1, 1, (2, 3, 8)).astype(np_dtype)
    got = eager.run("MatmulAllReduceV2", backend, **args, reduceOp="sum", guard=True)["output"]
    ops = _ops(provider.events)
    assert ops.index("gemm") < ops.index("ScaledAdd") < ops.index("Add") < ops.index("all_reduce")
    assert ops[-1] == "Cast"  # the guarded output is not dense: reduced in a temporary, then copied
    (ar,) = [e for e in provider.events if e[0] == "all_reduce"]
    assert ar[4] == (FP16 if dtype == D.ACL_FLOAT16 else BF16)
    x1, x2 = args["x1"].astype(np.float64).reshape(-1, 16), args["x2"].astype(np.float64)
    local = (x1 @ x2 + args["bias"].astype(np.float64)).astype(np_dtype)
    expected = (local.astype(np.float64) + args["x3"].reshape(-1, 8)).astype(np_dtype).reshape(2, 3, 8)
    tol = 2e-3 if dtype == D.ACL_FLOAT16 else 2e-2
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)


def test_transposed_x1_is_copied_dense_before_the_gemm_and_the_guarded_output_stays_intact(emulated: Any) -> None:
    backend, provider = emulated
    args = _args(np.random.default_rng(9), (2, 3, 16), 8)
    got = eager.run("MatmulAllReduce", backend, layout="transposed", guard=True, **args, reduceOp="sum")["output"]
    ops = _ops(provider.events)
    assert ops.index("Cast") < ops.index("gemm") < ops.index("all_reduce")
    np.testing.assert_array_equal(got, _product(args["x1"], args["x2"], np.float16))


def test_reduce_scatter_into_a_guarded_output(emulated: Any) -> None:
    backend, provider = emulated
    args = _args(np.random.default_rng(10), (4, 256), 3)
    got = eager.run("MatmulReduceScatter", backend, guard=True, **args, reduceOp="sum")["output"]
    assert _ops(provider.events)[-3:] == ["gemm", "reduce_scatter", "Cast"]
    np.testing.assert_array_equal(got, _product(args["x1"], args["x2"], np.float16))


# ----------------------------------------------------------------------------- expert parallelism, one rank


ROUTES = ["block", "grid", "grid3"]
"""ACL_MC2_ROUTE choices the dispatch tests force: one block, the grid (64-copy units), the grid with 3-copy units."""


def _route(backend: Any, route: str) -> None:
    """Force the dispatch routing ``route`` on ``backend``'s MC2 runner (grid3: units of 3 copies)."""
    runner = backend.runners["mc2"]
    runner.forced_route = route[:4] if route.startswith("grid") else route
    runner.route_segment = 3 if route == "grid3" else SEGMENT


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", MOE)
def test_every_moe_distribute_sample_matches_the_reference_on_one_rank(emulated: Any, op: str, route: str) -> None:
    backend, provider = emulated
    _route(backend, route)
    reference = acl_core.get_backend("reference")
    assert op in backend.capabilities().ops
    for sample in get_spec(op).samples(np.random.default_rng(2026)):  # type: ignore[misc]
        assert_matches_reference(backend, reference, op, dict(sample.args), "contiguous", sample.note)
    ev = provider.events
    gathers = [i for i, e in enumerate(ev) if e[0] == "all_gather"]
    assert gathers
    launched = {e[3].split("_")[4] for e in ev if e[0] == "kernel" and "_mc2_dispatch_" in e[3]}
    if "Dispatch" in op:  # the forced routing ran, and only it
        assert launched == ({"route"} if route == "block" else {"count", "scan", "place"}), launched
    for i in gathers:  # every exchange is on the stream of the routing kernel that reads it, enqueued before it
        routing = next(e for e in ev[i:] if e[0] == "kernel" and e[1] == "mc2")
        assert routing[2] == ev[i][6]


def _code(backend: Any, op: str, args: dict[str, Any]) -> int | None:
    try:
        eager.run(op, backend, **args)
    except AclnnError as exc:
        return exc.code
    return None


@pytest.mark.parametrize("op", MOE)
def test_every_moe_distribute_error_sample_is_refused_with_the_references_code(emulated: Any, op: str) -> None:
    backend, _ = emulated
    reference = acl_core.get_backend("reference")
    for sample in get_spec(op).error_samples(np.random.default_rng(7)):  # type: ignore[misc]
        expected = _code(reference, op, dict(sample.args))
        assert expected is not None, sample.note
        assert _code(backend, op, dict(sample.args)) == expected, sample.note


def _combine_case(rng: np.random.Generator, v1: bool) -> dict[str, Any]:
    from acl_core.spec.ops.mc2 import combine_args

    return combine_args(rng, 5, 8, 2, 4, D.ACL_FLOAT16, v1)


@pytest.mark.parametrize("v1", [True, False])
def test_combine_refuses_on_the_device_what_the_reference_refuses(emulated: Any, v1: bool) -> None:
    """Tables that do not come from a dispatch: 161002 on both (rocm's from its deferred device check)."""
    backend, _ = emulated
    reference = acl_core.get_backend("reference")
    op = "MoeDistributeCombine" if v1 else "MoeDistributeCombineV2"
    rng = np.random.default_rng(11)
    base = _combine_case(rng, v1)
    table = "expandIdx" if v1 else "assistInfoForCombine"
    cases: list[tuple[str, dict[str, Any]]] = []
    counts = np.asarray(base["epSendCounts"]).copy()
    counts[1], counts[2] = counts[2], counts[1] - 1  # not a running total
    cases.append(("counts decrease", {**base, "epSendCounts": counts}))
    if v1:
        idx = np.asarray(base[table]).copy()
        idx[3] = 50  # past the expert's rows
        cases.append(("expandIdx past the rows", {**base, table: idx}))
        ids = np.asarray(base["expertIds"]).copy()
        ids[0, 0] = 4  # not an expert of the domain
        cases.append(("expert id of E", {**base, "expertIds": ids}))
    else:
        assist = np.asarray(base[table]).reshape(-1, 128).copy()
        assist[0, 0] = 1  # the copy of row 0 names another source rank: its token finds no row
        cases.append(("assist names rank 1", {**base, table: assist.reshape(-1)}))
    for note, args in cases:
        assert _code(reference, op, args) == 161002, note
        assert _code(backend, op, args) == 161002, note


# ----------------------------------------------------------------------------- expert parallelism, W ranks
class RankedNccl(HostNccl):
    """NCCL as the W ranks of communicators that live in one process, simulated in two passes.

    Every rank's op runs once to record what each of its all-gathers sends (the receive buffers get W
    copies of the sender's own data, so that pass's results are meaningless), then again: the n-th
    all-gather of rank r receives the n-th sends of ranks 0..W-1 in rank order. This is exact for ops
    whose sends do not depend on what they receive, as the MoeDistribute ops' inputs do not.
    """

    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        super().__init__(events)
        self.rank_of: dict[int, tuple[int, int]] = {}
        self.sent: dict[int, list[bytes]] = {}
        self.calls: dict[int, int] = {}
        self.replay = False

    def comm_init(self, nranks: int, uid: bytes, rank: int, *, blocking: bool) -> tuple[int, int]:
        comm, rc = super().comm_init(nranks, uid, rank, blocking=blocking)
        self.rank_of[comm] = (rank, nranks)
        return comm, rc

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: int, stream: int) -> int:
        self.events.append(("all_gather", send, recv, count, dtype, comm, stream))
        rank, world = self.rank_of.get(comm, (0, 1))
        data = ctypes.string_at(send, count * ITEM[dtype])
        if not self.replay:
            self.sent.setdefault(rank, []).append(data)
            parts = [data] * world
        else:
            n = self.calls[rank] = self.calls.get(rank, 0) + 1
            assert self.sent[rank][n - 1] == data, f"rank {rank} sends other data when replayed"
            parts = [self.sent[r][n - 1] for r in range(world)]
        ctypes.memmove(recv, b"".join(parts), len(data) * world)
        return NCCL_SUCCESS


@dataclass
class RankedProvider(_Logged, kernel_emulator.EmulatedProvider):
    """Executed launches (g++ emulation), host GEMMs, one RankedNccl for every communicator."""

    events: list[tuple[Any, ...]] = field(default_factory=list)
    nccl_fail: int = 0
    ranked: RankedNccl | None = None

    def collective_library(self) -> tuple[CollectiveLibrary | None, str]:
        self.ranked = RankedNccl(self.events)
        return self.ranked, ""


class RankedEngine:
    """The reference engine's all_gather_values for W ranks, with RankedNccl's two passes."""

    def __init__(self) -> None:
        self.sent: dict[int, list[bytes]] = {}
        self.calls: dict[int, int] = {}
        self.replay = False

    def all_gather_values(self, comm: Any, data: bytes, count: int, dtype: Any) -> list[bytes]:
        if not self.replay:
            self.sent.setdefault(comm.rank, []).append(data)
            return [data] * comm.size
        n = self.calls[comm.rank] = self.calls.get(comm.rank, 0) + 1
        return [self.sent[r][n - 1] for r in range(comm.size)]


@dataclass
class _Comm:
    size: int
    rank: int


def _run_domain(op: str, backend: Any, per_rank: list[dict[str, Any]], record: Any, replay: Any) -> list[Any]:
    """``op`` on every rank of the domain, twice (record, then replay): each rank's outputs or its error code."""
    for args in per_rank:
        record(args["epRankId"])
        try:
            eager.run(op, backend, **args)
        except AclnnError:
            pass  # the recording pass routes meaningless data: a device check may fire
    results: list[Any] = []
    replay()
    for args in per_rank:
        record(args["epRankId"])
        try:
            results.append(eager.run(op, backend, **args))
        except AclnnError as exc:
            results.append(exc.code)
    return results


@pytest.fixture
def ranked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RocmBackend, RankedProvider]]:
    why = kernel_emulator.available()
    if why:
        pytest.skip(why)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    kernel_emulator.EmulatedProvider.build_dir = build
    monkeypatch.setenv("WORLD_SIZE", "8")  # the engine's rank limit: a launcher's world
    provider = RankedProvider(blas=True)
    for backend in _backend(provider, tmp_path):
        yield backend, provider


def _domain_comms(world: int) -> list[Any]:
    comms = []
    for r in range(world):
        info, ret = hccl.HcclGetRootInfo()
        assert ret == 0, hccl.last_error_message()
        comm, ret = hccl.HcclCommInitRootInfo(world, info, r)
        assert ret == 0, hccl.last_error_message()
        comms.append(comm)
    return comms


def _both(
    op: str, backend: RocmBackend, provider: RankedProvider, per_rank: list[dict[str, Any]], monkeypatch: Any
) -> tuple[list[Any], list[Any]]:
    """(rocm's, the reference's) results of ``op`` on every rank of the simulated domain."""
    from acl_reference.kernels import mc2 as ref_mc2

    nccl = provider.ranked
    assert nccl is not None
    nccl.sent.clear()
    nccl.calls.clear()
    nccl.replay = False

    def nccl_replay() -> None:
        nccl.replay = True

    got = _run_domain(op, backend, per_rank, lambda r: None, nccl_replay)
    engine = RankedEngine()
    world = len(per_rank)
    current = [0]

    def ref_record(rank: int) -> None:
        current[0] = rank

    def ref_replay() -> None:
        engine.replay = True

    monkeypatch.setattr(ref_mc2, "_ep_group", lambda k: (engine, _Comm(world, current[0])))
    reference = acl_core.get_backend("reference")
    expected = _run_domain(op, reference, per_rank, ref_record, ref_replay)
    return got, expected


def _assert_same(op: str, got: list[Any], expected: list[Any]) -> None:
    for r, (g, e) in enumerate(zip(got, expected, strict=True)):
        if not isinstance(e, dict):
            assert g == e, f"{op} rank {r}: rocm {g}, reference {e}"
            continue
        assert isinstance(g, dict) and g.keys() == e.keys(), f"{op} rank {r}: {g}"
        for name in e:
            np.testing.assert_array_equal(g[name], e[name], err_msg=f"{op} rank {r}: {name}")


def _ep(name: str, world: int, rank: int, experts: int) -> dict[str, Any]:
    return {"groupEp": name, "epWorldSize": world, "epRankId": rank, "moeExpertNum": experts}


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("v1", [True, False])
def test_dispatch_then_combine_on_w_ranks_equal_the_reference_bit_for_bit(
    ranked: Any, monkeypatch: pytest.MonkeyPatch, world: int, v1: bool, route: str
) -> None:
    """Dispatch (no mask, 1-D / 2-D masks, weights carried, dynamic int8 with smooth scales), then combine."""
    from acl_core.spec.ops.mc2 import _names, dispatch_args

    backend, provider = ranked
    _route(backend, route)
    n = _names(v1)
    dispatch, combine = (
        ("MoeDistributeDispatch", "MoeDistributeCombine")
        if v1
        else (
            "MoeDistributeDispatchV2",
            "MoeDistributeCombineV2",
        )
    )
    comms = _domain_comms(world)
    try:
        names = []
        for c in comms:
            name, ret = hccl.HcclGetCommName(c)
            assert ret == 0
            names.append(name)
        local, bs, h, k = 2, 5, 16, 3
        experts = local * world
        for kind in ("none", "1d", "2d", "quant"):
            per_rank = []
            for r in range(world):
                rng = np.random.default_rng([r, world, 3])
                extra: dict[str, Any] = {"quantMode": 2} if kind == "quant" else {}
                args = dispatch_args(rng, bs, h, k, experts, D.ACL_BF16, v1, **extra)
                args |= _ep(names[r], world, r, experts)
                if kind == "1d":
                    args[n["xActiveMask"]] = np.arange(bs) < bs - 1 - r % 2
                if kind == "2d":
                    args[n["xActiveMask"]] = rng.random((bs, k)) < 0.6
                if kind != "quant":
                    args[n["expertScales"]] = rng.uniform(0, 1, (bs, k)).astype(np.float32)
                else:
                    args[n["scales"]] = rng.uniform(0.5, 2, (experts, h)).astype(np.float32)
                per_rank.append(args)
            got, expected = _both(dispatch, backend, provider, per_rank, monkeypatch)
            _assert_same(f"{dispatch} {kind} W={world}", got, expected)
            assert all(isinstance(e, dict) for e in expected)
            for r, e in enumerate(expected):  # rows really came from the other ranks (counts over (expert, rank))
                per_source = np.diff(e[n["epRecvCounts"]], prepend=0).reshape(local, world)
                assert per_source[:, [s for s in range(world) if s != r]].sum() > 0
            if kind == "quant":
                continue
            combined = []
            for r, (args, out) in enumerate(zip(per_rank, expected, strict=True)):
                y = (out[n["expandX"]].astype(np.float64) * (1 + r)).astype(out[n["expandX"]].dtype)
                c = {"expandX": y, "expertIds": args["expertIds"], n["assistIn"]: out[n["assist"]]}
                c |= {"epSendCounts": out[n["epRecvCounts"]], "expertScales": args[n["expertScales"]]}
                c |= {n["tpSendCounts"]: None, n["xActiveMask"]: args[n["xActiveMask"]], n["activationScale"]: None}
                c |= {n["weightScale"]: None, n["groupList"]: None, n["expandScales"]: None}
                c |= {"groupTp": "", "tpWorldSize": 0, "tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0}
                c |= {"sharedExpertRankNum": 0, "globalBs": 0, "outDtype": 0, "commQuantMode": 0, "groupListType": 0}
                if not v1:
                    c |= {"sharedExpertXOptional": None, "commAlg": None}
                combined.append(c | _ep(names[r], world, r, experts))
            got, expected = _both(combine, backend, provider, combined, monkeypatch)
            _assert_same(f"{combine} {kind} W={world}", got, expected)
            assert all(isinstance(e, dict) and np.any(e[n["xOut"]] != 0) for e in expected)
    finally:
        for c in comms:
            assert hccl.HcclCommDestroy(c) == 0


@pytest.mark.parametrize("route", ROUTES)
def test_on_two_ranks_an_id_out_of_range_or_a_repeated_id_is_refused_by_every_rank(
    ranked: Any, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """Rank 1's bad id makes rank 0 refuse too (each sees every rank's ids); repeated ids overflow rank 0's A rows."""
    from acl_core.spec.ops.mc2 import dispatch_args

    backend, provider = ranked
    _route(backend, route)
    comms = _domain_comms(2)
    try:
        names = [hccl.HcclGetCommName(c)[0] for c in comms]
        for case in ("out of range", "repeated"):
            per_rank = []
            for r in range(2):
                args = dispatch_args(np.random.default_rng(r), 3, 8, 2, 2, D.ACL_FLOAT16, False) | _ep(
                    names[r], 2, r, 2
                )
                if r == 1:
                    args["expertIds"] = np.asarray(args["expertIds"]).copy()
                    if case == "out of range":
                        args["expertIds"][2] = [2, 0]
                    else:  # 6 copies of rank 1 and 3 of rank 0 for expert 0: 9 > A = 3·2·min(1, 2)
                        args["expertIds"][:] = 0
                per_rank.append(args)
            got, expected = _both("MoeDistributeDispatchV2", backend, provider, per_rank, monkeypatch)
            outcome = [e if isinstance(e, int) else "ran" for e in expected]
            assert outcome == ([161002, 161002] if case == "out of range" else [161002, "ran"]), f"{case}: {outcome}"
            _assert_same(case, got, expected)
    finally:
        for c in comms:
            assert hccl.HcclCommDestroy(c) == 0


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("op", ["MoeDistributeDispatch", "MoeDistributeDispatchV2"])
def test_dispatch_over_more_experts_than_routing_threads_matches_the_reference(
    emulated: Any, op: str, route: str
) -> None:
    """512 experts: more (expert, rank) pairs than the routing block's 256 threads, so each thread takes two."""
    from acl_core.spec.ops.mc2 import _names, dispatch_args

    backend, _ = emulated
    _route(backend, route)
    v1 = op == "MoeDistributeDispatch"
    rng = np.random.default_rng(5)
    args = dispatch_args(rng, 6, 8, 8, 512, D.ACL_FLOAT16, v1)
    args[_names(v1)["xActiveMask"]] = rng.random((6, 8)) < 0.7
    assert_matches_reference(backend, acl_core.get_backend("reference"), op, args, "contiguous", "512 experts")


class _Watched(EmulatedLoggedProvider):
    """Records every host wait and device-to-host copy while ``watching`` is set."""

    watching = False
    waits: list[str] = []

    def memcpy(self, dst: int, src: int, nbytes: int, direction: Any, stream: int | None) -> None:
        if self.watching and "DEVICE_TO_HOST" in str(direction):
            self.waits.append(f"memcpy {direction}")
        super().memcpy(dst, src, nbytes, direction, stream)

    def stream_synchronize(self, stream: int) -> None:
        if self.watching:
            self.waits.append("stream_synchronize")
        super().stream_synchronize(stream)

    def synchronize_device(self) -> None:
        if self.watching:
            self.waits.append("synchronize_device")
        super().synchronize_device()

    def event_synchronize(self, event: int) -> None:
        if self.watching:
            self.waits.append("event_synchronize")
        super().event_synchronize(event)

    def stream_query(self, stream: int) -> bool:
        if self.watching:
            self.waits.append("stream_query")
        return super().stream_query(stream)


@pytest.mark.parametrize("op", ["MoeDistributeDispatch", "MoeDistributeDispatchV2", "MoeDistributeCombineV2"])
def test_phase_2_of_the_moe_distribute_ops_neither_waits_for_nor_reads_the_device(tmp_path: Path, op: str) -> None:
    """What capture needs: execute enqueues the all-gathers and kernels and returns; the device check waits for sync."""
    if kernel_emulator.available():
        pytest.skip(kernel_emulator.available())
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    kernel_emulator.EmulatedProvider.build_dir = build
    provider = _Watched(blas=True)
    provider.waits = []
    for backend in _backend(provider, tmp_path):
        spec = get_spec(op)
        sample = next(iter(spec.samples(np.random.default_rng(1))))  # type: ignore[misc]
        arrays = {n: eager.to_device(v, backend) for n, v in sample.args.items() if isinstance(v, np.ndarray)}
        call = {**sample.args, **{n: a.tensor() for n, a in arrays.items()}}
        outs = eager.run(op, backend, **sample.args)  # shapes of the outputs
        targets = {n: eager.empty(v.shape, from_numpy(v.dtype), backend) for n, v in outs.items()}
        call |= {n: t.tensor() for n, t in targets.items()}
        for p in spec.params:
            call.setdefault(p.name, None)
        size, executor = get_workspace_size(spec, [], call, backend=backend)
        stream = backend.runtime.create_stream()
        provider.watching = True
        execute(spec, 0, size, executor, stream)
        provider.watching = False
        assert provider.waits == [], provider.waits
        backend.runtime.synchronize_stream(stream)
        for n, expected in outs.items():
            np.testing.assert_array_equal(targets[n].numpy(), expected, err_msg=n)


def test_the_bench_times_each_dispatch_route_beside_the_default(emulated: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ops bench's MoeDistributeDispatchV2 rows: the default, then ACL_MC2_ROUTE=block and grid forced (and
    released after), each running the forced routing kernels on the emulator."""
    torch = pytest.importorskip("torch")
    from acl_tools.bench import moe_rows
    from tests.rocm.test_bench_variant_rows_cpu import _suite

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the emulated GPU's torch side runs on the CPU
    backend, provider = emulated
    suite = _suite(backend, {"MoeDistributeDispatchV2"})
    idx = np.stack([np.random.default_rng(i).choice(8, 2, replace=False) for i in range(16)]).astype(np.int32)
    for route in suite.choices("mc2", "forced_route", ("block", "grid")):  # type: ignore[attr-defined]
        provider.events.clear()
        moe_rows._dispatch_row(suite, 16, 32, 2, 8, idx, route)  # type: ignore[arg-type]
        names = {e[3].split("_")[4] for e in provider.events if e[0] == "kernel" and "_mc2_dispatch_" in e[3]}
        assert names == ({"count", "scan", "place"} if route == "grid" else {"route"}), (route, names)
    rows = suite.cases  # type: ignore[attr-defined]
    assert [c.note.split(";")[0] for c in rows][1:] == ["ACL_MC2_ROUTE=block", "ACL_MC2_ROUTE=grid"]
    assert {c.status for c in rows} == {"ok"} and backend.runners["mc2"].forced_route is None
