"""Weight prefetch in the decode step (``ACL_QWEN3_PREFETCH``): aclrtCmoAsync hints between the GEMVs.

At batch 1 each layer's GEMVs read their weights once from HBM while the small kernels between them
(norms, rope, cache scatter, attention) leave HBM idle. vllm-ascend prefetches the next weights into L2
with aclrtCmoAsync (torch_npu.npu_prefetch); the runner does the same, per mode:

* ``off`` (the default until measured): no prefetch.
* ``ahead``: on the session's stream, after layer i's qkv GEMV, prefetch its o, gate_up and down weights;
  after its down GEMV, the next layer's qkv weight (nothing after the last layer: lm_head is larger
  than L2).
* ``mlp``: as ``ahead`` with only gate_up and down after the qkv GEMV (no o, no next qkv).
* ``side``: ``ahead``'s prefetches on a second stream: at each point the session's stream records an
  event the side stream waits for, then the side stream prefetches, overlapping the main stream's
  kernels; at the end of the step the main stream waits for an event the side stream records after its
  last prefetch, so a capture of the step rejoins (docs/RUNTIME.md) and a step never runs ahead of the
  prefetches of the one before.

A prefetch changes no data: the tokens are those of ``off`` (tests/qwen3/test_prefetch.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from acl_core import acl
from acl_tools.qwen3.device import Buffer, Session, check_acl

ENV = "ACL_QWEN3_PREFETCH"
MODES = ("off", "ahead", "side", "mlp")
ACL_RT_CMO_TYPE_PREFETCH = 0


def prefetch_mode(value: str | None = None) -> str:
    """``value``, or ``ACL_QWEN3_PREFETCH`` when None (empty: off); ValueError for an unknown mode."""
    mode = (os.environ.get(ENV, "") if value is None else value).strip().lower() or "off"
    if mode not in MODES:
        raise ValueError(f"{ENV}={mode!r} is none of {', '.join(MODES)}")
    return mode


class PlanStep(Protocol):
    """One launchable step of a decode plan: an aclnn executor or a prefetch task."""

    name: str

    def __call__(self) -> None:
        """Enqueue the step on the session's stream."""

    def release(self) -> None:
        """Free what the step holds."""


class SideStream:
    """The second stream of ``side`` mode and the events its forks and its join record (made at first use)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        stream, ret = acl.rt.create_stream()
        check_acl(ret, "aclrtCreateStream(prefetch side stream)")
        self.stream: int = stream
        self.events: list[int] = []

    def event(self) -> int:
        """A new event, destroyed with the side stream."""
        event, ret = acl.rt.create_event()
        check_acl(ret, "aclrtCreateEvent")
        self.events.append(event)
        return int(event)

    def release(self) -> None:
        """Destroy the events and the stream (a capture that used them was destroyed before)."""
        for event in self.events:
            acl.rt.destroy_event(event)
        self.events = []
        if self.stream:
            check_acl(acl.rt.destroy_stream(self.stream), "aclrtDestroyStream(prefetch side stream)")
            self.stream = 0


class Prefetch:
    """aclrtCmoAsync(PREFETCH) of some weights: on the session's stream, or forked onto the side stream."""

    name = "CmoAsync"

    def __init__(self, session: Session, buffers: Sequence[Buffer], side: SideStream | None) -> None:
        self.session = session
        self.ranges = [(b.ptr, b.nbytes) for b in buffers]
        self.side = side
        self.fork = side.event() if side is not None else 0

    def __call__(self) -> None:
        """Enqueue the prefetches (after a fork from the session's stream in side mode)."""
        stream = self.session.stream
        if self.side is not None:
            check_acl(acl.rt.record_event(self.fork, stream), "aclrtRecordEvent(prefetch fork)")
            check_acl(acl.rt.stream_wait_event(self.side.stream, self.fork), "aclrtStreamWaitEvent(prefetch fork)")
            stream = self.side.stream
        for ptr, nbytes in self.ranges:
            check_acl(acl.rt.cmo_async(ptr, nbytes, ACL_RT_CMO_TYPE_PREFETCH, stream), "aclrtCmoAsync")

    def release(self) -> None:
        """Nothing of its own (the side stream owns the events)."""


class Join:
    """The end of a side-mode step: the session's stream waits for the side stream's last prefetch."""

    name = "PrefetchJoin"

    def __init__(self, session: Session, side: SideStream) -> None:
        self.session, self.side = session, side
        self.done = side.event()

    def __call__(self) -> None:
        """Record on the side stream, wait on the session's."""
        check_acl(acl.rt.record_event(self.done, self.side.stream), "aclrtRecordEvent(prefetch join)")
        check_acl(acl.rt.stream_wait_event(self.session.stream, self.done), "aclrtStreamWaitEvent(prefetch join)")

    def release(self) -> None:
        """The last step of a side-mode plan releases the side stream."""
        self.side.release()


def with_prefetches(
    session: Session, mode: str, items: Sequence[Any], plan: Sequence[PlanStep], layers: Sequence[Any]
) -> list[PlanStep]:
    """``plan`` (one step per item of ``items``, the decode program) with ``mode``'s prefetches inserted.

    A layer's qkv and down GEMVs are the items ``("Mm", (x, W.t, ...))`` whose weight view is that
    layer's ``qkv.t`` / ``down.t``.
    """
    steps: list[PlanStep] = list(plan)
    if mode == "off":
        return steps
    side = SideStream(session) if mode == "side" else None
    after: dict[int, list[Buffer]] = {}
    for i, lw in enumerate(layers):
        mlp = [lw.gate_up.buffer, lw.down.buffer]
        after[id(lw.qkv.t)] = mlp if mode == "mlp" else [lw.o.buffer, *mlp]
        if mode != "mlp" and i + 1 < len(layers):
            after[id(lw.down.t)] = [layers[i + 1].qkv.buffer]
    out: list[PlanStep] = []
    for item, step in zip(items, steps, strict=True):
        out.append(step)
        if isinstance(item, tuple) and item[0] == "Mm" and id(item[1][1]) in after:
            out.append(Prefetch(session, after[id(item[1][1])], side))
    if side is not None:
        out.append(Join(session, side))
    return out
