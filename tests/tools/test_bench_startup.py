"""``acl-core bench --suite startup``: cold and warm ``acl-core qwen3 generate`` starts, and the counters it reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_rocm.backend import RocmBackend
from acl_tools.bench import startup
from acl_tools.bench.cli import main
from tests.rocm.fake_provider import FakeProvider


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from acl_tools.qwen3 import hf

    return hf.make_checkpoint(tmp_path_factory.mktemp("qwen3") / "tiny", preset="tiny", seed=0)


def test_cold_and_warm_starts_on_the_reference(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "startup.json"
    argv = ["--suite", "startup", "--backend", "reference", "--model", str(tiny), "--new-tokens", "3"]
    assert main([*argv, "--prompt-len", "5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    body = report["startup"]
    assert report["backend"] == body["backend"] == "reference" and "--suite startup" in report["command"]
    assert body["prompt_tokens"] == 5 and body["new_tokens"] == 3 and body["same_tokens"] is True
    for phase in ("cold", "warm"):
        row = body[phase]
        assert 0 < row["first_token_s"] < row["wall_s"], row
        assert row["prefill_s"] < row["first_token_s"]
        assert len(row["tokens"][0]) == 3
        # the reference compiles nothing and keeps no library plans: zeros, and the report says why
        assert row["kernels_compiled"] == row["plans_made"] == row["plans_loaded"] == 0
        assert row["caches_reported"] is False
    assert report["import"]["import_and_list_ms"] > 0
    text = capsys.readouterr().out
    assert "keeps no kernel or plan cache" in text and "cold" in text and "warm" in text


def test_a_missing_model_or_a_failing_start_is_exit_status_2(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--suite", "startup", "--backend", "reference", "--out", str(tmp_path / "a.json")]) == 2
    assert "--model DIR" in capsys.readouterr().err
    missing = ["--suite", "startup", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "b.json")]
    assert main(missing) == 2
    bad = ["--suite", "startup", "--backend", "reference", "--model", str(tiny), "--dtype", "fp64"]
    assert main([*bad, "--out", str(tmp_path / "c.json")]) == 2  # the child's usage error, reported
    assert "exited 2" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in ("a.json", "b.json", "c.json"))


def test_the_rows_read_the_rocm_backends_own_counters(tmp_path: Path) -> None:
    """What generate writes (RocmBackend.cache_stats) is what the startup rows count, cold then warm."""
    rows = []
    for _ in range(2):  # two backends on one cache directory: a cold process, then a warm one
        backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
        backend.runtime.ensure_device(0)
        x = np.arange(6, dtype=np.float32)
        eager.run("Add", backend, self=x, other=x, alpha=1.0)
        if not rows:
            backend.plans.made("cublaslt")  # as the nvidia provider counts a heuristic query
        report = {
            "first_token_clock": 100.25,
            "prefill_s": 0.1,
            "decode_s": 0.2,
            "tokens": [[1, 2]],
            "caches": json.loads(json.dumps(backend.cache_stats())),  # as written to the JSON file
        }
        rows.append(startup.summarise(report, 100.0, 101.0))
    cold, warm = rows
    assert cold["kernels_compiled"] >= 1 and cold["kernels_from_disk"] == 0
    assert warm["kernels_compiled"] == 0 and warm["kernels_from_disk"] == cold["kernels_compiled"]
    assert cold["plans_made"] == 1 and cold["plans_made_by_kind"] == {"cublaslt": 1} and warm["plans_made"] == 0
    assert cold["first_token_s"] == 0.25 and cold["wall_s"] == 1.0 and cold["caches_reported"] is True


def test_the_measured_processes_use_a_private_cache(tmp_path: Path) -> None:
    env = startup.cache_env(tmp_path / "k", {"ACL_PLAN_CACHE": "/elsewhere", "PATH": "/bin"})
    assert env == {"ACL_KERNEL_CACHE": str(tmp_path / "k"), "PATH": "/bin"}  # plans go to <kernel cache>/plans
    command = startup.generate_command(tmp_path, tmp_path / "o.json", backend="rocm", dtype="bf16", prompt=[3, 4],
                                       new_tokens=2)  # fmt: skip
    assert command[1:5] == ["-m", "acl_core", "qwen3", "generate"] and command[-2:] == ["--backend", "rocm"]
    assert "3,4" in command and "--json" in command
