"""The MC2 ops on the rocm backend, one rank on one GPU: each equals its single ops composed by hand.

For every spec sample (fp16 and bf16, with and without bias/x3, empty m or n): the MC2 operator's
outputs must equal, bit for bit, the single operators run one after another -- Mm or Addmm (beta =
alpha = 1) on x1's 2-D view, Add for V2's x3, and the collective through ``from acl_core import
hccl`` (HcclAllReduce / HcclAllGather / HcclReduceScatter) on a communicator of one rank. Padded
and transposed placements (guarded outputs) are checked against the float64 product within a
rounding of the output dtype. The group may also be a communicator's HcclGetCommName.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import acl_core
from acl_core import eager, hccl
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.dtypes import from_numpy
from acl_core.spec.collective import ACL_TO_HCCL
from acl_core.spec.ops import get_spec

pytestmark = pytest.mark.gpu

MC2 = ("MatmulAllReduce", "MatmulAllReduceV2", "AllGatherMatmul", "MatmulReduceScatter")


@pytest.fixture(scope="module")
def b(rocm: Backend) -> Iterator[Backend]:
    """The rocm backend as the process default (the hccl front end uses it), with its collective engine."""
    if rocm.collectives is None:
        pytest.skip(f"no collective engine: {rocm.capabilities().notes.get('collectives')}")
    missing = [op for op in MC2 if op not in rocm.capabilities().ops]
    assert not missing, f"engine present but {missing} not claimed: {rocm.capabilities().notes.get('mc2')}"
    acl_core.use_backend("rocm")
    yield rocm
    acl_core.use_backend(None)


@pytest.fixture(scope="module")
def comm(b: Backend) -> Iterator[Any]:
    info, ret = hccl.HcclGetRootInfo()
    assert ret == 0, hccl.last_error_message()
    handle, ret = hccl.HcclCommInitRootInfo(1, info, 0)
    assert ret == 0, hccl.last_error_message()
    yield handle
    assert hccl.HcclCommDestroy(handle) == 0, hccl.last_error_message()


def _samples(op: str) -> list[Any]:
    spec = get_spec(op)
    assert spec.samples is not None
    return list(spec.samples(np.random.default_rng(0)))


def _collective(b: Backend, comm: Any, kind: str, values: np.ndarray, out_elems: int) -> np.ndarray:
    """One single-op collective of ``values`` (a dense device copy) on the one-rank communicator, back to NumPy."""
    dtype = from_numpy(values.dtype)
    send = eager.to_device(np.ascontiguousarray(values).reshape(-1), b)
    recv = eager.empty((out_elems,), dtype, b)
    code = int(ACL_TO_HCCL[dtype])
    if kind == "all_reduce":
        ret = hccl.HcclAllReduce(send.address, recv.address, values.size, code, hccl.HCCL_REDUCE_SUM, comm)
    elif kind == "all_gather":
        ret = hccl.HcclAllGather(send.address, recv.address, values.size, code, comm)
    else:
        ret = hccl.HcclReduceScatter(send.address, recv.address, out_elems, code, hccl.HCCL_REDUCE_SUM, comm)
    assert ret == 0, hccl.last_error_message()
    return recv.numpy()


def _one(dtype: D) -> tuple[int, D]:
    return (1, dtype)


def composed(b: Backend, comm: Any, op: str, args: dict[str, Any]) -> dict[str, np.ndarray]:
    """The MC2 op's outputs from single operators (Mm/Addmm, Add) and single-op collectives."""
    x1, x2, bias = args["x1"], args["x2"], args.get("bias")
    dt = from_numpy(x1.dtype)
    k, n = x2.shape
    if op == "AllGatherMatmul":
        gathered = _collective(b, comm, "all_gather", x1, x1.size).reshape(x1.shape)
        out = eager.run("Mm", b, self=gathered, mat2=x2, cubeMathType=0)["out"]
        return {"output": out, "gatherOut": gathered}
    rows = x1.reshape(-1, k)
    if bias is not None:
        one = _one(D.ACL_FLOAT)  # Addmm's scalars have no bf16; 1 is exact in any dtype
        local = eager.run("Addmm", b, self=bias, mat1=rows, mat2=x2, beta=one, alpha=one, cubeMathType=0)["out"]
    else:
        local = eager.run("Mm", b, self=rows, mat2=x2, cubeMathType=0)["out"]
    if args.get("x3") is not None:
        local = eager.run("Add", b, self=local, other=args["x3"].reshape(-1, n), alpha=_one(dt))["out"]
    if op == "MatmulReduceScatter":
        return {"output": _collective(b, comm, "reduce_scatter", local, local.size).reshape(local.shape)}
    total = _collective(b, comm, "all_reduce", local, local.size)
    return {"output": total.reshape(*x1.shape[:-1], n)}


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)


def _float64(args: dict[str, Any], op: str) -> np.ndarray:
    """The float64 value the output rounds (NumPy oracle for the non-contiguous placements)."""
    x1, x2 = args["x1"].astype(np.float64), args["x2"].astype(np.float64)
    y = x1.reshape(-1, x1.shape[-1]) @ x2
    if args.get("bias") is not None:
        y = y + args["bias"].astype(np.float64)
    if args.get("x3") is not None:
        y = y + args["x3"].astype(np.float64).reshape(y.shape)
    return y.reshape(*x1.shape[:-1], x2.shape[1])


@pytest.mark.parametrize("op", MC2)
def test_mc2_equals_the_single_ops_composed(b: Backend, comm: Any, op: str) -> None:
    for sample in _samples(op):
        args = dict(sample.args)
        got = eager.run(op, b, guard=True, **args)
        want = composed(b, comm, op, args)
        for name, expected in want.items():
            if name == "gatherOut" and args.get("gatherOut", 0) is None:
                continue
            actual = got[name]
            assert actual.shape == expected.shape, (op, sample.note, name)
            assert np.array_equal(_bits(actual), _bits(expected)), f"{op} {sample.note}: {name} differs in bits"


@pytest.mark.parametrize("layout", ["padded", "transposed"])
@pytest.mark.parametrize("op", MC2)
def test_mc2_on_strided_placements_matches_the_float64_oracle(b: Backend, op: str, layout: str) -> None:
    for sample in _samples(op):
        args = dict(sample.args)
        got = eager.run(op, b, layout=layout, guard=True, **args)
        want = _float64(args, op)
        tol = 1e-2 if args["x1"].dtype.itemsize == 2 and from_numpy(args["x1"].dtype) == D.ACL_BF16 else 2e-3
        np.testing.assert_allclose(
            got["output"].astype(np.float64), want, rtol=tol, atol=tol, err_msg=f"{op} {sample.note} {layout}"
        )
        if op == "AllGatherMatmul" and "gatherOut" in got:
            assert np.array_equal(_bits(got["gatherOut"]), _bits(args["x1"]))


def test_group_by_communicator_name(b: Backend, comm: Any) -> None:
    name, ret = hccl.HcclGetCommName(comm)
    assert ret == 0 and name
    sample = _samples("MatmulAllReduce")[0]
    args = {**sample.args, "group": name}
    got = eager.run("MatmulAllReduce", b, guard=True, **args)["output"]
    assert np.array_equal(_bits(got), _bits(composed(b, comm, "MatmulAllReduce", args)["output"]))


def test_matmul_reduce_scatter_v2_is_its_base_bit_for_bit(b: Backend) -> None:
    assert "MatmulReduceScatterV2" in b.capabilities().ops
    base_names = set(get_spec("MatmulReduceScatter").param_names)
    for sample in _samples("MatmulReduceScatterV2"):
        args = dict(sample.args)
        for mode in ("aicpu", "aiv"):
            got = eager.run("MatmulReduceScatterV2", b, guard=True, **{**args, "commMode": mode})["output"]
            want = eager.run("MatmulReduceScatter", b, guard=True, **{k: v for k, v in args.items() if k in base_names})
            assert np.array_equal(_bits(got), _bits(want["output"])), f"{sample.note} commMode {mode}"
