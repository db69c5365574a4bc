"""Helpers every rank script shares: the world (MPI, or acl_tools.launch's files), device buffers, a failure log."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from acl_core import acl, hccl
from acl_core.spec.collective import ELEMENT_BYTES, NUMPY_DTYPES, HcclDataType
from acl_tools.world import current

WORLD = current()  # MPI.COMM_WORLD under mpiexec, a shared directory under acl_tools.launch
RANK = WORLD.rank
SIZE = WORLD.size
FAILURES: list[str] = []
CHECKS = [0]


def start() -> None:
    """aclInit and a device per rank (rank r on device r; reference devices wrap around at 8)."""
    assert acl.init() == 0
    assert acl.rt.set_device(RANK % 8) == 0


def check(condition: bool, message: str) -> bool:
    """Record a failure (the rank exits non-zero at the end) instead of stopping at the first one."""
    CHECKS[0] += 1
    if not condition:
        FAILURES.append(message)
    return condition


def expect(code: int, want: int, what: str) -> bool:
    """Check an HCCL return code, naming the call and the engine's reason on a mismatch."""
    return check(code == want, f"{what}: returned {code}, expected {want} ({hccl.last_error_message()})")


def make_comm(n_ranks: int | None = None, members: list[int] | None = None) -> Any:
    """A communicator of every rank (or of ``members``), root info made on the first member and broadcast."""
    members = list(range(SIZE)) if members is None else members
    info = hccl.HcclGetRootInfo()[0] if RANK == members[0] else None
    info = WORLD.bcast(info, root=members[0])
    assert isinstance(info, bytes) and len(info) == 4108
    if RANK not in members:
        return None
    comm, ret = hccl.HcclCommInitRootInfo(n_ranks or len(members), info, members.index(RANK))
    if not expect(ret, 0, "HcclCommInitRootInfo"):
        finish()
    return comm


def nbytes(dtype: HcclDataType, count: int) -> int:
    """Bytes of ``count`` elements."""
    return ELEMENT_BYTES[dtype] * count


def device(data: np.ndarray | bytes, extra: int = 0) -> int:
    """Device memory holding ``data`` (plus ``extra`` spare bytes)."""
    raw = np.frombuffer(bytes(data) if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes(), np.uint8)
    size = max(raw.size + extra, 1)
    address, ret = acl.rt.malloc(size, 0)
    assert ret == 0, ret
    if raw.size:
        host = raw.copy()
        assert acl.rt.memcpy(address, size, acl.util.numpy_to_ptr(host), raw.size, 1) == 0
    return address


def empty(size: int) -> int:
    """Device memory of ``size`` bytes, filled with 0xEE so unwritten bytes show."""
    address, ret = acl.rt.malloc(max(size, 1), 0)
    assert ret == 0, ret
    acl.rt.memset(address, max(size, 1), 0xEE, max(size, 1))
    return address


def host(address: int, size: int) -> bytes:
    """The first ``size`` bytes at a device address, once the device's queued work has run.

    aclrtMemcpy waits for no stream: a collective enqueued on a stream is only seen after a synchronisation.
    """
    assert acl.rt.synchronize_device() == 0
    out = np.zeros(max(size, 1), np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.size, address, size, 2) == 0
    return out[:size].tobytes()


def rank_values(rank: int, dtype: HcclDataType, count: int, salt: int) -> np.ndarray | bytes:
    """Rank ``rank``'s data for a case, reproducible on every rank: exact-friendly values per dtype.

    Floats are multiples of 0.5 in [-2, 2] (sums and products of a few stay exact in float64);
    integers span their whole range (so sums and products wrap); types without NumPy arithmetic
    (HIF8, INT128) are raw bytes.
    """
    rng = np.random.default_rng([rank, int(dtype), count, salt])
    np_dtype = NUMPY_DTYPES[dtype]
    if np_dtype is None:
        return rng.integers(0, 256, nbytes(dtype, count), dtype=np.uint8).tobytes()
    if np_dtype.kind in "iu":
        info = np.iinfo(np_dtype)
        return rng.integers(int(info.min), int(info.max), count, dtype=np_dtype, endpoint=True)
    if dtype is HcclDataType.HCCL_DATA_TYPE_FP8E8M0:
        return (2.0 ** rng.integers(-4, 5, count)).astype(np_dtype)  # E8M0 holds powers of two only
    return (rng.integers(-4, 5, count) / 2).astype(np_dtype)


def as_bytes(values: np.ndarray | bytes) -> bytes:
    """The raw bytes of a case's data."""
    return values if isinstance(values, bytes) else np.ascontiguousarray(values).tobytes()


def same_on_every_rank(blob: bytes, what: str) -> None:
    """Check that every rank got bit-identical bytes (by digest, gathered through the world)."""
    digests = WORLD.allgather(hashlib.sha256(blob).hexdigest())
    check(len(set(digests)) == 1, f"{what}: ranks got different bytes")


def run_section(name: str, fn: Callable[[], None]) -> None:
    """Run one section; an exception is a failure of this rank, not a crash of the job."""
    try:
        fn()
    except Exception:
        FAILURES.append(f"{name} raised:\n{traceback.format_exc()}")


def finish(report: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Print this rank's failures, write its report, and exit non-zero if any check failed."""
    if report:
        with open(os.path.join(report, f"rank{RANK}.json"), "w", encoding="utf-8") as fh:
            json.dump({"rank": RANK, "checks": CHECKS[0], "failures": FAILURES, **(extra or {})}, fh)
    for message in FAILURES:
        print(f"[rank {RANK}] FAIL {message}", flush=True)
    sys.stdout.flush()
    sys.exit(1 if FAILURES else 0)
