"""A second process compiles nothing and plans nothing it planned before (GPU tier; kernels also on the emulator).

Each run is a fresh interpreter (``tests/rocm/plan_cache_probe.py``) sharing one kernel cache directory,
with the plan cache in it (``plans/``): the first run compiles its kernels and asks cuBLASLt's heuristic
(or builds cuDNN graphs), the second must load every kernel and plan from disk, make none, and compute
the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acl_core.backend import Backend

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _probe(what: str, cache: Path, out: Path) -> dict[str, Any]:
    env = {**os.environ, "ACL_KERNEL_CACHE": str(cache)}
    env.pop("ACL_PLAN_CACHE", None)
    env.pop("ACL_PLAN_CACHE_CUDNN", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.rocm.plan_cache_probe", what, str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(out.read_text()))


def _cold_warm(what: str, tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    cache = tmp_path / "cache"
    return _probe(what, cache, tmp_path / "cold.json"), _probe(what, cache, tmp_path / "warm.json")


def test_a_warm_process_compiles_nothing_and_asks_no_heuristic(rocm: Backend, tmp_path: Path) -> None:
    cold, warm = _cold_warm("gemm", tmp_path)
    ck, wk = cold["caches"]["kernels"], warm["caches"]["kernels"]
    cp, wp = cold["caches"]["plans"], warm["caches"]["plans"]
    note = f"cold {cold['caches']}\nwarm {warm['caches']}\nwarm log {warm['log']}"
    assert ck["compiles"] > 0 and wk["compiles"] == 0 and wk["disk_hits"] == ck["compiles"], note
    assert wp["made"]["all"] == 0 and wp["refused"]["all"] == 0 and wp["ignored"]["all"] == 0, note
    if not cold["emulated"]:  # the emulator's BLAS is the host's: no library plans to persist
        assert cp["made"].get("cublaslt", 0) >= 3, note  # three GEMM shapes, one heuristic query each
        assert wp["loaded"].get("cublaslt", 0) == cp["made"]["cublaslt"], note
    assert warm["results"] == cold["results"], "the stored algorithms must compute the same bytes"


def test_cudnn_plans_stay_in_memory_by_default(rocm: Backend, tmp_path: Path) -> None:
    """SDPA plans are not persisted unless ACL_PLAN_CACHE_CUDNN=1 (deserialised plans crashed workers on the H100).

    The warm process therefore builds its two graphs again, stores nothing, and computes the same bytes.
    """
    refusal = rocm.attention.cudnn.refusal()  # type: ignore[attr-defined]
    if refusal is not None:
        pytest.skip(refusal)
    cold, warm = _cold_warm("attention", tmp_path)
    cp, wp = cold["caches"]["plans"], warm["caches"]["plans"]
    note = f"cold {cp}\ncold log {cold['log']}\nwarm {wp}\nwarm log {warm['log']}"
    assert cp["made"].get("cudnn_sdpa", 0) == 2 and cp["stored"].get("cudnn_sdpa", 0) == 0, note
    assert wp["made"].get("cudnn_sdpa", 0) == 2 and wp["loaded"].get("cudnn_sdpa", 0) == 0, note
    assert warm["caches"]["kernels"]["compiles"] == 0, note
    assert warm["results"] == cold["results"], "the same graphs must compute the same bytes"
