"""The fuzzer's instruments: a per-call deadline, canary-guarded device buffers, leak tables."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from acl_core.errors import AclCoreError
from acl_core.runtime import RangeKind, Runtime
from acl_core.spec.runtime import MemcpyKind

CANARY = np.frombuffer(bytes(range(0xC0, 0x100)), dtype=np.uint8)
"""64 bytes written before and after every guarded payload."""
GUARD = CANARY.size
FILL = 0xA5
"""What output payloads start as, so a write to them can be told from none."""


class Hang(BaseException):
    """Raised into a call that ran past its deadline.

    A BaseException, so that the front ends' ``except Exception`` lets it through.
    """


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Interrupt the block with :class:`Hang` after ``seconds`` (SIGALRM; the main thread only)."""

    def expire(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timed(fn: Callable[[], Any], seconds: float) -> tuple[Any, BaseException | None, float]:
    """(result, exception or None, elapsed seconds) of ``fn`` run under :func:`deadline`."""
    start = time.perf_counter()
    try:
        with deadline(seconds):
            result = fn()
    except (Exception, Hang) as exc:
        return None, exc, time.perf_counter() - start
    return result, None, time.perf_counter() - start


def read_device(rt: Runtime, address: int, nbytes: int) -> np.ndarray:
    """A host copy of ``nbytes`` device bytes at ``address`` (through the runtime, as users copy)."""
    host = np.empty(nbytes, dtype=np.uint8)
    rt.register_host(host.ctypes.data, nbytes, host)
    try:
        rt.memcpy(host.ctypes.data, nbytes, address, nbytes, MemcpyKind.ACL_MEMCPY_DEVICE_TO_HOST)
    finally:
        rt.unregister(host.ctypes.data)
    return host


def write_device(rt: Runtime, address: int, data: np.ndarray) -> None:
    """Copy host bytes ``data`` to device memory at ``address``."""
    host = np.ascontiguousarray(data, dtype=np.uint8)
    rt.register_host(host.ctypes.data, host.nbytes, host)
    try:
        rt.memcpy(address, host.nbytes, host.ctypes.data, host.nbytes, MemcpyKind.ACL_MEMCPY_HOST_TO_DEVICE)
    finally:
        rt.unregister(host.ctypes.data)


class Guarded:
    """A device allocation laid out as [canary | payload | canary]; ``data`` is the payload's address."""

    def __init__(self, rt: Runtime, payload: np.ndarray) -> None:
        payload = np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
        self.rt = rt
        self.size = GUARD + payload.nbytes + GUARD
        self.base = rt.malloc(self.size)
        self.data = self.base + GUARD
        self.before = np.concatenate([CANARY, payload, CANARY])
        write_device(rt, self.base, self.before)
        self.freed = False

    def changed(self, allowed: list[tuple[int, int]]) -> str | None:
        """A description of bytes that changed outside the ``allowed`` [start, end) address ranges, or None."""
        after = read_device(self.rt, self.base, self.size)
        diff = np.flatnonzero(after != self.before)
        if diff.size == 0:
            return None
        addresses = diff + self.base
        outside = np.ones(diff.size, dtype=bool)
        for start, end in allowed:
            outside &= (addresses < start) | (addresses >= end)
        bad = diff[outside]
        if bad.size == 0:
            return None
        first = int(bad[0])
        where = "canary" if first < GUARD or first >= self.size - GUARD else "payload"
        return (
            f"{bad.size} bytes changed outside every written view, the first in the {where} at "
            f"allocation offset {first} ({first - GUARD:+d} from the payload)"
        )

    def free(self) -> None:
        """Release the allocation (once)."""
        if not self.freed:
            self.freed = True
            self.rt.free(self.base)


def tables(rt: Runtime) -> dict[str, frozenset[object]]:
    """Every allocation and handle the runtime and its reference driver hold, by table.

    Pageable host ranges that acl.util hands out are remembered by design (the newest 4096) and are
    left out; everything else must be back to where it was once a case freed what it made.
    """
    driver: Any = rt.driver
    state: Any = rt
    found: dict[str, frozenset[object]] = {
        "memory": frozenset((r.start, r.kind.value) for r in rt.memory.live() if r.kind is not RangeKind.HOST),
        "streams": frozenset(state._streams),
        "events": frozenset(state._events),
        "contexts": frozenset(state._contexts),
        "devices": frozenset((d, s.refcount) for d, s in state._devices.items()),
    }
    for name in ("_buffers", "_host"):
        table = getattr(driver, name, None)
        if table is None:
            raise AssertionError(f"the reference driver has no {name} table any more: update tests/fuzz/harness.py")
        found[f"driver{name}"] = frozenset(table)
    return found


def leaked(before: dict[str, frozenset[object]], after: dict[str, frozenset[object]]) -> str | None:
    """What ``after`` holds that ``before`` did not, or None."""
    extra = []
    for name, items in after.items():
        new = items - before.get(name, frozenset())
        if new:
            shown = ", ".join(_show(x) for x in sorted(new, key=repr)[:3])
            extra.append(f"{name} +{len(new)} ({shown})")
    return "; ".join(extra) or None


def _show(item: object) -> str:
    if isinstance(item, int):
        return hex(item)
    if isinstance(item, tuple):
        return "(" + ", ".join(_show(x) for x in item) + ")"
    return str(item)


def code_of(exc: BaseException) -> tuple[int, str]:
    """(code, message) of a typed error; (0, '') for anything else."""
    if isinstance(exc, AclCoreError):
        return exc.code, exc.message
    return 0, ""
