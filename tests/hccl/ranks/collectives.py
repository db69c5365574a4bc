"""One rank of the HCCL conformance run: every collective, data type and reduce op, checked against NumPy.

Launched as ``mpiexec -n K python collectives.py REPORT_DIR`` by tests/hccl/test_mpi.py. Every rank
can rebuild every other rank's data (it is seeded by rank, dtype and case), so each computes the
expected result on its own, exactly (Python integers, fractions), and compares bytes; results that
must agree across ranks are also compared by digest. A rank exits non-zero when any check failed.
"""

from __future__ import annotations

import json
import math
import os
import sys
from fractions import Fraction

import numpy as np
from common import (
    RANK,
    SIZE,
    WORLD,
    as_bytes,
    check,
    device,
    empty,
    expect,
    finish,
    host,
    make_comm,
    nbytes,
    rank_values,
    run_section,
    same_on_every_rank,
    start,
)

from acl_core import aclnn, eager, get_backend, hccl
from acl_core.dtypes import DataType
from acl_core.errors import AclnnError
from acl_core.spec.collective import (
    ACL_TO_HCCL,
    ELEMENT_BYTES,
    NUMPY_DTYPES,
    HcclDataType,
    HcclReduceOp,
)

D = HcclDataType
DTYPES = sorted(ELEMENT_BYTES)
ENGINE = get_backend().collectives
assert ENGINE is not None, "the backend has no collective engine"
NEVER_REDUCED = {D.HCCL_DATA_TYPE_HIF8, D.HCCL_DATA_TYPE_FP8E8M0, D.HCCL_DATA_TYPE_INT128}
if ENGINE.name in ("nccl", "rccl"):  # NCCL reduces only its own types; fp8 from NCCL 2.24
    NEVER_REDUCED |= {D.HCCL_DATA_TYPE_INT16, D.HCCL_DATA_TYPE_UINT16}
    if getattr(ENGINE, "nccl_version", 0) < 22400:
        NEVER_REDUCED |= {D.HCCL_DATA_TYPE_FP8E4M3, D.HCCL_DATA_TYPE_FP8E5M2}
REDUCIBLE = [d for d in DTYPES if d not in NEVER_REDUCED]
OPS = list(HcclReduceOp)[:4]
PEERS = [p for p in range(SIZE) if p != RANK]


def expected_reduction(parts: list[np.ndarray], dtype: HcclDataType, op: HcclReduceOp) -> bytes:
    """The exact reduction of ``parts`` (one array per rank), rounded once / wrapped to ``dtype``."""
    np_dtype = NUMPY_DTYPES[dtype]
    assert np_dtype is not None
    out = []
    for column in zip(*(p.tolist() if np_dtype.kind in "iu" else p.astype(np.float64).tolist() for p in parts)):
        if np_dtype.kind in "iu":
            value = {0: sum, 1: math.prod, 2: max, 3: min}[int(op)](int(v) for v in column)
            bits = np_dtype.itemsize * 8
            value %= 2**bits
            if np_dtype.kind == "i" and value >= 2 ** (bits - 1):
                value -= 2**bits
            out.append(value)
        elif op in (HcclReduceOp.HCCL_REDUCE_MAX, HcclReduceOp.HCCL_REDUCE_MIN):
            out.append(max(column) if op is HcclReduceOp.HCCL_REDUCE_MAX else min(column))
        else:
            # the data are multiples of 0.5 in [-2, 2]: sums and products of a few are exact in any order
            exact, value = Fraction(column[0]), column[0]
            for v in column[1:]:
                if op is HcclReduceOp.HCCL_REDUCE_SUM:
                    exact, value = exact + Fraction(v), value + v
                else:
                    exact, value = exact * Fraction(v), value * v
            assert Fraction(value) == exact, "test data must keep float64 arithmetic exact"
            out.append(value)  # the float carries the sign of zero that IEEE arithmetic gives
    if np_dtype.kind in "iu":
        return np.array(out, dtype=np_dtype).tobytes()
    return np.array(out, dtype=np.float64).astype(np_dtype).tobytes()


STEPWISE = ENGINE.name in ("nccl", "rccl")
"""NCCL rounds after every step of a reduction, in its ring's order, not once as the reference does."""
FLOAT_FORMAT = {  # significand bits (with the implicit one), smallest normal
    D.HCCL_DATA_TYPE_FP16: (11, 2.0**-14),
    D.HCCL_DATA_TYPE_BFP16: (8, 2.0**-126),
    D.HCCL_DATA_TYPE_FP8E4M3: (4, 2.0**-6),
    D.HCCL_DATA_TYPE_FP8E5M2: (3, 2.0**-14),
}


def ulp(magnitude: np.ndarray, dtype: HcclDataType) -> np.ndarray:
    """The spacing of ``dtype``'s floats at ``magnitude`` (subnormals included)."""
    bits, smallest_normal = FLOAT_FORMAT[dtype]
    return 2.0 ** (np.floor(np.log2(np.maximum(magnitude, smallest_normal))) - (bits - 1))


def reduction_matches(got: bytes, parts: list[np.ndarray], dtype: HcclDataType, op: HcclReduceOp) -> bool:
    """``got`` is the exact reduction rounded once, or (NCCL, 3+ ranks, a float narrower than fp32, sum or
    product) within the error of rounding after each of the SIZE-1 steps: half an ulp of the largest
    partial sum per addition, a relative 2^-p per multiplication."""
    want = expected_reduction(parts, dtype, op)
    if got == want:
        return True
    products = (HcclReduceOp.HCCL_REDUCE_SUM, HcclReduceOp.HCCL_REDUCE_PROD)
    if not (STEPWISE and SIZE > 2 and dtype in FLOAT_FORMAT and op in products):
        return False
    np_dtype = NUMPY_DTYPES[dtype]
    values = np.stack([p.astype(np.float64) for p in parts])
    g, w = (np.frombuffer(b, np_dtype).astype(np.float64) for b in (got, want))
    if op is HcclReduceOp.HCCL_REDUCE_SUM:
        tolerance = SIZE / 2 * ulp(np.abs(values).sum(axis=0), dtype)
    else:
        exact = np.abs(np.prod(values, axis=0))
        tolerance = SIZE * 2.0 ** -(FLOAT_FORMAT[dtype][0] - 1) * exact + ulp(exact, dtype) / 2
    return bool(np.all(np.abs(g - w) <= tolerance))


# ----------------------------------------------------------------------------- collectives
def all_reduce(comm: object) -> None:
    count = 37
    for dtype in REDUCIBLE:
        parts = [np.asarray(rank_values(r, dtype, count, 1)) for r in range(SIZE)]
        send = device(parts[RANK])
        for op in OPS:
            recv = empty(nbytes(dtype, count))
            if expect(
                hccl.HcclAllReduce(send, recv, count, int(dtype), int(op), comm, None),
                0,
                f"AllReduce {dtype.name} {op.name}",
            ):
                got = host(recv, nbytes(dtype, count))
                check(reduction_matches(got, parts, dtype, op), f"AllReduce {dtype.name} {op.name}: wrong result")
                same_on_every_rank(got, f"AllReduce {dtype.name} {op.name}")
    for dtype in sorted(NEVER_REDUCED):
        buf = device(as_bytes(rank_values(RANK, dtype, 4, 2)))
        expect(hccl.HcclAllReduce(buf, buf, 4, int(dtype), 0, comm, None), 5, f"AllReduce {dtype.name} not supported")
    # in place, and zero elements
    fp32 = HcclDataType.HCCL_DATA_TYPE_FP32
    parts = [np.asarray(rank_values(r, fp32, 9, 3)) for r in range(SIZE)]
    buf = device(parts[RANK])
    if expect(hccl.HcclAllReduce(buf, buf, 9, int(fp32), 0, comm, None), 0, "in-place AllReduce"):
        check(host(buf, 36) == expected_reduction(parts, fp32, HcclReduceOp.HCCL_REDUCE_SUM), "in-place AllReduce")
    expect(hccl.HcclAllReduce(buf, buf, 0, int(fp32), 0, comm, None), 0, "AllReduce of 0 elements")


def reduce_scatter(comm: object) -> None:
    block = 5
    for dtype in REDUCIBLE:
        full = [np.asarray(rank_values(r, dtype, block * SIZE, 4)) for r in range(SIZE)]
        send = device(full[RANK])
        for op in OPS:
            recv = empty(nbytes(dtype, block))
            if expect(
                hccl.HcclReduceScatter(send, recv, block, int(dtype), int(op), comm, None),
                0,
                f"ReduceScatter {dtype.name} {op.name}",
            ):
                mine = [f[RANK * block : (RANK + 1) * block] for f in full]
                check(
                    reduction_matches(host(recv, nbytes(dtype, block)), mine, dtype, op),
                    f"ReduceScatter {dtype.name} {op.name}",
                )


def movement(comm: object) -> None:
    for dtype in DTYPES:
        size = ELEMENT_BYTES[dtype]
        # AllGather
        count = 5
        data = [as_bytes(rank_values(r, dtype, count, 5)) for r in range(SIZE)]
        recv = empty(nbytes(dtype, count * SIZE))
        if expect(
            hccl.HcclAllGather(device(data[RANK]), recv, count, int(dtype), comm, None), 0, f"AllGather {dtype.name}"
        ):
            check(host(recv, nbytes(dtype, count * SIZE)) == b"".join(data), f"AllGather {dtype.name}")
        # Broadcast from the last rank
        root, count = SIZE - 1, 7
        data = [as_bytes(rank_values(r, dtype, count, 6)) for r in range(SIZE)]
        buf = device(data[RANK])
        if expect(hccl.HcclBroadcast(buf, count, int(dtype), root, comm, None), 0, f"Broadcast {dtype.name}"):
            check(host(buf, nbytes(dtype, count)) == data[root], f"Broadcast {dtype.name}")
        # AlltoAll, 3 elements per peer
        count = 3
        data = [as_bytes(rank_values(r, dtype, count * SIZE, 7)) for r in range(SIZE)]
        recv = empty(nbytes(dtype, count * SIZE))
        ret = hccl.HcclAlltoAll(device(data[RANK]), count, int(dtype), recv, count, int(dtype), comm, None)
        if expect(ret, 0, f"AlltoAll {dtype.name}"):
            want = b"".join(data[p][RANK * count * size : (RANK + 1) * count * size] for p in range(SIZE))
            check(host(recv, nbytes(dtype, count * SIZE)) == want, f"AlltoAll {dtype.name}")
        all_to_all_v(comm, dtype)
        if PEERS:
            point_to_point(comm, dtype)


def all_to_all_v(comm: object, dtype: HcclDataType) -> None:
    """Uneven blocks (some empty) with a one-element gap after each block, on both sides."""
    size = ELEMENT_BYTES[dtype]

    def sends(r: int) -> list[int]:
        return [(r + 2 * p) % 3 for p in range(SIZE)]

    def displs(counts: list[int]) -> list[int]:
        return [sum(counts[:p]) + p for p in range(len(counts))]

    data = [as_bytes(rank_values(r, dtype, sum(sends(r)) + SIZE, 8)) for r in range(SIZE)]
    scount, sdispl = sends(RANK), displs(sends(RANK))
    rcount = [sends(p)[RANK] for p in range(SIZE)]
    rdispl = displs(rcount)
    total = sum(rcount) + SIZE
    recv = empty(nbytes(dtype, total))
    ret = hccl.HcclAlltoAllV(
        device(data[RANK]), scount, sdispl, int(dtype), recv, rcount, rdispl, int(dtype), comm, None
    )
    if expect(ret, 0, f"AlltoAllV {dtype.name}"):
        want = bytearray(b"\xee" * nbytes(dtype, total))
        for p in range(SIZE):
            start_p = displs(sends(p))[RANK] * size
            want[rdispl[p] * size : (rdispl[p] + rcount[p]) * size] = data[p][start_p : start_p + rcount[p] * size]
        check(host(recv, nbytes(dtype, total)) == bytes(want), f"AlltoAllV {dtype.name}")


def point_to_point(comm: object, dtype: HcclDataType) -> None:
    """A ring with HcclSend/HcclRecv (even ranks send first), then both neighbours at once with HcclBatchSendRecv."""
    count = 6
    nxt, prv = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    data = [as_bytes(rank_values(r, dtype, count, 9)) for r in range(SIZE)]
    send, recv = device(data[RANK]), empty(nbytes(dtype, count))
    order = [("send", nxt), ("recv", prv)] if RANK % 2 == 0 else [("recv", prv), ("send", nxt)]
    for kind, peer in order:
        if kind == "send":
            expect(hccl.HcclSend(send, count, int(dtype), peer, comm, None), 0, f"Send {dtype.name}")
        else:
            if expect(hccl.HcclRecv(recv, count, int(dtype), peer, comm, None), 0, f"Recv {dtype.name}"):
                check(host(recv, nbytes(dtype, count)) == data[peer], f"Send/Recv {dtype.name}")
    from_prev, from_next = empty(nbytes(dtype, count)), empty(nbytes(dtype, count))
    items = [
        hccl.HcclSendRecvItem(hccl.HCCL_SEND, send, count, int(dtype), nxt),
        hccl.HcclSendRecvItem(hccl.HCCL_RECV, from_prev, count, int(dtype), prv),
        hccl.HcclSendRecvItem(hccl.HCCL_SEND, send, count, int(dtype), prv),
        hccl.HcclSendRecvItem(hccl.HCCL_RECV, from_next, count, int(dtype), nxt),
    ]
    if expect(hccl.HcclBatchSendRecv(items, len(items), comm, None), 0, f"BatchSendRecv {dtype.name}"):
        got = host(from_prev, nbytes(dtype, count)), host(from_next, nbytes(dtype, count))
        check(got == (data[prv], data[nxt]), f"BatchSendRecv {dtype.name}")


def barrier(comm: object) -> None:
    for _ in range(3):
        expect(hccl.HcclBarrier(comm, None), 0, "Barrier")


# ----------------------------------------------------------------------------- disagreement between ranks
def mismatches(comm: object) -> None:
    """Ranks that disagree about a call get HCCL_E_PARA (every rank that hears of it); the communicator stays usable."""
    fp32, int32 = HcclDataType.HCCL_DATA_TYPE_FP32, HcclDataType.HCCL_DATA_TYPE_INT32
    buf, out = device(np.ones(16, np.float32)), empty(64 * SIZE)
    expect(hccl.HcclAllReduce(buf, out, 8 if RANK == 0 else 9, int(fp32), 0, comm, None), 1, "AllReduce counts differ")
    expect(
        hccl.HcclAllReduce(buf, out, 8, int(fp32 if RANK == 0 else int32), 0, comm, None), 1, "AllReduce dtypes differ"
    )
    expect(hccl.HcclAllReduce(buf, out, 8, int(fp32), 0 if RANK == 0 else 2, comm, None), 1, "AllReduce ops differ")
    if RANK == 0:
        ret = hccl.HcclAllGather(buf, out, 8, int(fp32), comm, None)
    else:
        ret = hccl.HcclAllReduce(buf, out, 8, int(fp32), 0, comm, None)
    expect(ret, 1, "AllGather on one rank, AllReduce on the others")
    expect(hccl.HcclBroadcast(buf, 4, int(fp32), 0 if RANK == 0 else 1, comm, None), 1, "Broadcast roots differ")
    if RANK in (0, 1):
        ret = (hccl.HcclSend if RANK == 0 else hccl.HcclRecv)(
            buf, 4 if RANK == 0 else 5, int(fp32), 1 - RANK, comm, None
        )
        expect(ret, 1, "Send and Recv counts differ")
    counts = [1] * SIZE
    rcounts = [2 if (RANK == 0 and p == 1) else 1 for p in range(SIZE)]
    displs = [2 * p for p in range(SIZE)]
    ret = hccl.HcclAlltoAllV(buf, counts, displs, int(fp32), out, rcounts, displs, int(fp32), comm, None)
    expect(ret, 1 if RANK in (0, 1) else 0, "AlltoAllV: rank 0 expects one element more from rank 1")
    parts = [np.full(8, r + 1, np.float32) for r in range(SIZE)]
    buf = device(parts[RANK])
    if expect(hccl.HcclAllReduce(buf, out, 8, int(fp32), 0, comm, None), 0, "AllReduce after the disagreements"):
        check(host(out, 32) == expected_reduction(parts, fp32, HcclReduceOp.HCCL_REDUCE_SUM), "AllReduce after")


# ----------------------------------------------------------------------------- communicators
def sub_communicators() -> None:
    """Two communicators of two ranks each at once (4 ranks): each reduces over its own members only."""
    infos = [WORLD.bcast(hccl.HcclGetRootInfo()[0] if RANK == root else None, root=root) for root in (0, 2)]
    group = RANK // 2
    comm, ret = hccl.HcclCommInitRootInfo(2, infos[group], RANK % 2)
    if not expect(ret, 0, "HcclCommInitRootInfo of a 2-rank sub-communicator"):
        return
    check(hccl.HcclGetRankId(comm) == (RANK % 2, 0), "sub-communicator rank")
    buf, out = device(np.full(4, RANK + 1, np.int64)), empty(32)
    if expect(
        hccl.HcclAllReduce(buf, out, 4, int(HcclDataType.HCCL_DATA_TYPE_INT64), 0, comm, None), 0, "sub AllReduce"
    ):
        members = [2 * group + 1, 2 * group + 2]
        check(np.frombuffer(host(out, 32), np.int64).tolist() == [sum(members)] * 4, "sub-communicator sum")
    expect(hccl.HcclCommDestroy(comm), 0, "HcclCommDestroy of a sub-communicator")


def rank_table(report: str) -> None:
    """HcclCommInitClusterInfo from a rank table JSON (rank_id i = MPI rank i)."""
    path = os.path.join(report, "rank_table.json")
    if RANK == 0:
        servers = [
            {
                "server_id": f"10.0.0.{s}",
                "device": [
                    {"device_id": str(r % 8), "device_ip": f"192.168.{s}.{r}", "rank_id": str(r)}
                    for r in range(SIZE)
                    if r // 2 == s
                ],
            }
            for s in range((SIZE + 1) // 2)
        ]
        table = {"status": "completed", "version": "1.0", "server_count": str(len(servers)), "server_list": servers}
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(table, fh)
    WORLD.barrier()
    comm, ret = hccl.HcclCommInitClusterInfo(path, RANK)
    if not expect(ret, 0, "HcclCommInitClusterInfo"):
        return
    check(hccl.HcclGetCommName(comm) == ("hccl_world_group", 0), "rank-table communicator name")
    check(hccl.HcclGetRankSize(comm) == (SIZE, 0), "rank-table size")
    buf, out = device(np.full(3, RANK, np.int32)), empty(12)
    if expect(
        hccl.HcclAllReduce(buf, out, 3, int(HcclDataType.HCCL_DATA_TYPE_INT32), 2, comm, None), 0, "rank-table MAX"
    ):
        check(np.frombuffer(host(out, 12), np.int32).tolist() == [SIZE - 1] * 3, "rank-table AllReduce MAX")
    expect(hccl.HcclCommDestroy(comm), 0, "HcclCommDestroy (rank table)")


def rank_table_refused(report: str) -> None:
    """An NCCL engine forms multi-rank communicators from root info only: a rank table has no ncclUniqueId."""
    path = os.path.join(report, "rank_table_nccl.json")
    if RANK == 0:
        device_list = [{"device_id": str(r), "device_ip": f"192.168.0.{r}", "rank_id": str(r)} for r in range(SIZE)]
        servers = [{"server_id": "10.0.0.0", "device": device_list}]
        table = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": servers}
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(table, fh)
    WORLD.barrier()
    _, ret = hccl.HcclCommInitClusterInfo(path, RANK)
    expect(ret, 5, "HcclCommInitClusterInfo of several ranks on NCCL (HCCL_E_NOT_SUPPORT)")


# ----------------------------------------------------------------------------- MC2 operators
def mc2(comm: object) -> None:
    """Each MC2 operator equals its single operators composed (bit for bit) and the NumPy formula, on every rank."""
    name, ret = hccl.HcclGetCommName(comm)
    expect(ret, 0, "HcclGetCommName")
    for acl_dtype in (DataType.ACL_FLOAT16, DataType.ACL_BF16):
        mc2_in(comm, str(name), acl_dtype)
    # an unknown group is refused in phase 1
    x1, x2 = np.ones((2, 4), np.float16), np.ones((4, 2), np.float16)
    t = [eager.to_device(a).tensor() for a in (x1, x2)] + [eager.empty((2, 2), DataType.ACL_FLOAT16).tensor()]
    _, _, ret = aclnn.aclnnMatmulAllReduceGetWorkspaceSize(t[0], t[1], None, "nobody", "sum", 0, 1, t[2])
    check(ret == 161002, f"MatmulAllReduce with an unknown group returned {ret}")
    if SIZE > 1:  # m must divide among the ranks
        odd = np.ones((2 * SIZE + 1, 256), np.float16)
        try:
            eager.run(
                "MatmulReduceScatter",
                x1=odd,
                x2=np.ones((256, 2), np.float16),
                bias=None,
                group=name,
                reduceOp="sum",
                commTurn=0,
                streamMode=1,
            )
            check(False, "MatmulReduceScatter accepted m that does not divide among the ranks")
        except AclnnError as exc:
            check(exc.code == 161002, f"MatmulReduceScatter with m % ranks != 0 raised {exc.code}")


def mc2_in(comm: object, name: str, acl_dtype: DataType) -> None:
    """The MC2 checks in one dtype (float16 or bfloat16)."""
    np_dtype = acl_dtype.numpy
    hccl_dtype = ACL_TO_HCCL[acl_dtype]
    mc2_attrs = {"group": name, "commTurn": 0, "streamMode": 1}

    def rand(r: int, shape: tuple[int, ...], salt: int) -> np.ndarray:
        rng = np.random.default_rng([r, salt, int(acl_dtype)])
        return rng.uniform(-1, 1, shape).astype(np_dtype)

    def reduced(parts: list[np.ndarray]) -> np.ndarray:
        acc = parts[0].astype(np.float64)
        for p in parts[1:]:
            acc = acc + p.astype(np.float64)
        return acc.astype(np_dtype)

    def near(got: np.ndarray, parts: list[np.ndarray]) -> bool:
        """``got`` equals the sum of ``parts`` (each rank's rounded GEMM) rounded once: bit for bit on the
        reference (float64 GEMMs), elsewhere within each rank's GEMM rounding (float32 accumulation) and
        the reduction's: 2·SIZE ulps at the sum of the parts' magnitudes."""
        want = reduced(parts)
        if got.tobytes() == want.tobytes():
            return True
        if get_backend().name == "reference":
            return False
        bound = np.sum([np.abs(p.astype(np.float64)) for p in parts], axis=0)
        error = np.abs(got.astype(np.float64) - want.astype(np.float64))
        return bool(np.all(error <= 2 * SIZE * ulp(bound, hccl_dtype)))

    def all_reduce_ref(local: np.ndarray) -> np.ndarray:
        send, recv = device(local), empty(local.nbytes)
        expect(hccl.HcclAllReduce(send, recv, local.size, int(hccl_dtype), 0, comm, None), 0, "AllReduce (composition)")
        return np.frombuffer(host(recv, local.nbytes), np_dtype).reshape(local.shape)

    # MatmulAllReduce, x1 3-D: Addmm on the (b*s, k) view, then HcclAllReduce
    x1s = [rand(r, (2, 3, 16), 1) for r in range(SIZE)]
    x2s = [rand(r, (16, 8), 2) for r in range(SIZE)]
    biases = [rand(r, (8,), 3) for r in range(SIZE)]
    fused = eager.run("MatmulAllReduce", x1=x1s[RANK], x2=x2s[RANK], bias=biases[RANK], reduceOp="sum", **mc2_attrs)[
        "output"
    ]
    local = eager.run(
        "Addmm", self=biases[RANK], mat1=x1s[RANK].reshape(6, 16), mat2=x2s[RANK], beta=1, alpha=1, cubeMathType=0
    )["out"]
    composed = all_reduce_ref(local).reshape(2, 3, 8)
    parts = [
        (x1s[r].reshape(6, 16).astype(np.float64) @ x2s[r].astype(np.float64) + biases[r]).astype(np_dtype)
        for r in range(SIZE)
    ]
    check(fused.tobytes() == composed.tobytes(), f"MatmulAllReduce {acl_dtype.short} != Addmm + HcclAllReduce")
    check(near(fused.reshape(6, 8), parts), f"MatmulAllReduce {acl_dtype.short} != NumPy")
    same_on_every_rank(fused.tobytes(), f"MatmulAllReduce {acl_dtype.short}")

    # MatmulAllReduceV2 through the two-phase C API: Addmm, Add x3, HcclAllReduce
    x3s = [rand(r, (6, 8), 4) for r in range(SIZE)]
    args = [eager.to_device(a) for a in (x1s[RANK].reshape(6, 16), x2s[RANK], biases[RANK], x3s[RANK])]
    out = eager.empty((6, 8), acl_dtype)
    tensors = [a.tensor() for a in args]
    ws, executor, ret = aclnn.aclnnMatmulAllReduceV2GetWorkspaceSize(*tensors, name, "sum", 0, 1, out.tensor())
    if expect(ret, 0, f"aclnnMatmulAllReduceV2GetWorkspaceSize ({aclnn.aclGetRecentErrMsg()})"):
        expect(
            aclnn.aclnnMatmulAllReduceV2(None, ws, executor, None),
            0,
            f"aclnnMatmulAllReduceV2 ({aclnn.aclGetRecentErrMsg()})",
        )
        local = eager.run(
            "Add",
            self=eager.run(
                "Addmm",
                self=biases[RANK],
                mat1=x1s[RANK].reshape(6, 16),
                mat2=x2s[RANK],
                beta=1,
                alpha=1,
                cubeMathType=0,
            )["out"],
            other=x3s[RANK],
            alpha=1,
        )["out"]
        check(
            out.numpy().tobytes() == all_reduce_ref(local).tobytes(),
            f"MatmulAllReduceV2 {acl_dtype.short} != Addmm + Add + HcclAllReduce",
        )

    # AllGatherMatmul: HcclAllGather, then Mm
    x1s = [rand(r, (3, 256), 5) for r in range(SIZE)]
    x2 = rand(0, (256, 4), 6)
    res = eager.run("AllGatherMatmul", x1=x1s[RANK], x2=x2, bias=None, gatherIndex=0, **mc2_attrs)
    gathered = empty(3 * 256 * 2 * SIZE)
    ret = hccl.HcclAllGather(device(x1s[RANK]), gathered, 3 * 256, int(hccl_dtype), comm, None)
    if expect(ret, 0, "AllGather (composition)"):
        g = np.frombuffer(host(gathered, 3 * 256 * 2 * SIZE), np_dtype).reshape(3 * SIZE, 256)
        check(
            res["gatherOut"].tobytes() == np.concatenate(x1s).tobytes(),
            f"AllGatherMatmul {acl_dtype.short} gatherOut",
        )
        mm = eager.run("Mm", self=g, mat2=x2, cubeMathType=0)["out"]
        check(res["output"].tobytes() == mm.tobytes(), f"AllGatherMatmul {acl_dtype.short} != HcclAllGather + Mm")

    # MatmulReduceScatter: Mm, then HcclReduceScatter
    x1s = [rand(r, (2 * SIZE, 256), 7) for r in range(SIZE)]
    x2s = [rand(r, (256, 5), 8) for r in range(SIZE)]
    fused = eager.run("MatmulReduceScatter", x1=x1s[RANK], x2=x2s[RANK], bias=None, reduceOp="sum", **mc2_attrs)[
        "output"
    ]
    local = eager.run("Mm", self=x1s[RANK], mat2=x2s[RANK], cubeMathType=0)["out"]
    recv = empty(2 * 5 * 2)
    ret = hccl.HcclReduceScatter(device(local), recv, 10, int(hccl_dtype), 0, comm, None)
    if expect(ret, 0, "ReduceScatter (composition)"):
        check(fused.tobytes() == host(recv, 20), f"MatmulReduceScatter {acl_dtype.short} != Mm + HcclReduceScatter")
    products = [(x1s[r].astype(np.float64) @ x2s[r].astype(np.float64)).astype(np_dtype) for r in range(SIZE)]
    mine = [p[2 * RANK : 2 * RANK + 2] for p in products]
    check(near(fused, mine), f"MatmulReduceScatter {acl_dtype.short} != NumPy")


def main() -> None:
    report = sys.argv[1]
    start()
    comm = make_comm()
    check(hccl.HcclGetRankSize(comm) == (SIZE, 0) and hccl.HcclGetRankId(comm) == (RANK, 0), "size / rank")
    name, _ = hccl.HcclGetCommName(comm)
    same_on_every_rank(str(name).encode(), "HcclGetCommName")
    run_section("all_reduce", lambda: all_reduce(comm))
    run_section("reduce_scatter", lambda: reduce_scatter(comm))
    run_section("movement", lambda: movement(comm))
    run_section("barrier", lambda: barrier(comm))
    run_section("mc2", lambda: mc2(comm))
    if SIZE > 1 and ENGINE.name == "mpi":  # NCCL cannot see that ranks disagree (they would hang)
        run_section("mismatches", lambda: mismatches(comm))
        run_section("rank_table", lambda: rank_table(report))
    elif SIZE > 1:
        run_section("rank_table", lambda: rank_table_refused(report))
    if SIZE == 4:
        run_section("sub_communicators", sub_communicators)
    expect(hccl.HcclCommDestroy(comm), 0, "HcclCommDestroy")
    expect(hccl.HcclBarrier(comm, None), 1, "Barrier on a destroyed communicator")
    finish(report)


if __name__ == "__main__":
    main()
