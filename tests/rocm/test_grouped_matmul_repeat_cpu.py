"""GroupedMatmulV5's repeated calls on the rocm backend, on a CPU (issue 18).

A repeatable executor's phase 2 builds its launches once per signature (the plan, the descriptor rows, the kernel
lookups, the packed arguments) and then only allocates the call's descriptor table, takes a check flag and
launches. These tests pin that down on the fake provider (what a repeated call asks of the provider and of the
planner) and check on the kernel emulator that what a call reads per call still is read per call: the device
group list's values (a bad one still fails at synchronisation), rebound addresses (a fresh plan), the forced
kernel switch.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.aclnn import aclSetAclOpExecutorRepeatable, execute, get_workspace_size
from acl_core.backend import Backend
from acl_core.eager import DeviceArray, to_device
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.opspec import Kind
from acl_core.spec.runtime import CopyDirection
from acl_core.tensor import AclTensorList
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import handle
from acl_rocm.kernels.grouped_matmul import FILL_GROUPS
from tests.rocm.capture_harness import replays_like_eager
from tests.rocm.fake_provider import FakeProvider

OP = "GroupedMatmulV5"
SPEC = get_spec(OP)


class _Call:
    """One GroupedMatmulV5 call of M-axis groups (device counts) after phase 1, its executor repeatable."""

    def __init__(
        self, backend: RocmBackend, counts: list[int], k: int, n: int, seed: int = 0, dtype: Any = np.float16
    ) -> None:
        rng = np.random.default_rng(seed)
        m = sum(counts) + 3  # the last 3 rows no group covers
        self.backend = backend
        self.x = rng.uniform(-1, 1, (m, k)).astype(dtype)
        self.w = rng.uniform(-1, 1, (len(counts), k, n)).astype(dtype)
        self.arrays = {
            "x": to_device(self.x, backend),
            "weight": to_device(self.w, backend),
            "list": to_device(np.array(counts, np.int64), backend),
            "out": to_device(np.zeros((m, n), dtype), backend),
        }
        self.lists = {name: AclTensorList.create([self.arrays[name].tensor()]) for name in ("x", "weight", "out")}
        args: dict[str, Any] = dict.fromkeys(p.name for p in SPEC.params)
        args |= self.lists | {"groupListOptional": self.arrays["list"].tensor()}
        args |= {"splitItem": 3, "groupType": 0, "groupListType": 1, "actType": 0}
        self.size, self.executor = get_workspace_size(SPEC, [], args, backend=backend)
        assert self.size == 0 and aclSetAclOpExecutorRepeatable(self.executor) == 0
        self.stream = handle(backend.runtime.stream(None))

    def __call__(self) -> None:
        execute(SPEC, None, self.size, self.executor, None)

    def sync(self) -> None:
        self.backend.driver.synchronize_stream(self.stream)

    def write(self, name: str, values: np.ndarray) -> None:
        """New values into the device array ``name`` (same address)."""
        a = self.arrays[name]
        host = np.ascontiguousarray(values)
        self.backend.provider.memcpy(a.address, host.ctypes.data, host.nbytes, CopyDirection.HOST_TO_DEVICE, None)

    def expected(self, counts: list[int], x: np.ndarray | None = None) -> np.ndarray:
        """The grouped product of ``counts`` over ``x`` (default: the call's), rows past the groups zero."""
        x = self.x if x is None else x
        out = np.zeros((x.shape[0], self.w.shape[2]), np.float64)
        start = 0
        for g, c in enumerate(counts):
            out[start : start + c] = x[start : start + c].astype(np.float64) @ self.w[g].astype(np.float64)
            start += c
        return out


def _close(got: DeviceArray, want: np.ndarray) -> None:
    """fp16 products of at most a few dozen terms, rounded once."""
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, atol=2e-2, rtol=1e-2)


class _Watched(FakeProvider):
    """The fake provider counting what phase 2 asks of it, with each launch's argument bytes kept."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.counts: Counter[str] = Counter()
        self.tables: list[int] = []

    def malloc_async(self, nbytes: int, stream: int) -> int:
        self.counts["malloc_async"] += 1
        address = super().malloc_async(nbytes, stream)
        self.tables.append(address)
        return address

    def free_async(self, address: int, stream: int) -> None:
        self.counts["free_async"] += 1
        super().free_async(address, stream)

    def launcher(self, *args: Any, **kwargs: Any) -> Any:
        self.counts["launcher"] += 1
        return super().launcher(*args, **kwargs)


def test_a_repeated_call_plans_and_packs_nothing_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provider = _Watched()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    runner = backend.grouped_matmul
    counts = [5, 0, 7] * 12  # 36 groups: three fill launches
    call = _Call(backend, counts, 8, 16)
    work: Counter[str] = Counter()
    for name, owner in (("plan", runner), ("gemm", runner), ("function", backend)):
        real = getattr(owner, name)

        def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            work[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
    flags: list[int] = []
    real_flag = backend.driver.check_flag

    def flag(stream: int) -> int:
        flags.append(real_flag(stream))
        return flags[-1]

    monkeypatch.setattr(backend.driver, "check_flag", flag)
    call()
    assert work["plan"] == 1 and work["gemm"] == 1 and work["function"] == -(-len(counts) // FILL_GROUPS) + 2
    kinds = [launch.name.split("_")[2] for launch in provider.launches]
    path = runner.last_path  # wgmma: the fake is an sm_90 with an sm_90a target
    assert kinds == ["fill"] * 3 + ["prep", path] and path in ("wgmma", "mma")
    first = provider.launches[-1]
    for i in range(3):
        work.clear()
        provider.counts.clear()
        provider.launches.clear()
        call()
        assert not work, f"call {i + 2} planned again: {dict(work)}"
        assert dict(provider.counts) == {"malloc_async": 1, "free_async": 1}  # the table; nothing bound again
        assert [launch.name for launch in provider.launches][-1] == first.name and len(provider.launches) == 5
        table, flag_at = provider.tables[-1], flags[-1]
        for launch in provider.launches[:3]:  # the fills write this call's table
            assert int.from_bytes(launch.args[1], "little") == table
        prep, gemm = provider.launches[3:]
        assert [int.from_bytes(a, "little") for a in prep.args[2:]] == [table, flag_at]
        assert [int.from_bytes(a, "little") for a in gemm.args[1:]] == [table, flag_at]
        assert gemm.grid == first.grid and gemm.args[0] == first.args[0]
        assert runner.last_path == path
    assert len(set(flags)) == len(flags)  # a fresh slot of the stream's slab every call
    call.sync()


def test_a_forced_kernels_refusal_is_reported_by_every_call(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    runner = backend.grouped_matmul
    call = _Call(backend, [4, 4], 8, 16, dtype=np.float32)  # fp32: no wgmma kernel
    runner.forced_kernel = "wgmma"
    try:
        call()
        why = runner.last_refusal
        assert runner.last_path == "simt" and why
        for _ in range(2):
            runner.last_refusal = None
            call()  # the kept launches
            assert runner.last_path == "simt" and runner.last_refusal == why
        runner.forced_kernel = None
        runner.last_refusal = "left alone"
        call()
        assert runner.last_path == "simt" and runner.last_refusal == "left alone"  # auto reports no refusal
    finally:
        runner.forced_kernel = None
    call.sync()


def test_group_list_values_are_read_every_call(emulated: RocmBackend) -> None:
    counts = [3, 0, 70, 1, 5]
    call = _Call(emulated, counts, 24, 40, seed=1)
    call()
    call.sync()
    _close(call.arrays["out"], call.expected(counts))
    moved = [0, 40, 30, 6, 3]  # the same number of rows, cut elsewhere
    call.write("list", np.array(moved, np.int64))
    call.write("out", np.zeros(call.expected(moved).shape, np.float16))
    call()
    call.sync()
    _close(call.arrays["out"], call.expected(moved))
    call.write("list", np.array([3, 0, 90, 1, 5], np.int64))  # beyond M: refused at synchronisation
    call()
    with pytest.raises(AclnnError) as err:
        call.sync()
    assert err.value.code == 161002 and "groupListOptional" in str(err.value)
    call.write("list", np.array(counts, np.int64))
    call.write("out", np.zeros(call.expected(counts).shape, np.float16))
    call()
    call.sync()  # the plan kept, no check left armed
    _close(call.arrays["out"], call.expected(counts))


def test_rebound_addresses_are_planned_again(emulated: RocmBackend) -> None:
    counts = [10, 0, 21, 4]
    call = _Call(emulated, counts, 16, 24, seed=2)
    call()
    call.sync()
    _close(call.arrays["out"], call.expected(counts))
    other_x = np.random.default_rng(3).uniform(-1, 1, call.x.shape).astype(np.float16)
    moved_x = to_device(other_x, emulated)
    moved_out = to_device(np.zeros(call.expected(counts).shape, np.float16), emulated)
    ex = call.executor
    lists = [p.name for p in SPEC.params if p.kind in (Kind.TENSOR, Kind.TENSOR_LIST)]  # aclSetDynamicTensorAddr's
    assert aclnn.aclSetDynamicTensorAddr(ex, lists.index("x"), 0, call.lists["x"], moved_x.address) == 0
    assert aclnn.aclSetDynamicTensorAddr(ex, lists.index("out"), 0, call.lists["out"], moved_out.address) == 0
    before = call.arrays["out"].numpy().copy()
    call()
    call.sync()
    _close(moved_out, call.expected(counts, other_x))
    np.testing.assert_array_equal(call.arrays["out"].numpy(), before)  # the old output left alone
    moved_x.free()
    moved_out.free()


def test_the_forced_kernel_switch_applies_to_a_repeated_call(emulated: RocmBackend, reference: Backend) -> None:
    del reference
    counts = [9, 2, 0, 30]
    call = _Call(emulated, counts, 16, 24, seed=4)
    runner = emulated.grouped_matmul
    try:
        for forced, path in ((None, "mma"), ("simt", "simt"), (None, "mma"), ("simt", "simt")):
            runner.forced_kernel = forced
            call.write("out", np.zeros(call.expected(counts).shape, np.float16))
            call()
            call.sync()
            assert runner.last_path == path
            _close(call.arrays["out"], call.expected(counts))
    finally:
        runner.forced_kernel = None


def test_a_kept_program_replays_under_capture(emulated: RocmBackend) -> None:
    """Eager twice, then captured and replayed twice (the inputs and the group list rotated for the second set):
    the capture runs the launches the eager calls kept, bit for bit like them."""
    rng = np.random.default_rng(5)
    counts = [9, 2, 0, 30]
    args = {
        "x": [rng.uniform(-1, 1, (44, 16)).astype(np.float16)],
        "weight": [rng.uniform(-1, 1, (4, 16, 24)).astype(np.float16)],
        "groupListOptional": np.array(counts, np.int64),
        "out": [np.zeros((44, 24), np.float16)],
        "splitItem": 3,
        "groupType": 0,
        "groupListType": 1,
        "actType": 0,
    }
    replays_like_eager(emulated, OP, args)
