"""The plugin's probe: no vendor import, a reason with the remedy, and a loud failure when asked for by name."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import acl_core
from acl_core.errors import BackendUnavailableError
from acl_rocm import platform as plat
from acl_rocm import plugin


def _no_libraries(filename: str, environ: object, extra_dirs: object = ()) -> None:
    return None


def test_reasons_name_the_missing_piece_and_the_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plat, "find_library", _no_libraries)
    monkeypatch.setattr(plat, "module_present", lambda name: False)
    assert plat.amd_reason({}) == "no HIP runtime: libamdhip64.so not found; install ROCm or set ROCM_PATH"
    assert plat.nvidia_reason({}) == "no CUDA runtime: cuda-bindings not installed; pip install 'acl-core[nvidia]'"
    probe = plat.detect({})
    assert probe.platform is None
    assert probe.reason == f"{plat.amd_reason({})}; {plat.nvidia_reason({})}"


def test_bindings_without_a_driver_is_its_own_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plat, "find_library", _no_libraries)
    monkeypatch.setattr(plat, "module_present", lambda name: name == "cuda.bindings")
    assert plat.nvidia_reason({}) == "no CUDA driver: libcuda.so.1 not found; install the NVIDIA driver"


def test_a_present_platform_is_chosen_and_the_override_forces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plat, "find_library", lambda f, env, extra=(): "/x/" + f)
    monkeypatch.setattr(plat, "module_present", lambda name: True)
    assert plat.detect({}).platform == "amd"
    assert plat.detect({"ACL_HIP_PLATFORM": "nvidia"}).platform == "nvidia"
    bad = plat.detect({"ACL_HIP_PLATFORM": "intel"})
    assert bad.platform is None and "ACL_HIP_PLATFORM='intel'" in (bad.reason or "")
    monkeypatch.setattr(plat, "module_present", lambda name: name.startswith("hip"))
    forced = plat.detect({"ACL_HIP_PLATFORM": "nvidia"})
    assert forced.platform is None and "cuda-bindings not installed" in (forced.reason or "")
    assert "ACL_HIP_PLATFORM=nvidia forces" in (forced.reason or "")


def test_rocm_path_is_searched_for_the_hip_runtime(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libamdhip64.so.6").write_bytes(b"")
    assert plat.find_library("libamdhip64.so", {}, plat.rocm_dirs({"ROCM_PATH": str(tmp_path)})) == str(
        lib / "libamdhip64.so.6"
    )


def test_module_present_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plat.module_present("json")
    assert plat.module_present("acl_core.spec")
    assert not plat.module_present("acl_core.no_such_module")
    assert not plat.module_present("no_such_top_level_module_xyz.sub")


def test_get_backend_raises_the_probe_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plat, "find_library", _no_libraries)
    monkeypatch.setattr(plat, "module_present", lambda name: False)
    acl_core.reset_plugins()
    try:
        rows = {s.name: s for s in acl_core.list_backends()}
        assert "rocm" in rows and not rows["rocm"].available
        assert rows["rocm"].reason == plugin.probe()
        with pytest.raises(BackendUnavailableError) as err:
            acl_core.get_backend("rocm")
        assert err.value.reason == plat.detect({}).reason
        assert "install ROCm or set ROCM_PATH" in str(err.value) and "pip install 'acl-core[nvidia]'" in str(err.value)
    finally:
        acl_core.reset_plugins()


def test_the_state_here_is_consistent() -> None:
    reason = plugin.probe()
    if reason is None:
        assert acl_core.get_backend("rocm").name == "rocm"
    else:
        with pytest.raises(BackendUnavailableError) as err:
            acl_core.get_backend("rocm")
        assert err.value.reason == reason


def test_listing_backends_imports_no_vendor_module() -> None:
    code = textwrap.dedent(
        """
        import json
        import sys
        import acl_core
        rows = acl_core.list_backends()
        assert any(r.name == "rocm" for r in rows), rows
        vendors = ("cuda", "hip", "nvmath", "cupy", "torch", "pycuda")
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in vendors)
        ours = sorted(m for m in sys.modules if m.startswith("acl_rocm."))
        print(json.dumps([loaded, ours]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded, ours = json.loads(out)
    assert loaded == []
    assert "acl_rocm.plugin" in ours
    assert not [m for m in ours if m.startswith(("acl_rocm.backend", "acl_rocm.providers", "acl_rocm.ops"))]
