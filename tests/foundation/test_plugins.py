"""Backend discovery: entry points, availability with reasons, selection, and no silent fallback."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import acl_core
from acl_core.backend import Backend, BackendRegistration
from acl_core.cli import main
from acl_core.errors import BackendNotFoundError, BackendUnavailableError
from acl_core.plugin import hookimpl


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    acl_core.reset_plugins()
    yield
    acl_core.reset_plugins()


class _Plugin:
    def __init__(self, *regs: BackendRegistration) -> None:
        self.regs = regs

    @hookimpl
    def acl_core_backends(self) -> Sequence[BackendRegistration]:
        return self.regs


def _reference_factory() -> Backend:
    from acl_reference.backend import ReferenceBackend

    backend = ReferenceBackend()
    backend.name = "fake"
    return backend


def test_reference_comes_from_its_entry_point() -> None:
    (row,) = [s for s in acl_core.list_backends() if s.name == "reference"]
    assert row.available and "entry point reference = acl_reference.plugin" in row.source


def test_unavailable_backend_is_listed_with_its_reason_and_refused_by_name() -> None:
    acl_core.register_plugin(
        _Plugin(BackendRegistration("ghost", _reference_factory, lambda: "no ghost runtime: install it", 50))
    )
    (row,) = [s for s in acl_core.list_backends() if s.name == "ghost"]
    assert not row.available and row.reason == "no ghost runtime: install it"
    with pytest.raises(BackendUnavailableError) as exc:
        acl_core.get_backend("ghost")
    assert "no ghost runtime: install it" in str(exc.value)
    # the default skips it even though its priority is higher: no fallback by name, only by availability
    assert acl_core.get_backend().name == "reference"


def test_highest_priority_available_backend_is_the_default() -> None:
    acl_core.register_plugin(_Plugin(BackendRegistration("fake", _reference_factory, priority=10)))
    assert acl_core.list_backends()[0].name == "fake"
    assert acl_core.get_backend().name == "fake"


def test_acl_backend_env_selects_and_never_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    acl_core.register_plugin(_Plugin(BackendRegistration("fake", _reference_factory, priority=-5)))
    monkeypatch.setenv("ACL_BACKEND", "fake")
    assert acl_core.get_backend().name == "fake"
    acl_core.reset_plugins()
    monkeypatch.setenv("ACL_BACKEND", "nosuch")
    with pytest.raises(BackendNotFoundError):
        acl_core.get_backend()


def test_acl_backend_is_read_when_the_default_is_resolved_not_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    acl_core.register_plugin(_Plugin(BackendRegistration("fake", _reference_factory, priority=-5)))
    monkeypatch.delenv("ACL_BACKEND", raising=False)
    assert acl_core.get_backend().name == "reference"
    monkeypatch.setenv("ACL_BACKEND", "fake")
    assert acl_core.get_backend().name == "reference"  # the resolved default is kept
    assert acl_core.get_backend("fake").name == "fake"  # a name still wins
    acl_core.use_backend(None)  # forgets the default: the environment is read again
    assert acl_core.get_backend().name == "fake"
    assert acl_core.use_backend("reference") is acl_core.get_backend() and acl_core.get_backend().name == "reference"
    acl_core.use_backend(None)
    monkeypatch.setenv("ACL_BACKEND", "nosuch")
    acl_core.reset_plugins()
    for _ in range(2):  # a failed resolution keeps nothing and fails again
        with pytest.raises(BackendNotFoundError):
            acl_core.get_backend()
    monkeypatch.setenv("ACL_BACKEND", "reference")
    assert acl_core.get_backend().name == "reference"


def test_a_failing_probe_or_factory_is_a_reason_not_a_crash() -> None:
    def broken_probe() -> str | None:
        raise OSError("driver exploded")

    def broken_factory() -> Backend:
        raise RuntimeError("device lost")

    acl_core.register_plugin(
        _Plugin(
            BackendRegistration("probe-fails", _reference_factory, broken_probe),
            BackendRegistration("start-fails", broken_factory),
        )
    )
    rows = {s.name: s for s in acl_core.list_backends()}
    assert not rows["probe-fails"].available and "driver exploded" in rows["probe-fails"].reason
    with pytest.raises(BackendUnavailableError, match="device lost"):
        acl_core.get_backend("start-fails")


def test_malformed_plugin_is_reported() -> None:
    class Malformed:
        @hookimpl
        def acl_core_backends(self, unexpected_argument: int) -> list[BackendRegistration]:
            return []

    acl_core.register_plugin(Malformed(), name="malformed")
    rows = {s.name: s for s in acl_core.list_backends()}
    assert not rows["malformed"].available and "malformed" in rows["malformed"].reason


def test_import_and_listing_import_no_vendor_or_heavy_library() -> None:
    code = textwrap.dedent(
        """
        import sys, acl_core
        acl_core.list_backends()
        heavy = sorted(m for m in sys.modules if m.split('.')[0] in
                       {'hip', 'cuda', 'cupy', 'torch', 'nvmath', 'nccl', 'mpi4py', 'numpy', 'pydantic'})
        print(heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


PLUGIN_PYPROJECT = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "acl-backend-demo"
version = "1.0"

[project.entry-points."acl_core.backends"]
demo = "acl_backend_demo"
"""

PLUGIN_MODULE = '''
"""A demo backend, written from docs/PLUGINS.md."""
import os
from acl_core.backend import BackendRegistration
from acl_core.plugin import hookimpl


def _create():
    from acl_reference.backend import ReferenceBackend

    backend = ReferenceBackend()
    backend.name = "demo"
    return backend


def _probe():
    return None if os.environ.get("DEMO_DEVICE") else "no demo device: set DEMO_DEVICE=1"


@hookimpl
def acl_core_backends():
    return [BackendRegistration(name="demo", factory=_create, probe=_probe, priority=5, summary="demo")]
'''


@pytest.mark.slow
def test_a_separate_distribution_is_discovered_selected_and_explained(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (src / "acl_backend_demo.py").write_text(PLUGIN_MODULE)
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}
    env.pop("DEMO_DEVICE", None)
    listing = subprocess.run(
        [sys.executable, "-m", "acl_core", "backends", "--json"], env=env, capture_output=True, text=True, check=True
    )
    assert '"name": "demo"' in listing.stdout and "no demo device: set DEMO_DEVICE=1" in listing.stdout
    env["DEMO_DEVICE"] = "1"
    env["ACL_BACKEND"] = "demo"
    chosen = subprocess.run(
        [sys.executable, "-c", "import acl_core; print(acl_core.get_backend().name)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert chosen.stdout.strip() == "demo"


def test_backends_table_shows_reasons_verbatim() -> None:
    acl_core.register_plugin(
        _Plugin(BackendRegistration("bracket", _reference_factory, lambda: "pip install 'x[extra]'"))
    )
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["backends", "--no-probe"]) == 0
    assert "x[extra]" in buffer.getvalue()


def test_reset_keeps_started_entry_point_backends() -> None:
    reference = acl_core.get_backend("reference")
    acl_core.register_plugin(_Plugin(BackendRegistration("fake", _reference_factory, priority=10)))
    fake = acl_core.get_backend("fake")
    acl_core.reset_plugins()
    assert acl_core.get_backend("reference") is reference  # its runtime may own live memory
    with pytest.raises(BackendNotFoundError):
        acl_core.get_backend("fake")
    assert fake.name == "fake"
