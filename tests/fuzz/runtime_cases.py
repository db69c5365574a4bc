"""Runtime misuse through ``acl`` (``acl.rt``, ``acl.util``): each kind is one short script of calls.

A script records every call it makes (the reproduction line is their sequence) and what each may end
in; resources it creates are released afterwards, and a release that fails counts as a leak. Calls
before ``acl.init`` and after ``acl.finalize`` run on a backend of their own, so the process's
runtime is never finalized under the other cases.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import acl_core
from acl_core import acl
from acl_core.backend import Backend, BackendRegistration
from acl_core.errors import AclCoreError, AclErrorCode, RtErrorCode
from acl_core.plugin import hookimpl

from .harness import Hang, timed
from .op_cases import describe
from .verdict import ANYTHING, Expect, Outcome, Verdict, classify_code

INVALID = int(AclErrorCode.ACL_ERROR_INVALID_PARAM)
UNINIT = int(AclErrorCode.ACL_ERROR_UNINITIALIZE)
REPEAT_INIT = int(AclErrorCode.ACL_ERROR_REPEAT_INITIALIZE)
REPEAT_FINAL = int(AclErrorCode.ACL_ERROR_REPEAT_FINALIZE)
MEM_FREE = int(RtErrorCode.ACL_ERROR_RT_MEMORY_FREE)
MEM_ALLOC = int(RtErrorCode.ACL_ERROR_RT_MEMORY_ALLOCATION)
HANDLE = int(RtErrorCode.ACL_ERROR_RT_INVALID_HANDLE)
CONTEXT = int(RtErrorCode.ACL_ERROR_RT_CONTEXT_NULL)
DEVICE_ID = int(RtErrorCode.ACL_ERROR_RT_INVALID_DEVICEID)
MEM_TYPE = int(RtErrorCode.ACL_ERROR_RT_INVALID_MEMORY_TYPE)
NOT_SUPPORT = int(RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
TIMESTAMP = int(RtErrorCode.ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID)
VALID = Expect(frozenset({0}))
"""A valid call: it must succeed (a refusal is a wrong code)."""
H2D, D2H, H2H = 1, 2, 0
NPY_UINT8 = 2

BAD_INTS: tuple[Any, ...] = (-1, 2**63, 2**64, -(2**63) - 1, "x", None, 1.5, b"\x01", [1], float("nan"))
"""Arguments C cannot pass as an integer (or that no size_t / int holds)."""
BAD_HANDLES: tuple[Any, ...] = (0xDEAD_BEEF, -1, 2**64, "stream", 1.5, [1], b"\x00")


def refuse(*codes: int) -> Expect:
    """A misuse that must be refused with one of ``codes``."""
    return Expect.refusal(codes)


class Script:
    """The calls of one runtime case, their verdicts, and what to release afterwards."""

    def __init__(self, out: Outcome, limit: float, rng: np.random.Generator) -> None:
        self.out = out
        self.limit = limit
        self.rng = rng
        self.steps: list[str] = []
        self._release: list[tuple[str, Callable[[], Any]]] = []

    def pick(self, options: tuple[Any, ...] | list[Any]) -> Any:
        """One of ``options``, drawn from the case's generator."""
        return options[int(self.rng.integers(len(options)))]

    def call(self, text: str, fn: Callable[[], Any], expect: Expect = ANYTHING) -> Any:
        """Run one front-end call (returning a code, or values then a code) and classify it."""
        self.steps.append(text)
        self.out.repro = "; ".join(self.steps)
        result, exc, seconds = timed(fn, self.limit)
        if isinstance(exc, Hang) or (exc is None and seconds > self.limit):
            self.out.worse(Verdict.HANG, text, 0, f"took {seconds:.1f} s")
            return None
        if exc is not None:
            self.out.worse(Verdict.ESCAPED, text, 0, f"{type(exc).__name__}: {exc}")
            return None
        code = int(result[-1] if isinstance(result, tuple) else result)
        message = acl.get_recent_err_msg() if code else ""
        self.out.worse(classify_code(code, message, expect), text, code, message or "accepted")
        return result

    def util(self, text: str, fn: Callable[[], Any], refused: bool) -> Any:
        """An ``acl.util`` call, which raises on misuse: typed errors count as refusals, others escape."""
        self.steps.append(text)
        self.out.repro = "; ".join(self.steps)
        result, exc, _ = timed(fn, self.limit)
        if isinstance(exc, Hang):
            self.out.worse(Verdict.HANG, text, 0, str(exc))
        elif isinstance(exc, AclCoreError):
            self.out.worse(classify_code(exc.code, exc.message, ANYTHING), text, exc.code, exc.message)
        elif isinstance(exc, (TypeError, ValueError)):
            self.out.worse(Verdict.REFUSED, text, 0, f"{type(exc).__name__}: {exc}")
        elif exc is not None:
            self.out.worse(Verdict.ESCAPED, text, 0, f"{type(exc).__name__}: {exc}")
        elif refused:
            self.out.worse(Verdict.ACCEPTED, text, 0, f"returned {describe(result)}")
        return result

    def value(self, text: str, fn: Callable[[], tuple[Any, int]], expect: Expect = VALID) -> Any:
        """A call returning (value, code); the value, or None when it failed."""
        result = self.call(text, fn, expect)
        return result[0] if result is not None and result[-1] == 0 else None

    def release(self, text: str, fn: Callable[[], int]) -> None:
        """Remember to run ``fn`` (a free / destroy that must succeed) after the script."""
        self._release.append((text, fn))

    def forget(self, text: str) -> None:
        """The script released this itself."""
        self._release = [(t, f) for t, f in self._release if t != text]

    def finish(self) -> None:
        """Release what the script made, newest first; a release that fails is a leak."""
        for text, fn in reversed(self._release):
            result, exc, _ = timed(fn, self.limit)
            code = int(result) if exc is None else -1
            if code != 0:
                why = f"{type(exc).__name__}: {exc}" if exc is not None else f"{code}: {acl.get_recent_err_msg()}"
                self.out.worse(Verdict.LEAK, f"cleanup {text}", max(code, 0), f"cleanup failed ({why})")
        self._release = []

    # -------------------------------------------------------------- helpers that make resources
    def malloc(self, size: int = 256) -> int | None:
        """Device memory the script releases at the end."""
        ptr = self.value(f"p = acl.rt.malloc({size}, 0)", lambda: acl.rt.malloc(size, 0))
        if ptr:
            self.release(f"acl.rt.free({ptr:#x})", lambda: acl.rt.free(ptr))
        return ptr  # type: ignore[no-any-return]

    def malloc_host(self, size: int = 256) -> int | None:
        """Page-locked host memory the script releases at the end."""
        ptr = self.value(f"h = acl.rt.malloc_host({size})", lambda: acl.rt.malloc_host(size))
        if ptr:
            self.release(f"acl.rt.free_host({ptr:#x})", lambda: acl.rt.free_host(ptr))
        return ptr  # type: ignore[no-any-return]

    def stream(self) -> int | None:
        """A stream the script destroys at the end."""
        s = self.value("s = acl.rt.create_stream()", acl.rt.create_stream)
        if s:
            self.release(f"acl.rt.destroy_stream({s:#x})", lambda: acl.rt.destroy_stream(s))
        return s  # type: ignore[no-any-return]

    def event(self) -> int | None:
        """An event the script destroys at the end."""
        e = self.value("e = acl.rt.create_event()", acl.rt.create_event)
        if e:
            self.release(f"acl.rt.destroy_event({e:#x})", lambda: acl.rt.destroy_event(e))
        return e  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- a backend of one's own
_fresh = itertools.count()


@contextmanager
def fresh_backend() -> Iterator[Backend]:
    """A new reference backend, made the process default for the block (its runtime is not initialised)."""
    from acl_reference.backend import ReferenceBackend

    name = f"fuzz-fresh-{next(_fresh)}"
    made: list[Backend] = []

    def factory() -> Backend:
        backend = ReferenceBackend()
        backend.name = name
        made.append(backend)
        return backend

    class _Plugin:
        @hookimpl
        def acl_core_backends(self) -> list[BackendRegistration]:
            return [BackendRegistration(name, factory, priority=-100)]

    acl_core.register_plugin(_Plugin(), f"{name}-plugin")
    try:
        backend = acl_core.use_backend(name)
        assert backend is not None
        yield backend
    finally:
        acl_core.use_backend(None)  # the fuzz loop selects its backend again before each case
        acl_core.unregister_backend(name)


# ----------------------------------------------------------------------------- the misuse kinds
NEEDS_INIT: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("acl.rt.set_device(0)", lambda: acl.rt.set_device(0)),
    ("acl.rt.malloc(64, 0)", lambda: acl.rt.malloc(64, 0)),
    ("acl.rt.malloc_host(64)", lambda: acl.rt.malloc_host(64)),
    ("acl.rt.create_stream()", acl.rt.create_stream),
    ("acl.rt.create_event()", acl.rt.create_event),
    ("acl.rt.create_context(0)", lambda: acl.rt.create_context(0)),
    ("acl.rt.get_mem_info(0)", lambda: acl.rt.get_mem_info(0)),
)
"""Entry points CANN refuses with ACL_ERROR_UNINITIALIZE (100001) before aclInit / after aclFinalize."""


def before_init(s: Script) -> None:
    """A runtime call on a process that never called acl.init."""
    text, fn = s.pick(NEEDS_INIT)
    with fresh_backend() as backend:
        s.call(text, fn, refuse(UNINIT))
        _drain(backend)


def after_finalize(s: Script) -> None:
    """A runtime call after acl.finalize."""
    text, fn = s.pick(NEEDS_INIT)
    with fresh_backend() as backend:
        s.call("acl.init()", acl.init, VALID)
        s.call("acl.rt.set_device(0)", lambda: acl.rt.set_device(0), VALID)
        s.call("acl.finalize()", acl.finalize, VALID)
        s.call(text, fn, refuse(UNINIT))
        _drain(backend)


def lifecycle(s: Script) -> None:
    """acl.init twice, acl.finalize twice, acl.finalize without acl.init."""
    with fresh_backend() as backend:
        if s.rng.integers(2):
            s.call("acl.finalize()", acl.finalize, refuse(UNINIT))
        s.call("acl.init()", acl.init, VALID)
        s.call("acl.init()", acl.init, refuse(REPEAT_INIT))
        s.call("acl.finalize()", acl.finalize, VALID)
        s.call("acl.finalize()", acl.finalize, refuse(REPEAT_FINAL, UNINIT))
        _drain(backend)


def _drain(backend: Backend) -> None:
    """Finalize a fresh backend the case left initialised (it is dropped after the case with all it holds)."""
    if backend.runtime.initialized:
        backend.runtime.finalize()


def bad_malloc_size(s: Script) -> None:
    """acl.rt.malloc / malloc_host of sizes no allocation has, or C cannot pass; both give the same code."""
    size = s.pick((0, *BAD_INTS))
    dev = s.call(f"acl.rt.malloc({describe(size)}, 0)", lambda: acl.rt.malloc(size, 0), refuse(INVALID, MEM_ALLOC))
    host = s.call(f"acl.rt.malloc_host({describe(size)})", lambda: acl.rt.malloc_host(size), refuse(INVALID, MEM_ALLOC))
    for result, free in ((dev, acl.rt.free), (host, acl.rt.free_host)):
        if result is not None and result[-1] == 0:
            s.release("free the accepted allocation", lambda p=result[0], f=free: f(p))
    if dev is not None and host is not None and dev[-1] != host[-1] and not s.out.verdict.failed:
        s.out.worse(
            Verdict.WRONG_CODE, "malloc vs malloc_host", host[-1], f"malloc says {dev[-1]}, malloc_host {host[-1]}"
        )


def huge_malloc(s: Script) -> None:
    """Sizes past any device's memory but inside size_t: out of memory, the same code for host and device."""
    size = s.pick((1 << 40, 1 << 50, 2**63 - 1, 2**63, 2**64 - 1))
    dev = s.call(f"acl.rt.malloc({size}, 0)", lambda: acl.rt.malloc(size, 0), refuse(MEM_ALLOC, INVALID))
    host = s.call(f"acl.rt.malloc_host({size})", lambda: acl.rt.malloc_host(size), refuse(MEM_ALLOC, INVALID))
    if dev is not None and host is not None and dev[-1] != host[-1] and not s.out.verdict.failed:
        s.out.worse(
            Verdict.WRONG_CODE, "malloc vs malloc_host", host[-1], f"malloc says {dev[-1]}, malloc_host {host[-1]}"
        )


def bad_policy(s: Script) -> None:
    """acl.rt.malloc with a policy that is no aclrtMemMallocPolicy."""
    policy = s.pick((0xFFFF_FFFF, 0x1234, "x", None, 1.5, 2**64))
    result = s.call(f"acl.rt.malloc(64, {describe(policy)})", lambda: acl.rt.malloc(64, policy), refuse(INVALID))
    if result is not None and result[-1] == 0:
        s.release("free the accepted allocation", lambda: acl.rt.free(result[0]))


def double_free(s: Script) -> None:
    """acl.rt.free / free_host of a pointer already freed."""
    if s.rng.integers(2):
        p = s.malloc()
        if p:
            s.forget(f"acl.rt.free({p:#x})")
            s.call(f"acl.rt.free({p:#x})", lambda: acl.rt.free(p), VALID)
            s.call(f"acl.rt.free({p:#x})", lambda: acl.rt.free(p), refuse(MEM_FREE))
    else:
        h = s.malloc_host()
        if h:
            s.forget(f"acl.rt.free_host({h:#x})")
            s.call(f"acl.rt.free_host({h:#x})", lambda: acl.rt.free_host(h), VALID)
            s.call(f"acl.rt.free_host({h:#x})", lambda: acl.rt.free_host(h), refuse(MEM_FREE))


def foreign_free(s: Script) -> None:
    """acl.rt.free / free_host of pointers that are not an allocation's start (or not pointers at all)."""
    p = s.malloc()
    h = s.malloc_host()
    host = np.zeros(16, dtype=np.uint8)
    if not (p and h):
        return
    candidates: tuple[Any, ...] = (p + 64, h, int(host.ctypes.data), 0x1234, 0, None, *BAD_HANDLES)
    target = s.pick(candidates)
    if s.rng.integers(2):
        s.call(f"acl.rt.free({describe(target)})", lambda: acl.rt.free(target), refuse(MEM_FREE, INVALID))
    else:
        other = s.pick((p, p + 64, int(host.ctypes.data), 0x1234, 0, None, "x", 2**64))
        s.call(f"acl.rt.free_host({describe(other)})", lambda: acl.rt.free_host(other), refuse(MEM_FREE, INVALID))


def copy_past_bounds(s: Script) -> None:
    """acl.rt.memcpy whose count runs past an allocation, exceeds destMax, or is no size."""
    p = s.malloc(256)
    q = s.malloc(64)
    if not (p and q):
        return
    host = np.zeros(64, dtype=np.uint8)
    hp = acl.util.numpy_to_ptr(host)
    variants: tuple[tuple[str, Callable[[], int], Expect], ...] = (
        ("memcpy(q, 256, p, 256, D2D)", lambda: acl.rt.memcpy(q, 256, p, 256, 3), refuse(INVALID)),
        ("memcpy(p, 256, q, 128, D2D)", lambda: acl.rt.memcpy(p, 256, q, 128, 3), refuse(INVALID)),
        ("memcpy(p, 16, q, 32, D2D)", lambda: acl.rt.memcpy(p, 16, q, 32, 3), refuse(INVALID)),
        ("memcpy(p+250, 16, q, 16, D2D)", lambda: acl.rt.memcpy(p + 250, 16, q, 16, 3), refuse(INVALID)),
        ("memcpy(hp, 64, p, 128, D2H)", lambda: acl.rt.memcpy(hp, 64, p, 128, D2H), refuse(INVALID)),
        ("memcpy(hp, 128, p, 128, D2H)", lambda: acl.rt.memcpy(hp, 128, p, 128, D2H), refuse(INVALID)),
        ("memcpy(p, 256, hp, 2**64, H2D)", lambda: acl.rt.memcpy(p, 256, hp, 2**64, H2D), refuse(INVALID)),
        ("memcpy(p, 256, hp, -1, H2D)", lambda: acl.rt.memcpy(p, 256, hp, -1, H2D), refuse(INVALID)),
        ("memcpy(p, 256, hp, 1.5, H2D)", lambda: acl.rt.memcpy(p, 256, hp, 1.5, H2D), refuse(INVALID)),
        ("memcpy(p, 'x', hp, 8, H2D)", lambda: acl.rt.memcpy(p, "x", hp, 8, H2D), refuse(INVALID)),
        ("memcpy(None, 8, hp, 8, H2D)", lambda: acl.rt.memcpy(None, 8, hp, 8, H2D), refuse(INVALID)),
        ("memcpy(p, 8, 0x1234, 8, H2D)", lambda: acl.rt.memcpy(p, 8, 0x1234, 8, H2D), refuse(INVALID)),
        ("memcpy('p', 8, hp, 8, H2D)", lambda: acl.rt.memcpy("p", 8, hp, 8, H2D), refuse(INVALID)),
    )
    text, fn, expect = s.pick(variants)
    s.call(f"hp = acl.util.numpy_to_ptr(np.zeros(64, uint8)); acl.rt.{text}", fn, expect)


def bad_kind(s: Script) -> None:
    """acl.rt.memcpy with a kind that is no aclrtMemcpyKind, or that contradicts the addresses."""
    p = s.malloc(64)
    if not p:
        return
    host = np.zeros(64, dtype=np.uint8)
    hp = acl.util.numpy_to_ptr(host)
    kind = s.pick((99, -1, "x", None, 1.5, 2**64, D2H, H2H, 3))
    expect = refuse(MEM_TYPE) if kind in (D2H, H2H, 3) else refuse(INVALID)
    s.call(f"acl.rt.memcpy(p, 64, hp, 64, {describe(kind)})", lambda: acl.rt.memcpy(p, 64, hp, 64, kind), expect)


def freed_copy(s: Script) -> None:
    """acl.rt.memcpy / memset on memory that was freed."""
    p = s.malloc(64)
    q = s.malloc(64)
    if not (p and q):
        return
    s.forget(f"acl.rt.free({p:#x})")
    s.call(f"acl.rt.free({p:#x})", lambda: acl.rt.free(p), VALID)
    if s.rng.integers(2):
        s.call("acl.rt.memcpy(q, 64, p, 64, D2D)", lambda: acl.rt.memcpy(q, 64, p, 64, 3), refuse(INVALID))
    else:
        s.call("acl.rt.memset(p, 64, 0, 64)", lambda: acl.rt.memset(p, 64, 0, 64), refuse(INVALID))


def async_copies(s: Script) -> None:
    """acl.rt.memcpy_async from pageable memory, host to host, or on a destroyed stream."""
    p = s.malloc(64)
    h = s.malloc_host(64)
    st = s.stream()
    if not (p and h and st):
        return
    host = np.zeros(64, dtype=np.uint8)
    hp = acl.util.numpy_to_ptr(host)
    dead = s.value("d = acl.rt.create_stream()", acl.rt.create_stream)
    s.call("acl.rt.destroy_stream(d)", lambda: acl.rt.destroy_stream(dead), VALID)
    variants: tuple[tuple[str, Callable[[], int], Expect], ...] = (
        ("memcpy_async(p, 64, hp, 64, H2D, s)", lambda: acl.rt.memcpy_async(p, 64, hp, 64, H2D, st), refuse(INVALID)),
        ("memcpy_async(h, 64, h, 64, H2H, s)", lambda: acl.rt.memcpy_async(h, 64, h, 64, H2H, st), refuse(NOT_SUPPORT)),
        ("memcpy_async(p, 64, h, 64, H2D, d)", lambda: acl.rt.memcpy_async(p, 64, h, 64, H2D, dead), refuse(HANDLE)),
        (
            "memcpy_async(p, 64, h, 64, H2D, 'x')",
            lambda: acl.rt.memcpy_async(p, 64, h, 64, H2D, "x"),
            refuse(INVALID, HANDLE),
        ),
        ("memcpy_async(p, 64, h, 128, H2D, s)", lambda: acl.rt.memcpy_async(p, 64, h, 128, H2D, st), refuse(INVALID)),
        ("memcpy_async(p, 64, h, 64, H2D, s)", lambda: acl.rt.memcpy_async(p, 64, h, 64, H2D, st), VALID),
    )
    text, fn, expect = s.pick(variants)
    s.call(f"acl.rt.{text}", fn, expect)


def bad_memset(s: Script) -> None:
    """acl.rt.memset past an allocation, past maxCount, of pageable memory, or with what C cannot pass."""
    p = s.malloc(64)
    if not p:
        return
    host = np.zeros(64, dtype=np.uint8)
    hp = acl.util.numpy_to_ptr(host)
    variants: tuple[tuple[str, Callable[[], int], Expect], ...] = (
        ("memset(p, 128, 0, 128)", lambda: acl.rt.memset(p, 128, 0, 128), refuse(INVALID)),
        ("memset(p, 16, 0, 32)", lambda: acl.rt.memset(p, 16, 0, 32), refuse(INVALID)),
        ("memset(hp, 64, 0, 64)", lambda: acl.rt.memset(hp, 64, 0, 64), refuse(INVALID)),
        ("memset(p, 64, 2**64, 64)", lambda: acl.rt.memset(p, 64, 2**64, 64), ANYTHING),
        ("memset(p, 64, 'x', 64)", lambda: acl.rt.memset(p, 64, "x", 64), refuse(INVALID)),
        ("memset(p, 64, 0, -1)", lambda: acl.rt.memset(p, 64, 0, -1), refuse(INVALID)),
        ("memset(p, 64, 0, None)", lambda: acl.rt.memset(p, 64, 0, None), refuse(INVALID)),
        ("memset(p+60, 64, 0, 8)", lambda: acl.rt.memset(p + 60, 64, 0, 8), refuse(INVALID)),
    )
    text, fn, expect = s.pick(variants)
    s.call(f"acl.rt.{text}", fn, expect)


def bad_memcpy2d(s: Script) -> None:
    """acl.rt.memcpy2d with a width past a pitch, rows past an allocation, or pitches C cannot pass."""
    p = s.malloc(256)
    q = s.malloc(256)
    if not (p and q):
        return
    variants: tuple[tuple[str, Callable[[], int], Expect], ...] = (
        ("memcpy2d(p, 8, q, 16, 16, 4, D2D)", lambda: acl.rt.memcpy2d(p, 8, q, 16, 16, 4, 3), refuse(INVALID)),
        ("memcpy2d(p, 64, q, 64, 64, 8, D2D)", lambda: acl.rt.memcpy2d(p, 64, q, 64, 64, 8, 3), refuse(INVALID)),
        (
            "memcpy2d(p, 16, q, 16, 16, 2**40, D2D)",
            lambda: acl.rt.memcpy2d(p, 16, q, 16, 16, 2**40, 3),
            refuse(INVALID),
        ),
        ("memcpy2d(p, -1, q, 16, 8, 2, D2D)", lambda: acl.rt.memcpy2d(p, -1, q, 16, 8, 2, 3), refuse(INVALID)),
        ("memcpy2d(p, 16, q, 16, 8, 'x', D2D)", lambda: acl.rt.memcpy2d(p, 16, q, 16, 8, "x", 3), refuse(INVALID)),
        ("memcpy2d(p, 16, q, 16, 8, 2, 99)", lambda: acl.rt.memcpy2d(p, 16, q, 16, 8, 2, 99), refuse(INVALID)),
        ("memcpy2d(p, 16, q, 16, 8, 4, D2D)", lambda: acl.rt.memcpy2d(p, 16, q, 16, 8, 4, 3), VALID),
    )
    text, fn, expect = s.pick(variants)
    s.call(f"acl.rt.{text}", fn, expect)


def bad_streams(s: Script) -> None:
    """Stream calls on a destroyed stream, a handle nobody made, or a value that is no handle."""
    dead = s.value("d = acl.rt.create_stream()", acl.rt.create_stream)
    s.call("acl.rt.destroy_stream(d)", lambda: acl.rt.destroy_stream(dead), VALID)
    handle = s.pick((dead, dead, *BAD_HANDLES))
    text = "d" if handle == dead else describe(handle)
    expect = refuse(HANDLE) if handle == dead else refuse(INVALID, HANDLE)  # no pointer at all: either code
    variants: tuple[tuple[str, Callable[[], Any]], ...] = (
        (f"acl.rt.destroy_stream({text})", lambda: acl.rt.destroy_stream(handle)),
        (f"acl.rt.synchronize_stream({text})", lambda: acl.rt.synchronize_stream(handle)),
        (f"acl.rt.stream_query({text})", lambda: acl.rt.stream_query(handle)),
    )
    call_text, fn = s.pick(variants)
    s.call(call_text, fn, expect)


def bad_events(s: Script) -> None:
    """Event calls on destroyed events or streams, unrecorded events, and values that are no handles."""
    e = s.event()
    dead = s.value("d = acl.rt.create_event()", acl.rt.create_event)
    s.call("acl.rt.destroy_event(d)", lambda: acl.rt.destroy_event(dead), VALID)
    dead_stream = s.value("ds = acl.rt.create_stream()", acl.rt.create_stream)
    s.call("acl.rt.destroy_stream(ds)", lambda: acl.rt.destroy_stream(dead_stream), VALID)
    bad = s.pick(BAD_HANDLES)
    variants: tuple[tuple[str, Callable[[], Any], Expect], ...] = (
        ("acl.rt.destroy_event(d)", lambda: acl.rt.destroy_event(dead), refuse(HANDLE)),
        ("acl.rt.record_event(d, None)", lambda: acl.rt.record_event(dead, None), refuse(HANDLE)),
        ("acl.rt.record_event(e, ds)", lambda: acl.rt.record_event(e, dead_stream), refuse(HANDLE)),
        ("acl.rt.query_event(d)", lambda: acl.rt.query_event(dead), refuse(HANDLE)),
        ("acl.rt.synchronize_event(d)", lambda: acl.rt.synchronize_event(dead), refuse(HANDLE)),
        ("acl.rt.event_elapsed_time(e, e)", lambda: acl.rt.event_elapsed_time(e, e), refuse(TIMESTAMP)),
        ("acl.rt.event_elapsed_time(e, d)", lambda: acl.rt.event_elapsed_time(e, dead), refuse(HANDLE)),
        ("acl.rt.stream_wait_event(None, d)", lambda: acl.rt.stream_wait_event(None, dead), refuse(HANDLE)),
        (
            f"acl.rt.record_event({describe(bad)}, None)",
            lambda: acl.rt.record_event(bad, None),
            refuse(HANDLE, INVALID),
        ),
        (f"acl.rt.record_event(e, {describe(bad)})", lambda: acl.rt.record_event(e, bad), refuse(HANDLE, INVALID)),
    )
    text, fn, expect = s.pick(variants)
    s.call(text, fn, expect)


def bad_contexts(s: Script) -> None:
    """Destroying a default context, a context twice, or switching to one nobody made."""
    ctx = s.value("c = acl.rt.create_context(0)", lambda: acl.rt.create_context(0))
    if not ctx:
        return
    s.release("acl.rt.destroy_context(c)", lambda: acl.rt.destroy_context(ctx))
    choice = int(s.rng.integers(3))
    if choice == 0:
        s.forget("acl.rt.destroy_context(c)")
        s.call("acl.rt.destroy_context(c)", lambda: acl.rt.destroy_context(ctx), VALID)
        s.call("acl.rt.destroy_context(c)", lambda: acl.rt.destroy_context(ctx), refuse(CONTEXT))
    elif choice == 1:
        s.call("acl.rt.set_device(0)", lambda: acl.rt.set_device(0), VALID)
        s.release("acl.rt.reset_device(0)", lambda: acl.rt.reset_device(0))
        default = s.value("d = acl.rt.get_context()", acl.rt.get_context)
        s.call("acl.rt.destroy_context(d)", lambda: acl.rt.destroy_context(default), refuse(INVALID))
    else:
        bad = s.pick(BAD_HANDLES)
        s.call(f"acl.rt.set_context({describe(bad)})", lambda: acl.rt.set_context(bad), refuse(CONTEXT, INVALID))


def bad_devices(s: Script) -> None:
    """set_device / reset_device of ids that do not exist or are no ints, reset of a device never set."""
    device = s.pick((-1, 99, 2**64, "0", None, 1.5))
    if s.rng.integers(2):
        s.call(f"acl.rt.set_device({describe(device)})", lambda: acl.rt.set_device(device), refuse(DEVICE_ID, INVALID))
    else:
        s.call(
            f"acl.rt.reset_device({describe(device)})", lambda: acl.rt.reset_device(device), refuse(DEVICE_ID, INVALID)
        )


def device_teardown(s: Script) -> None:
    """Streams, events and memory of a device after its last reset_device are gone, and refused."""
    device = int(s.rng.integers(1, 4))
    s.call(f"acl.rt.set_device({device})", lambda: acl.rt.set_device(device), VALID)
    p = s.value("p = acl.rt.malloc(64, 0)", lambda: acl.rt.malloc(64, 0))
    st = s.value("st = acl.rt.create_stream()", acl.rt.create_stream)
    ev = s.value("ev = acl.rt.create_event()", acl.rt.create_event)
    s.call(f"acl.rt.reset_device({device})", lambda: acl.rt.reset_device(device), VALID)
    s.call("acl.rt.set_device(0)", lambda: acl.rt.set_device(0), VALID)
    s.release("acl.rt.reset_device(0)", lambda: acl.rt.reset_device(0))
    variants: tuple[tuple[str, Callable[[], Any], Expect], ...] = (
        ("acl.rt.free(p)", lambda: acl.rt.free(p), refuse(MEM_FREE)),
        ("acl.rt.destroy_stream(st)", lambda: acl.rt.destroy_stream(st), refuse(HANDLE)),
        ("acl.rt.record_event(ev, None)", lambda: acl.rt.record_event(ev, None), refuse(HANDLE)),
        ("acl.rt.memset(p, 64, 0, 64)", lambda: acl.rt.memset(p, 64, 0, 64), refuse(INVALID)),
    )
    text, fn, expect = s.pick(variants)
    s.call(text, fn, expect)


def bad_mem_info(s: Script) -> None:
    """acl.rt.get_mem_info of an attribute that is no aclrtMemAttr."""
    attr = s.pick((99, -1, "x", None, 2**64))
    s.call(f"acl.rt.get_mem_info({describe(attr)})", lambda: acl.rt.get_mem_info(attr), refuse(INVALID))


def pinned_view(s: Script) -> None:
    """numpy_to_ptr on a view of malloc_host memory must leave the block pinned (async copy, free_host)."""
    h = s.malloc_host(256)
    p = s.malloc(256)
    st = s.stream()
    if not (h and p and st):
        return
    view = s.util(
        "v = acl.util.ptr_to_numpy(h, (256,), NPY_UINT8)", lambda: acl.util.ptr_to_numpy(h, (256,), NPY_UINT8), False
    )
    if view is None:
        return
    offset = int(s.pick((0, 0, 64)))
    s.util(f"acl.util.numpy_to_ptr(v[{offset}:])", lambda: acl.util.numpy_to_ptr(view[offset:]), False)
    s.call("acl.rt.memcpy_async(p, 256, h, 256, H2D, s)", lambda: acl.rt.memcpy_async(p, 256, h, 256, H2D, st), VALID)
    s.call("acl.rt.synchronize_stream(s)", lambda: acl.rt.synchronize_stream(st), VALID)


def util_misuse(s: Script) -> None:
    """acl.util helpers given device pointers, unknown addresses, unknown type numbers or non-buffers."""
    p = s.malloc(64)
    if not p:
        return
    variants: tuple[tuple[str, Callable[[], Any], bool], ...] = (
        ("acl.util.ptr_to_bytes(p, 64)", lambda: acl.util.ptr_to_bytes(p, 64), True),
        ("acl.util.ptr_to_bytes(0x1234, 8)", lambda: acl.util.ptr_to_bytes(0x1234, 8), True),
        ("acl.util.ptr_to_bytes(None, 8)", lambda: acl.util.ptr_to_bytes(None, 8), True),  # type: ignore[arg-type]
        ("acl.util.ptr_to_bytes(p, -1)", lambda: acl.util.ptr_to_bytes(p, -1), True),
        ("acl.util.ptr_to_numpy(p, (4,), 11)", lambda: acl.util.ptr_to_numpy(p, (4,), 11), True),
        ("acl.util.ptr_to_numpy(0x1234, (4,), 11)", lambda: acl.util.ptr_to_numpy(0x1234, (4,), 11), True),
        ("acl.util.ptr_to_numpy(p, (4,), 9999)", lambda: acl.util.ptr_to_numpy(p, (4,), 9999), True),
        ("acl.util.ptr_to_numpy(p, (-4,), 11)", lambda: acl.util.ptr_to_numpy(p, (-4,), 11), True),
        ("acl.util.bytes_to_ptr(123)", lambda: acl.util.bytes_to_ptr(123), True),  # type: ignore[arg-type]
        ("acl.util.bytes_to_ptr('x')", lambda: acl.util.bytes_to_ptr("x"), True),  # type: ignore[arg-type]
        (
            "acl.util.numpy_to_ptr(np.zeros((4, 4))[:, ::2])",
            lambda: acl.util.numpy_to_ptr(np.zeros((4, 4))[:, ::2]),
            True,
        ),
        ("acl.util.numpy_to_ptr([1, 2])", lambda: acl.util.numpy_to_ptr([1, 2]), True),  # type: ignore[arg-type]
        ("acl.util.bytes_to_ptr(b'')", lambda: acl.util.bytes_to_ptr(b""), False),
    )
    text, fn, refused = s.pick(variants)
    s.util(text, fn, refused)


def valid_round_trip(s: Script) -> None:
    """A valid copy host → device → host, to prove the script machinery sees success as success."""
    p = s.malloc(64)
    if not p:
        return
    src = np.arange(64, dtype=np.uint8)
    dst = np.zeros(64, dtype=np.uint8)
    sp, dp = acl.util.numpy_to_ptr(src), acl.util.numpy_to_ptr(dst)
    s.call("acl.rt.memcpy(p, 64, src, 64, H2D)", lambda: acl.rt.memcpy(p, 64, sp, 64, H2D), VALID)
    s.call("acl.rt.memcpy(dst, 64, p, 64, D2H)", lambda: acl.rt.memcpy(dp, 64, p, 64, D2H), VALID)
    if not np.array_equal(src, dst):
        s.out.worse(Verdict.CORRUPTION, "round trip", 0, "the bytes copied back differ from those copied in")


KINDS: tuple[Callable[[Script], None], ...] = (
    before_init,
    after_finalize,
    lifecycle,
    bad_malloc_size,
    huge_malloc,
    bad_policy,
    double_free,
    foreign_free,
    copy_past_bounds,
    bad_kind,
    freed_copy,
    async_copies,
    bad_memset,
    bad_memcpy2d,
    bad_streams,
    bad_events,
    bad_contexts,
    bad_devices,
    device_teardown,
    bad_mem_info,
    pinned_view,
    util_misuse,
    valid_round_trip,
)
"""Every runtime misuse kind the fuzzer knows (a case draws its variant from its own generator)."""
