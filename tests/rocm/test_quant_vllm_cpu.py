"""The quantisation operators vllm-ascend reaches, on the rocm backend, on the CPU (kernel emulator).

Every spec sample of the ten ops (the V1 forms through their V2's kernels) runs in the g++ kernel
emulator and is compared byte for byte with the reference (ClippedSwiglu, whose float32 sigmoid is
the device's, under its ulp class), contiguous and through padded (offset,
strided) and transposed input views with guarded outputs. Launch counts and the kernels' FLOAT32
arithmetic are checked on the fake provider and on hand-computed cases, and the programs that use
stream-ordered temporaries replay bit for bit under stream capture.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.quant_vllm import SPECS
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.quant_vllm import OPS
from tests.rocm.against_reference import assert_matches_reference
from tests.rocm.capture_harness import OpCall, compare_replay
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.test_quant_cpu import compare

ALL = [s.name for s in SPECS]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, FakeProvider]:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    return backend, provider


def test_rocm_claims_every_op_of_the_family(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    assert set(ALL) <= set(backend.capabilities().ops)
    assert set(OPS) < set(ALL)  # the V1 forms are claimed through their V2's kernels


@pytest.mark.parametrize("op", ALL)
def test_every_sample_matches_the_reference(emulated: Backend, reference: Backend, op: str) -> None:
    """Byte for byte, but ClippedSwiglu (float32 expf on the device): under its ulp class."""
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(11)))
    assert samples
    for sample in samples:
        if op == "ClippedSwiglu":
            for layout in ("contiguous", "padded", "transposed"):
                assert_matches_reference(emulated, reference, op, dict(sample.args), layout, sample.note)
        else:
            compare(emulated, reference, op, sample.args, sample.note)


def test_one_launch_per_call_without_groups(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, provider = fake
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (4, 256)).astype(np.float16)
    provider.launches.clear()
    eager.run("DynamicBlockQuant", backend, x=x, minScale=0.0, dstType=2, rowBlockSize=1, colBlockSize=128)
    assert len(provider.launches) == 1
    provider.launches.clear()
    counts = np.array([1, 2], np.int64)
    eager.run(
        "ClippedSwiglu",
        backend,
        x=x,
        groupIndexOptional=counts,
        dim=-1,
        alpha=1.7,
        limit=7.0,
        bias=1.0,
        interleaved=False,
    )
    assert provider.launches[0].name == "acl_quant_group_ends"
    assert len(provider.launches) == 2


def test_dynamic_block_quant_hand_computed(emulated: Backend) -> None:
    # one block of [1, 2, -4, 0.5]: scale = 4 / 127; y = round(x * 127 / 4) -> [32, 64, -127, 16]
    x = np.array([[1.0, 2.0, -4.0, 0.5]], np.float32)
    args = {"minScale": 0.0, "dstType": 2, "rowBlockSize": 1, "colBlockSize": 128, "dstTypeMax": 0.0}
    got = eager.run("DynamicBlockQuantV2", emulated, x=x, **args)
    np.testing.assert_array_equal(got["yOut"], [[32, 64, -127, 16]])
    assert got["scaleOut"].tolist() == [[np.float32(4.0) / np.float32(127.0)]]


def test_quantize_adds_the_zero_point_before_rounding(emulated: Backend) -> None:
    # 2.5 + 1 = 3.5 -> 4 (half to even after the zero point), not round(2.5) + 1 = 3
    x = np.array([2.5, -2.5], np.float32)
    args = {"scales": np.ones(1, np.float32), "zeroPoints": np.ones(1, np.int32), "dtype": D.ACL_INT8, "axis": 0}
    got = eager.run("Quantize", emulated, x=x, **args)
    np.testing.assert_array_equal(got["out"], [4, -2])


def test_trans_quant_param_bits(emulated: Backend) -> None:
    got = eager.run(
        "TransQuantParamV2", emulated, scale=np.array([1.0], np.float32), offset=np.array([-3.0], np.float32)
    )
    word = int(got["out"][0])
    assert word & 0xFFFFFFFF == 0x3F800000 and (word >> 46) & 1 == 1
    assert (word >> 37) & 0x1FF == (-3) & 0x1FF


def test_programs_with_temporaries_replay_bit_for_bit_under_capture(emulated: RocmBackend) -> None:
    """Group ends and FlatQuant's products live in stream-ordered temporaries: a captured replay equals eager."""
    rng = np.random.default_rng(3)
    x = rng.integers(-500, 500, (6, 32)).astype(np.int32)
    dsq = {"x": x, "weightScaleOptional": rng.uniform(1e-3, 1e-2, 32).astype(np.float32)}
    dsq |= {"groupIndexOptional": np.array([2, 3], np.int64), "activateLeft": True, "quantModeOptional": "dynamic"}
    flat = {"x": rng.uniform(-2, 2, (3, 4, 8)).astype(np.float16), "clipRatio": 1.0}
    flat |= {"kroneckerP1": rng.uniform(-1, 1, (4, 4)).astype(np.float16)}
    flat |= {"kroneckerP2": rng.uniform(-1, 1, (8, 8)).astype(np.float16)}
    swiglu = {"x": rng.uniform(-9, 9, (5, 16)).astype(np.float32), "groupIndexOptional": np.array([3], np.int64)}
    swiglu |= {"dim": -1, "alpha": 1.702, "limit": 7.0, "bias": 1.0, "interleaved": True}
    calls = [OpCall(emulated, "DequantSwigluQuant", dsq), OpCall(emulated, "FlatQuant", flat)]
    calls.append(OpCall(emulated, "ClippedSwiglu", swiglu))
    stream = emulated.runtime.create_stream()
    try:
        graph = compare_replay(calls, stream)
        emulated.driver.graph_destroy(graph)
    finally:
        for c in calls:
            c.free()
        emulated.runtime.destroy_stream(stream)


def test_flat_quant_slices_past_shared_memory_take_the_two_step_path(
    emulated: Backend, reference: Backend, fake: tuple[RocmBackend, FakeProvider]
) -> None:
    """N1 * N2 = 6,144 > 5,632: x @ P2 through a double temporary, then P1 @ x' per slice (two launches)."""
    rng = np.random.default_rng(9)
    x = rng.uniform(-2, 2, (2, 64, 96)).astype(np.float16)
    args = {"x": x, "kroneckerP1": rng.uniform(-1, 1, (64, 64)).astype(np.float16), "clipRatio": 1.0}
    args["kroneckerP2"] = rng.uniform(-1, 1, (96, 96)).astype(np.float16)
    backend, provider = fake
    provider.launches.clear()
    eager.run("FlatQuant", backend, **args)
    assert [launch.name.split("_")[2] for launch in provider.launches] == ["flatright", "flatleft"]
    compare(emulated, reference, "FlatQuant", args, "two-step int32")
    out = {"out": np.zeros(x.shape, "int4"), "quantScale": np.zeros(2, np.float32)}
    compare(emulated, reference, "FlatQuant", args | out, "two-step int4")


def _flat_args(rng: np.random.Generator, m: int, n1: int, n2: int, dtype: Any = np.float16) -> dict[str, Any]:
    x = rng.uniform(-2, 2, (m, n1, n2)).astype(dtype)
    x[m // 2] = 0  # a zero slice: scale 0, codes 0
    args = {"x": x, "kroneckerP1": rng.uniform(-1, 1, (n1, n1)).astype(dtype), "clipRatio": 0.9}
    return args | {"kroneckerP2": rng.uniform(-1, 1, (n2, n2)).astype(dtype)}


@pytest.mark.parametrize(
    ("choice", "shape", "kind"),
    [
        ("auto", (2, 64, 64), "flattile"),
        ("slice", (2, 64, 64), "flatfused"),
        ("simt", (2, 64, 64), "flattile"),
        ("dmma", (2, 64, 64), "flattile"),
        ("dmma16", (2, 64, 64), "flattile"),
        ("dmma", (2, 8, 16), "flatfused"),  # 1 x 2 output tiles cannot feed 8 warps: the per-slice kernel
        ("auto", (2, 64, 96), "flatright"),  # 512 threads: past the simt tile, the two-step path
    ],
)
def test_flat_quant_kernel_choice(
    fake: tuple[RocmBackend, FakeProvider], choice: str, shape: tuple[int, int, int], kind: str
) -> None:
    """ACL_FLATQUANT_KERNEL's choices reach the launches; a token tile opts into its dynamic shared memory."""
    backend, provider = fake
    runner = backend.runners["quant_vllm"]
    runner.forced_flat = choice
    try:
        provider.launches.clear()
        eager.run("FlatQuant", backend, **_flat_args(np.random.default_rng(4), *shape))
    finally:
        runner.forced_flat = None
    assert provider.launches[0].name.split("_")[2] == kind
    if kind == "flattile":
        assert runner.flat_last_path == f"token tile {'dmma16' if choice == 'auto' else choice}"  # fake: NVIDIA
        assert provider.dynamic_shared[provider.launches[0].name] > 48 * 1024  # 64 x 64: about 100 KiB
        assert len(provider.launches) == 1


def test_flat_quant_auto_is_the_f64_warp_product_on_nvidia_only(
    fake: tuple[RocmBackend, FakeProvider], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto`` takes ``dmma16`` on NVIDIA (the fastest on an H100) and the ``simt`` tile elsewhere."""
    backend, provider = fake
    runner = backend.runners["quant_vllm"]
    args = _flat_args(np.random.default_rng(5), 2, 64, 64)
    eager.run("FlatQuant", backend, **args)
    assert runner.flat_last_path == "token tile dmma16"
    monkeypatch.setattr(provider, "platform", "amd")
    eager.run("FlatQuant", backend, **_flat_args(np.random.default_rng(6), 3, 64, 64))
    assert runner.flat_last_path == "token tile simt"


def test_flat_quant_kernel_switch_refuses_unknown_values(fake: tuple[RocmBackend, FakeProvider]) -> None:
    backend, _ = fake
    runner = backend.runners["quant_vllm"]
    runner.forced_flat = "wgmma"
    try:
        with pytest.raises(AclError, match="ACL_FLATQUANT_KERNEL"):
            eager.run("FlatQuant", backend, **_flat_args(np.random.default_rng(4), 2, 8, 16))
    finally:
        runner.forced_flat = None


@pytest.mark.parametrize("choice", ["simt", "dmma", "dmma16"])
def test_flat_quant_token_tiles_match_the_reference(emulated: RocmBackend, reference: Backend, choice: str) -> None:
    """Both token tiles byte for byte: padded dims (24 -> 32, 40 -> 64), bf16, INT4 and INT32 out, blocks
    looping over tokens (a grid of 2 for 5 tokens: the next token's x fetched during the second product)."""
    runner = emulated.runners["quant_vllm"]
    runner.forced_flat, runner.flat_blocks = choice, 2
    rng = np.random.default_rng(12)
    try:
        for shape, dtype in (((5, 24, 40), np.float16), ((3, 16, 32), ml_dtypes.bfloat16)):
            args = _flat_args(rng, *shape, dtype=dtype)
            compare(emulated, reference, "FlatQuant", args, f"{choice} {shape} int32")
            assert runner.flat_last_path == f"token tile {choice}"
            out = {"out": np.zeros(shape, ml_dtypes.int4), "quantScale": np.zeros(shape[0], np.float32)}
            compare(emulated, reference, "FlatQuant", args | out, f"{choice} {shape} int4")
    finally:
        runner.forced_flat, runner.flat_blocks = None, None
