"""The pyACL-shaped front end: a pyACL script runs unchanged but for its import; misuse returns codes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def test_pyacl_script_runs_with_only_its_import_changed() -> None:
    script = ROOT / "examples" / "pyacl_runtime.py"
    assert "from acl_core import acl  # was: import acl" in script.read_text()
    env = {**os.environ, "ACL_BACKEND": "reference"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "round trip ok" in done.stdout


MISUSE = r"""
import numpy as np
from acl_core import acl
assert acl.init() == 0 and acl.init() == 100002
assert acl.rt.set_device(0) == 0
keep, ret = acl.rt.malloc(64, 0); assert ret == 0
payload = np.arange(64, dtype=np.uint8)
assert acl.rt.memcpy(keep, 64, acl.util.numpy_to_ptr(payload), 64, 1) == 0
dev, ret = acl.rt.malloc(32, 0)
host = np.zeros(128, np.uint8); h = acl.util.numpy_to_ptr(host)
codes = {
    "out_of_bounds": acl.rt.memcpy(dev, 128, h, 128, 1),
    "count_over_dest_max": acl.rt.memcpy(dev, 16, h, 32, 1),
    "kind_contradicts": acl.rt.memcpy(dev, 32, h, 32, 2),
    "unknown_pointer": acl.rt.memcpy(h, 32, 0x7ff0_0000_0000, 32, 2),
    "free_unknown": acl.rt.free(12345),
}
assert acl.rt.free(dev) == 0
codes["double_free"] = acl.rt.free(dev)
codes["use_after_free"] = acl.rt.memcpy(h, 32, dev, 32, 2)
stream, _ = acl.rt.create_stream(); assert acl.rt.destroy_stream(stream) == 0
codes["destroyed_stream"] = acl.rt.synchronize_stream(stream)
event, _ = acl.rt.create_event(); assert acl.rt.destroy_event(event) == 0
codes["destroyed_event"] = acl.rt.record_event(event, None)
out = np.zeros(64, np.uint8)
assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), 64, keep, 64, 2) == 0
print(codes, bool((out == payload).all()), acl.get_recent_err_msg() != "")
"""


def test_every_misuse_returns_a_code_and_disturbs_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MISUSE], capture_output=True, text=True, env={**os.environ, "ACL_BACKEND": "reference"}
    )
    assert done.returncode == 0, done.stderr
    codes_text, intact, has_message = done.stdout.rsplit(" ", 2)
    codes = eval(codes_text)  # a dict literal printed by the child
    assert codes == {
        "out_of_bounds": 100000,
        "count_over_dest_max": 100000,
        "kind_contradicts": 107016,
        "unknown_pointer": 100000,
        "free_unknown": 207002,
        "double_free": 207002,
        "use_after_free": 100000,
        "destroyed_stream": 107017,
        "destroyed_event": 107017,
    }
    assert intact == "True" and has_message.strip() == "True"


def test_util_helpers_round_trip() -> None:
    from acl_core import acl

    arr = np.arange(6, dtype=np.float32)
    ptr = acl.util.numpy_to_ptr(arr)
    view = acl.util.ptr_to_numpy(ptr, (2, 3), np.dtype(np.float32).num)
    assert np.array_equal(view, arr.reshape(2, 3))
    assert acl.util.ptr_to_bytes(ptr, 8) == arr.tobytes()[:8]
    assert acl.util.ptr_to_bytes(ptr, 0) == b""
