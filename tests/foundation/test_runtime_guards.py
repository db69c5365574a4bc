"""Runtime reliability (issue 17): aclInit is required, C-inexpressible arguments are parameter errors,
registered views never shadow allocations, and impossible allocation sizes are 207001 everywhere.

The sweeps enumerate the entry points instead of listing them, so an entry point added later is
swept too.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from acl_core.acl import rt as acl_rt
from acl_core.errors import AclError
from acl_core.runtime import MemoryMap, Range, RangeKind, Runtime
from acl_core.runtime.c_args import c_converters
from acl_core.spec.runtime import MemcpyKind as K
from acl_reference.driver import ReferenceDriver

ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_RT_MEMORY_ALLOCATION = 207001
INTERNAL = {500000, 500001, 500002, 500003, 500004, 561000, 561001, 561002, 561003}

LIFECYCLE = {"init", "finalize"}


def _entry_points() -> dict[str, object]:
    """Every Runtime method that is an acl entry point (carries the acl_entry marker)."""
    return {name: fn for name, fn in vars(Runtime).items() if hasattr(fn, "acl_api")}


def _front_end_functions() -> list[str]:
    """Every public function of acl.rt."""
    return sorted(
        name
        for name, fn in vars(acl_rt).items()
        if inspect.isfunction(fn) and fn.__module__ == acl_rt.__name__ and not name.startswith("_")
    )


def _code(fn, *args) -> int:
    with pytest.raises(AclError) as exc:
        fn(*args)
    return exc.value.code


def _fresh() -> Runtime:
    return Runtime("reference", ReferenceDriver())


def _ready() -> Runtime:
    rt = _fresh()
    rt.init()
    rt.set_device(0)
    return rt


# ----------------------------------------------------------------- the entry points declare C types
def test_every_entry_point_types_every_parameter() -> None:
    entries = _entry_points()
    assert len(entries) >= 35, sorted(entries)
    untyped = {name: [p for p, c in c_converters(fn).items() if c is None] for name, fn in entries.items()}
    assert {name: ps for name, ps in untyped.items() if ps} == {}


def test_every_front_end_function_reaches_an_entry_point() -> None:
    """acl.rt adds no conversions of its own, so each of its functions must end in a marked method."""
    entries = _entry_points()
    unguarded = []
    for name in _front_end_functions():
        source = inspect.getsource(getattr(acl_rt, name))
        if not any(f"runtime().{method}(" in source for method in entries):
            unguarded.append(name)
    assert unguarded == []


# ----------------------------------------------------------------- item 5: aclInit first
def _sample_args(fn) -> list[object]:
    return [0 for _ in c_converters(fn)]


@pytest.mark.parametrize("when", ["never initialised", "after finalize"])
def test_every_entry_point_needs_acl_init(when: str) -> None:
    rt = _fresh()
    if when == "after finalize":
        rt.init()
        rt.set_device(0)
        rt.finalize()
    codes = {
        name: _code(getattr(rt, name), *_sample_args(fn))
        for name, fn in _entry_points().items()
        if name not in LIFECYCLE
    }
    assert codes == dict.fromkeys(codes, ACL_ERROR_UNINITIALIZE)


SWEEP_CHILD = r"""
import inspect, json, sys
from acl_core import acl
from acl_core.acl import rt

def codes():
    out = {}
    for name, fn in sorted(vars(rt).items()):
        if not inspect.isfunction(fn) or fn.__module__ != rt.__name__ or name.startswith("_"):
            continue
        result = fn(*[0] * len(inspect.signature(fn).parameters))
        out[name] = result[-1] if isinstance(result, tuple) else result
    return out

report = {"before": codes()}
assert acl.init() == 0 and acl.rt.set_device(0) == 0
ptr, ret = acl.rt.malloc(64, 0); assert ret == 0
assert acl.finalize() == 0
report["after"] = codes()
report["free_after_finalize"] = acl.rt.free(ptr)
print(json.dumps(report))
"""


def _child(script: str) -> dict:
    env = {**os.environ, "ACL_BACKEND": "reference"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_acl_rt_function_before_init_and_after_finalize_returns_100001() -> None:
    report = _child(SWEEP_CHILD)
    names = _front_end_functions()
    assert sorted(report["before"]) == names and len(names) >= 36
    assert report["before"] == dict.fromkeys(names, ACL_ERROR_UNINITIALIZE)
    assert report["after"] == dict.fromkeys(names, ACL_ERROR_UNINITIALIZE)
    assert report["free_after_finalize"] == ACL_ERROR_UNINITIALIZE


def test_the_pythonic_layer_initialises_implicitly_and_acl_init_still_succeeds_once() -> None:
    rt = _fresh()
    assert rt.ensure_device() == 0 and rt.initialized
    rt.init()  # the program's own aclInit is its first: it succeeds
    assert _code(rt.init) == 100002


# ----------------------------------------------------------------- item 12: arguments C cannot express
NEVER_C = {
    "str": "x",
    "float": 1.5,
    "bool": True,
    "bytes": b"\x00",
    "list": [1],
    "object": object(),
    "2**64": 2**64,
    "-2**64": -(2**64),
}
"""Values no C parameter of the acl API can take: every one is ACL_ERROR_INVALID_PARAM."""

EDGE = {"None": None, "-1": -1, "2**63": 2**63, "numpy int": np.int64(3)}
"""Values some C parameters can take (null pointer, int32 -1, a huge size_t): codes vary, never internal."""


def _bad_arg_cases() -> list[tuple[str, int]]:
    cases = []
    for name in _front_end_functions():
        for position in range(len(inspect.signature(getattr(acl_rt, name)).parameters)):
            cases.append((name, position))
    return cases


BAD_ARG_CHILD = r"""
import inspect, json
import numpy as np
from acl_core import acl
from acl_core.acl import rt
assert acl.init() == 0 and acl.rt.set_device(0) == 0
values = {values}
report = {{}}
for name, fn in sorted(vars(rt).items()):
    if not inspect.isfunction(fn) or fn.__module__ != rt.__name__ or name.startswith("_"):
        continue
    arity = len(inspect.signature(fn).parameters)
    for position in range(arity):
        for label, value in values.items():
            args = [0] * arity
            args[position] = value
            result = fn(*args)
            code = result[-1] if isinstance(result, tuple) else result
            report[f"{{name}}[{{position}}]={{label}}"] = [code, acl.get_recent_err_msg()]
print(json.dumps(report))
"""

_VALUES_SOURCE = (
    '{"str": "x", "float": 1.5, "bool": True, "bytes": b"\\x00", "list": [1], "object": object(),'
    ' "2**64": 2**64, "-2**64": -(2**64), "None": None, "-1": -1, "2**63": 2**63, "numpy int": np.int64(3)}'
)


@pytest.fixture(scope="module")
def bad_arg_report() -> dict:
    return _child(BAD_ARG_CHILD.format(values=_VALUES_SOURCE))


def test_the_sweep_covers_every_parameter_of_every_acl_rt_function(bad_arg_report: dict) -> None:
    expected = {f"{n}[{p}]={label}" for n, p in _bad_arg_cases() for label in (*NEVER_C, *EDGE)}
    assert set(bad_arg_report) == expected and len(_bad_arg_cases()) >= 45


def test_values_c_cannot_express_are_invalid_param_everywhere(bad_arg_report: dict) -> None:
    wrong = {
        case: result
        for case, result in bad_arg_report.items()
        if case.rsplit("=", 1)[1] in NEVER_C and result[0] != ACL_ERROR_INVALID_PARAM
    }
    assert wrong == {}
    sample = bad_arg_report["free[0]=str"][1]
    assert "aclrtFree" in sample and "'x'" in sample, sample


def test_edge_values_never_come_back_as_internal_errors(bad_arg_report: dict) -> None:
    internal = {case: result for case, result in bad_arg_report.items() if result[0] in INTERNAL}
    assert internal == {}


def test_negative_and_none_follow_the_c_type() -> None:
    rt = _ready()
    assert _code(rt.malloc, -1) == ACL_ERROR_INVALID_PARAM  # size_t
    assert _code(rt.set_device, -1) == 107001  # int32_t: a device id that does not exist
    assert _code(rt.set_device, 2**31) == ACL_ERROR_INVALID_PARAM  # wider than int32_t
    assert _code(rt.free, None) == 207002  # a null pointer is a pointer, just not an allocation
    assert _code(rt.malloc, None) == ACL_ERROR_INVALID_PARAM
    rt.synchronize_stream(None)  # null stream: the default stream
    ptr = rt.malloc(np.int64(64))  # NumPy integers are integers
    rt.free(np.uint64(ptr))


def test_a_string_stream_is_a_parameter_error_for_every_front_end() -> None:
    rt = _ready()
    assert _code(rt.stream, "x") == ACL_ERROR_INVALID_PARAM  # what aclnn and HCCL launch through
    assert _code(rt.stream, 1.0) == ACL_ERROR_INVALID_PARAM


@pytest.mark.parametrize(
    ("helper", "args"),
    [
        ("bytes_to_ptr", ("text",)),
        ("numpy_to_ptr", ([1, 2],)),
        ("numpy_contiguous_to_ptr", ("x",)),
        ("ptr_to_bytes", ("x", 4)),
        ("ptr_to_bytes", (0x1000, -1)),
        ("ptr_to_bytes", (1.5, 4)),
        ("ptr_to_numpy", ("x", (2,), 11)),
        ("ptr_to_numpy", (0x1000, "2", 11)),
        ("ptr_to_numpy", (0x1000, (2,), "f")),
        ("ptr_to_numpy", (0x1000, (2,), 9999)),
    ],
)
def test_util_helpers_raise_invalid_param(helper: str, args: tuple) -> None:
    from acl_core import acl

    assert _code(getattr(acl.util, helper), *args) == ACL_ERROR_INVALID_PARAM


def test_config_path_must_be_a_string() -> None:
    rt = _fresh()
    assert _code(rt.init, 5) == ACL_ERROR_INVALID_PARAM  # never open(5): that reads file descriptor 5
    assert not rt.initialized


# ----------------------------------------------------------------- item 6: views of malloc_host memory
def test_a_registered_view_of_page_locked_memory_stays_page_locked_and_freeable() -> None:
    rt = _ready()
    driver = rt.driver
    host = rt.malloc_host(256)
    view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * 256).from_address(host))
    view[:] = np.arange(256, dtype=np.uint8)
    rt.register_host(int(view.ctypes.data), view.nbytes, view)  # acl.util.numpy_to_ptr(view)
    inner = view[64:]
    rt.register_host(int(inner.ctypes.data), inner.nbytes, inner)  # a view starting inside the block
    dev = rt.malloc(256)
    stream = rt.create_stream()
    rt.memcpy_async(dev, 256, host, 256, K.ACL_MEMCPY_HOST_TO_DEVICE, stream)
    rt.memcpy_async(dev, 192, host + 64, 192, K.ACL_MEMCPY_HOST_TO_DEVICE, stream)
    rt.synchronize_stream(stream)
    out = np.zeros(192, np.uint8)
    rt.register_host(int(out.ctypes.data), out.nbytes, out)
    rt.memcpy(int(out.ctypes.data), 192, dev, 192, K.ACL_MEMCPY_DEVICE_TO_HOST)
    assert np.array_equal(out, np.arange(64, 256, dtype=np.uint8))
    rt.unregister(host)  # what eager does after borrowing a host buffer: never drops an allocation
    rt.free_host(host)
    assert rt.memory.live(RangeKind.HOST_PINNED) == [] and driver._host == {}  # nothing leaked


def test_a_larger_buffer_at_a_registered_start_supersedes_it() -> None:
    rt = _ready()
    data = np.arange(64, dtype=np.uint8)
    rt.register_host(int(data.ctypes.data), 16, data[:16])
    rt.register_host(int(data.ctypes.data), 64, data)
    assert rt.memory.exact(int(data.ctypes.data)).size == 64
    rt.register_host(int(data.ctypes.data), 8, data[:8])  # a smaller one keeps the larger
    assert rt.memory.exact(int(data.ctypes.data)).size == 64


def test_the_memory_map_never_replaces_a_live_range() -> None:
    memory = MemoryMap()
    memory.add(Range(0x1000, 64, RangeKind.HOST_PINNED, -1))
    with pytest.raises(AclError):
        memory.add(Range(0x1000, 64, RangeKind.HOST, -1))
    assert memory.exact(0x1000).kind is RangeKind.HOST_PINNED
    memory.remove(0x1000)
    memory.add(Range(0x1000, 32, RangeKind.HOST, -1))  # once removed, the start is free again


# ----------------------------------------------------------------- item 7: impossible sizes
@pytest.mark.parametrize("size", [2**63, 2**64 - 1])
def test_sizes_no_memory_holds_are_207001_on_host_and_device(size: int) -> None:
    rt = _ready()
    assert _code(rt.malloc_host, size) == ACL_ERROR_RT_MEMORY_ALLOCATION
    assert _code(rt.malloc, size) == ACL_ERROR_RT_MEMORY_ALLOCATION


def test_host_exhaustion_in_the_driver_is_207001(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _ready()

    def exhausted(nbytes: int) -> int:
        raise MemoryError

    monkeypatch.setattr(rt.driver, "alloc_host", exhausted)
    assert _code(rt.malloc_host, 1 << 40) == ACL_ERROR_RT_MEMORY_ALLOCATION


def test_front_end_malloc_and_malloc_host_agree_on_huge_sizes() -> None:
    report = _child(
        "import json\nfrom acl_core import acl\nassert acl.init() == 0 and acl.rt.set_device(0) == 0\n"
        "print(json.dumps([acl.rt.malloc(2**63, 0)[1], acl.rt.malloc_host(2**63)[1],"
        " acl.rt.malloc(2**64, 0)[1], acl.rt.malloc_host(2**64)[1]]))"
    )
    assert report == [207001, 207001, 100000, 100000]
