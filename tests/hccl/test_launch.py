"""The multi-rank harness on the CPU: the file world, the launcher, the benchmark's two sides, the GPU script.

scripts/multi_gpu_run.sh is what a 2+ GPU machine runs (issue 8); here it runs end to end as a dry
run with the reference engine under mpiexec and torch.distributed over gloo, 2 ranks, tiny sizes, so
only the backend and the torch backend differ on the GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from acl_tools import world as world_module
from acl_tools.bench.compare_collectives import compare
from acl_tools.launch import TIMED_OUT, launch
from acl_tools.world import FileWorld, SingleWorld

ROOT = Path(__file__).resolve().parents[2]
RANKS = Path(__file__).parent / "ranks"


def test_file_world_gathers_in_rank_order_and_broadcasts_from_the_root(tmp_path: Path) -> None:
    results: dict[int, tuple[Any, ...]] = {}

    def rank(r: int) -> None:
        w = FileWorld(tmp_path, r, 3, timeout_s=20)
        gathered = w.allgather(10 * r)
        w.barrier()
        results[r] = (gathered, w.bcast(f"from {r}", root=2), w.max(float(r)), w.sum(r + 1))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {r: ([0, 10, 20], "from 2", 2.0, 6) for r in range(3)}


def test_file_world_times_out_when_a_rank_never_comes(tmp_path: Path) -> None:
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 1 did not reach exchange 0"):
        FileWorld(tmp_path, 0, 2, timeout_s=0.3).allgather("alone")
    assert time.monotonic() - began < 3
    with pytest.raises(ValueError):
        FileWorld(tmp_path, 2, 2)


def test_current_is_the_launchers_world_else_one_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (world_module.DIR_ENV, world_module.SIZE_ENV, *world_module.MPI_SIZE_ENVS):
        monkeypatch.delenv(variable, raising=False)
    assert isinstance(world_module.current(), SingleWorld)
    monkeypatch.setenv(world_module.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(world_module.SIZE_ENV, "4")
    monkeypatch.setenv(world_module.RANK_ENV, "3")
    w = world_module.current()
    assert isinstance(w, FileWorld) and (w.rank, w.size, w.directory) == (3, 4, tmp_path)


PROGRAM = """
import os, sys
from acl_tools.world import current
w = current()
got = w.allgather(os.environ["LOCAL_RANK"] + ":" + os.environ["WORLD_SIZE"])
print("gathered", got, "port", os.environ["MASTER_PORT"])
sys.exit(0 if got == [f"{r}:{w.size}" for r in range(w.size)] else 1)
"""


def test_launcher_spawns_ranks_with_their_environment_and_relays_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch([sys.executable, "-c", PROGRAM], 3, timeout_s=60) == 0
    out = capsys.readouterr().out
    for r in range(3):
        assert f"[{r}] gathered ['0:3', '1:3', '2:3'] port " in out, out


def test_launcher_returns_a_failing_ranks_status() -> None:
    code = "import os, sys; sys.exit(3 if os.environ['ACL_LAUNCH_RANK'] == '1' else 0)"
    assert launch([sys.executable, "-c", code], 2, timeout_s=60) == 3


def test_launcher_kills_every_rank_past_its_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    began = time.monotonic()
    assert launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout_s=1.0) == TIMED_OUT
    assert time.monotonic() - began < 10
    assert "every rank was killed" in capsys.readouterr().out


def test_rank_conformance_runs_without_mpi_under_the_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank script's world is the launcher's files when no MPI launched it (one reference rank)."""
    for variable in world_module.MPI_SIZE_ENVS:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("ACL_BACKEND", "reference")
    assert launch([sys.executable, str(RANKS / "collectives.py"), str(tmp_path)], 1, timeout_s=120) == 0
    report = json.loads((tmp_path / "rank0.json").read_text())
    assert report["failures"] == [] and report["checks"] >= 400, report


def _row(size: int, busbw: float, wrong: int = 0) -> dict[str, Any]:
    return {"size": size, "time_us": 1.0, "algbw_GBps": busbw, "busbw_GBps": busbw, "wrong": wrong}


def test_compare_joins_both_sides_and_judges_the_256_mib_all_reduce() -> None:
    big = 256 << 20
    acl = {"ranks": 2, "side": "acl", "collectives": {"all_reduce": [_row(1024, 1.0), _row(big, 85.0)]}}
    torch = {"ranks": 2, "side": "torch", "collectives": {"all_reduce": [_row(1024, 2.0), _row(big, 100.0)]}}
    report = compare(acl, torch)
    assert [r["busbw_ratio"] for r in report["collectives"]["all_reduce"]] == [0.5, 0.85]
    assert report["all_reduce_target"]["ratio"] == 0.85 and not report["all_reduce_target"]["within_10_percent"]
    acl["collectives"]["all_reduce"][1]["busbw_GBps"] = 91.0
    assert compare(acl, torch)["all_reduce_target"]["within_10_percent"]
    assert compare(acl, torch, target_bytes=4096)["all_reduce_target"] is None
    torch["collectives"]["all_reduce"].pop()
    with pytest.raises(ValueError, match="different sizes"):
        compare(acl, torch)
    with pytest.raises(ValueError, match="ranks"):
        compare(acl, {**torch, "ranks": 4})


@pytest.mark.slow
def test_multi_gpu_script_dry_run_on_the_cpu(tmp_path: Path) -> None:
    """The whole script: 2 reference ranks under mpiexec, torch.distributed over gloo, tiny sizes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HCCL_", "MPIR_CVAR_", "PMI_", "ACL_LAUNCH_"))}
    env.update(
        OUT=str(tmp_path),
        WHEELS="0",
        RANKS="2",
        ACL_BACKEND="reference",
        LAUNCH_MODE="mpiexec",
        TORCH_BACKEND="gloo",
        MIN_BYTES="256",
        MAX_BYTES="1024",
        ITERS="2",
        OPS="all_reduce,all_gather,reduce_scatter,all_to_all,broadcast",
        HCCL_CONNECT_TIMEOUT="30",
        HCCL_EXEC_TIMEOUT="30",
        TARGET_BYTES="1024",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "multi_gpu_run.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    conformance = json.loads((tmp_path / "conformance_multi.json").read_text())
    assert conformance["passed"] and conformance["reported"] == 2 and conformance["checks"] >= 900, conformance
    both = json.loads((tmp_path / "bench_collectives.json").read_text())
    assert both["ranks"] == 2 and both["wrong"] == 0
    assert both["acl"]["engine"] == "mpi" and both["torch"]["engine"] == "torch.distributed/gloo"
    assert set(both["collectives"]) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"}
    for rows in both["collectives"].values():
        assert [r["size"] for r in rows] == [256, 1024]
        for r in rows:
            assert r["acl_busbw_GBps"] > 0 and r["torch_busbw_GBps"] > 0
            assert r["busbw_ratio"] == pytest.approx(r["acl_busbw_GBps"] / r["torch_busbw_GBps"])
    target = both["all_reduce_target"]
    assert target["size"] == 1024 and target["ratio"] == pytest.approx(
        both["collectives"]["all_reduce"][1]["busbw_ratio"]
    )
    assert (tmp_path / "more.tar.gz").exists() and (tmp_path / "multi_gpu_run.log").exists()


def _rank_script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """tests/hccl/ranks/collectives.py as a module (one rank, the reference backend)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(RANKS))
    monkeypatch.setenv("ACL_BACKEND", "reference")
    spec = importlib.util.spec_from_file_location("rank_collectives", RANKS / "collectives.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stepwise_rounding_of_nccl_is_accepted_within_its_error_bound_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fp8 e5m2 over 4 ranks: 1.5+1.5+1.5+0.5 rounded after each step is 4 (exact 5); 8 is wrong."""
    import numpy as np
    from ml_dtypes import float8_e5m2

    from acl_core.spec.collective import HcclDataType, HcclReduceOp

    script = _rank_script(monkeypatch)
    dtype, total = HcclDataType.HCCL_DATA_TYPE_FP8E5M2, HcclReduceOp.HCCL_REDUCE_SUM
    parts = [np.array([v], float8_e5m2) for v in (1.5, 1.5, 1.5, 0.5)]
    stepwise = np.array([4.0], float8_e5m2).tobytes()
    monkeypatch.setattr(script, "SIZE", 4)
    assert script.reduction_matches(np.array([5.0], float8_e5m2).tobytes(), parts, dtype, total)
    assert not script.reduction_matches(stepwise, parts, dtype, total)  # the reference engine rounds once
    monkeypatch.setattr(script, "STEPWISE", True)
    assert script.reduction_matches(stepwise, parts, dtype, total)
    assert not script.reduction_matches(np.array([8.0], float8_e5m2).tobytes(), parts, dtype, total)
    assert not script.reduction_matches(stepwise, parts, dtype, HcclReduceOp.HCCL_REDUCE_MAX)
    monkeypatch.setattr(script, "SIZE", 2)
    assert not script.reduction_matches(stepwise, parts, dtype, total)  # one addition: exact on 2 ranks
