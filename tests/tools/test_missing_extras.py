"""A missing optional dependency is one line naming the pip extra to install, and exit status 2, never a traceback.

Each test makes the import fail the way an absent package does (``sys.modules[name] = None``).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from acl_core.cli import main
from acl_core.extras import MissingExtra, missing_extra, require

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hccl_allreduce.py"


def _one_line(err: str, extra: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"pip install 'acl-core[{extra}]'" in err and f"pip install -e '.[{extra}]'" in err, err
    return err


def _block(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_bench_ops_without_torch(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _block(monkeypatch, "torch")
    assert main(["bench", "--backend", "reference", "--suite", "ops"]) == 2
    err = _one_line(capsys.readouterr().err, "torch")
    assert err.startswith("acl-core bench --suite ops needs torch")


@pytest.mark.parametrize("blocked", ["torch", "transformers"])
def test_qwen3_make_tiny_without_torch_or_transformers(
    blocked: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _block(monkeypatch, blocked)
    assert main(["qwen3", "make-tiny", str(tmp_path / "tiny")]) == 2
    err = _one_line(capsys.readouterr().err, "torch")
    assert err.startswith(f"acl-core qwen3 make-tiny needs {blocked}")
    assert not (tmp_path / "tiny").exists()


def test_qwen3_parity_without_torch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _block(monkeypatch, "torch")
    assert main(["qwen3", "parity", "--model", str(tmp_path), "--backend", "reference", "--quiet"]) == 2
    assert _one_line(capsys.readouterr().err, "torch").startswith("acl-core qwen3 parity needs torch")


def test_bench_collectives_without_mpi4py(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _block(monkeypatch, "mpi4py", "mpi4py.MPI")
    assert main(["bench", "--backend", "reference", "--collectives", "2"]) == 2
    assert "needs mpi4py" in _one_line(capsys.readouterr().err, "mpi")


def test_the_mpi_example_without_mpi4py(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _block(monkeypatch, "mpi4py", "mpi4py.MPI")
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert stop.value.code == 2
    assert "examples/hccl_allreduce.py needs mpi4py" in _one_line(capsys.readouterr().err, "mpi")


def test_a_delegated_command_that_hits_a_missing_module_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from acl_tools.bench import cli

    def needs_matplotlib(argv: list[str]) -> int:
        import matplotlib  # noqa: F401

        return 0

    _block(monkeypatch, "matplotlib")
    monkeypatch.setattr(cli, "main", needs_matplotlib)
    monkeypatch.setattr("acl_tools.bench.main", needs_matplotlib)
    assert main(["bench"]) == 2
    assert _one_line(capsys.readouterr().err, "tools").startswith("acl-core bench needs matplotlib")


def test_an_unrelated_missing_module_still_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def needs_something_else(argv: list[str]) -> int:
        import acl_core_no_such_module  # type: ignore[import-not-found]  # noqa: F401

        return 0

    monkeypatch.setattr("acl_tools.bench.main", needs_something_else)
    with pytest.raises(ModuleNotFoundError):
        main(["bench"])
    assert missing_extra(ModuleNotFoundError("x", name="acl_core_no_such_module"), "p") is None


def test_require_names_the_missing_module_and_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    _block(monkeypatch, "transformers")
    with pytest.raises(MissingExtra) as missing:
        require("numpy", "transformers", purpose="this")
    assert missing.value.module == "transformers" and missing.value.extra == "torch"
    assert str(missing.value).startswith("this needs transformers, which is not installed here")
