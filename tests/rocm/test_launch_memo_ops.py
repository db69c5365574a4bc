"""Matmul, attention and movement reuse their launch plans per signature; per-call temporaries stay per call."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn
from acl_core.aclnn import execute, get_workspace_size
from acl_core.dtypes import DataType as D
from acl_core.eager import to_device
from acl_core.formats import Format
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.driver import handle
from tests.rocm.fake_provider import FakeProvider


class CountingProvider(FakeProvider):
    """The fake provider, counting stream-ordered allocations and frees."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.allocated: list[int] = []
        self.released: list[int] = []

    def malloc_async(self, nbytes: int, stream: int) -> int:
        address = super().malloc_async(nbytes, stream)
        self.allocated.append(address)
        return address

    def free_async(self, address: int, stream: int) -> None:
        self.released.append(address)
        super().free_async(address, stream)


@pytest.fixture
def fake(tmp_path: Path) -> tuple[RocmBackend, CountingProvider]:
    provider = CountingProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend, provider


def _pointers(launch_args: list[bytes]) -> set[int]:
    return {struct.unpack("<Q", a)[0] for a in launch_args if len(a) == 8}


def _repeatable(op: str, args: list[Any], backend: RocmBackend) -> tuple[int, aclnn.AclOpExecutor]:
    size, executor = get_workspace_size(get_spec(op), args, backend=backend)
    assert aclnn.aclSetAclOpExecutorRepeatable(executor) == 0
    return size, executor


@pytest.mark.parametrize("gathered", [False, True])
def test_matmul_reuses_its_gemm_call_and_keeps_temporaries_per_call(fake, gathered: bool) -> None:
    backend, provider = fake
    rng = np.random.default_rng(0)
    a_host = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    b_host = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    a, b = to_device(a_host, backend), to_device(b_host, backend)
    out, other = (to_device(np.zeros((4, 3), np.float32), backend) for _ in range(2))
    cube = 3 if gathered else 0  # USE_HF32 on fp32: the operands are rounded into temporaries first
    spec = get_spec("Mm")
    size, executor = _repeatable("Mm", [a.tensor(), b.tensor(), out.tensor(), cube], backend)
    for _ in range(2):
        execute(spec, None, size, executor, None)
    first, second = provider.gemms[-2:]
    memo = executor.call.memo
    assert [k for k in memo if k.startswith("rocm.matmul")], "the runner records its plan"
    if gathered:
        assert next(v for k, v in memo.items() if k.startswith("rocm.matmul")) is None  # planned per call
    else:
        assert first == second and first.d.address == out.address
    assert len(provider.allocated) == 2 * (3 if gathered else 1), "workspace (and gathers) allocated per call"
    assert sorted(provider.allocated) == sorted(provider.released), "every temporary is freed"
    if not gathered:  # the fake BLAS computes; the fake kernels (the gathers) only record
        got = np.frombuffer(ctypes.string_at(out.address, 48), np.float32).reshape(4, 3)
        np.testing.assert_allclose(got, a_host @ b_host, rtol=1e-5, atol=1e-6)
    assert aclnn.aclSetRawTensorAddr(out.tensor(), other.address) == 0
    execute(spec, None, size, executor, None)
    if not gathered:
        assert provider.gemms[-1].d.address == other.address
    assert executor.call.memo is not memo


def test_an_index_op_reuses_its_launches_with_a_fresh_check_flag_per_call(fake) -> None:
    backend, provider = fake
    weight = to_device(np.ones((8, 4), np.float32), backend)
    ids = to_device(np.array([1, 3, 5], np.int64), backend)
    out = to_device(np.zeros((3, 4), np.float32), backend)
    spec = get_spec("Embedding")
    size, executor = _repeatable("Embedding", [weight.tensor(), ids.tensor(), out.tensor()], backend)
    stream = handle(backend.runtime.stream(None))
    flags = []
    for _ in range(2):  # no synchronisation between: the second call takes the next slot of the stream's slab
        before = len(provider.launches)
        execute(spec, None, size, executor, None)
        slab = backend.driver._eager[stream].active[-1]
        flags.append(slab.base + 4 * (len(slab.messages) - 1))
        (take,) = provider.launches[before:]  # three ids: checked inside the gather's blocks
        assert flags[-1] in _pointers(take.args)
        assert out.address in _pointers(take.args)
    assert flags[1] == flags[0] + 4
    assert provider.allocated == [], "no stream-ordered allocation per call: the flag is a slab slot"
    backend.driver.synchronize_stream(stream)
    first, second = provider.launches[-2].args, provider.launches[-1].args
    at = first.index(flags[0].to_bytes(8, "little"))
    assert second[at] == flags[1].to_bytes(8, "little")
    assert first[:at] + first[at + 1 :] == second[:at] + second[at + 1 :]  # same take, only the flag moves


def _foreach_add(backend: RocmBackend, n: int, members: int = 3) -> tuple[int, aclnn.AclOpExecutor, list[Any]]:
    lists = [[to_device(np.full(n, float(i), np.float32), backend) for i in range(members)] for _ in range(3)]
    x1, x2, out = ([a.tensor() for a in lst] for lst in lists)
    alpha = to_device(np.ones(1, np.float32), backend)
    listed = [aclnn.aclCreateTensorList(t) for t in (x1, x2, out)]
    args = [listed[0], listed[1], alpha.tensor(), listed[2]]
    size, executor = _repeatable("ForeachAddList", args, backend)
    return size, executor, [*lists, alpha]


def test_foreach_replays_its_launches_per_signature_and_replans_per_setting(fake, monkeypatch) -> None:
    """A repeated ForeachAddList reuses its packed slot tables (no re-tabling on the host); another list, or
    another ACL_FOREACH_CONFIG, gets its own."""
    backend, provider = fake
    spec = get_spec("ForeachAddList")
    size, executor, keep = _foreach_add(backend, 5000)
    execute(spec, None, size, executor, None)
    first = provider.launches[-1]
    runner = backend.foreach  # type: ignore[attr-defined]
    tabled = runner._chunk

    def no_tabling(*args: Any) -> None:
        raise AssertionError("a repeated signature built its slot table again")

    monkeypatch.setattr(runner, "_chunk", no_tabling)
    execute(spec, None, size, executor, None)
    assert provider.launches[-1].args == first.args and provider.launches[-1].grid == first.grid
    monkeypatch.setattr(runner, "_chunk", tabled)
    other_size, other, keep_other = _foreach_add(backend, 5000)  # same shapes, other buffers
    execute(spec, None, other_size, other, None)
    table = provider.launches[-1].args[0]  # the slot table: every member's address
    assert all(a.address.to_bytes(8, "little") in table for a in keep_other[2]), "the other list's own outputs"
    assert not any(a.address.to_bytes(8, "little") in table for a in keep[2])
    runner.forced_config = "scan"  # a setting read per call: its own plan, one grid row
    try:
        execute(spec, None, size, executor, None)
    finally:
        runner.forced_config = None
    assert provider.launches[-1].grid[1] == 1 and first.grid[1] == 3


def test_foreach_with_a_gathered_member_stays_planned_per_call(fake) -> None:
    """A non-contiguous member is gathered into a temporary each call, so nothing of it is memoised."""
    backend, provider = fake
    base = to_device(np.ones((64, 2), np.float32), backend)
    column = aclnn.aclCreateTensor((64,), D.ACL_FLOAT, (2,), 0, Format.ACL_FORMAT_ND, (64, 2), base.address)
    dense = [to_device(np.ones(64, np.float32), backend) for _ in range(3)]
    alpha = to_device(np.ones(1, np.float32), backend)
    args = [
        aclnn.aclCreateTensorList([column]),
        aclnn.aclCreateTensorList([dense[0].tensor()]),
        alpha.tensor(),
        aclnn.aclCreateTensorList([dense[1].tensor()]),
    ]
    size, executor = _repeatable("ForeachAddList", args, backend)
    for _ in range(2):
        execute(get_spec("ForeachAddList"), None, size, executor, None)
    assert len(provider.allocated) == 2 and sorted(provider.allocated) == sorted(provider.released)
    assert not [k for k in executor.call.memo if k.startswith("rocm.foreach")]
