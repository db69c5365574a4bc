"""The nvidia provider makes one cuBLASLt plan per GEMM shape, reuses it and destroys it on eviction or close."""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

import pytest

from acl_rocm.providers import nvidia
from acl_rocm.providers.base import GemmCall, Matrix
from acl_rocm.providers.nvidia import NvidiaProvider


class FakeLt:
    """Records cuBLASLt calls; every create returns a fresh handle, every destroy is remembered."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.live: set[int] = set()
        self.next = 1000
        self.MatmulDescAttribute = SimpleNamespace(TRANSA=1, TRANSB=2, A_SCALE_POINTER=11, B_SCALE_POINTER=12)
        self.MatrixLayoutAttribute = SimpleNamespace(BATCH_COUNT=3, STRIDED_BATCH_OFFSET=4)
        self.MatmulPreferenceAttribute = SimpleNamespace(
            MAX_WORKSPACE_BYTES=5,
            MIN_ALIGNMENT_A_BYTES=6,
            MIN_ALIGNMENT_B_BYTES=7,
            MIN_ALIGNMENT_C_BYTES=8,
            MIN_ALIGNMENT_D_BYTES=9,
            REDUCTION_SCHEME_MASK=10,
        )
        self.ReductionScheme = SimpleNamespace(NONE=0, INPLACE=1, COMPUTE_TYPE=2, OUTPUT_TYPE=4)
        for name in ("matmul_desc", "matrix_layout", "matmul_preference"):
            setattr(self, f"get_{name}_attribute_dtype", lambda key: "int64")
            setattr(self, f"{name}_set_attribute", self._recorder(f"{name}_set_attribute"))

    def _recorder(self, name: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        record.__name__ = name
        return record

    def _create(self, name: str) -> int:
        self.next += 1
        self.live.add(self.next)
        self.calls.append((name, ()))
        return self.next

    def _destroy(self, value: int) -> None:
        self.live.remove(value)

    def create(self) -> int:
        return 1

    def matmul_desc_create(self, compute: int, scale: int) -> int:
        return self._create("matmul_desc_create")

    def matrix_layout_create(self, dtype: int, rows: int, cols: int, ld: int) -> int:
        return self._create("matrix_layout_create")

    def matmul_preference_create(self) -> int:
        return self._create("matmul_preference_create")

    matmul_desc_destroy = matrix_layout_destroy = matmul_preference_destroy = _destroy

    def MatmulHeuristicResult(self, n: int) -> Any:
        self.next += 1
        return SimpleNamespace(ptr=self.next)

    def matmul_algo_get_heuristic(self, *args: Any) -> None:
        self.calls.append(("heuristic", args))
        ctypes.c_int32.from_address(args[-1]).value = 1

    def matmul(self, *args: Any) -> None:
        self.calls.append(("matmul", args))

    def get_status_name(self, status: int) -> str:
        return f"STATUS_{status}"

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)


def _provider(lt: FakeLt) -> NvidiaProvider:
    provider = NvidiaProvider.__new__(NvidiaProvider)
    provider.__dict__.update(
        _blas=lt, _lock=threading.Lock(), _lt_handles={0: 1}, _scalars=None, _gemm_plans=OrderedDict()
    )
    provider.__dict__["_gemm_lock"] = threading.Lock()
    provider.get_device = lambda: 0  # type: ignore[method-assign]
    return provider


def _call(a: int, b: int, d: int, n: int = 64) -> GemmCall:
    return GemmCall(Matrix(a, 0, n, n, n), Matrix(b, 0, n, n, n), Matrix(d, 0, n, n, n))


def test_a_repeated_shape_reuses_its_plan_and_passes_each_calls_pointers() -> None:
    lt = FakeLt()
    provider = _provider(lt)
    provider.gemm(_call(0x1000, 0x2000, 0x3000), 0x9000, 1 << 20, 7)
    provider.gemm(_call(0x4000, 0x5000, 0x6000), 0xA000, 1 << 20, 8)
    assert lt.count("heuristic") == 1 and lt.count("matmul_desc_create") == 1
    assert lt.count("matrix_layout_create") == 3
    first, second = (args for name, args in lt.calls if name == "matmul")
    assert first[1] == second[1] and first[4] == second[4] and first[12] == second[12]  # desc, layout, algo
    assert (second[3], second[5], second[8], second[10]) == (0x4000, 0x5000, 0x6000, 0x6000)
    assert (second[13], second[15]) == (0xA000, 8)  # workspace, stream
    # a different alignment, workspace or shape is another plan
    provider.gemm(_call(0x4004, 0x5000, 0x6000), 0xA000, 1 << 20, 8)
    provider.gemm(_call(0x4000, 0x5000, 0x6000), 0xA000, 1 << 21, 8)
    provider.gemm(_call(0x4000, 0x5000, 0x6000, 32), 0xA000, 1 << 20, 8)
    assert lt.count("heuristic") == 4
    provider.close()
    assert not lt.live, "close destroys every descriptor, layout and preference"


def test_split_k_may_reduce_only_in_the_compute_type() -> None:
    lt = FakeLt()
    masks: list[int] = []

    def set_attribute(obj: int, key: int, address: int, size: int) -> None:
        if key == lt.MatmulPreferenceAttribute.REDUCTION_SCHEME_MASK:
            masks.append(ctypes.c_int64.from_address(address).value)  # read while the buffer is alive

    set_attribute.__name__ = "matmul_preference_set_attribute"
    lt.matmul_preference_set_attribute = set_attribute  # type: ignore[attr-defined]
    provider = _provider(lt)
    provider.gemm(_call(0x1000, 0x2000, 0x3000), 0x9000, 1 << 20, 7)
    assert masks == [lt.ReductionScheme.COMPUTE_TYPE], "no reduction in the (16-bit) output type nor in place"
    provider.close()


def test_eviction_destroys_the_least_recently_used_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    lt = FakeLt()
    provider = _provider(lt)
    monkeypatch.setattr(nvidia, "GEMM_PLAN_LIMIT", 2)
    for n in (8, 16, 8, 32):  # 16 is the least recently used when 32 arrives
        provider.gemm(_call(0x1000, 0x2000, 0x3000, n), 0x9000, 1 << 20, 7)
    assert lt.count("heuristic") == 3 and len(provider._gemm_plans) == 2
    assert len(lt.live) == 2 * 5  # two plans of desc + three layouts + preference
    provider.gemm(_call(0x1000, 0x2000, 0x3000, 8), 0x9000, 1 << 20, 7)
    assert lt.count("heuristic") == 3
    provider.close()
    assert not lt.live


def test_a_failed_heuristic_destroys_what_it_made() -> None:
    lt = FakeLt()
    lt.matmul_algo_get_heuristic = lambda *args: None  # type: ignore[method-assign]  # found stays 0
    provider = _provider(lt)
    with pytest.raises(Exception, match="no algorithm"):
        provider.gemm(_call(0x1000, 0x2000, 0x3000), 0x9000, 1 << 20, 7)
    assert not lt.live and not provider._gemm_plans


def test_a_bound_gemm_runs_its_plan_as_gemm_does_and_plans_again_after_an_eviction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lt = FakeLt()
    provider = _provider(lt)
    monkeypatch.setattr(nvidia, "GEMM_PLAN_LIMIT", 1)
    call = _call(0x1000, 0x2000, 0x3000)
    provider.gemm(call, 0x9000, 1 << 20, 7)
    bound = provider.gemm_launcher(call, 0x9000, 1 << 20)
    bound(8)
    bound(9)
    assert lt.count("heuristic") == 1  # the plan gemm made
    plain, first, second = (args for name, args in lt.calls if name == "matmul")
    assert first[:15] == plain[:15] and first[15] == 8 and second[15] == 9  # the same matmul on each stream
    provider.gemm(_call(0x1000, 0x2000, 0x3000, 32), 0x9000, 1 << 20, 7)  # evicts (and destroys) call's plan
    assert len(provider._gemm_plans) == 1 and lt.count("heuristic") == 2
    bound(10)  # not found under its key: planned again through gemm, never the destroyed descriptor
    assert lt.count("heuristic") == 3
    last = [args for name, args in lt.calls if name == "matmul"][-1]
    assert last[1] in lt.live and last[15] == 10 and (last[3], last[5], last[8]) == (0x1000, 0x2000, 0x3000)
    provider.close()
    assert not lt.live
