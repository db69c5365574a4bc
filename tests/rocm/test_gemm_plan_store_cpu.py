"""The nvidia provider's cuBLASLt algorithms persist: a later provider checks the stored one instead of asking."""

from __future__ import annotations

import ctypes
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from acl_rocm.plan_cache import MAGIC, PlanCache
from acl_rocm.providers.base import DeviceProperties, GemmCall, Matrix
from acl_rocm.providers.nvidia import ALGO_BYTES, CUBLASLT_PLAN, NvidiaProvider
from tests.rocm.test_gemm_plan_cache import FakeLt, _call, _provider

RESULT_BYTES = 96  # sizeof(cublasLtMatmulHeuristicResult_t)


class AlgoLt(FakeLt):
    """FakeLt with real heuristic-result memory: each heuristic writes a new 64-byte algorithm."""

    def __init__(self, version: int = 130100) -> None:
        super().__init__()
        self.version = version
        self.buffers: list[Any] = []
        self.algos = 0
        self.checked: list[bytes] = []
        self.refuse: str | None = None
        self.check_workspace = 0

    def get_version(self) -> int:
        return self.version

    def MatmulHeuristicResult(self, n: int) -> Any:
        buf = ctypes.create_string_buffer(RESULT_BYTES * n)
        self.buffers.append(buf)
        return type("Result", (), {"ptr": ctypes.addressof(buf)})()

    def matmul_algo_get_heuristic(self, *args: Any) -> None:
        self.calls.append(("heuristic", args))
        self.algos += 1
        ctypes.memmove(args[-2], bytes([self.algos]) * ALGO_BYTES, ALGO_BYTES)
        ctypes.c_int32.from_address(args[-1]).value = 1

    def matmul_algo_check(self, *args: Any) -> None:
        self.calls.append(("check", args))
        self.checked.append(ctypes.string_at(args[-2], ALGO_BYTES))
        if self.refuse is not None:
            raise RuntimeError(15, self.refuse)  # nvmath raises with the cublasStatus_t first
        ctypes.c_size_t.from_address(args[-1] + ALGO_BYTES).value = self.check_workspace

    def algo_of_matmul(self, index: int = -1) -> bytes:
        """The algorithm bytes the ``index``-th matmul ran with."""
        args = [a for name, a in self.calls if name == "matmul"][index]
        return ctypes.string_at(args[12], ALGO_BYTES)


def _store_provider(lt: AlgoLt, directory: Path, device: str = "NVIDIA H200") -> NvidiaProvider:
    provider = _provider(lt)
    provider.plan_cache = PlanCache(directory)
    provider.device_properties = lambda index: DeviceProperties(  # type: ignore[method-assign]
        index, device, "sm_90", 32, 132, 1 << 30, False, 1024, 2**31 - 1, 49152, 1 << 25
    )
    return provider


def _gemm(provider: NvidiaProvider, call: GemmCall | None = None, workspace: int = 1 << 20) -> None:
    provider.gemm(call or _call(0x1000, 0x2000, 0x3000), 0x9000, workspace, 7)


def test_a_later_process_runs_the_stored_algorithm_without_a_heuristic(tmp_path: Path) -> None:
    first_lt = AlgoLt()
    first = _store_provider(first_lt, tmp_path)
    _gemm(first)
    _gemm(first)  # the in-process memo: no second plan, no disk read
    assert first_lt.count("heuristic") == 1 and first_lt.count("check") == 0
    stats = first.plan_cache.stats  # type: ignore[union-attr]
    assert stats.made == {CUBLASLT_PLAN: 1} and stats.stored == {CUBLASLT_PLAN: 1} and not stats.loaded
    first.close()

    second_lt = AlgoLt()
    second_lt.algos = 50  # a heuristic here would answer something else
    second = _store_provider(second_lt, tmp_path)
    _gemm(second)
    _gemm(second)
    assert second_lt.count("heuristic") == 0 and second_lt.count("check") == 1
    assert second_lt.checked == [bytes([1]) * ALGO_BYTES]
    assert second_lt.algo_of_matmul(0) == second_lt.algo_of_matmul(1) == bytes([1]) * ALGO_BYTES
    stats = second.plan_cache.stats  # type: ignore[union-attr]
    assert stats.loaded == {CUBLASLT_PLAN: 1} and not stats.made and not stats.refused
    second.close()
    assert not second_lt.live


@pytest.mark.parametrize(
    "change",
    ["workspace", "alignment", "transpose", "batch", "fast_tf32", "scale", "device", "version"],
)
def test_any_change_of_the_signature_asks_the_heuristic(tmp_path: Path, change: str) -> None:
    _gemm(_store_provider(AlgoLt(), tmp_path))
    lt = AlgoLt(version=130101 if change == "version" else 130100)
    provider = _store_provider(lt, tmp_path, device="NVIDIA H100" if change == "device" else "NVIDIA H200")
    n = 64
    a, b, d = Matrix(0x1000, 0, n, n, n), Matrix(0x2000, 0, n, n, n), Matrix(0x3000, 0, n, n, n)
    calls = {
        "alignment": GemmCall(Matrix(0x1004, 0, n, n, n), b, d),
        "transpose": GemmCall(a, Matrix(0x2000, 0, n, n, n, transpose=True), d),
        "batch": GemmCall(Matrix(0x1000, 0, n, n, n, n * n), Matrix(0x2000, 0, n, n, n, n * n), d, batch=2),
        "fast_tf32": GemmCall(a, b, d, fast_tf32=True),
        "scale": GemmCall(a, b, d, a_scale=0x8000),
    }
    _gemm(provider, calls.get(change), workspace=1 << 21 if change == "workspace" else 1 << 20)
    assert lt.count("heuristic") == 1 and lt.count("check") == 0


def test_a_refused_algorithm_falls_back_to_the_heuristic_and_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _gemm(_store_provider(AlgoLt(), tmp_path))
    lt = AlgoLt()
    lt.algos = 20
    lt.refuse = "CUBLAS_STATUS_INVALID_VALUE"
    provider = _store_provider(lt, tmp_path)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.plan_cache"):
        _gemm(provider)
    assert lt.count("check") == 1 and lt.count("heuristic") == 1
    assert lt.algo_of_matmul() == bytes([21]) * ALGO_BYTES  # the heuristic's, not the refused one
    stats = provider.plan_cache.stats  # type: ignore[union-attr]
    assert stats.refused == {CUBLASLT_PLAN: 1} and stats.made == {CUBLASLT_PLAN: 1}
    assert "refused a stored cublaslt plan" in caplog.text and "cublasLtMatmulAlgoCheck" in caplog.text
    third = AlgoLt()
    _gemm(_store_provider(third, tmp_path))
    assert third.checked == [bytes([21]) * ALGO_BYTES]  # the replacement was stored


def test_an_algorithm_needing_more_workspace_is_refused(tmp_path: Path) -> None:
    _gemm(_store_provider(AlgoLt(), tmp_path))
    lt = AlgoLt()
    lt.check_workspace = (1 << 20) + 1
    provider = _store_provider(lt, tmp_path)
    _gemm(provider)
    assert lt.count("check") == 1 and lt.count("heuristic") == 1
    assert provider.plan_cache.stats.refused == {CUBLASLT_PLAN: 1}  # type: ignore[union-attr]


def test_a_stored_entry_of_the_wrong_size_is_refused(tmp_path: Path) -> None:
    first = _store_provider(AlgoLt(), tmp_path)
    _gemm(first)
    (path,) = tmp_path.rglob("*.plan")
    cache = first.plan_cache
    assert cache is not None
    # the same key rewritten through the store with a short payload: an intact file with the wrong content
    data = path.read_bytes()
    length = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "little")
    header = json.loads(data[len(MAGIC) + 4 : len(MAGIC) + 4 + length])
    cache.store(CUBLASLT_PLAN, json.loads(header["key"])["fields"], b"\x01" * 10)
    lt = AlgoLt()
    provider = _store_provider(lt, tmp_path)
    _gemm(provider)
    assert lt.count("check") == 0 and lt.count("heuristic") == 1
    assert provider.plan_cache.stats.refused == {CUBLASLT_PLAN: 1}  # type: ignore[union-attr]


def test_a_damaged_store_still_runs_the_gemm(tmp_path: Path) -> None:
    _gemm(_store_provider(AlgoLt(), tmp_path))
    for path in tmp_path.rglob("*.plan"):
        path.write_bytes(b"\0" * 7)
    lt = AlgoLt()
    provider = _store_provider(lt, tmp_path)
    _gemm(provider)
    assert lt.count("heuristic") == 1 and lt.count("matmul") == 1
    assert provider.plan_cache.stats.ignored == {CUBLASLT_PLAN: 1}  # type: ignore[union-attr]
