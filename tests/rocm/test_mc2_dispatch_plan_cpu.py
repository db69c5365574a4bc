"""MoeDistributeDispatch's per-signature plan (``Launch.memo``) on the rocm backend, without a GPU.

A repeated phase 2 replays the packed launches over the stream's scratch: nothing is allocated but the call's
check flag, and only the flag moves between two calls' launches. A second executor over other buffers, and an
executor whose tensors are re-pointed (aclSetRawTensorAddr), get plans of their own: their launches carry their
addresses, and on the kernel emulator their outputs equal the reference's for their own inputs (a stale plan
would gather the first call's rows and ids).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import aclnn, eager
from acl_core.aclnn import AclOpExecutor, execute, get_workspace_size
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.mc2 import dispatch_args
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import handle
from acl_rocm.kernels.mc2 import SEGMENT, DispatchPlace, DispatchRoute, DispatchRows
from acl_rocm.ops.mc2_dispatch import ROWS_REGION, TABLES_REGION
from tests.rocm.test_mc2_cpu import EmulatedLoggedProvider, LoggedProvider, _backend, emulated_backend

OP = "MoeDistributeDispatchV2"


@dataclass
class CountingProvider(LoggedProvider):
    """The logged fake provider (HostNccl, recorded launches), counting stream-ordered allocations."""

    allocated: list[int] = field(default_factory=list)

    def malloc_async(self, nbytes: int, stream: int) -> int:
        address = super().malloc_async(nbytes, stream)
        self.allocated.append(address)
        return address


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[RocmBackend, CountingProvider]]:
    provider = CountingProvider(blas=True)
    for backend in _backend(provider, tmp_path):
        yield backend, provider


@pytest.fixture
def emulated(tmp_path: Path) -> Iterator[tuple[RocmBackend, EmulatedLoggedProvider]]:
    yield from emulated_backend(tmp_path)


def _args(seed: int, bs: int = 6, hidden: int = 16, k: int = 2, experts: int = 4) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    args = dispatch_args(rng, bs, hidden, k, experts, D.ACL_BF16)
    args["xActiveMaskOptional"] = rng.random((bs, k)) < 0.8
    args["expertScalesOptional"] = rng.uniform(0, 1, (bs, k)).astype(np.float32)
    return args


@dataclass
class Call:
    """A repeatable executor over device copies of ``args`` and device outputs shaped like the reference's."""

    executor: AclOpExecutor
    size: int
    arrays: dict[str, Any]
    outs: dict[str, Any]


def _prepare(backend: RocmBackend, args: dict[str, Any]) -> Call:
    spec = get_spec(OP)
    shapes = eager.run(OP, acl_core.get_backend("reference"), **args)
    arrays = {n: eager.to_device(v, backend) for n, v in args.items() if isinstance(v, np.ndarray)}
    outs = {n: eager.empty(v.shape, from_numpy(v.dtype), backend) for n, v in shapes.items()}
    call = {**args, **{n: a.tensor() for n, a in arrays.items()}, **{n: o.tensor() for n, o in outs.items()}}
    for p in spec.params:
        call.setdefault(p.name, None)
    size, executor = get_workspace_size(spec, [], call, backend=backend)
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    return Call(executor, size, arrays, outs)


def _free(*calls: Call) -> None:
    """Destroy the executors and free every device array of ``calls``."""
    for call in calls:
        assert aclnn.aclDestroyAclOpExecutor(call.executor) == 0
        for array in (*call.arrays.values(), *call.outs.values()):
            array.free()


def _run(call: Call, stream: Any = None) -> None:
    execute(get_spec(OP), None, call.size, call.executor, stream)


def _pointers(launch_args: list[bytes]) -> set[int]:
    return {struct.unpack("<Q", a)[0] for a in launch_args if len(a) == 8}


def _force(backend: RocmBackend, route: str) -> None:
    runner = backend.runners["mc2"]  # type: ignore[attr-defined]
    runner.forced_route = route
    runner.route_segment = 3 if route == "grid" else SEGMENT  # several units a pair on these small calls


@pytest.mark.parametrize("route", ["block", "grid"])
def test_a_repeated_dispatch_replays_its_launches_with_only_a_fresh_flag(fake: Any, route: str) -> None:
    backend, provider = fake
    _force(backend, route)
    call = _prepare(backend, _args(1))
    _run(call)
    memo = call.executor.call.memo
    segment = 3 if route == "grid" else SEGMENT
    assert [k for k in memo if k.startswith("rocm.mc2.dispatch@")] == [f"rocm.mc2.dispatch@0:{route}:range:{segment}"]
    first = list(provider.launches)
    gathers = [e for e in provider.events if e[0] == "all_gather"]
    allocated = len(provider.allocated)
    _run(call)
    second = provider.launches[len(first) :]
    assert len(provider.allocated) == allocated, "a repeated call allocates nothing (its flag is a slab slot)"
    assert [e for e in provider.events if e[0] == "all_gather"][len(gathers) :] == gathers
    assert [launch.name for launch in second] == [launch.name for launch in first]
    flags = {a for launch in second for a in _pointers(launch.args)} - {
        a for launch in first for a in _pointers(launch.args)
    }
    stream = backend.runtime.stream(None)
    slab = backend.driver._eager[handle(stream)].active[-1]
    assert flags == {slab.base + 4 * (len(slab.messages) - 1)}, "only the check flag moves (to the next slot)"
    tables = backend.driver.stream_scratch(stream, 1, TABLES_REGION)
    rows = backend.driver.stream_scratch(stream, 1, ROWS_REGION)
    assert {e[2] for e in gathers} <= set(range(tables, tables + 4096 * 16)) | set(range(rows, rows + 4096 * 16))
    backend.runtime.synchronize_stream(None)


@pytest.mark.parametrize("route", ["block", "grid"])
def test_another_executor_or_a_rebinding_is_not_served_the_first_ones_plan(fake: Any, route: str) -> None:
    backend, provider = fake
    _force(backend, route)
    one, two = _prepare(backend, _args(1)), _prepare(backend, _args(2))
    _run(one)
    memo = one.executor.call.memo
    start = len(provider.launches)
    _run(two)
    assert two.executor.call.memo is not memo
    seen = {a for launch in provider.launches[start:] for a in _pointers(launch.args)}
    assert two.outs["expandXOut"].address in seen and one.outs["expandXOut"].address not in seen
    sends = [e[1] for e in provider.events if e[0] == "all_gather"][-4:]
    assert two.arrays["x"].address in sends and one.arrays["x"].address not in sends
    other = eager.empty(one.outs["expandXOut"].shape, D.ACL_BF16, backend)
    assert aclnn.aclSetRawTensorAddr(one.outs["expandXOut"].tensor(), other.address) == 0
    start = len(provider.launches)
    _run(one)
    assert one.executor.call.memo is not memo, "a rebinding revalidates and plans again"
    seen = {a for launch in provider.launches[start:] for a in _pointers(launch.args)}
    assert other.address in seen and one.outs["expandXOut"].address not in seen
    backend.runtime.synchronize_stream(None)


@pytest.mark.parametrize("route", ["block", "grid"])
def test_on_the_emulator_a_second_executor_and_a_rebound_one_compute_their_own_inputs(
    emulated: Any, route: str
) -> None:
    backend, _ = emulated
    _force(backend, route)
    reference = acl_core.get_backend("reference")
    first, second = _args(3), _args(4)
    one, two = _prepare(backend, first), _prepare(backend, second)
    for call, args in ((one, first), (one, first), (two, second)):
        _run(call)
        backend.runtime.synchronize_stream(None)
        want = eager.run(OP, reference, **args)
        for name, value in want.items():
            np.testing.assert_array_equal(call.outs[name].numpy(), value, err_msg=f"{route} {name}")
    # re-point one's x and expertIds at two's: one now computes second's inputs into its own outputs
    for name in ("x", "expertIds", "xActiveMaskOptional", "expertScalesOptional"):
        assert aclnn.aclSetRawTensorAddr(one.arrays[name].tensor(), two.arrays[name].address) == 0
    _run(one)
    backend.runtime.synchronize_stream(None)
    want = eager.run(OP, reference, **second)
    for name, value in want.items():
        np.testing.assert_array_equal(one.outs[name].numpy(), value, err_msg=f"{route} rebound {name}")


@pytest.mark.parametrize("route", ["block", "grid"])
@pytest.mark.parametrize("layout", ["contiguous", "padded"])
def test_the_assist_zeros_go_as_16_byte_words_only_on_a_dense_aligned_table(
    emulated: Any, route: str, layout: str
) -> None:
    """assistInfoForCombine dense and 16-byte aligned: the routing kernel's vector zeros; padded (offset): the
    element zeros; both equal the reference."""
    from tests.rocm.against_reference import assert_matches_reference

    backend, provider = emulated
    _force(backend, route)
    args = _args(5, bs=9, hidden=8, k=3, experts=8)
    assert_matches_reference(backend, acl_core.get_backend("reference"), OP, args, layout, layout)
    kernel = (
        DispatchRoute(False, layout == "contiguous")
        if route == "block"
        else DispatchPlace(False, layout == "contiguous")
    )
    names = {e[3] for e in provider.events if e[0] == "kernel"}
    assert kernel.kernel_name in names, (route, layout)


@pytest.mark.parametrize("route", ["block", "grid"])
@pytest.mark.parametrize("op", ["MoeDistributeDispatch", "MoeDistributeDispatchV2"])
def test_acl_mc2_rows_row_copies_every_sample_like_the_reference(emulated: Any, op: str, route: str) -> None:
    """ACL_MC2_ROWS=row (forced on the runner): every sample, contiguous (16-byte words or elements), padded and
    transposed (rows that are not contiguous runs: RangeGather, logged), equals the reference; the row kernel ran
    for the contiguous unquantised samples."""
    from tests.rocm.against_reference import assert_matches_reference

    backend, provider = emulated
    _force(backend, route)
    runner = backend.runners["mc2"]  # type: ignore[attr-defined]
    runner.forced_rows = "row"
    reference = acl_core.get_backend("reference")
    try:
        for sample in get_spec(op).samples(np.random.default_rng(2026)):  # type: ignore[misc]
            for layout in ("contiguous", "padded", "transposed"):
                provider.events.clear()
                assert_matches_reference(backend, reference, op, dict(sample.args), layout, sample.note)
                kernels = {e[3] for e in provider.events if e[0] == "kernel"}
                rows = any("_mc2_dispatch_rows_" in name for name in kernels)
                quant = int(sample.args["quantMode"]) == 2
                assert rows == (layout != "transposed" and not quant), (sample.note, layout, kernels)
    finally:
        runner.forced_rows = None


def test_acl_mc2_rows_refuses_an_unknown_value(fake: Any) -> None:
    from acl_core.errors import AclError

    backend, _ = fake
    backend.environ["ACL_MC2_ROWS"] = "rows"
    try:
        with pytest.raises(AclError, match="ACL_MC2_ROWS"):
            backend.runners["mc2"].rows_copy()  # type: ignore[attr-defined]
    finally:
        del backend.environ["ACL_MC2_ROWS"]


def test_the_bench_times_acl_mc2_rows_row_beside_the_default(emulated: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ops bench's DispatchV2 rows at both sizes: the routes, then ACL_MC2_ROWS=row forced (and released after),
    the row kernel running on the emulator only in its row."""
    torch = pytest.importorskip("torch")
    from acl_tools.bench import moe_rows
    from tests.rocm.test_bench_variant_rows_cpu import _suite

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the emulated GPU's torch side runs on the CPU
    backend, provider = emulated
    suite = _suite(backend, {OP})
    monkeypatch.setattr(moe_rows, "DISPATCH_DECODE_TOKENS", 4)
    idx = np.stack([np.random.default_rng(i).choice(8, 2, replace=False) for i in range(16)]).astype(np.int32)
    ran: list[bool] = []
    real = moe_rows._dispatch_row

    def watched(*args: Any) -> None:
        provider.events.clear()
        real(*args)
        ran.append(any("_mc2_dispatch_rows_" in e[3] for e in provider.events if e[0] == "kernel"))

    monkeypatch.setattr(moe_rows, "_dispatch_row", watched)
    moe_rows._distribute(suite, 16, 32, 2, 8, idx)  # type: ignore[arg-type]
    notes = [c.note.split(";")[0] for c in suite.cases if c.op == OP]  # type: ignore[attr-defined]
    routes = ["", "ACL_MC2_ROUTE=block", "ACL_MC2_ROUTE=grid"]
    assert [n if n.startswith("ACL_") else "" for n in notes] == [*routes, "ACL_MC2_ROWS=row"] * 2
    assert ran == [False, False, False, True] * 2
    assert {c.status for c in suite.cases} == {"ok"}  # type: ignore[attr-defined]
    assert backend.runners["mc2"].forced_rows is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("hidden", [5, 24])
def test_acl_mc2_rows_row_copies_odd_rows_by_elements_and_even_ones_by_16_byte_words(
    emulated: Any, hidden: int
) -> None:
    """bf16 rows of 5 (10 bytes: 2-byte elements) and 24 (48 bytes: 16-byte words), more rows than blocks' worth
    of zero rows after the routed ones, equal the reference under ACL_MC2_ROWS=row."""
    from tests.rocm.against_reference import assert_matches_reference

    backend, provider = emulated
    runner = backend.runners["mc2"]  # type: ignore[attr-defined]
    runner.forced_rows = "row"
    try:
        args = _args(7, bs=12, hidden=hidden, k=3, experts=8)
        provider.events.clear()
        assert_matches_reference(backend, acl_core.get_backend("reference"), OP, args, "contiguous", str(hidden))
    finally:
        runner.forced_rows = None
    word = 16 if hidden * 2 % 16 == 0 else 2
    names = {e[3] for e in provider.events if e[0] == "kernel"}
    assert DispatchRows(word).kernel_name in names, (hidden, names)


def test_a_plan_binds_another_stream_with_the_addresses_it_was_planned_with(fake: Any) -> None:
    """A binding made later (another stream) packs the planned addresses, not those of a tensor object that was
    re-pointed meanwhile (the re-pointed executor plans anew; this plan stays its signature's)."""
    backend, provider = fake
    _force(backend, "grid")
    call = _prepare(backend, _args(1))
    _run(call)
    (plan,) = [v for k, v in call.executor.call.memo.items() if k.startswith("rocm.mc2.dispatch@")]
    out = call.executor.call.args["expandXOut"]
    planned, other = out.data, eager.empty(call.outs["expandXOut"].shape, D.ACL_BF16, backend)
    out.data = other.address  # what aclSetRawTensorAddr does to the shared tensor object
    try:
        stream = backend.runtime.create_stream()
        start = len(provider.launches)
        plan.run(int(stream))
        seen = {a for launch in provider.launches[start:] for a in _pointers(launch.args)}
        assert planned in seen and other.address not in seen
        assert len(plan.bindings) == 2
        backend.runtime.synchronize_stream(stream)
        backend.runtime.destroy_stream(stream)
    finally:
        out.data = planned
    backend.runtime.synchronize_stream(None)
