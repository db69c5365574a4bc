"""ACL_BLASLT_TUNE: the nvidia provider times the candidates and keeps the fastest (fake cuBLASLt and clock)."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest

from acl_core.errors import AclError, AclErrorCode
from acl_rocm.providers import blaslt_tune
from acl_rocm.providers.base import GemmCall, Matrix
from acl_rocm.providers.nvidia import ALGO_BYTES, CUBLASLT_PLAN, HEURISTIC_BYTES, STATE_OFFSET, NvidiaProvider
from tests.rocm.test_gemm_plan_store_cpu import AlgoLt, _store_provider

N = 64  # MIN_WORK is lowered to 64^3 below: the fake GEMMs stay tiny


class TimedLt(AlgoLt):
    """AlgoLt whose heuristic answers several candidates (algorithm bytes 1, 2, ...) and whose matmul may refuse."""

    def __init__(self, candidates: int = 4, bad_state: int | None = None, refuse_algo: int | None = None) -> None:
        super().__init__()
        self.candidates, self.bad_state, self.refuse_algo = candidates, bad_state, refuse_algo
        self.asked: list[int] = []

    def matmul_algo_get_heuristic(self, *args: Any) -> None:
        requested, results, found = args[-3], args[-2], args[-1]
        self.calls.append(("heuristic", args))
        self.asked.append(requested)
        count = min(requested, self.candidates)
        for i in range(count):
            address = results + i * HEURISTIC_BYTES
            ctypes.memmove(address, bytes([i + 1]) * ALGO_BYTES, ALGO_BYTES)
            ctypes.c_int32.from_address(address + STATE_OFFSET).value = 15 if i + 1 == self.bad_state else 0
        ctypes.c_int32.from_address(found).value = count

    def matmul(self, *args: Any) -> None:
        algo = ctypes.string_at(args[12], 1)[0]
        if algo == self.refuse_algo:
            raise RuntimeError(15, "not supported")
        self.calls.append(("matmul", args))

    def algos_run(self) -> list[int]:
        return [ctypes.string_at(a[12], 1)[0] for name, a in self.calls if name == "matmul"]


class FakeClock:
    """Events on a fake device: the elapsed time between two records is the summed cost of the matmuls between them."""

    def __init__(self, lt: TimedLt, cost_ms: dict[int, float]) -> None:
        self.lt, self.cost_ms = lt, cost_ms
        self.marks: dict[int, int] = {}
        self.created = 0
        self.destroyed: list[int] = []

    def install(self, provider: NvidiaProvider, capturing: bool = False) -> None:
        provider.event_create = self.create  # type: ignore[method-assign]
        provider.event_record = lambda event, stream: self.marks.__setitem__(event, len(self.lt.algos_run()))  # type: ignore[method-assign]
        provider.event_synchronize = lambda event: None  # type: ignore[method-assign]
        provider.event_elapsed_ms = self.elapsed  # type: ignore[method-assign]
        provider.event_destroy = self.destroyed.append  # type: ignore[method-assign]
        provider._capturing = lambda stream: capturing  # type: ignore[method-assign]

    def create(self) -> int:
        self.created += 1
        return 500 + self.created

    def elapsed(self, start: int, end: int) -> float:
        run = self.lt.algos_run()[self.marks[start] : self.marks[end]]
        return sum(self.cost_ms[a] for a in run)


@pytest.fixture(autouse=True)
def _small_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blaslt_tune, "MIN_WORK", N**3)
    monkeypatch.setenv("ACL_BLASLT_TUNE", "1")


def _call(n: int = N) -> GemmCall:
    return GemmCall(Matrix(0x1000, 2, n, n, n, transpose=True), Matrix(0x2000, 2, n, n, n), Matrix(0x3000, 3, n, n, n))


def _tuned(lt: TimedLt, tmp_path: Path, cost: dict[int, float], capturing: bool = False) -> tuple[Any, FakeClock]:
    provider = _store_provider(lt, tmp_path)
    clock = FakeClock(lt, cost)
    clock.install(provider, capturing)
    provider.gemm(_call(), 0x9000, 1 << 20, 7)
    return provider, clock


def test_the_fastest_candidate_is_kept_run_and_stored(tmp_path: Path) -> None:
    lt = TimedLt(candidates=4)
    provider, clock = _tuned(lt, tmp_path, {1: 3.0, 2: 2.5, 3: 1.0, 4: 1.5})
    assert lt.asked == [blaslt_tune.CANDIDATES]
    per = blaslt_tune.WARMUP + blaslt_tune.REPEATS
    assert lt.algos_run() == [1] * per + [2] * per + [3] * per + [4] * per + [3]  # timed, then the call itself
    assert clock.created == 2 and sorted(clock.destroyed) == [501, 502]
    provider.gemm(_call(), 0x9000, 1 << 20, 7)  # in-process memo: no more timing
    assert lt.algos_run()[-2:] == [3, 3] and len(lt.algos_run()) == 4 * per + 2
    stats = provider.plan_cache.stats
    assert stats.made == {CUBLASLT_PLAN: 1} and stats.stored == {CUBLASLT_PLAN: 1}


def test_a_warm_start_loads_the_timed_choice_and_times_nothing(tmp_path: Path) -> None:
    _tuned(TimedLt(), tmp_path, {1: 3.0, 2: 0.5, 3: 1.0, 4: 1.5})
    lt = TimedLt()
    lt.candidates = 0  # a heuristic here would fail: nothing is asked
    provider, clock = _tuned(lt, tmp_path, {})
    assert lt.count("heuristic") == 0 and clock.created == 0
    assert lt.checked == [bytes([2]) * ALGO_BYTES] and lt.algos_run() == [2]
    assert provider.plan_cache.stats.loaded == {CUBLASLT_PLAN: 1}


def test_tune_off_keeps_the_heuristics_first_and_its_own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACL_BLASLT_TUNE", "0")
    lt = TimedLt()
    _tuned(lt, tmp_path, {1: 3.0, 2: 0.5})
    assert lt.asked == [1] and lt.algos_run() == [1]
    monkeypatch.setenv("ACL_BLASLT_TUNE", "1")  # the untimed entry is not taken for a timed one
    timed = TimedLt(candidates=2)
    _tuned(timed, tmp_path, {1: 3.0, 2: 0.5})
    assert timed.asked == [blaslt_tune.CANDIDATES] and timed.algos_run()[-1] == 2


def test_candidates_that_cannot_run_are_skipped(tmp_path: Path) -> None:
    lt = TimedLt(candidates=4, bad_state=1, refuse_algo=2)  # 1: the heuristic says no; 2: the matmul refuses
    _tuned(lt, tmp_path, {3: 2.0, 4: 1.0})
    assert set(lt.algos_run()) == {3, 4} and lt.algos_run()[-1] == 4


def test_no_candidate_running_is_a_typed_error(tmp_path: Path) -> None:
    lt = TimedLt(candidates=1, refuse_algo=1)
    with pytest.raises(AclError, match="none of the 1 cuBLASLt candidates ran"):
        _tuned(lt, tmp_path, {})
    assert not lt.live  # the half-made plan was destroyed


def test_small_gemms_and_captured_ones_are_not_timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blaslt_tune, "MIN_WORK", N**3 + 1)
    lt = TimedLt()
    _provider, clock = _tuned(lt, tmp_path / "small", {})
    assert lt.asked == [1] and clock.created == 0
    monkeypatch.setattr(blaslt_tune, "MIN_WORK", N**3)
    captured = TimedLt()
    provider, clock = _tuned(captured, tmp_path / "capture", {}, capturing=True)
    assert captured.asked == [1] and clock.created == 0 and captured.algos_run() == [1]
    stats = provider.plan_cache.stats
    assert stats.made == {CUBLASLT_PLAN: 1} and stats.stored == {CUBLASLT_PLAN: 1}  # under the untimed key
    warm = TimedLt(candidates=0)  # a heuristic here would fail: the captured warm start asks nothing
    provider, clock = _tuned(warm, tmp_path / "capture", {}, capturing=True)
    assert warm.count("heuristic") == 0 and clock.created == 0 and warm.algos_run() == [1]
    assert not provider.plan_cache.stats.made and provider.plan_cache.stats.loaded == {CUBLASLT_PLAN: 1}
    eager = TimedLt(candidates=2)  # the same GEMM outside capture: the captured answer is not a timed one
    _tuned(eager, tmp_path / "capture", {1: 3.0, 2: 0.5})
    assert eager.asked == [blaslt_tune.CANDIDATES] and eager.algos_run()[-1] == 2


def test_tuning_is_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, ACL_BLASLT_TUNE times (measured: int8 16384^3 6.00 ms tuned, 10.65 ms the heuristic's first)."""
    monkeypatch.delenv("ACL_BLASLT_TUNE")
    lt = TimedLt(candidates=3)
    _tuned(lt, tmp_path, {1: 2.0, 2: 1.0, 3: 1.5})
    assert lt.asked == [blaslt_tune.CANDIDATES] and lt.algos_run()[-1] == 2


def test_a_bad_setting_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACL_BLASLT_TUNE", "yes")
    with pytest.raises(AclError) as err:
        _tuned(TimedLt(), tmp_path, {})
    assert err.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM and "ACL_BLASLT_TUNE='yes'" in str(err.value)


def test_pick_fastest_keeps_the_earlier_of_a_tie_and_refuses_nothing_run() -> None:
    assert blaslt_tune.pick_fastest(3, [2.0, 1.0, 1.0].__getitem__) == (1, [2.0, 1.0, 1.0])
    assert blaslt_tune.pick_fastest(2, [None, 4.0].__getitem__)[0] == 1
    with pytest.raises(ValueError, match="none of the 2"):
        blaslt_tune.pick_fastest(2, lambda i: None)
    assert blaslt_tune.describe([1.5, None, 0.25], 2) == "1.500 x [0.250]"
    assert blaslt_tune.tune_enabled({}) and blaslt_tune.tune_enabled({"ACL_BLASLT_TUNE": "1"})
    assert not blaslt_tune.tune_enabled({"ACL_BLASLT_TUNE": "0"})
