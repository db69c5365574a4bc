"""docs/PLUGINS.md names the whole driver seam and every capability field, so it cannot drift from the code."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from acl_core.backend import Backend
from acl_core.capabilities import Capabilities
from acl_core.spec.runtime import Driver

DOC = Path(__file__).resolve().parents[2] / "docs" / "PLUGINS.md"


def _named(name: str, text: str) -> bool:
    return re.search(rf"[`.]{re.escape(name)}[`(]", text) is not None


def _driver_methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(Driver, inspect.isfunction) if not n.startswith("_"))


def test_every_driver_method_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    methods = _driver_methods()
    assert {"destroy_stream", "destroy_event", "synchronize_device", "capture_begin"} <= set(methods)
    missing = [n for n in methods if not _named(n, text)]
    assert not missing, f"docs/PLUGINS.md does not name Driver.{', Driver.'.join(missing)}"


def test_the_dlpack_hooks_are_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert all(_named(n, text) for n in ("dlpack_device", "dlpack_pointer"))
    assert all(hasattr(Backend, n) for n in ("dlpack_device", "dlpack_pointer"))


def test_every_capabilities_field_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [n for n in Capabilities.model_fields if not _named(n, text)]
    assert not missing, f"docs/PLUGINS.md does not name Capabilities.{', Capabilities.'.join(missing)}"


def test_the_synchronize_device_default_is_the_one_documented() -> None:
    """The doc says the default waits only for the default stream: keep that true or fix the doc."""
    source = inspect.getsource(Driver.synchronize_device)
    assert "self.synchronize_stream(self.default_stream())" in source
    assert "waits only for `default_stream()`" in DOC.read_text(encoding="utf-8")
