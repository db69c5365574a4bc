"""A Python twin of the warp-specialised wgmma kernel's signalling (``kernels/attention_wgmma_ws.py``), for tests.

Producer threads and consumer warpgroups are generators that yield the condition they block on; a random scheduler
runs whichever may proceed, or lands one producer thread's oldest ``cp.async`` group. The twin keeps the kernel's
order of operations (the Q group, K and V groups with their slots, parities, the flush before an empty wait, the
token ring of the ping-pong) and checks what the GPU cannot tell us on failure: no deadlock, every acquired slot
holds the group its reader expects from every producer thread, no slot refilled while a consumer holds it, no
stale slot (the pipelined loop's last S) being written, and every barrier's phase count at the end.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

Wait = Callable[[], bool]
Thread = Generator[Wait | None, None, None]


@dataclass
class MBarrier:
    """``mbarrier``: arrivals a phase, the phases completed."""

    count: int
    pending: int = 0
    phases: int = 0

    def __post_init__(self) -> None:
        self.pending = self.count

    def arrive(self) -> None:
        self.pending -= 1
        assert self.pending >= 0
        if self.pending == 0:
            self.phases, self.pending = self.phases + 1, self.count

    def done(self, parity: int) -> bool:
        """``try_wait.parity`` / ``test_wait.parity``: the phase of that parity has completed."""
        return (self.phases & 1) != parity


@dataclass
class NamedBarrier:
    """``bar.sync`` / ``bar.arrive`` with ``count`` participants (a warpgroup is one)."""

    count: int
    arrived: int = 0
    generation: int = 0

    def arrive(self) -> int:
        generation = self.generation
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.generation = 0, self.generation + 1
        return generation


@dataclass
class Block:
    """One block's shared state."""

    tiles: int
    stages: int
    consumers: int
    producers: int
    qbar: MBarrier = field(init=False)
    full: list[MBarrier] = field(init=False)
    empty: list[MBarrier] = field(init=False)
    turns: list[NamedBarrier] = field(init=False)
    data: list[dict[int, object]] = field(init=False)  # slot -> producer thread -> the group that landed there
    writing: list[set[int]] = field(init=False)  # slot -> producer threads with a copy into it in flight
    holders: list[set[int]] = field(init=False)  # slot -> consumers that acquired it and have not released it
    in_flight: list[list[tuple[int | None, object]]] = field(init=False)  # thread -> committed groups (slot, id)

    def __post_init__(self) -> None:
        self.qbar = MBarrier(self.producers)
        self.full = [MBarrier(self.producers) for _ in range(2 * self.stages)]
        self.empty = [MBarrier(self.consumers) for _ in range(2 * self.stages)]
        self.turns = [NamedBarrier(2) for _ in range(self.consumers)]
        self.data = [{} for _ in range(2 * self.stages)]
        self.writing = [set() for _ in range(2 * self.stages)]
        self.holders = [set() for _ in range(2 * self.stages)]
        self.in_flight = [[] for _ in range(self.producers)]

    def land(self, p: int) -> None:
        slot, group = self.in_flight[p].pop(0)
        if slot is not None:
            self.data[slot][p] = group
            self.writing[slot].discard(p)


def producer(blk: Block, p: int, negative_scale: bool, rng: random.Random, flush: bool = True) -> Thread:
    """The producer warpgroup's loop, one of its threads (``flush`` False: no signal before an empty wait)."""
    S = blk.stages

    def commit(slot: int | None, group: object) -> None:
        if slot is not None:
            assert not blk.holders[slot], f"slot {slot} refilled while consumers {blk.holders[slot]} hold it"
            blk.writing[slot].add(p)
        blk.in_flight[p].append((slot, group))

    def slot_of(j: int) -> int:
        return 2 * (j // 2 % S) + j % 2

    commit(None, "Q")
    if negative_scale:
        yield lambda: not blk.in_flight[p]  # wait_group 0 (and the producers' named barrier: Q is only read later)
        blk.qbar.arrive()
    pending = -1
    for j in range(2 * blk.tiles):
        t, kv = divmod(j, 2)
        slot = slot_of(j)
        par = ((t // S) & 1) ^ 1
        if flush and t >= S and pending >= 0 and not (rng.random() < 0.5 and blk.empty[slot].done(par)):
            yield lambda: not blk.in_flight[p]
            blk.full[slot_of(pending)].arrive()
            pending = -1
        if t >= S:
            yield lambda slot=slot, par=par: blk.empty[slot].done(par)
        commit(slot, ("KV"[kv], t))
        if j == 0 or pending >= 0:
            yield lambda: len(blk.in_flight[p]) <= 1
            if pending >= 0:
                blk.full[slot_of(pending)].arrive()
            elif not negative_scale:
                blk.qbar.arrive()
        pending = j
    if pending >= 0:
        yield lambda: not blk.in_flight[p]
        blk.full[slot_of(pending)].arrive()


def consumer(blk: Block, c: int, pipelined: bool, pingpong: bool, prearrive: bool = True) -> Thread:
    """One consumer warpgroup's loop (a warp's empty arrivals stand for its four; ``prearrive`` False: no ring)."""
    S, tiles = blk.stages, blk.tiles
    mine, nxt = blk.turns[c], blk.turns[(c + 1) % blk.consumers]

    def acquire(slot: int, group: tuple[str, int]) -> None:
        for p in range(blk.producers):
            assert blk.data[slot].get(p) == group, f"consumer {c} expected {group} in slot {slot}: {blk.data[slot]}"
        blk.holders[slot].add(c)

    def release(slot: int) -> None:
        blk.holders[slot].discard(c)
        blk.empty[slot].arrive()

    def sync_turn() -> Thread:
        generation = mine.arrive()
        yield lambda: mine.generation > generation

    if prearrive and pingpong and tiles > 0 and c == blk.consumers - 1:
        blk.turns[0].arrive()
    if tiles > 0:
        yield lambda: blk.qbar.done(0)
    if not pipelined:
        for t in range(tiles):
            s, par = t % S, (t // S) & 1
            yield lambda s=s, par=par: blk.full[2 * s].done(par)
            acquire(2 * s, ("K", t))
            release(2 * s)
            yield lambda s=s, par=par: blk.full[2 * s + 1].done(par)
            acquire(2 * s + 1, ("V", t))
            release(2 * s + 1)
        return
    if tiles > 0:
        yield lambda: blk.full[0].done(0)
        acquire(0, ("K", 0))
        if pingpong:
            yield from sync_turn()
            nxt.arrive()
        release(0)
    for t in range(tiles):
        s, s1, last = t % S, (t + 1) % S, t + 1 == tiles
        if not last:
            yield lambda s1=s1, t=t: blk.full[2 * s1].done(((t + 1) // S) & 1)
            acquire(2 * s1, ("K", t + 1))
        yield lambda s=s, t=t: blk.full[2 * s + 1].done((t // S) & 1)
        acquire(2 * s + 1, ("V", t))
        if pingpong:
            yield from sync_turn()
        if last:  # S(t + 1) on a stale K slot: nothing may be writing it
            assert not blk.writing[2 * s1], f"the last S reads slot {2 * s1} while it is written"
        if pingpong and (not last or c != blk.consumers - 1):
            nxt.arrive()
        if not last:
            release(2 * s1)
        release(2 * s + 1)


def run(
    tiles: int,
    stages: int,
    consumers: int,
    pipelined: bool,
    pingpong: bool,
    negative: bool,
    seed: int,
    flush: bool = True,
    prearrive: bool = True,
) -> None:
    """One block under a random schedule; AssertionError on a deadlock or a protocol error."""
    rng = random.Random(seed)
    blk = Block(tiles, stages, consumers, producers=2)
    threads: list[tuple[Thread, list[Wait | None]]] = []
    for p in range(blk.producers):
        threads.append((producer(blk, p, negative, rng, flush), [None]))
    for c in range(consumers):
        threads.append((consumer(blk, c, pipelined, pingpong, prearrive), [None]))
    live = list(threads)
    while live or any(blk.in_flight):
        ready = [th for th in live if th[1][0] is None or th[1][0]()]
        landings = [p for p in range(blk.producers) if blk.in_flight[p]]
        if not ready and not landings:
            raise AssertionError(f"deadlock: {len(live)} threads blocked, barriers {blk.full} {blk.empty}")
        if landings and (not ready or rng.random() < 0.3):
            blk.land(rng.choice(landings))
            continue
        th = rng.choice(ready)
        try:
            th[1][0] = next(th[0])
        except StopIteration:
            live.remove(th)
    for b in (*blk.full, *blk.empty):
        assert b.pending == b.count, "a barrier phase left half-arrived"
    for s in range(2 * stages):  # every slot's barriers completed once a tile that used it
        uses = len(range(s // 2, tiles, stages))
        assert blk.full[s].phases == uses and blk.empty[s].phases == uses, (s, uses, blk.full[s], blk.empty[s])
    assert all(t.arrived == 0 for t in blk.turns), "a named barrier left with arrivals"
