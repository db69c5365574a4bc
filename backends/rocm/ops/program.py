"""Recorded launch programs with stream-ordered temporaries and a deferred device check.

An op that needs scratch memory (sort runs, routing tables) records its launches once per signature
as :class:`Step` objects whose arguments may name a :class:`Temp` (a byte offset into a temporary
allocated for each run), a :class:`Scratch` (a byte offset into the stream's persistent scratch) or
:data:`FLAG` (a 4-byte device flag). :func:`run_program` allocates the
temporaries on the stream, packs the arguments, launches, and frees them stream-ordered; when the
program has a check, the flag is handed to the driver, which raises 161002 at synchronisation if a
kernel set it (no host round trip inside the op).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from acl_core.backend import Kernel, Launch
from acl_rocm.driver import handle
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.binding import family_key, memo_plan, named_kernel

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend


@dataclass(frozen=True)
class Temp:
    """Byte ``offset`` into the temporary ``slot`` of one run."""

    slot: int
    offset: int = 0


@dataclass(frozen=True)
class Scratch:
    """Byte ``offset`` into the launch stream's persistent scratch (:meth:`RocmDriver.stream_scratch`)."""

    offset: int = 0


class _Flag:
    def __repr__(self) -> str:
        return "FLAG"


FLAG: Final = _Flag()
"""Placeholder for the run's 4-byte device check flag."""


@dataclass(frozen=True)
class Step:
    """One kernel launch: the loaded function, its configuration, its arguments (ctypes, Temp or FLAG)."""

    function: object
    config: LaunchConfig
    values: tuple[Any, ...]
    programmatic: bool = False
    """Launched with programmatic stream serialization (the kernel ``ACL_PDL_WAIT()``s before its first read; a
    provider without it launches plainly)."""


@dataclass(frozen=True)
class Enqueue:
    """A host-side step between launches (a vendor GEMM), as a :class:`Step`'s function (config and values unused):
    ``enqueue(resolve, stream)``, where ``resolve`` turns a :class:`Temp`, :class:`Scratch` or :data:`FLAG` into its
    ``c_void_p`` for this run (anything else as it is)."""

    enqueue: Callable[[Callable[[Any], Any], int], None]


@dataclass
class Program:
    """One call's launches with the temporaries they use and, optionally, a deferred check's message."""

    steps: list[Step] = field(default_factory=list)
    temps: list[int] = field(default_factory=list)
    report: str | None = None
    zeroed: list[tuple[Temp, int]] = field(default_factory=list)
    """(where, bytes) of temporaries set to zero on the stream before the first step (counters)."""
    scratch: int = 0
    """Bytes of the stream's persistent scratch the steps use (:class:`Scratch`: zeroed once, and counters
    there are left zero by the kernels themselves; nothing enqueued for it per run)."""
    scratch_region: str = ""
    """Which of the stream's scratch buffers (:meth:`RocmDriver.stream_scratch`'s ``region``): a family whose
    data would land on another family's counters takes its own."""
    flagged: bool = False
    """A flag for every run, even without a :attr:`report` (kernels that read it whether or not a check is armed);
    without a report it is dropped after the run, never checked."""
    _packed: _Packed | None = field(default=None, init=False, repr=False, compare=False)

    def temp(self, nbytes: int) -> Temp:
        """A new temporary of ``nbytes`` (allocated for every run)."""
        self.temps.append(max(int(nbytes), 1))
        return Temp(len(self.temps) - 1)

    def packed(self, provider: Any) -> _Packed:
        """The steps packed once for ``provider`` (again when steps were added since): see :class:`_Packed`."""
        packed = self._packed
        if packed is None or packed.count != len(self.steps):
            packed = self._packed = _Packed(self.steps, provider)
        return packed


class _Packed:
    """A program's launches with their arguments packed once (issue 16: the per-run resolving and packing was
    most of a small program's host time). Each :class:`Temp`, :class:`Scratch` or :data:`FLAG` argument is a
    ``c_void_p`` slot of its own, set to this run's address before the launches (under :attr:`lock`: one run's
    values at a time; a launch copies its arguments, so the next run may set them again)."""

    def __init__(self, steps: list[Step], provider: Any) -> None:
        self.count = len(steps)
        self.slots: list[tuple[ctypes.c_void_p, Any]] = []
        self.runs: list[Callable[[int], None] | Enqueue] = []
        self.lock = threading.Lock()
        self.bound: tuple[list[int], int, int] | None = None
        """The (temporaries, flag, scratch) addresses the slots hold now."""
        for step in steps:
            if isinstance(step.function, Enqueue):
                self.runs.append(step.function)
                continue
            args = KernelArgs([self._slot(v) for v in step.values])
            cfg = step.config
            if step.programmatic:
                self.runs.append(_programmatic(provider, step.function, cfg, args))
            else:
                self.runs.append(
                    provider.launcher(step.function, cfg.grid, cfg.block, cfg.shared_bytes, args.address, args)
                )

    def _slot(self, value: Any) -> Any:
        if isinstance(value, (Temp, Scratch)) or value is FLAG:
            slot = ctypes.c_void_p(0)
            self.slots.append((slot, value))
            return slot
        return value


def _programmatic(provider: Any, function: object, cfg: LaunchConfig, args: KernelArgs) -> Callable[[int], None]:
    """A programmatic launch of ``function`` with ``args`` (kept alive by the callable), given the stream."""

    def enqueue(stream: int, _keep: KernelArgs = args) -> None:
        provider.launch_programmatic(function, cfg.grid, cfg.block, cfg.shared_bytes, stream, args.address)

    return enqueue


def _address(value: Any, bases: list[int], flag: int, scratch: int) -> int:
    if isinstance(value, Temp):
        return bases[value.slot] + value.offset
    if isinstance(value, Scratch):
        return scratch + value.offset
    return flag


def _resolve(value: Any, bases: list[int], flag: int, scratch: int) -> Any:
    if isinstance(value, Temp):
        return ctypes.c_void_p(bases[value.slot] + value.offset)
    if isinstance(value, Scratch):
        return ctypes.c_void_p(scratch + value.offset)
    if value is FLAG:
        return ctypes.c_void_p(flag)
    return value


def run_program(
    backend: RocmBackend, prog: Program, stream: int, then: Callable[[list[int]], None] | None = None
) -> None:
    """Launch ``prog`` on ``stream`` with fresh temporaries (freed stream-ordered) and a fresh flag.

    ``then`` enqueues more work on ``stream`` after the steps, given the temporaries' addresses (they are
    freed after it).
    """
    provider = backend.provider
    bases: list[int] = []
    flag = 0
    scratch = backend.driver.stream_scratch(stream, prog.scratch, prog.scratch_region) if prog.scratch else 0
    try:
        for size in prog.temps:
            bases.append(provider.malloc_async(size, stream))
        for where, nbytes in prog.zeroed:
            provider.memset(bases[where.slot] + where.offset, 0, nbytes, stream)
        if prog.report is not None or prog.flagged:
            flag = backend.driver.check_flag(stream)
        packed = prog.packed(provider)
        with packed.lock:
            if packed.slots and packed.bound != (bases, flag, scratch):  # the pool often hands the same block back
                for slot, where in packed.slots:
                    slot.value = _address(where, bases, flag, scratch)
                packed.bound = (bases, flag, scratch)
            for run in packed.runs:
                if isinstance(run, Enqueue):
                    run.enqueue(lambda v: _resolve(v, bases, flag, scratch), stream)
                else:
                    run(stream)
        if then is not None:
            then(bases)
    except BaseException:
        if flag:
            backend.driver.drop_check(stream, flag)
        raise
    finally:
        for base in bases:
            provider.free_async(base, stream)
    if flag:
        if prog.report is None:
            backend.driver.drop_check(stream, flag)
        else:
            backend.driver.defer_check(stream, flag, prog.report)


def program_kernel(
    backend: RocmBackend,
    family: str,
    op: str,
    plan: Callable[[Launch], Program],
    variant: Callable[[], str | None] | None = None,
) -> Kernel:
    """The Kernel of ``op``: its program planned once per signature and device (``launch.memo``), then run;
    ``variant`` names a forced kernel choice (tests, bench A/B) whose plans are kept apart."""

    def run(launch: Launch) -> None:
        key = family_key(backend, family, variant() if variant is not None else None)
        run_program(backend, memo_plan(launch, key, lambda: plan(launch)), handle(launch.stream))

    return named_kernel(op, run)


def program_kernels(
    backend: RocmBackend,
    family: str,
    plans: Mapping[str, Callable[[Launch], Program]],
    variant: Callable[[], str | None] | None = None,
) -> dict[str, Kernel]:
    """A :func:`program_kernel` per op of ``plans`` (op name to its planner), all of one family."""
    return {op: program_kernel(backend, family, op, plan, variant) for op, plan in plans.items()}
