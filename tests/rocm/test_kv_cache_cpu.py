"""The KV-cache family, the rotary versions and ScatterNdUpdate above the provider seam, on the CPU.

Their generated kernels (slot and position checks, the paged scatter, the sequence starts, block-table
check and paged gather, the fused RmsNorm + RoPE block kernel, the cache-fed rotary kernel, and
IndexPutImpl's sort-based apply for ScatterNdUpdate) run in the g++ kernel emulator on host memory:
every sample against the reference under the op's accuracy class, contiguous and transposed, and every
error sample with the reference's code; index values only the device sees are refused at
synchronisation (161002) and leave the caches as they were.
"""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclCoreError, AclnnError
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.ops import kv_cache as kv_ops
from tests.rocm.against_reference import assert_matches_reference

OPS = [
    *kv_ops.OPS,
    "ScatterPaCache",
    "RopeWithSinCosCache",
    "ScatterNdUpdate",
    "InterleaveRope",
    "RotaryPositionEmbeddingV2",
]


def test_the_family_and_its_versions_are_claimed(emulated: RocmBackend) -> None:
    assert set(OPS) <= set(emulated.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    if op == "RotaryPositionEmbeddingV2":  # 60 samples of the base's: its kernel is RotaryPositionEmbedding's
        samples = samples[::6]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed"):
            assert_matches_reference(emulated, reference, op, dict(sample.args), layout, sample.note)


@pytest.mark.parametrize("op", [*kv_ops.OPS, "ScatterPaCache", "ScatterNdUpdate", "InterleaveRope"])
def test_error_samples_give_the_reference_codes(emulated: RocmBackend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.error_samples is not None
    for case in spec.error_samples(np.random.default_rng(1)):
        codes = []
        for backend in (reference, emulated):
            with pytest.raises(AclCoreError) as err:
                eager.run(op, backend, **case.args)
            codes.append(getattr(err.value, "code", None))
        assert codes == [case.code, case.code], f"{op} [{case.note}]: {codes}"


def test_a_refused_slot_leaves_both_caches_as_they_were(emulated: RocmBackend) -> None:
    rng = np.random.default_rng(4)
    key = rng.standard_normal((3, 2, 8)).astype(np.float16)
    kc = rng.standard_normal((2, 4, 2, 8)).astype(np.float16)
    vc = rng.standard_normal((2, 4, 2, 8)).astype(np.float16)
    caches = [eager.to_device(c, emulated) for c in (kc, vc)]
    args = {"key": key, "value": key.copy(), "slotMapping": np.array([0, 8, 1], np.int64)}
    with pytest.raises(AclnnError) as err:
        eager.run("ScatterPaKvCache", emulated, keyCacheRef=caches[0], valueCacheRef=caches[1], **args)
    assert err.value.code == 161002 and "slotMapping" in str(err.value)
    np.testing.assert_array_equal(caches[0].numpy(), kc)
    np.testing.assert_array_equal(caches[1].numpy(), vc)


def test_padding_slots_are_skipped_on_the_device(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    args = {
        "key": rng.standard_normal((5, 1, 16)).astype(np.float32),
        "keyCacheRef": rng.standard_normal((2, 4, 1, 16)).astype(np.float32),
        "slotMapping": np.array([-1, 3, -1, 7, 0], np.int32),
        "value": rng.standard_normal((5, 1, 4)).astype(np.float32),
        "valueCacheRef": rng.standard_normal((2, 4, 1, 4)).astype(np.float32),
    }
    got = eager.run("ScatterPaKvCache", emulated, **args)
    want = eager.run("ScatterPaKvCache", reference, **args)
    for name in ("keyCacheRef", "valueCacheRef"):
        np.testing.assert_array_equal(got[name], want[name])


def test_gather_with_a_bad_block_id_writes_nothing(emulated: RocmBackend) -> None:
    spec = get_spec("GatherPaKvCache")
    assert spec.samples is not None
    args = dict(next(iter(spec.samples(np.random.default_rng(0)))).args)
    tables = args["blockTables"].copy()
    tables[0, 0] = args["keyCache"].shape[0] + 5
    key = eager.to_device(args.pop("keyRef"), emulated)
    before = key.numpy().copy()
    with pytest.raises(AclnnError) as err:
        eager.run("GatherPaKvCache", emulated, **{**args, "blockTables": tables, "keyRef": key})
    assert err.value.code == 161002
    np.testing.assert_array_equal(key.numpy(), before)


def test_scatter_nd_update_keeps_the_last_repeat_on_the_device(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(8)
    var = rng.standard_normal((4, 6)).astype(np.float32)
    idx = rng.integers(0, 4, (30, 1)).astype(np.int64)  # 30 rows onto 4: many repeats
    upd = rng.standard_normal((30, 6)).astype(np.float32)
    got = eager.run("ScatterNdUpdate", emulated, varRef=var, indices=idx, updates=upd)["varRef"]
    want = eager.run("ScatterNdUpdate", reference, varRef=var, indices=idx, updates=upd)["varRef"]
    np.testing.assert_array_equal(got, want)


def _scatter_views(backend: RocmBackend, rng: np.random.Generator, dtype: type, shape: str) -> dict:
    """ScatterPaKvCache's arguments: ``decode`` (Qwen3's k and v of one token, 8 heads of 128, each a view into a
    fused qkv row, as the runner passes them), ``narrow`` (rows of 12: 4 a thread), ``shifted`` (key starting
    one element past an aligned address: a thread per element)."""
    from acl_core.dtypes import from_numpy
    from acl_core.tensor import AclTensor
    from tests.rocm.offset_views import placed

    tokens, heads, width = {"decode": (2, 8, 128), "narrow": (3, 2, 12), "shifted": (3, 2, 16)}[shape]
    blocks, size = 3, 4
    qkv = rng.standard_normal((tokens, 4 * heads, width)).astype(dtype)  # q (2 heads' worth), k, v
    da = placed(backend, qkv, 1 if shape == "shifted" else 0)
    row = 4 * heads * width
    d = from_numpy(qkv.dtype)

    def view(first_head: int) -> AclTensor:
        at = da.offset + first_head * width
        return AclTensor.create(
            (tokens, heads, width), d, (row, width, 1), at, storage_dims=da.storage_dims, data=da.address
        )

    caches = [rng.standard_normal((blocks, size, heads, width)).astype(dtype) for _ in range(2)]
    slots = np.array([5, -1, 0][:tokens] if tokens > 2 else [7, 2], np.int32)
    hold = {"qkv": da}
    key, value = view(2 * heads), view(3 * heads)
    host = {"key": qkv[:, 2 * heads : 3 * heads], "value": qkv[:, 3 * heads :]}
    return {"device": {"key": key, "value": value}, "host": host, "caches": caches, "slots": slots, "hold": hold}


@pytest.mark.parametrize("mode", ["scalar", "vec", "row"])
@pytest.mark.parametrize(
    ("shape", "dtype", "vec"),
    [("decode", "bfloat16", 8), ("decode", "float32", 4), ("narrow", "float16", 4), ("shifted", "bfloat16", 1)],
)
def test_scatter_copies_bit_for_bit_under_each_config(
    emulated: RocmBackend, reference: Backend, mode: str, shape: str, dtype: str, vec: int
) -> None:
    """ACL_KV_SCATTER_CONFIG: ``vec`` moves the widest vector every view allows (16 bytes at decode's bf16 rows, a
    thread per element for a shifted key), ``scalar`` a thread per element; the caches equal the reference's bit
    for bit (a padding slot -1 skipped), k and v views into one fused row."""
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype).type
    runner = emulated.runners["kv_cache"]
    views = _scatter_views(emulated, np.random.default_rng(8), np_dtype, shape)
    runner.forced_scatter = mode
    kernels: list = []
    real_step = runner._step
    runner._step = lambda prog, kernel, *rest: (kernels.append(kernel), real_step(prog, kernel, *rest))[1]
    try:
        key, value = views["device"]["key"], views["device"]["value"]
        assert runner.scatter_vec([(key, key), (value, value)], (key.view_dims[2], value.view_dims[2])) == (
            vec if mode != "scalar" else 1
        )
        got = eager.run(
            "ScatterPaKvCache",
            emulated,
            key=key,
            value=value,
            keyCacheRef=views["caches"][0],
            valueCacheRef=views["caches"][1],
            slotMapping=views["slots"],
        )
    finally:
        runner._step = real_step
        runner.forced_scatter = None
        views["hold"]["qkv"].free()
    assert [k.vec for k in kernels if hasattr(k, "vec")] == [vec if mode != "scalar" else 1]
    assert [k.row for k in kernels if hasattr(k, "row")] == [mode == "row"]
    want = eager.run(
        "ScatterPaKvCache",
        reference,
        key=np.ascontiguousarray(views["host"]["key"]),
        value=np.ascontiguousarray(views["host"]["value"]),
        keyCacheRef=views["caches"][0],
        valueCacheRef=views["caches"][1],
        slotMapping=views["slots"],
    )
    for name in ("keyCacheRef", "valueCacheRef"):
        assert got[name].tobytes() == want[name].tobytes(), f"{mode} {shape} {dtype}: {name}"


@pytest.mark.parametrize("mode", ["vec", "row"])
def test_vec_scatter_refuses_a_bad_slot_and_writes_nothing(emulated: RocmBackend, mode: str) -> None:
    """Under ``vec`` and ``row`` a slot past the cache is still refused (161002) before any vector is written."""
    rng = np.random.default_rng(9)
    kc, vc = (rng.standard_normal((2, 4, 2, 8)).astype(np.float16) for _ in range(2))
    caches = [eager.to_device(c, emulated) for c in (kc, vc)]
    key = rng.standard_normal((2, 2, 8)).astype(np.float16)
    runner = emulated.runners["kv_cache"]
    runner.forced_scatter = mode
    try:
        with pytest.raises(AclnnError) as err:
            eager.run(
                "ScatterPaKvCache",
                emulated,
                key=key,
                value=key.copy(),
                keyCacheRef=caches[0],
                valueCacheRef=caches[1],
                slotMapping=np.array([1, 8], np.int64),
            )
        runner.forced_scatter = "fastest"
        with pytest.raises(AclnnError):
            runner.scatter_mode()
    finally:
        runner.forced_scatter = None
    assert err.value.code == 161002
    np.testing.assert_array_equal(caches[0].numpy(), kc)
    np.testing.assert_array_equal(caches[1].numpy(), vc)
    for c in caches:
        c.free()
