"""Expert-parallel dispatch and combine (MC2) across MPI ranks on the reference: ``ranks/moe_distribute.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hccl.test_mpi import launch, reports


@pytest.mark.parametrize("n", [1, 2, 4])
def test_dispatch_then_combine_returns_each_tokens_mixture(n: int, tmp_path: Path) -> None:
    env = {"HCCL_CONNECT_TIMEOUT": "30", "HCCL_EXEC_TIMEOUT": "60", "MPIR_CVAR_NO_COLLECTIVE_FINALIZE": "1"}
    result, _ = launch("moe_distribute.py", n, tmp_path, env)
    assert result.returncode == 0, result.stdout[-8000:]
    for r, rep in reports(tmp_path, range(n)).items():
        assert rep["failures"] == [], f"rank {r}: {rep['failures']}"
        assert isinstance(rep["checks"], int) and rep["checks"] >= 24 * 7 + 5, f"rank {r} ran only {rep['checks']}"
