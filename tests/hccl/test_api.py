"""The HCCL front end in one process: the contract's constants, bad arguments → codes, a world of one, MC2 on it.

Nothing here starts MPI: a communicator of one rank never needs it (checked in a fresh interpreter).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import acl_core
from acl_core import acl, eager, hccl
from acl_core.dtypes import DataType
from acl_core.errors import AclnnError, HcclResult
from acl_core.spec.collective import (
    ACL_TO_HCCL,
    COMM_NAME_MAX_LENGTH,
    ELEMENT_BYTES,
    HCCL_ROOT_INFO_BYTES,
    HCCL_TO_ACL,
    NUMPY_DTYPES,
    SELF_GROUP_NAME,
    HcclDataType,
    HcclReduceOp,
    Timeouts,
    unpack_root_info,
)
from acl_reference.collectives import reduce_in_rank_order

OK, PARA, PTR, NOT_SUPPORT, NOT_FOUND, TIMEOUT = 0, 1, 2, 5, 6, 9
FP32 = int(HcclDataType.HCCL_DATA_TYPE_FP32)
SUM = int(HcclReduceOp.HCCL_REDUCE_SUM)


@pytest.fixture(scope="module")
def device() -> int:
    """Device 0 set on this thread (aclInit once per process)."""
    acl.init()
    assert acl.rt.set_device(0) == 0
    return 0


@pytest.fixture
def comm(device: int) -> object:
    """A fresh communicator of one rank, destroyed afterwards."""
    info, ret = hccl.HcclGetRootInfo()
    assert ret == OK
    handle, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == OK, hccl.last_error_message()
    yield handle
    hccl.HcclCommDestroy(handle)


def to_device(data: np.ndarray | bytes) -> int:
    """Device memory holding ``data``."""
    raw = np.frombuffer(data if isinstance(data, bytes) else np.ascontiguousarray(data).tobytes(), np.uint8).copy()
    address, ret = acl.rt.malloc(max(raw.size, 1), 0)
    assert ret == OK
    if raw.size:
        assert acl.rt.memcpy(address, raw.size, acl.util.numpy_to_ptr(raw), raw.size, 1) == OK
    return address


def from_device(address: int, size: int) -> bytes:
    """``size`` bytes at a device address, once the default stream's collectives have run (as a program must)."""
    assert acl.rt.synchronize_stream(None) == OK
    out = np.zeros(max(size, 1), np.uint8)
    assert acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.size, address, size, 2) == OK
    return out[:size].tobytes()


# ----------------------------------------------------------------------------- the contract's facts
def test_hccl_numbers_are_cannes_own() -> None:
    assert HCCL_ROOT_INFO_BYTES == 4108 and COMM_NAME_MAX_LENGTH == 128
    assert [int(HcclReduceOp[n]) for n in ("HCCL_REDUCE_SUM", "HCCL_REDUCE_PROD", "HCCL_REDUCE_MAX")] == [0, 1, 2]
    assert int(HcclReduceOp.HCCL_REDUCE_MIN) == 3 and int(HcclReduceOp.HCCL_REDUCE_RESERVED) == 255
    assert (int(HcclDataType.HCCL_DATA_TYPE_FP16), int(DataType.ACL_FLOAT16)) == (3, 1)
    assert int(HcclDataType.HCCL_DATA_TYPE_BFP16) == 11 and int(HcclDataType.HCCL_DATA_TYPE_FP8E8M0) == 17
    assert int(HcclResult.HCCL_E_TIMEOUT) == 9 and int(HcclResult.HCCL_E_IN_STATUS) == 1041


def test_acl_and_hccl_dtype_maps_are_inverse_and_agree_on_sizes() -> None:
    assert {v: k for k, v in ACL_TO_HCCL.items()} == HCCL_TO_ACL
    assert ACL_TO_HCCL[DataType.ACL_FLOAT16] is HcclDataType.HCCL_DATA_TYPE_FP16
    assert ACL_TO_HCCL[DataType.ACL_BF16] is HcclDataType.HCCL_DATA_TYPE_BFP16
    for h, a in HCCL_TO_ACL.items():
        assert a.info.element_bits == 8 * ELEMENT_BYTES[h], h
        if NUMPY_DTYPES[h] is not None:
            assert NUMPY_DTYPES[h] == a.numpy, h
    assert (
        HcclDataType.HCCL_DATA_TYPE_INT128 not in HCCL_TO_ACL
        and ELEMENT_BYTES[HcclDataType.HCCL_DATA_TYPE_INT128] == 16
    )


def test_root_info_layout(device: int) -> None:
    blob, ret = hccl.HcclGetRootInfo()
    assert ret == OK and isinstance(blob, bytes) and len(blob) == 4108
    assert blob[:8] == b"ACLHCCL\0" and struct.unpack_from("<I", blob, 8) == (1,)
    assert blob[12:28].rstrip(b"\0") == b"mpi"
    rank, size, pid = struct.unpack_from("<III", blob, 44)
    assert (rank, size, pid) == (0, 1, os.getpid())
    info = unpack_root_info(blob)
    assert info.comm_name == f"hccl_comm_{blob[28:44].hex()}"
    other, _ = hccl.HcclGetRootInfo()
    assert other[28:44] != blob[28:44], "every root info names a new communicator"


def test_timeouts_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "2.5")
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "soon")
    assert Timeouts.from_env() == Timeouts(2.5, 1836.0)
    monkeypatch.setenv("HCCL_CONNECT_TIMEOUT", "-1")
    assert Timeouts.from_env().connect_s == 120.0


def test_error_strings() -> None:
    assert hccl.HcclGetErrorString(9) == "HCCL_E_TIMEOUT: timeout"
    assert hccl.HcclGetErrorString(1).startswith("HCCL_E_PARA")
    assert "unknown" in hccl.HcclGetErrorString(77)


# ----------------------------------------------------------------------------- reductions
def test_reduction_folds_in_rank_order_in_float64_then_casts_once() -> None:
    f64 = HcclDataType.HCCL_DATA_TYPE_FP64
    parts = [np.array([1.0]), np.array([1e16]), np.array([-1e16])]
    assert reduce_in_rank_order(parts, f64, HcclReduceOp.HCCL_REDUCE_SUM).tolist() == [0.0]  # (1 + 1e16) - 1e16
    assert reduce_in_rank_order(parts[::-1], f64, HcclReduceOp.HCCL_REDUCE_SUM).tolist() == [1.0]
    f32 = [np.array([2.0**24], np.float32), np.array([1.0], np.float32), np.array([1.0], np.float32)]
    got = reduce_in_rank_order(f32, HcclDataType.HCCL_DATA_TYPE_FP32, HcclReduceOp.HCCL_REDUCE_SUM)
    assert got.dtype == np.float32 and got.tolist() == [2.0**24 + 2]  # float32 steps would give 2**24
    bf16 = [np.array([1.0], ml_dtypes.bfloat16)] + [np.array([2.0**-8], ml_dtypes.bfloat16)] * 2
    got = reduce_in_rank_order(bf16, HcclDataType.HCCL_DATA_TYPE_BFP16, HcclReduceOp.HCCL_REDUCE_SUM)
    assert float(got[0]) == 1.0 + 2.0**-7


def test_integer_reductions_wrap() -> None:
    i8 = HcclDataType.HCCL_DATA_TYPE_INT8
    parts = [np.array([127, -128, 100], np.int8), np.array([1, -1, 100], np.int8)]
    assert reduce_in_rank_order(parts, i8, HcclReduceOp.HCCL_REDUCE_SUM).tolist() == [-128, 127, -56]
    assert reduce_in_rank_order(parts, i8, HcclReduceOp.HCCL_REDUCE_PROD).tolist() == [127, -128, 16]
    u64 = [np.array([2**64 - 1], np.uint64), np.array([2], np.uint64)]
    assert reduce_in_rank_order(u64, HcclDataType.HCCL_DATA_TYPE_UINT64, HcclReduceOp.HCCL_REDUCE_SUM).tolist() == [1]
    assert reduce_in_rank_order(parts, i8, HcclReduceOp.HCCL_REDUCE_MIN).tolist() == [1, -128, 100]


# ----------------------------------------------------------------------------- a world of one
def test_no_mpi_for_a_world_of_one() -> None:
    """import acl_core / hccl, and a one-rank communicator's collectives, never import mpi4py."""
    program = """
import sys
import acl_core
from acl_core import acl, hccl
acl.init(); acl.rt.set_device(0)
assert "mpi4py" not in sys.modules
info, ret = hccl.HcclGetRootInfo(); assert ret == 0
comm, ret = hccl.HcclCommInitRootInfo(1, info, 0); assert ret == 0, hccl.last_error_message()
buf, ret = acl.rt.malloc(64, 0)
assert hccl.HcclAllReduce(buf, buf, 16, 4, 0, comm, None) == 0
assert hccl.HcclBarrier(comm, None) == 0
assert acl_core.get_backend().capabilities().collective_engine == "mpi"
assert "mpi4py" not in sys.modules, "mpi4py was imported"
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_"))}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_single_rank_collectives_are_identities(comm: object) -> None:
    assert hccl.HcclGetRankSize(comm) == (1, OK) and hccl.HcclGetRankId(comm) == (0, OK)
    name, ret = hccl.HcclGetCommName(comm)
    assert ret == OK and name.startswith("hccl_comm_") and len(name) < 128
    assert hccl.HcclCommGetHandleWithName(name) == (comm, OK)
    for dtype in ELEMENT_BYTES:
        data = np.random.default_rng(int(dtype)).integers(0, 256, 8 * ELEMENT_BYTES[dtype], np.uint8).tobytes()
        if NUMPY_DTYPES[dtype] is not None and NUMPY_DTYPES[dtype].kind in "fV":
            data = np.arange(8, dtype=NUMPY_DTYPES[dtype]).tobytes()  # no NaN bit patterns
        src, dst = to_device(data), to_device(bytes(len(data)))
        assert hccl.HcclAllGather(src, dst, 8, int(dtype), comm, None) == OK
        assert from_device(dst, len(data)) == data
        assert hccl.HcclAlltoAll(src, 8, int(dtype), dst, 8, int(dtype), comm, None) == OK
        assert hccl.HcclBroadcast(src, 8, int(dtype), 0, comm, None) == OK and from_device(src, len(data)) == data
        reducible = dtype not in (
            HcclDataType.HCCL_DATA_TYPE_HIF8,
            HcclDataType.HCCL_DATA_TYPE_FP8E8M0,
            HcclDataType.HCCL_DATA_TYPE_INT128,
        )
        for op in range(4):
            dst2 = to_device(bytes(len(data)))
            ret = hccl.HcclAllReduce(src, dst2, 8, int(dtype), op, comm, None)
            assert ret == (OK if reducible else NOT_SUPPORT), (dtype, op)
            if reducible:
                assert from_device(dst2, len(data)) == data, (dtype, op)
                assert hccl.HcclReduceScatter(src, dst2, 8, int(dtype), op, comm, None) == OK
    stream, _ = acl.rt.create_stream()
    assert hccl.HcclBarrier(comm, stream) == OK


# ----------------------------------------------------------------------------- bad arguments
def test_communicator_arguments(device: int) -> None:
    info, _ = hccl.HcclGetRootInfo()
    assert hccl.HcclCommInitRootInfo(0, info, 0) == (None, PARA)
    assert hccl.HcclCommInitRootInfo(1, info, 1) == (None, PARA)
    assert hccl.HcclCommInitRootInfo(1, None, 0) == (None, PTR)
    assert hccl.HcclCommInitRootInfo(1, info[:100], 0) == (None, PARA)
    assert hccl.HcclCommInitRootInfo(1, b"x" * 4108, 0) == (None, PARA)
    assert hccl.HcclCommInitRootInfo(2, info, 0) == (None, PARA), "two ranks in a world of one process"
    assert "exceeds" in hccl.last_error_message()
    comm, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == OK
    assert hccl.HcclCommInitRootInfo(1, info, 0) == (None, PARA), "the same rank twice in one process"
    for bad in (None, 0):
        assert hccl.HcclGetRankSize(bad) == (0, PTR)
        assert hccl.HcclCommDestroy(bad) == PTR
    assert hccl.HcclGetRankSize("comm") == (0, PARA)
    assert hccl.HcclCommDestroy(comm) == OK
    assert hccl.HcclCommDestroy(comm) == PARA
    assert hccl.HcclGetRankId(comm) == (0, PARA)
    assert hccl.HcclCommGetHandleWithName("nobody") == (None, NOT_FOUND)


def test_a_device_must_be_set_before_forming_a_communicator(device: int) -> None:
    info, _ = hccl.HcclGetRootInfo()
    result: list[tuple[object, int]] = []
    worker = threading.Thread(target=lambda: result.append(hccl.HcclCommInitRootInfo(1, info, 0)))
    worker.start()
    worker.join()
    assert result == [(None, int(HcclResult.HCCL_E_RUNTIME))]


def test_collective_arguments(comm: object) -> None:
    good, out = to_device(np.zeros(8, np.float32)), to_device(np.zeros(8, np.float32))
    host = np.zeros(8, np.float32)
    freed = to_device(np.zeros(8, np.float32))
    assert acl.rt.free(freed) == OK
    cases = {
        "null send": (hccl.HcclAllReduce(None, out, 8, FP32, SUM, comm, None), PTR),
        "null recv": (hccl.HcclAllReduce(good, 0, 8, FP32, SUM, comm, None), PTR),
        "host memory": (hccl.HcclAllReduce(acl.util.numpy_to_ptr(host), out, 8, FP32, SUM, comm, None), PARA),
        "freed memory": (hccl.HcclAllReduce(freed, out, 8, FP32, SUM, comm, None), PARA),
        "too small": (hccl.HcclAllReduce(good, out, 9, FP32, SUM, comm, None), PARA),
        "misaligned": (hccl.HcclAllReduce(good + 2, out, 4, FP32, SUM, comm, None), PARA),
        "negative count": (hccl.HcclAllReduce(good, out, -1, FP32, SUM, comm, None), PARA),
        "float count": (hccl.HcclAllReduce(good, out, 1.5, FP32, SUM, comm, None), PARA),
        "dtype 13": (hccl.HcclAllReduce(good, out, 8, 13, SUM, comm, None), PARA),
        "dtype RESERVED": (hccl.HcclAllReduce(good, out, 8, 255, SUM, comm, None), PARA),
        "op RESERVED": (hccl.HcclAllReduce(good, out, 8, FP32, 255, comm, None), PARA),
        "op 4": (hccl.HcclAllReduce(good, out, 8, FP32, 4, comm, None), PARA),
        "INT128 reduction": (hccl.HcclAllReduce(good, out, 2, 12, SUM, comm, None), NOT_SUPPORT),
        "null comm": (hccl.HcclAllReduce(good, out, 8, FP32, SUM, None, None), PTR),
        "destroyed stream": (hccl.HcclAllReduce(good, out, 8, FP32, SUM, comm, 0xDEAD), PARA),
        "root out of range": (hccl.HcclBroadcast(good, 8, FP32, 1, comm, None), PARA),
        "send to itself": (hccl.HcclSend(good, 8, FP32, 0, comm, None), PARA),
        "recv from rank 5": (hccl.HcclRecv(good, 8, FP32, 5, comm, None), PARA),
        "gather recv too small": (hccl.HcclAllGather(good, out, 9, FP32, comm, None), PARA),
        "alltoall counts differ": (hccl.HcclAlltoAll(good, 4, FP32, out, 2, FP32, comm, None), PARA),
        "alltoall types differ": (hccl.HcclAlltoAll(good, 4, FP32, out, 4, 2, comm, None), PARA),
        "alltoall in place": (hccl.HcclAlltoAll(good, 4, FP32, good, 4, FP32, comm, None), PARA),
        "alltoallv null counts": (hccl.HcclAlltoAllV(good, None, [0], FP32, out, [1], [0], FP32, comm, None), PTR),
        "alltoallv 2 counts": (hccl.HcclAlltoAllV(good, [1, 1], [0, 1], FP32, out, [1], [0], FP32, comm, None), PARA),
        "batch null": (hccl.HcclBatchSendRecv(None, 0, comm, None), PTR),
        "batch itemNum": (hccl.HcclBatchSendRecv([], 1, comm, None), PARA),
        "batch item type": (hccl.HcclBatchSendRecv([(0, good, 8, FP32, 0)], 1, comm, None), PARA),
    }
    wrong = {k: v for k, v in cases.items() if v[0] != v[1]}
    assert not wrong, wrong
    other_device = acl.rt.set_device(1)
    elsewhere, _ = acl.rt.malloc(32, 0)
    acl.rt.set_device(0)
    assert other_device == OK
    assert hccl.HcclAllReduce(elsewhere, out, 8, FP32, SUM, comm, None) == PARA
    assert "device 1" in hccl.last_error_message()
    assert hccl.HcclBatchSendRecv([], 0, comm, None) == OK


# ----------------------------------------------------------------------------- rank tables
def _table(path: Path, devices: list[dict[str, str]], **top: str) -> str:
    doc = {"status": "completed", "version": "1.0", "server_count": "1", **top}
    doc["server_list"] = [{"server_id": "10.0.0.1", "device": devices}]
    path.write_text(json.dumps(doc))
    return str(path)


def test_rank_table(device: int, tmp_path: Path) -> None:
    one = [{"device_id": "0", "device_ip": "192.168.0.1", "rank_id": "0"}]
    comm, ret = hccl.HcclCommInitClusterInfo(_table(tmp_path / "ok.json", one), 0)
    assert ret == OK, hccl.last_error_message()
    assert hccl.HcclGetCommName(comm) == ("hccl_world_group", OK)
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "ok.json", one), 0) == (None, PARA), "initialised twice"
    assert hccl.HcclCommDestroy(comm) == OK
    again, ret = hccl.HcclCommInitClusterInfo(_table(tmp_path / "ok.json", one), 0)
    assert ret == OK and hccl.HcclCommDestroy(again) == OK
    assert hccl.HcclCommInitClusterInfo(str(tmp_path / "missing.json"), 0) == (None, 10)
    (tmp_path / "bad.json").write_text("{not json")
    assert hccl.HcclCommInitClusterInfo(str(tmp_path / "bad.json"), 0) == (None, PARA)
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "s.json", one, status="running"), 0) == (None, PARA)
    twice = [*one, {"device_id": "1", "device_ip": "192.168.0.2", "rank_id": "0"}]
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "d.json", twice), 0) == (None, PARA)
    number = [{"device_id": 0, "device_ip": "192.168.0.1", "rank_id": "0"}]
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "n.json", number), 0) == (None, PARA)
    count = _table(tmp_path / "c.json", one, server_count="2")
    assert hccl.HcclCommInitClusterInfo(count, 0) == (None, PARA)
    other = [{"device_id": "3", "device_ip": "192.168.0.1", "rank_id": "0"}]
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "o.json", other), 0) == (None, PARA), "device 0 is set"
    assert hccl.HcclCommInitClusterInfo(_table(tmp_path / "ok.json", one), 1) == (None, PARA)
    assert hccl.HcclCommInitClusterInfo(None, 0) == (None, PTR)


# ----------------------------------------------------------------------------- MC2 in a world of one
def test_mc2_in_a_world_of_one_is_the_single_operators(comm: object) -> None:
    name, _ = hccl.HcclGetCommName(comm)
    rng = np.random.default_rng(5)
    x1, x2 = rng.uniform(-1, 1, (5, 16)).astype(np.float16), rng.uniform(-1, 1, (16, 3)).astype(np.float16)
    bias, x3 = rng.uniform(-1, 1, 3).astype(np.float16), rng.uniform(-1, 1, (5, 3)).astype(np.float16)
    attrs = {"reduceOp": "sum", "commTurn": 0, "streamMode": 1}
    addmm = eager.run("Addmm", self=bias, mat1=x1, mat2=x2, beta=1, alpha=1, cubeMathType=0)["out"]
    for group in (name, SELF_GROUP_NAME):
        got = eager.run("MatmulAllReduce", x1=x1, x2=x2, bias=bias, group=group, **attrs)["output"]
        assert got.tobytes() == addmm.tobytes()
        got = eager.run("MatmulAllReduceV2", x1=x1, x2=x2, bias=bias, x3=x3, group=group, **attrs)["output"]
        assert got.tobytes() == eager.run("Add", self=addmm, other=x3, alpha=1)["out"].tobytes()
    big1, big2 = rng.uniform(-1, 1, (4, 256)).astype(np.float16), rng.uniform(-1, 1, (256, 2)).astype(np.float16)
    mm = eager.run("Mm", self=big1, mat2=big2, cubeMathType=0)["out"]
    res = eager.run("AllGatherMatmul", x1=big1, x2=big2, bias=None, group=name, gatherIndex=0, commTurn=0, streamMode=1)
    assert res["gatherOut"].tobytes() == big1.tobytes() and res["output"].tobytes() == mm.tobytes()
    got = eager.run("MatmulReduceScatter", x1=big1, x2=big2, bias=None, group=name, **attrs)["output"]
    assert got.tobytes() == mm.tobytes()


def test_mc2_group_must_name_a_live_communicator(device: int) -> None:
    info, _ = hccl.HcclGetRootInfo()
    comm, _ = hccl.HcclCommInitRootInfo(1, info, 0)
    name, _ = hccl.HcclGetCommName(comm)
    x1, x2 = np.ones((2, 4), np.float16), np.ones((4, 2), np.float16)
    attrs = {"x1": x1, "x2": x2, "bias": None, "reduceOp": "sum", "commTurn": 0, "streamMode": 1}
    eager.run("MatmulAllReduce", group=name, **attrs)
    hccl.HcclCommDestroy(comm)
    for group in (name, "nobody", "x" * 128):
        with pytest.raises(AclnnError) as exc:
            eager.run("MatmulAllReduce", group=group, **attrs)
        assert exc.value.code == 161002, group


def test_capabilities_name_the_engine() -> None:
    caps = acl_core.get_backend("reference").capabilities()
    assert caps.collective_engine == "mpi" and caps.collective_max_ranks >= 1
    assert acl_core.get_backend("reference").collectives is not None


@pytest.mark.slow
def test_acl_core_bench_runs_the_collective_benchmark_on_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "acl_core", "bench", "--collectives", "2", "--max-bytes", "512", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    rows = [row for op in report["collectives"].values() for row in op]
    assert report["backend"] == "reference" and report["ranks"] == 2 and "# all_reduce" in done.stdout
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"} <= set(report["collectives"])
    assert rows and all(row["wrong"] == 0 and row["busbw_GBps"] >= 0 for row in rows)
