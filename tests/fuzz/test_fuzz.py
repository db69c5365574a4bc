"""The fuzz test: corrupted calls through aclnn (both phases), eager and the acl runtime must never crash.

Every declared operator is reached; each case corrupts one argument (or the call's shape, or the
runtime's use) and is classified: ok, refused with a parameter code, or a failure: an internal error
(500000 / 561000) or escaped exception for a parameter fault, a misuse accepted, a hang past the
per-call deadline, bytes changed outside an output (canaries around every allocation, inputs
compared before and after), or allocations and handles left behind once the case freed what it made.

The default run is seeded and bounded for CI (``ACL_FUZZ_CALLS`` cases, default 2000, about 20 s on
one core). A longer run::

    ACL_FUZZ_CALLS=200000 ACL_FUZZ_SEED=7 .venv/bin/python -m pytest tests/fuzz -q

or directly ``python -m tests.fuzz --seed 7 --calls 200000``. A failure prints the seed, each failure
class with its first reproduction (the calls with their arguments) and the command that replays that
case alone (``python -m tests.fuzz --seed S --case I``). docs/FUZZ.md has the details.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from acl_core import acl
from acl_core.errors import AclnnStatus

from .harness import Guarded, Hang, deadline, leaked, tables
from .runtime_cases import fresh_backend
from .verdict import ANYTHING, Expect, Verdict, classify_code

ROOT = Path(__file__).resolve().parents[2]
CALLS = int(os.environ.get("ACL_FUZZ_CALLS", "2000"))
SEED = int(os.environ.get("ACL_FUZZ_SEED", "0"))
WALL_PER_CASE = 0.25
"""Seconds of wall time the parent allows per case before it declares the whole run hung (generous)."""


def _fuzz(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ACL_BACKEND": "reference", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tests.fuzz", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_fuzz(tmp_path: Path) -> None:
    """ACL_FUZZ_CALLS corrupted calls of seed ACL_FUZZ_SEED: no failure of any class."""
    progress = tmp_path / "progress"
    timeout = 120 + CALLS * WALL_PER_CASE
    try:
        result = _fuzz("--seed", str(SEED), "--calls", str(CALLS), "--progress", str(progress), timeout=timeout)
    except subprocess.TimeoutExpired:
        case = progress.read_text().strip() if progress.exists() else "?"
        pytest.fail(
            f"[hang] the fuzz run (seed={SEED}) did not finish in {timeout:.0f} s; case {case} was running "
            f"(replay: python -m tests.fuzz --seed {SEED} --case {case})"
        )
    print(result.stdout)
    assert result.returncode == 0, f"seed={SEED}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert "operators reached through aclnn: " in result.stdout
    reached = result.stdout.split("operators reached through aclnn: ")[1].split()
    if CALLS >= 1200:  # six in ten cases go through aclnn, operators in turn: every one is reached
        assert reached[0] == reached[2], result.stdout


def test_planted_defects_are_caught() -> None:
    """A kernel that writes past its output, crashes, never returns or leaks memory is reported as such."""
    result = _fuzz("--prove", timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-3000:]}"
    assert result.stdout.count("planted ") == 4, result.stdout


def test_replay_is_deterministic() -> None:
    """Replaying a case gives the same case: same subject, corruption, calls and verdict."""
    first, second = (_without_addresses(_fuzz("--seed", "3", "--case", "4", timeout=120).stdout) for _ in range(2))
    assert "repro: aclnn" in first and first == second, (first, second)


def _without_addresses(text: str) -> str:
    import re

    return re.sub(r"0x[0-9a-f]+|\b\d{6,}\b", "<n>", text)


def test_classifier() -> None:
    """Internal codes and messages are failures whatever the case expects; success of a must-refuse misuse too."""
    refuse = Expect.refusal({161002})
    assert classify_code(0, "", ANYTHING) is Verdict.OK
    assert classify_code(0, "", refuse) is Verdict.ACCEPTED
    assert classify_code(161002, "bad", refuse) is Verdict.REFUSED
    assert classify_code(161001, "null", refuse) is Verdict.WRONG_CODE
    assert classify_code(int(AclnnStatus.ACLNN_ERR_INNER), "x", ANYTHING) is Verdict.INTERNAL
    assert classify_code(500000, "x", ANYTHING) is Verdict.INTERNAL
    assert classify_code(161002, "internal error: TypeError: boom", ANYTHING) is Verdict.INTERNAL
    assert {v for v in Verdict if v.failed} == set(Verdict) - {Verdict.OK, Verdict.REFUSED}


def test_deadline_interrupts_a_loop() -> None:
    """A call that never returns is interrupted and named a hang."""
    start = time.perf_counter()
    with pytest.raises(Hang):
        with deadline(0.2):
            while True:
                pass
    assert time.perf_counter() - start < 5


def test_canaries_and_leak_tables_see_defects() -> None:
    """A write past a payload, a changed input and an allocation left behind are each caught."""
    with fresh_backend() as backend:
        assert acl.init() == 0
        assert acl.rt.set_device(0) == 0
        rt = backend.runtime
        before = tables(rt)
        g = Guarded(rt, np.arange(16, dtype=np.uint8))
        assert g.changed([]) is None
        assert leaked(before, tables(rt)) is not None  # the guarded block itself is live
        rt.memset(g.data + 16, 1, 0, 1)  # one byte past the payload: the trailing canary
        assert "canary" in (g.changed([(g.data, g.data + 16)]) or "")
        assert g.changed([(g.data, g.data + 17)]) is None  # inside a view the call may write
        h = Guarded(rt, np.arange(16, dtype=np.uint8))
        rt.memset(h.data + 3, 1, 9, 1)
        assert "payload" in (h.changed([]) or "")
        g.free()
        h.free()
        assert leaked(before, tables(rt)) is None
        stray, _ = acl.rt.malloc(64, 0)
        assert "memory +1" in (leaked(before, tables(rt)) or "")
        assert acl.rt.free(stray) == 0
        assert acl.finalize() == 0


def test_impossible_host_sizes_are_out_of_memory_like_device_ones() -> None:
    """malloc_host(2**63 - 1) was 500000 (NumPy's ValueError from the reference driver); malloc says 207001."""
    with fresh_backend():
        assert acl.init() == 0
        assert acl.rt.set_device(0) == 0
        for size in (2**63 - 1, 2**64 - 1):
            assert acl.rt.malloc_host(size)[1] == acl.rt.malloc(size, 0)[1] == 207001
        assert acl.finalize() == 0
