"""The attention family and Addmm/Baddbmm above the provider seam, on a CPU (host-memory stand-in).

The attention and rotary kernels' arithmetic is mirrored here in NumPy (:func:`_attention_model`,
:func:`_rope_model`) and run on every launch the op code makes, straight from the packed kernel
arguments on host memory; the elementwise instances SwiGlu and Addmm's epilogue use are evaluated
from their planned geometry with :func:`acl_rocm.views.offsets`. Every sample of every claimed op is
then compared with the reference, contiguous and as padded / transposed views, so the layout,
stride, mask, window and per-batch arithmetic is checked without a GPU. The CUDA sources themselves
are compiled with nvcc where it is installed (that they compute the same is the GPU tier's job).
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.matmul import round_to_hf32
from acl_core.spec.ops.versions import SPECS as VERSION_SPECS
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.attention import (
    ATTN_META_LEN,
    ATTN_STRUCT,
    ATTN_THREADS,
    ROPE_META_LEN,
    ROPE_STRUCT,
    AttentionInstance,
    AttentionMeta,
    RopeInstance,
    attention_source,
    rope_source,
)
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.launch import KernelArgs
from acl_rocm.ops.attention import OPS, bnsd_strides, layout_dims, mask_strides, window_bounds
from acl_rocm.ops.elementwise import Planned, Prepared
from acl_rocm.ops.matmul import SCALED_OPS
from acl_rocm.views import Geometry, offsets
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider

_BY_SHORT = {d.short: d for d in D}


# ----------------------------------------------------------------------------- host memory access
def _gather(address: int, dtype: np.dtype, index: np.ndarray) -> np.ndarray:
    """Elements at ``index`` (element offsets, any shape) of a host buffer at ``address``."""
    index = np.asarray(index, dtype=np.int64)
    count = int(index.max()) + 1 if index.size else 0
    flat = np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(address), dtype=dtype)
    return flat[index]


def _scatter(address: int, dtype: np.dtype, index: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` (converted to ``dtype``) at element offsets ``index`` of a host buffer."""
    index = np.asarray(index, dtype=np.int64)
    if not index.size:
        return
    count = int(index.max()) + 1
    flat = np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(address), dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        flat[index] = np.asarray(values, dtype=np.float64).astype(dtype)


def _np(dtype: D) -> np.dtype:
    numpy = dtype.numpy
    assert numpy is not None
    return np.dtype(numpy)


# ----------------------------------------------------------------------------- kernel models
def _gather_model(name: str, grid: tuple[int, int, int], params: int) -> None:
    """The paged-KV gather kernel, mirrored in NumPy: row j of (b, h) from block table[b, j / size] of the pool."""
    from acl_rocm.kernels.attention_paged import MAX_PAGED_BATCH, GatherMeta

    dt = _np(_BY_SHORT[name.split("_")[3]])
    table = (ctypes.c_void_p * 6).from_address(params)
    count = len(GatherMeta.__dataclass_fields__)
    m = GatherMeta(*(ctypes.c_int64 * count).from_address(table[0]))
    lens = list((ctypes.c_int32 * MAX_PAGED_BATCH).from_address(table[1]))
    pool, tab, out, flag = (ctypes.c_void_p.from_address(table[i]).value for i in range(2, 6))
    dims = np.arange(m.d)
    at = (dims >> 4) * m.pd + (dims & 15) * m.pt if m.nz else dims * m.pd
    for r in range(grid[0]):
        j, h, b = r % m.rows, (r // m.rows) % m.nkv, r // (m.rows * m.nkv)
        values = np.zeros(m.d)
        if j < lens[b]:
            blk = int(_gather(tab, np.dtype(np.int32), np.array([b * m.table_step + (j // m.size) * m.table_col]))[0])
            if 0 <= blk < m.blocks:
                values = _gather(pool, dt, blk * m.pb + h * m.ph + (j % m.size) * m.pr + at).astype(np.float64)
            else:
                _scatter(flag, np.dtype(np.int32), np.array([0]), np.array([1]))
        _scatter(out, dt, b * m.ob + h * m.oh + j * m.orow + dims * m.od, values)


def _attention_model(name: str, grid: tuple[int, int, int], params: int) -> None:
    """The attention row kernel, mirrored in NumPy: same strides, masks, window and online softmax tiles."""
    short, head, sink_short = name.split("_")[2], name.split("_")[3], name.split("_")[4]
    dt = _np(_BY_SHORT[short])
    d = int(head[1:])
    table = (ctypes.c_void_p * 12).from_address(params)
    raw = list((ctypes.c_int64 * ATTN_META_LEN).from_address(table[0]))
    scale = ctypes.c_double.from_address(table[1]).value
    q, k, v, pse, mask, out, smax, ssum, lse, sink = (
        ctypes.c_void_p.from_address(table[i]).value for i in range(2, 12)
    )
    m = AttentionMeta(*(tuple(raw[4 * i : 4 * i + 4]) for i in range(9)), *raw[36:])  # type: ignore[arg-type]
    dims = np.arange(d)
    for b in range(grid[2]):
        for h in range(grid[1]):
            for i in range(grid[0]):
                o_index = b * m.o[0] + h * m.o[1] + i * m.o[2] + dims * m.o[3]
                lse_index = np.array([b * m.lse[0] + h * m.lse[1] + i * m.lse[2]])
                if i >= m.rows:
                    _scatter(out, dt, o_index, np.zeros(d))
                    if lse:
                        _scatter(lse, np.dtype(np.float32), lse_index, np.array([np.inf]))
                    continue
                qrow = _gather(q, dt, b * m.q[0] + h * m.q[1] + i * m.q[2] + dims * m.q[3]).astype(np.float64)
                hk = h // m.group
                run_max, run_sum, acc = -np.inf, 0.0, np.zeros(d)
                if m.has_sink:  # the sink starts the online softmax: max = sink, sum = 1
                    sink_dt = _np(_BY_SHORT[sink_short])
                    run_max, run_sum = float(_gather(sink, sink_dt, np.array([h * m.sink_step]))[0]), 1.0
                for j0 in range(0, m.kv_len, ATTN_THREADS):
                    j = np.arange(j0, min(j0 + ATTN_THREADS, m.kv_len))
                    keep = np.ones(j.shape, bool)
                    if m.has_mask:
                        row = b * m.mask[0] + h * m.mask[1] + i * m.mask[2]
                        keep &= _gather(mask, np.dtype(np.uint8), row + j * m.mask[3]) == 0
                    if m.has_window:
                        off = j - i - m.shift
                        keep &= (off >= m.win_lo) & (off <= m.win_hi)
                    keys = _gather(k, dt, b * m.k[0] + hk * m.k[1] + j[:, None] * m.k[2] + dims[None] * m.k[3])
                    dot = keys.astype(np.float64) @ qrow
                    if m.has_pse:
                        dot = dot + _gather(pse, dt, b * m.pse[0] + h * m.pse[1] + i * m.pse[2] + j * m.pse[3])
                    score = np.where(keep, scale * dot, -np.inf)
                    new_max = max(run_max, float(score.max(initial=-np.inf)))
                    if new_max == -np.inf:
                        continue
                    p = np.where(keep, np.exp(np.where(keep, score, 0.0) - new_max), 0.0)
                    alpha = 0.0 if run_max == -np.inf else math.exp(run_max - new_max)
                    vals = _gather(v, dt, b * m.v[0] + hk * m.v[1] + j[:, None] * m.v[2] + dims[None] * m.v[3])
                    run_sum = run_sum * alpha + p.sum()
                    run_max = new_max
                    acc = acc * alpha + p @ vals.astype(np.float64)
                _scatter(out, dt, o_index, acc / run_sum if run_sum > 0 else np.zeros(d))
                if smax:
                    eight = np.arange(8)
                    base = b * m.smax[0] + h * m.smax[1] + i * m.smax[2]
                    _scatter(smax, np.dtype(np.float32), base + eight * m.smax[3], np.full(8, run_max))
                    base = b * m.ssum[0] + h * m.ssum[1] + i * m.ssum[2]
                    _scatter(ssum, np.dtype(np.float32), base + eight * m.ssum[3], np.full(8, run_sum))
                if lse:
                    value = run_max + math.log(run_sum) if run_sum > 0 else np.inf
                    _scatter(lse, np.dtype(np.float32), lse_index, np.array([value]))


def _rope_model(name: str, params: int) -> None:
    """The rotary-pair kernel, mirrored in NumPy: its first tensor, then its second (x2 into out2) if any."""
    table = (ctypes.c_void_p * 8).from_address(params)
    x, cs, sn, out = (ctypes.c_void_p.from_address(table[i]).value for i in range(1, 5))
    x2, out2 = (ctypes.c_void_p.from_address(table[i]).value for i in (6, 7))
    _rope_tensor(name, table[0], x, cs, sn, out)
    _rope_tensor(name, table[5], x2, cs, sn, out2)


def _rope_tensor(name: str, meta: int, x: int, cs: int, sn: int, out: int) -> None:
    dt = _np(_BY_SHORT[name.split("_")[2]])
    raw = list((ctypes.c_int64 * ROPE_META_LEN).from_address(meta))
    pairs, shape, strides, half, mode = raw[0], raw[1:4], raw[4:20], raw[20], raw[21]
    if pairs == 0:
        return
    sx, sc, ss, so = (strides[4 * n : 4 * n + 4] for n in range(4))
    idx = np.arange(pairs)
    p, rest = idx % half, idx // half
    a2, rest = rest % shape[2], rest // shape[2]
    a1, a0 = rest % shape[1], rest // shape[1]
    if mode == 1:
        o1 = 2 * p
        o2, i1, i2 = o1 + 1, o1, o1 + 1
    elif mode == 2:
        quarter = half // 2
        o1 = (p // quarter) * half + p % quarter
        o2, i1, i2 = o1 + quarter, o1, o1 + quarter
    elif mode == 3:
        o1, o2, i1, i2 = p, p + half, 2 * p, 2 * p + 1
    else:
        o1, o2, i1, i2 = p, p + half, p, p + half

    def at(st: list[int], col: np.ndarray) -> np.ndarray:
        return a0 * st[0] + a1 * st[1] + a2 * st[2] + col * st[3]

    x1 = _gather(x, dt, at(sx, i1)).astype(np.float64)
    x2 = _gather(x, dt, at(sx, i2)).astype(np.float64)
    c1, c2 = (_gather(cs, dt, at(sc, o)).astype(np.float64) for o in (o1, o2))
    s1, s2 = (_gather(sn, dt, at(ss, o)).astype(np.float64) for o in (o1, o2))
    _scatter(out, dt, at(so, o1), x1 * c1 - x2 * s1)
    _scatter(out, dt, at(so, o2), x2 * c2 + x1 * s2)


def _elementwise_model(planned: Planned) -> None:
    """The elementwise instances this family and Addmm launch, evaluated from their planned geometry."""
    inst = planned.instance
    meta = list(planned.values[0])
    nd, nops = inst.ndim, len(inst.operands)
    shape = tuple(meta[1 : 1 + nd])
    strides = tuple(tuple(meta[1 + nd + k * nd : 1 + nd + (k + 1) * nd]) for k in range(nops))
    geometry = Geometry(shape, strides)
    data: dict[str, np.ndarray] = {}
    for k, op in enumerate(inst.operands):
        pointer = planned.values[1 + k].value or 0
        if op.read:
            data[op.name] = _gather(pointer, _np(op.storage), np.array(offsets(geometry, k))).astype(np.float64)
    scalars = {s.name: planned.values[1 + nops + n].value for n, s in enumerate(inst.scalars)}
    name = inst.ufunc.name
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "SwiGlu":
            a = data["a"]
            result = a / (1.0 + np.exp(-a)) * data["b"]
        elif name == "ScaledAdd":
            result = scalars["alpha"] * data["product"]
            if scalars["beta"] != 0:
                result = result + scalars["beta"] * data["self"]
        elif name in ("Cast", "InplaceCopy"):
            result = data["self" if "self" in data else "src"]
        elif name == "RoundHf32":
            result = round_to_hf32(data["self"].astype(np.float32)).astype(np.float64)
        elif name == "InplaceZero":
            result = np.zeros(geometry.numel)
        else:
            raise AssertionError(f"no model of elementwise {name}")
    k, op = next((k, op) for k, op in enumerate(inst.operands) if op.write)
    _scatter(planned.values[1 + k].value, _np(op.storage), np.array(offsets(geometry, k)), result)


class ExecutingFake(FakeProvider):
    """The fake provider, whose attention and rotary launches run their NumPy models on host memory."""

    def module_function(self, module: object, name: str) -> object:
        assert isinstance(module, str) and f" {name}(" in module
        return (name, module)

    def launch(
        self,
        function: object,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: int,
        params: int,
    ) -> None:
        name, _source = function  # type: ignore[misc]
        if name.startswith("acl_attn_"):
            assert block == (ATTN_THREADS, 1, 1)
            _attention_model(name, grid, params)
        elif name.startswith("acl_rope_"):
            _rope_model(name, params)
        elif name.startswith("acl_paged_gather_"):
            _gather_model(name, grid, params)
        else:
            raise AssertionError(f"unexpected raw launch of {name}")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[tuple[RocmBackend, ExecutingFake]]:
    provider = ExecutingFake(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    # the row kernel is what this module models; the split-KV decode kernel runs on the emulator
    # (tests/rocm/test_gpu_decode_attention.py, ACL_ROCM_EMULATE=1)
    backend.attention.path_override = "kernel"
    ew = backend.elementwise
    ew.enqueue = lambda planned, stream: None if planned is None else _elementwise_model(planned)  # type: ignore[method-assign]
    launch_prepared = ew.launch_prepared

    def prepare(planned: Planned | None) -> Prepared | None:  # memoized launches carry their plan to the model
        return None if planned is None else Prepared(("model", planned), planned.config, KernelArgs([]))

    def launch(prepared: Prepared | None, stream: int) -> None:
        if prepared is not None and isinstance(prepared.function, tuple) and prepared.function[0] == "model":
            _elementwise_model(prepared.function[1])
        else:
            launch_prepared(prepared, stream)

    ew.prepare = prepare  # type: ignore[method-assign]
    ew.launch_prepared = launch  # type: ignore[method-assign]
    yield backend, provider


@pytest.fixture(scope="module")
def reference() -> Backend:
    import acl_core

    return acl_core.get_backend("reference")


# ----------------------------------------------------------------------------- arithmetic
def test_layout_strides_follow_each_layout() -> None:
    x = np.zeros((2, 3, 4, 5))  # B=2, N=4, S=3, D=5 as BSND
    bsnd = tuple(s // 8 for s in x.strides)
    assert layout_dims(x.shape, "BSND", 4) == (2, 4, 3, 5)
    assert bnsd_strides(bsnd, "BSND", 5) == (60, 5, 20, 1)
    bsh = (60, 20, 1)  # [2, 3, 20] with H = 4 heads of 5
    assert layout_dims((2, 3, 20), "BSH", 4) == (2, 4, 3, 5)
    assert bnsd_strides(bsh, "BSH", 5) == (60, 5, 20, 1)  # the same element walk as BSND
    assert layout_dims((3, 2, 20), "SBH", 4) == (2, 4, 3, 5)
    assert bnsd_strides((40, 20, 1), "SBH", 5) == (20, 5, 40, 1)
    assert bnsd_strides((60, 15, 5, 1), "BNSD", 5) == (60, 15, 5, 1)
    with pytest.raises(ValueError):
        bnsd_strides((1, 1, 1), "TND", 5)


def test_layout_strides_address_the_same_elements_as_numpy() -> None:
    rng = np.random.default_rng(0)
    bnsd = rng.normal(size=(2, 4, 3, 5))
    for layout in ("BSH", "SBH", "BSND", "BNSD"):
        laid = np.ascontiguousarray(
            {
                "BNSD": bnsd,
                "BSND": bnsd.transpose(0, 2, 1, 3),
                "BSH": bnsd.transpose(0, 2, 1, 3).reshape(2, 3, 20),
                "SBH": bnsd.transpose(0, 2, 1, 3).reshape(2, 3, 20).transpose(1, 0, 2),
            }[layout]
        )
        st = bnsd_strides(tuple(s // 8 for s in laid.strides), layout, 5)
        b, n, s, d = np.meshgrid(*map(np.arange, (2, 4, 3, 5)), indexing="ij")
        flat = laid.reshape(-1)
        np.testing.assert_array_equal(flat[b * st[0] + n * st[1] + s * st[2] + d * st[3]], bnsd)


def test_mask_strides_broadcast_like_the_reference() -> None:
    assert mask_strides((6, 9), (9, 1)) == (0, 0, 9, 1)
    assert mask_strides((2, 9), (9, 1), decode=True) == (9, 0, 0, 1)
    assert mask_strides((2, 1, 9), (9, 9, 1)) == (9, 0, 0, 1)  # [B,1,S] decode: row dim of size 1
    assert mask_strides((2, 1, 5, 16), (80, 80, 16, 1)) == (80, 0, 16, 1)
    assert mask_strides((1, 2, 5, 8), (80, 40, 8, 1)) == (0, 40, 8, 1)


@pytest.mark.parametrize(
    ("mode", "sq", "skv", "pre", "nxt"),
    [(0, 7, 7, 3, 1), (2, 5, 8, 0, 0), (3, 5, 8, 0, 0), (3, 8, 5, 0, 0), (4, 9, 7, 2, 1), (4, 6, 6, 1, 2)],
)
def test_window_bounds_reproduce_sparse_keep(mode: int, sq: int, skv: int, pre: int, nxt: int) -> None:
    from acl_reference.kernels import all_kernels

    all_kernels()  # load every family first: importing one family alone would leave the registry partial
    from acl_core.spec.ops.attention import sparse_keep

    bounds = window_bounds(mode, sq, skv, pre, nxt, skv - sq)
    assert bounds is not None
    lo, hi, shift = bounds
    off = np.arange(skv)[None, :] - np.arange(sq)[:, None] - shift
    np.testing.assert_array_equal((off >= lo) & (off <= hi), sparse_keep(mode, sq, skv, pre, nxt, skv - sq))
    assert window_bounds(1, sq, skv, pre, nxt, 0) is None


# ----------------------------------------------------------------------------- generated sources
def test_sources_declare_the_packed_meta() -> None:
    assert ATTN_STRUCT.count("long long") == 20 and ATTN_META_LEN == 47
    assert ROPE_STRUCT.count("long long") == 8 and ROPE_META_LEN == 22
    src = attention_source(AttentionInstance(D.ACL_BF16, 64))
    inst = AttentionInstance(D.ACL_BF16, 64)
    assert f"__launch_bounds__(THREADS) {inst.kernel_name}(" in src and "#define HEAD_DIM 64" in src
    assert "typedef float acc_t;" in src and "acl_b2f(" in src and "acl_f2b(" in src
    assert "typedef double acc_t;" in attention_source(AttentionInstance(D.ACL_FLOAT, 8))
    assert AttentionInstance(D.ACL_FLOAT16, 8).kernel_name != AttentionInstance(D.ACL_FLOAT16, 16).kernel_name
    rope = rope_source(RopeInstance(D.ACL_FLOAT16))
    assert "acl_h2f(" in rope and "const unsigned short* x," in rope  # x may alias out (in place)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_sources_compile_with_nvcc(tmp_path: Path) -> None:
    sources = [attention_source(AttentionInstance(dt, 8)) for dt in (D.ACL_FLOAT, D.ACL_FLOAT16)]
    sources.append(rope_source(RopeInstance(D.ACL_BF16)))
    for n, src in enumerate(sources):
        path = tmp_path / f"k{n}.cu"
        path.write_text(src)
        done = subprocess.run(
            ["nvcc", "-ptx", "-arch=sm_90", *compile_options(32), str(path), "-o", str(tmp_path / f"k{n}.ptx")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr


# ----------------------------------------------------------------------------- ops on the fake
VERSIONS = tuple(s.name for s in VERSION_SPECS if s.family == "attention")  # they run their base's launches
CLAIMED = (*OPS, *SCALED_OPS, "InplaceAddmm", "InplaceBaddbmm", *VERSIONS)


def test_claims(fake: tuple[RocmBackend, ExecutingFake]) -> None:
    backend, _ = fake
    assert set(CLAIMED) <= set(backend.capabilities().ops)
    assert "FlashAttentionVarLenScore" in CLAIMED


def _samples(op: str) -> list[Any]:
    spec = get_spec(op)
    assert spec.samples is not None
    return list(spec.samples(np.random.default_rng(11)))


@pytest.mark.parametrize("op", CLAIMED)
def test_every_sample_matches_the_reference(
    fake: tuple[RocmBackend, ExecutingFake], reference: Backend, op: str
) -> None:
    backend, _ = fake
    samples = _samples(op)
    assert samples
    for n, sample in enumerate(samples):
        expected = eager.run(op, reference, op_args=sample.args)
        layouts = ("contiguous", "padded", "transposed") if n % 4 == 0 else ("contiguous",)
        for layout in layouts:
            got = eager.run(op, backend, layout=layout, guard=True, op_args=sample.args)
            assert got.keys() == expected.keys()
            for name, value in expected.items():
                if name == "softmaxOutOut":
                    continue
                try:
                    assert got[name].dtype == value.dtype
                    assert_close(got[name], value)
                except AssertionError as exc:
                    raise AssertionError(f"{op} [{sample.note}] {layout}: {name}\n{exc}") from None


def test_inference_batches_with_different_caches_launch_per_batch(fake: tuple[RocmBackend, ExecutingFake]) -> None:
    backend, provider = fake
    launches: list[tuple[int, int, int]] = []
    real = provider.launch

    def spy(function: object, grid: Any, *rest: Any) -> None:
        launches.append(grid)
        real(function, grid, *rest)

    provider.launch = spy  # type: ignore[method-assign]
    ifa = _samples("IncreFlashAttention")
    per_batch = next(s for s in ifa if "one tensor per batch" in s.note)
    eager.run("IncreFlashAttention", backend, **per_batch.args)
    assert launches == [(1, 4, 1), (1, 4, 1)]
    launches.clear()
    one = next(s for s in ifa if "BNSD one cache tensor" in s.note)
    eager.run("IncreFlashAttention", backend, **one.args)
    assert launches == [(1, 2, 2)]  # one launch: rows x heads x batches


def test_apply_rotary_pos_emb_rotates_query_and_key_in_one_launch(fake: tuple[RocmBackend, ExecutingFake]) -> None:
    backend, provider = fake
    reference = __import__("acl_core").get_backend("reference")
    rng = np.random.default_rng(9)
    q, k = (rng.standard_normal((2, 3, n, 64)).astype(np.float16) for n in (4, 2))
    cos, sin = (rng.standard_normal((2, 3, 1, 64)).astype(np.float16) for _ in range(2))
    args = {"queryRef": q, "keyRef": k, "cos": cos, "sin": sin, "layout": 1}
    launches: list[object] = []
    real = provider.launch

    def spy(function: object, *rest: Any) -> None:
        launches.append(function)
        real(function, *rest)

    provider.launch = spy  # type: ignore[method-assign]
    got = eager.run("ApplyRotaryPosEmb", backend, op_args=args)
    assert len(launches) == 1
    want = eager.run("ApplyRotaryPosEmb", reference, op_args=args)
    for name in ("queryRef", "keyRef"):
        assert_close(got[name], want[name])


def test_addmm_runs_one_gemm_and_one_epilogue(fake: tuple[RocmBackend, ExecutingFake]) -> None:
    backend, provider = fake
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (4, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (6, 3)).astype(np.float32)
    s = np.full((3,), np.nan, np.float32)
    got = eager.run("Addmm", backend, self=s, mat1=a, mat2=b, beta=0, alpha=2, cubeMathType=0)["out"]
    np.testing.assert_allclose(got, 2 * (a.astype(np.float64) @ b), rtol=1e-6, atol=1e-6)  # beta 0: NaN ignored
    assert len(provider.gemms) == 1
    bf = ml_dtypes.bfloat16
    x = rng.uniform(-1, 1, (2, 4, 6)).astype(bf)
    y = rng.uniform(-1, 1, (2, 6, 3)).astype(bf)
    z = rng.uniform(-1, 1, (4, 1)).astype(bf)
    got = eager.run("Baddbmm", backend, self=z, batch1=x, batch2=y, beta=0.5, alpha=1.5, cubeMathType=0)["out"]
    exact = 1.5 * np.matmul(x.astype(np.float64), y.astype(np.float64)) + 0.5 * z.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=1e-2, atol=1e-2)
