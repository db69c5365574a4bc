"""The MC2 ops on the rocm backend, one rank on one GPU: each equals its single ops composed by hand.

For every spec sample (fp16 and bf16, with and without bias/x3, empty m or n): the MC2 operator's
outputs must equal, bit for bit, the single operators run one after another -- Mm or Addmm (beta =
alpha = 1) on x1's 2-D view, Add for V2's x3, and the collective through ``from acl_core import
hccl`` (HcclAllReduce / HcclAllGather / HcclReduceScatter) on a communicator of one rank. Padded
and transposed placements (guarded outputs) are checked against the float64 product within a
rounding of the output dtype. The group may also be a communicator's HcclGetCommName.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import aclnn, eager, hccl
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.collective import ACL_TO_HCCL
from acl_core.spec.ops import all_specs, get_spec

pytestmark = pytest.mark.gpu

EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
MC2 = ("MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter")


@pytest.fixture(scope="module")
def b(rocm: Backend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    """The rocm backend as the process default (the hccl front end uses it), with its collective engine.

    On the CPU kernel emulator (``ACL_ROCM_EMULATE=1``, no NCCL) it is an emulated backend whose collective
    library is the CPU tests' one-rank HostNccl, so these tests run the same kernels there.
    """
    if EMULATED and rocm.collectives is None:
        from tests.rocm.test_mc2_cpu import EmulatedLoggedProvider, _backend

        yield from _backend(EmulatedLoggedProvider(blas=True), tmp_path_factory.mktemp("mc2"))
        return
    if rocm.collectives is None:
        pytest.skip(f"no collective engine: {rocm.capabilities().notes.get('collectives')}")
    missing = [op for op in MC2 if op not in rocm.capabilities().ops]
    assert not missing, f"engine present but {missing} not claimed: {rocm.capabilities().notes.get('mc2')}"
    acl_core.use_backend("rocm")
    yield rocm
    acl_core.use_backend(None)


@pytest.fixture(scope="module")
def comm(b: Backend) -> Iterator[Any]:
    info, ret = hccl.HcclGetRootInfo()
    assert ret == 0, hccl.last_error_message()
    handle, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == 0, hccl.last_error_message()
    yield handle
    assert hccl.HcclCommDestroy(handle) == 0, hccl.last_error_message()


def _samples(op: str) -> list[Any]:
    spec = get_spec(op)
    assert spec.samples is not None
    return list(spec.samples(np.random.default_rng(0)))


def _collective(b: Backend, comm: Any, kind: str, values: np.ndarray, out_elems: int) -> np.ndarray:
    """One single-op collective of ``values`` (a dense device copy) on the one-rank communicator, back to NumPy."""
    dtype = from_numpy(values.dtype)
    send = eager.to_device(np.ascontiguousarray(values).reshape(-1), b)
    recv = eager.empty((out_elems,), dtype, b)
    code = int(ACL_TO_HCCL[dtype])
    if kind == "all_reduce":
        ret = hccl.HcclAllReduce(send.address, recv.address, values.size, code, hccl.HCCL_REDUCE_SUM, comm)
    elif kind == "all_gather":
        ret = hccl.HcclAllGather(send.address, recv.address, values.size, code, comm)
    else:
        ret = hccl.HcclReduceScatter(send.address, recv.address, out_elems, code, hccl.HCCL_REDUCE_SUM, comm)
    assert ret == 0, hccl.last_error_message()
    return recv.numpy()


def _one(dtype: D) -> tuple[int, D]:
    return (1, dtype)


def composed(b: Backend, comm: Any, op: str, args: dict[str, Any]) -> dict[str, np.ndarray]:
    """The MC2 op's outputs from single operators (Mm/Addmm, Add) and single-op collectives."""
    x1, x2, bias = args["x1"], args["x2"], args.get("bias")
    dt = from_numpy(x1.dtype)
    k, n = x2.shape
    if op == "AllGatherMatmul":
        gathered = _collective(b, comm, "all_gather", x1, x1.size).reshape(x1.shape)
        out = eager.run("Mm", b, self=gathered, mat2=x2, cubeMathType=0)["out"]
        return {"output": out, "gatherOut": gathered}
    rows = x1.reshape(-1, k)
    if bias is not None:
        one = _one(D.ACL_FLOAT)  # Addmm's scalars have no bf16; 1 is exact in any dtype
        local = eager.run("Addmm", b, self=bias, mat1=rows, mat2=x2, beta=one, alpha=one, cubeMathType=0)["out"]
    else:
        local = eager.run("Mm", b, self=rows, mat2=x2, cubeMathType=0)["out"]
    if args.get("x3") is not None:
        local = eager.run("Add", b, self=local, other=args["x3"].reshape(-1, n), alpha=_one(dt))["out"]
    if op == "MatmulReduceScatter":
        return {"output": _collective(b, comm, "reduce_scatter", local, local.size).reshape(local.shape)}
    total = _collective(b, comm, "all_reduce", local, local.size)
    return {"output": total.reshape(*x1.shape[:-1], n)}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


def _float64(args: dict[str, Any], op: str) -> np.ndarray:
    """The float64 value the output rounds (NumPy oracle for the non-contiguous placements)."""
    x1, x2 = args["x1"].astype(np.float64), args["x2"].astype(np.float64)
    y = x1.reshape(-1, x1.shape[-1]) @ x2
    if args.get("bias") is not None:
        y = y + args["bias"].astype(np.float64)
    if args.get("x3") is not None:
        y = y + args["x3"].astype(np.float64).reshape(y.shape)
    return y.reshape(*x1.shape[:-1], x2.shape[1])


@pytest.mark.parametrize("op", MC2)
def test_mc2_equals_the_single_ops_composed(b: Backend, comm: Any, op: str) -> None:
    for sample in _samples(op):
        args = dict(sample.args)
        got = eager.run(op, b, guard=True, **args)
        want = composed(b, comm, op, args)
        for name, expected in want.items():
            if name == "gatherOut" and args.get("gatherOut", 0) is None:
                continue
            actual = got[name]
            assert actual.shape == expected.shape, (op, sample.note, name)
            assert np.array_equal(_bits(actual), _bits(expected)), f"{op} {sample.note}: {name} differs in bits"


@pytest.mark.parametrize("layout", ["padded", "transposed"])
@pytest.mark.parametrize("op", MC2)
def test_mc2_on_strided_placements_matches_the_float64_oracle(b: Backend, op: str, layout: str) -> None:
    for sample in _samples(op):
        args = dict(sample.args)
        got = eager.run(op, b, layout=layout, guard=True, **args)
        want = _float64(args, op)
        tol = 1e-2 if args["x1"].dtype.itemsize == 2 and from_numpy(args["x1"].dtype) == D.ACL_BF16 else 2e-3
        np.testing.assert_allclose(
            got["output"].astype(np.float64), want, rtol=tol, atol=tol, err_msg=f"{op} {sample.note} {layout}"
        )
        if op == "AllGatherMatmul" and "gatherOut" in got:
            assert np.array_equal(_bits(got["gatherOut"]), _bits(args["x1"]))


def test_group_by_communicator_name(b: Backend, comm: Any) -> None:
    name, ret = hccl.HcclGetCommName(comm)
    assert ret == 0 and name
    sample = _samples("MatmulAllReduce")[0]
    args = {**sample.args, "group": name}
    got = eager.run("MatmulAllReduce", b, guard=True, **args)["output"]
    assert np.array_equal(_bits(got), _bits(composed(b, comm, "MatmulAllReduce", args)["output"]))


def test_matmul_reduce_scatter_v2_is_its_base_bit_for_bit(b: Backend) -> None:
    assert "MatmulReduceScatterV2" in b.capabilities().ops
    base_names = set(get_spec("MatmulReduceScatter").param_names)
    for sample in _samples("MatmulReduceScatterV2"):
        args = dict(sample.args)
        for mode in ("aicpu", "aiv"):
            got = eager.run("MatmulReduceScatterV2", b, guard=True, **{**args, "commMode": mode})["output"]
            want = eager.run("MatmulReduceScatter", b, guard=True, **{k: v for k, v in args.items() if k in base_names})
            assert np.array_equal(_bits(got), _bits(want["output"])), f"{sample.note} commMode {mode}"


# ----------------------------------------------------------------------------- expert parallelism (one rank)
MOE = tuple(sorted(name for name in all_specs() if name.startswith("MoeDistribute")))
"""Dispatch and Combine, V1 to V4."""


@pytest.mark.parametrize("op", MOE)
def test_moe_distribute_every_sample_matches_the_reference(b: Backend, reference: Backend, op: str) -> None:
    """Every spec sample, contiguous, padded and transposed, under the op's class (exact for dispatch)."""
    from tests.rocm.against_reference import assert_every_sample_matches

    assert_every_sample_matches(b, reference, op)


def _dispatch_sizes(v1: bool, quant: bool) -> dict[str, Any]:
    """A serving-sized one-rank dispatch: 256 tokens, H 2048, top-8 of 64 experts (2,048 rows received).

    On the emulator (a fiber per GPU thread) 64 tokens of H 256.
    """
    from acl_core.spec.ops.mc2 import _names, dispatch_args

    n = _names(v1)
    rng = np.random.default_rng(31)
    bs, hidden = (64, 256) if EMULATED else (256, 2048)
    extra: dict[str, Any] = {"quantMode": 2, "expertTokenNumsType": 1} if quant else {}
    args = dispatch_args(rng, bs, hidden, 8, 64, D.ACL_BF16, v1, **extra)
    args[n["xActiveMask"]] = rng.random((bs, 8)) < 0.9
    args[n["expertScales"]] = rng.uniform(0, 1, (bs, 8)).astype(np.float32)
    if quant:
        args[n["scales"]] = rng.uniform(0.5, 2, (64, hidden)).astype(np.float32)
    return args


@pytest.mark.parametrize("route", [None, "block", "grid"])
@pytest.mark.parametrize("quant", [False, True])
@pytest.mark.parametrize("v1", [True, False])
def test_moe_distribute_round_trip_at_serving_size_matches_the_reference(
    b: Backend, reference: Backend, v1: bool, quant: bool, route: str | None
) -> None:
    """Dispatch (bit for bit), a stand-in expert, then combine on the dispatch's own tables (bit for bit); under
    each ACL_MC2_ROUTE (forced on the runner; None: the size's default)."""
    runner = b.runners["mc2"]  # type: ignore[attr-defined]
    runner.forced_route = route
    try:
        _round_trip(b, reference, v1, quant)
    finally:
        runner.forced_route = None


@pytest.mark.parametrize("rows", [None, "row"])
@pytest.mark.parametrize("route", [None, "block", "grid"])
@pytest.mark.parametrize("v1", [True, False])
def test_moe_distribute_dispatch_at_prefill_size_matches_the_reference(
    b: Backend, reference: Backend, v1: bool, route: str | None, rows: str | None
) -> None:
    """A prefill-sized dispatch (4,096 tokens, H 1024, top-8 of 64; the emulator 256 tokens of H 64), bit for bit,
    under each ACL_MC2_ROUTE (None: the default, the grid from ROUTE_GRID_MIN copies) and ACL_MC2_ROWS (None: the
    default RangeGather; row: a block a row)."""
    from acl_core.spec.ops.mc2 import _names, dispatch_args

    n = _names(v1)
    op = "MoeDistributeDispatch" if v1 else "MoeDistributeDispatchV2"
    rng = np.random.default_rng(47)
    bs, hidden = (256, 64) if EMULATED else (4096, 1024)
    args = dispatch_args(rng, bs, hidden, 8, 64, D.ACL_BF16, v1)
    args[n["xActiveMask"]] = rng.random((bs, 8)) < 0.9
    runner = b.runners["mc2"]  # type: ignore[attr-defined]
    from acl_rocm.ops.mc2 import ROUTE_GRID_MIN

    assert runner.route(bs * 8) == ("grid" if bs * 8 >= ROUTE_GRID_MIN else "block")
    runner.forced_route, runner.forced_rows = route, rows
    try:
        got = eager.run(op, b, **args)
    finally:
        runner.forced_route = runner.forced_rows = None
    want = eager.run(op, reference, **args)
    for name, value in want.items():
        assert np.array_equal(_bits(got[name]), _bits(value)), f"{op} route {route} rows {rows}: {name} differs"


_REPLAY_WANT: dict[int, dict[str, np.ndarray]] = {}


@pytest.mark.parametrize("rows", [None, "row"])
@pytest.mark.parametrize("route", [None, "block", "grid"])
def test_moe_distribute_dispatch_replayed_and_rebound_matches_the_reference(
    b: Backend, reference: Backend, route: str | None, rows: str | None
) -> None:
    """The bench's shape (bf16 H 2048, top-8 of 64; 4,096 tokens, the emulator 64 of H 256): a repeatable executor's
    replayed phase 2 (its memoised plan over the stream's scratch), a second executor over other buffers, and the
    first re-pointed at the second's inputs, each equal to the reference for its own inputs, bit for bit."""
    from tests.rocm.test_mc2_dispatch_plan_cpu import _args, _free, _prepare, _run

    bs, hidden = (64, 256) if EMULATED else (4096, 2048)
    first, second = (_args(seed, bs, hidden, 8, 64) for seed in (61, 62))
    runner = b.runners["mc2"]  # type: ignore[attr-defined]
    runner.forced_route, runner.forced_rows = route, rows
    one, two = _prepare(b, first), _prepare(b, second)  # type: ignore[arg-type]
    try:
        cases = [(one, first), (one, first), (two, second), (one, second)]
        for i, (call, args) in enumerate(cases):
            if i == 3:  # re-point one's inputs at two's: one must compute second's inputs into its own outputs
                for name in ("x", "expertIds", "xActiveMaskOptional", "expertScalesOptional"):
                    assert aclnn.aclSetRawTensorAddr(one.arrays[name].tensor(), two.arrays[name].address) == 0
            _run(call)
            b.runtime.synchronize_stream(None)
            key = 61 if args is first else 62
            if key not in _REPLAY_WANT:  # the reference once per input set for every (route, rows)
                _REPLAY_WANT[key] = eager.run("MoeDistributeDispatchV2", reference, **args)
            want = _REPLAY_WANT[key]
            for name, value in want.items():
                got = call.outs[name].numpy()
                assert np.array_equal(_bits(got), _bits(value)), f"call {i} route {route} rows {rows}: {name} differs"
    finally:
        runner.forced_route = runner.forced_rows = None
        b.runtime.synchronize_stream(None)
        _free(one, two)


def _round_trip(b: Backend, reference: Backend, v1: bool, quant: bool) -> None:
    """Dispatch at serving size, a stand-in expert, combine: each equal to the reference bit for bit."""
    from acl_core.spec.ops.mc2 import _names

    n = _names(v1)
    dispatch, combine = (
        ("MoeDistributeDispatch", "MoeDistributeCombine")
        if v1
        else (
            "MoeDistributeDispatchV2",
            "MoeDistributeCombineV2",
        )
    )
    args = _dispatch_sizes(v1, quant)
    got = eager.run(dispatch, b, **args)
    want = eager.run(dispatch, reference, **args)
    for name, value in want.items():
        assert np.array_equal(_bits(got[name]), _bits(value)), f"{dispatch}: {name} differs"
    if quant:
        return
    y = (want[n["expandX"]].astype(np.float64) * 0.5).astype(want[n["expandX"]].dtype)
    c = {"expandX": y, "expertIds": args["expertIds"], n["assistIn"]: want[n["assist"]]}
    c |= {"epSendCounts": want[n["epRecvCounts"]], "expertScales": args[n["expertScales"]]}
    c |= {n["tpSendCounts"]: None, n["xActiveMask"]: args[n["xActiveMask"]], n["activationScale"]: None}
    c |= {n["weightScale"]: None, n["groupList"]: None, n["expandScales"]: None}
    c |= {k: args[k] for k in ("groupEp", "epWorldSize", "epRankId", "moeExpertNum", "groupTp", "tpWorldSize")}
    c |= {"tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0, "sharedExpertRankNum": 0, "globalBs": 0}
    c |= {"outDtype": 0, "commQuantMode": 0, "groupListType": 0}
    if not v1:
        c |= {"sharedExpertXOptional": None, "commAlg": None}
    out = eager.run(combine, b, **c)[n["xOut"]]
    assert np.array_equal(_bits(out), _bits(eager.run(combine, reference, **c)[n["xOut"]])), combine


@pytest.mark.parametrize("route", ["block", "grid"])
def test_moe_distribute_refusals_seen_only_by_the_kernels_are_161002(b: Backend, route: str) -> None:
    """An expert id of moeExpertNum, and counts past A: the deferred device check, at synchronisation."""

    b.runners["mc2"].forced_route = route  # type: ignore[attr-defined]
    try:
        _refusals(b)
    finally:
        b.runners["mc2"].forced_route = None  # type: ignore[attr-defined]


def _refusals(b: Backend) -> None:
    """Each error sample that only the kernels can see is refused with 161002."""
    from acl_core.errors import AclnnError

    for op in ("MoeDistributeDispatchV2", "MoeDistributeCombine", "MoeDistributeCombineV2"):
        spec = get_spec(op)
        for sample in spec.error_samples(np.random.default_rng(7)):  # type: ignore[misc]
            if "when it runs" not in sample.note:
                continue
            with pytest.raises(AclnnError) as err:
                eager.run(op, b, **sample.args)
            assert err.value.code == 161002, f"{op} {sample.note}"


def test_moe_distribute_captures_and_replays_bit_for_bit(b: Backend) -> None:
    """Dispatch and combine inside one captured graph (NCCL all-gathers, stream-ordered temporaries, the device
    check's slab), replayed with two input sets, equal their eager runs: nothing in phase 2 waits for the host."""
    from tests.rocm.capture_harness import OpCall, compare_replay

    if EMULATED:
        pytest.skip("the emulator's HostNccl copies when it is called, on the host: a graph cannot record it")
    if not b.capabilities().stream_capture:
        pytest.fail(f"rocm does not capture here: {b.capabilities().notes.get('stream_capture')}")
    dispatch = dict(_samples("MoeDistributeDispatchV2")[-1].args)
    combine = dict(_samples("MoeDistributeCombineV2")[-1].args)
    calls = [OpCall(b, "MoeDistributeDispatchV2", dispatch), OpCall(b, "MoeDistributeCombineV2", combine)]
    stream = b.runtime.create_stream()  # type: ignore[attr-defined]
    try:
        b.driver.graph_destroy(compare_replay(calls, stream))  # type: ignore[attr-defined]
    finally:
        for c in calls:
            c.free()
        b.runtime.destroy_stream(stream)  # type: ignore[attr-defined]
