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

    def temp(self, nbytes: int) -> Temp:
        """A new temporary of ``nbytes`` (allocated for every run)."""
        self.temps.append(max(int(nbytes), 1))
        return Temp(len(self.temps) - 1)


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
        if prog.report is not None:
            flag = backend.driver.check_flag(stream)
        for step in prog.steps:
            if isinstance(step.function, Enqueue):
                step.function.enqueue(lambda v: _resolve(v, bases, flag, scratch), stream)
                continue
            args = KernelArgs([_resolve(v, bases, flag, scratch) for v in step.values])
            cfg = step.config
            launch = provider.launch_programmatic if step.programmatic else provider.launch
            launch(step.function, cfg.grid, cfg.block, cfg.shared_bytes, stream, args.address)
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
        assert prog.report is not None
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
