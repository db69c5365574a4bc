"""Paged KV (page attention) of IncreFlashAttentionV3/V4 and FusedInferAttentionScore on rocm.

A paged call's key/value are block pools read through ``blockTable`` (:mod:`acl_rocm.kernels.attention_paged`).
Every path starts from :func:`paged_setup`: the pools' strides and a dense stand-in for key/value (a
tensor in the query's layout of the batches' longest length, address still unknown). Decode then runs
the decode kernels on the pool directly (``ACL_PAGED_DECODE=direct``, where the decode kernels address
it) or on a gathered temporary (``gather``); prefill gathers into stream-ordered temporaries and runs
the dense row / flash kernels on them (capture-safe: no host round trip, nothing allocated but
stream-ordered memory). A table entry outside the pool sets the run's check flag: 161002 at
synchronisation, its rows read as zeros.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from acl_core.backend import Launch
from acl_core.tensor import AclTensor
from acl_rocm.kernels.attention_paged import (
    GATHER_THREADS,
    MAX_PAGED_BATCH,
    GatherMeta,
    PoolStrides,
    gather_name,
    gather_source,
    pool_strides,
)
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.attention_decode import DecodeCall, PagedDecode
from acl_rocm.ops.program import FLAG, Program, Step, Temp

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

REPORT = "blockTable holds a block index outside the key/value pool ([0, blocks)); its rows read as zeros"


@dataclass(frozen=True)
class PagedSetup:
    """A paged call as the dense paths see it: the pools, their strides, and the dense stand-ins."""

    key: AclTensor
    value: AclTensor
    table: AclTensor
    ks: PoolStrides
    vs: PoolStrides
    dense_k: AclTensor
    dense_v: AclTensor
    size: int
    rows: int
    lengths: tuple[int, ...]
    layout: str
    """The dense stand-ins' layout (the query's input layout)."""
    nkv: int
    d: int


def _dense(layout: str, b: int, nkv: int, rows: int, d: int, like: AclTensor) -> AclTensor:
    """A contiguous [B, Nkv, rows, D] cache in ``layout`` (data 0: its address is the run's temporary)."""
    dims = {"BNSD": (b, nkv, rows, d), "BSND": (b, rows, nkv, d), "BSH": (b, rows, nkv * d)}[layout]
    return AclTensor.create(dims, like.dtype)


def _one(value: object) -> AclTensor:
    if isinstance(value, tuple):
        assert len(value) == 1
        value = value[0]
    assert isinstance(value, AclTensor)
    return value


def paged_setup(launch: Launch) -> PagedSetup:
    """Read a paged call: pools, table, strides, the longest length, and the dense stand-ins."""
    args, plan = launch.args, launch.plan
    layout, nkv = plan["layout"], plan["nkv"]
    in_layout = "BNSD" if layout == "BNSD_BSND" else layout
    key, value, table = _one(args["key"]), _one(args["value"]), args["blockTable"]
    assert isinstance(table, AclTensor)
    q = args["query"]
    assert isinstance(q, AclTensor)
    form, size = plan["kv_form"], int(plan["page"])
    ks = pool_strides(form, key.view_dims, key.strides, nkv)
    vs = pool_strides(form, value.view_dims, value.strides, nkv)
    lengths = tuple(int(n) for n in plan["act_kv"])
    rows = max(lengths, default=0)
    d = q.view_dims[-1] if in_layout != "BSH" else q.view_dims[-1] // plan["nq"]
    b = len(lengths)
    return PagedSetup(
        key, value, table, ks, vs, _dense(in_layout, b, nkv, rows, d, q), _dense(in_layout, b, nkv, rows, d, q),
        size, rows, lengths, in_layout, nkv, d,
    )  # fmt: skip


def paged_refusal(setup: PagedSetup) -> str | None:
    """Why rocm cannot run this paged call (None when it can)."""
    if len(setup.lengths) > MAX_PAGED_BATCH:
        return f"batch {len(setup.lengths)} (paged lengths travel as kernel arguments for up to {MAX_PAGED_BATCH})"
    return None


def gather_plan(backend: RocmBackend, setup: PagedSetup, prog: Program) -> tuple[Temp, Temp]:
    """Append the K and V gathers to ``prog`` (checking the table): the dense caches' temporaries."""
    from acl_rocm.ops.attention import bnsd_strides

    dtype = setup.key.dtype
    item = dtype.info.storage_bits // 8
    b = len(setup.lengths)
    temps = (prog.temp(setup.dense_k.numel * item), prog.temp(setup.dense_v.numel * item))
    if setup.rows == 0 or b == 0:
        return temps
    fn = backend.function(gather_source(dtype), gather_name(dtype))
    os = bnsd_strides(setup.dense_k.strides, setup.layout, setup.d)
    lens = KernelArgs.index_array(list(setup.lengths) + [0] * (MAX_PAGED_BATCH - b), "int")
    table_at = ctypes.c_void_p(setup.table.data + setup.table.offset * 4)
    for pool, st, temp in ((setup.key, setup.ks, temps[0]), (setup.value, setup.vs, temps[1])):
        meta = GatherMeta(
            nkv=setup.nkv,
            rows=setup.rows,
            d=setup.d,
            size=setup.size,
            blocks=pool.view_dims[0],
            table_step=setup.table.strides[0],
            table_col=setup.table.strides[1],
            pb=st.block,
            ph=st.head,
            pr=st.row,
            pd=st.dim,
            nz=st.nz,
            pt=st.tile,
            ob=os[0],
            oh=os[1],
            orow=os[2],
            od=os[3],
        )
        values = (
            KernelArgs.index_array(meta.values(), "long long"),
            lens,
            ctypes.c_void_p(pool.data + pool.offset * item),
            table_at,
            temp,
            FLAG,
        )
        grid = (b * setup.nkv * setup.rows, 1, 1)
        prog.steps.append(Step(fn, LaunchConfig(grid, (GATHER_THREADS, 1, 1)), values))
    prog.report = REPORT
    return temps


def with_dense(launch: Launch, setup: PagedSetup, k_data: int = 0, v_data: int = 0) -> Launch:
    """``launch`` with the dense stand-ins (at ``k_data`` / ``v_data``) as key and value, paging off."""
    args: dict[str, Any] = {
        **launch.args,
        "key": (replace(setup.dense_k, data=k_data),),
        "value": (replace(setup.dense_v, data=v_data),),
    }
    return replace(launch, args=args, plan={**launch.plan, "page": 0, "kv_form": "dense"})


def direct_call(call: DecodeCall, setup: PagedSetup, per_tile: bool = False) -> DecodeCall | None:
    """The decode call that reads the pools through the table (None: an NZ pool with non-contiguous tiles).

    ``per_tile``: one table entry a warp's tile where the tile never crosses a page (``ACL_PAGED_DECODE=tile``).
    """
    ks, vs = setup.ks, setup.vs
    if ks.nz and (ks.tile != 1 or vs.tile != 1):
        return None
    page = PagedDecode(setup.size, setup.table, setup.key.view_dims[0], bool(ks.nz), ks.tile, per_tile)
    return replace(
        call,
        k=setup.key,
        v=setup.value,
        ks=(ks.block, ks.head, ks.row, ks.dim),
        vs=(vs.block, vs.head, vs.row, vs.dim),
        page=page,
    )
