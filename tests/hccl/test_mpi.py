"""HCCL across processes: ``mpiexec -n K python tests/hccl/ranks/<script>.py`` on the CPU, checked by every rank.

Each rank script computes its own expectations with NumPy / exact arithmetic and writes a report
(``rank<r>.json``: how many checks it ran, which failed); these tests launch the job, bound its
wall time, and read the reports. They need mpi4py and an MPI with ``mpiexec`` (``pip install
'acl-core[mpi]'``; the ``dev`` extra includes them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

RANKS = Path(__file__).parent / "ranks"
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
if importlib.util.find_spec("mpi4py") is None or MPIEXEC is None:  # dev dependencies: a missing one is a failure
    raise RuntimeError("the HCCL tests need mpi4py and mpiexec: pip install -e '.[dev]' (or 'acl-core[mpi]')")
JOB_LIMIT_S = 120
"""No job may take longer than this (the tests fail, they never hang)."""


def launch(
    script: str | Path,
    n: int,
    report: Path,
    env: dict[str, str],
    flags: tuple[str, ...] = (),
    python_args: tuple[str, ...] | None = None,
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``mpiexec [flags] -n n python ranks/script report`` (or ``python python_args``) in its own session.

    Returns the result and the wall time in seconds.
    """
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HCCL_", "MPIR_CVAR_", "PMI_"))}
    full_env.update({"ACL_BACKEND": "reference", "PYTHONUNBUFFERED": "1", **env})
    args = python_args if python_args is not None else (str(RANKS / script), str(report))
    command = [str(MPIEXEC), *flags, "-n", str(n), sys.executable, *args]
    began = time.monotonic()
    process = subprocess.Popen(
        command,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=report,
    )
    try:
        out, _ = process.communicate(timeout=JOB_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the session this test started: mpiexec and its ranks
        out, _ = process.communicate()
        pytest.fail(f"{script} with {n} ranks ran past {JOB_LIMIT_S}s:\n{out[-6000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, None), time.monotonic() - began


def reports(report: Path, ranks: range | list[int]) -> dict[int, dict[str, object]]:
    """Each rank's report (a missing one is a failure of that rank)."""
    found = {}
    for r in ranks:
        path = report / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no report"
        found[r] = json.loads(path.read_text())
    return found


def exit_codes(output: str) -> list[int]:
    """Per-rank exit statuses from mpiexec's -print-all-exitcodes line (status << 8, or the signal)."""
    match = re.search(r"Exit codes: \[[^\]]*\] ([\d,]+)", output)
    assert match, f"no exit codes in mpiexec's output:\n{output[-3000:]}"
    return [int(c) for c in match.group(1).split(",")]


@pytest.mark.parametrize("n", [1, 2, 4])
def test_collectives_every_op_dtype_and_reduce_op(n: int, tmp_path: Path) -> None:
    env = {"HCCL_CONNECT_TIMEOUT": "30", "HCCL_EXEC_TIMEOUT": "30", "MPIR_CVAR_NO_COLLECTIVE_FINALIZE": "1"}
    result, _ = launch("collectives.py", n, tmp_path, env)
    assert result.returncode == 0, result.stdout[-8000:]
    for r, rep in reports(tmp_path, range(n)).items():
        assert rep["failures"] == [], f"rank {r}: {rep['failures']}"
        assert isinstance(rep["checks"], int) and rep["checks"] >= 450, f"rank {r} ran only {rep['checks']} checks"


@pytest.mark.parametrize("finalize", ["local", "collective"])
def test_killed_rank_makes_the_others_time_out(finalize: str, tmp_path: Path) -> None:
    """Rank 3 of 4 is SIGKILLed mid all-reduce; 0-2 return HCCL_E_TIMEOUT within HCCL_EXEC_TIMEOUT and exit.

    With MPIR_CVAR_NO_COLLECTIVE_FINALIZE=1 they exit with their own status (0); without it MPICH's
    MPI_Finalize would wait for the dead rank forever, and the engine's watchdog ends them with
    status 1 after HCCL_CONNECT_TIMEOUT.
    """
    exec_timeout, connect_timeout = 3.0, 2.0
    env = {"HCCL_EXEC_TIMEOUT": str(exec_timeout), "HCCL_CONNECT_TIMEOUT": str(connect_timeout)}
    if finalize == "local":
        env["MPIR_CVAR_NO_COLLECTIVE_FINALIZE"] = "1"
    flags = ("-disable-auto-cleanup", "-print-all-exitcodes")
    result, wall = launch("faults.py", 4, tmp_path, env, flags)
    survivors = reports(tmp_path, [0, 1, 2])
    for r, rep in survivors.items():
        assert rep["failures"] == [], f"rank {r}: {rep['failures']}\n{result.stdout[-4000:]}"
        assert rep["code"] == 9, rep
        assert isinstance(rep["elapsed"], float) and rep["elapsed"] <= exec_timeout + 1.0, rep
    assert not (tmp_path / "rank3.json").exists(), "the killed rank should not have reported"
    codes = exit_codes(result.stdout)
    assert codes[3] == (128 + signal.SIGKILL) << 8, f"rank 3 was not killed: {codes}"
    assert codes[:3] == ([0, 0, 0] if finalize == "local" else [1 << 8] * 3), codes
    assert wall < 30, f"the job took {wall:.1f}s"


def test_ranks_that_never_join_or_disagree_when_forming_a_communicator(tmp_path: Path) -> None:
    env = {"HCCL_CONNECT_TIMEOUT": "1.5", "HCCL_EXEC_TIMEOUT": "30"}
    result, _ = launch("init_faults.py", 2, tmp_path, env)
    assert result.returncode == 0, result.stdout[-8000:]
    for r, rep in reports(tmp_path, range(2)).items():
        assert rep["failures"] == [], f"rank {r}: {rep['failures']}"
        timings = rep["timings"]
        assert isinstance(timings, dict)
        waited = timings["absent_joiner" if r == 0 else "absent_maker"]
        assert 1.5 <= waited <= 2.5, timings


def test_example_runs_on_two_ranks(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "hccl_allreduce.py"
    result, _ = launch(example, 2, tmp_path, {"HCCL_EXEC_TIMEOUT": "30", "HCCL_CONNECT_TIMEOUT": "30"})
    assert result.returncode == 0, result.stdout
    assert "2 ranks on hccl_comm_" in result.stdout and "all-reduce 3," in result.stdout, result.stdout


def test_collective_bench_reports_nccl_tests_columns(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {"HCCL_EXEC_TIMEOUT": "30", "HCCL_CONNECT_TIMEOUT": "30", "MPIR_CVAR_NO_COLLECTIVE_FINALIZE": "1"}
    bench = ("-m", "acl_tools.bench.collectives", "--max-bytes", "4096", "--out", str(out))
    result, _ = launch("", 2, tmp_path, env, python_args=bench)
    assert result.returncode == 0, result.stdout
    report = json.loads(out.read_text())
    assert report["ranks"] == 2 and report["engine"] == "mpi"
    factors = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5, "broadcast": 1.0}
    assert set(report["collectives"]) == set(factors)
    for name, rows in report["collectives"].items():
        assert [r["size"] for r in rows] == [8, 32, 128, 512, 2048], name
        for r in rows:
            assert r["wrong"] == 0, (name, r)
            assert r["time_us"] > 0 and r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * factors[name]), (name, r)
