"""MoeGatingTopK(Backward), MoeTokenPermute and MoeTokenUnpermute above the provider seam, on the CPU kernel emulator.

Every sample runs contiguous and transposed against the reference; the ranking arithmetic
(``acl_rank_exp``) is compared with the reference's ``ranking_exp`` bit for bit; rows longer than a
sort tile take the merge path; index values the device refuses surface as 161002 at synchronisation.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_reference.kernels.moe import ranking_exp
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.moe import GatingTopKPrep, RowGather, ranking_exp_source
from acl_rocm.kernels.prelude import PRELUDE
from tests.rocm.against_reference import compare_run
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.kernel_emulator import SHIM, available
from tests.rocm.moe_routing_cases import ROUTING_OPS

EXACT = (
    "expertIdxOut",
    "permuteTokensOut",
    "sortedIndicesOut",
    "expandedXOut",
    "expandedRowIdxOut",
    "expandedScaleOut",
)


@pytest.fixture()
def small_tile(emulated: RocmBackend) -> Iterator[RocmBackend]:
    """The emulated backend with 8-element sort tiles (longer sorts take the merge path)."""
    sorter = emulated.runners["moe"].sorter
    sorter.tile = 8
    yield emulated
    sorter.tile = 2048


@pytest.mark.parametrize("op", ROUTING_OPS)
def test_every_sample_matches_the_reference_when_emulated(emulated: RocmBackend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2024)))  # type: ignore[misc]
    assert samples
    for sample in samples:
        for layout in ("contiguous", "transposed"):
            compare_run(emulated, reference, op, dict(sample.args), layout, sample.note, exact=EXACT)


def test_ranking_exp_is_the_references_bit_for_bit() -> None:
    reason = available()
    if reason:
        pytest.skip(reason)
    driver = r"""
extern "C" void rank_exp(const double* t, double* out, long n) {
  for (long i = 0; i < n; ++i) out[i] = acl_rank_exp(t[i]);
}
"""
    text = "#define ACL_WARP_SIZE 32\n#define ACL_LANE_MASK_BITS 32\n" + SHIM + PRELUDE + ranking_exp_source() + driver
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    so = build / f"rank-exp-{hashlib.sha1(text.encode()).hexdigest()[:16]}.so"
    if not so.exists():
        src = build / f"rank-exp.{os.getpid()}.cpp"
        src.write_text(text)
        tmp = build / f"rank-exp.{os.getpid()}.so"
        cmd = ["g++", "-std=c++20", "-O0", "-shared", "-fPIC", "-pthread", "-w", str(src), "-o", str(tmp)]
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-3000:]
        tmp.rename(so)
        src.unlink()
    lib = ctypes.CDLL(str(so))
    rng = np.random.default_rng(0)
    t = np.concatenate([rng.uniform(-720, 720, 100000), rng.standard_normal(10000) * 1e-6, [0.0, -0.0, np.nan]])
    t = np.concatenate([t, -np.abs(rng.standard_normal(10000) * 30)])
    out = np.empty_like(t)
    lib.rank_exp(t.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(t.size))
    np.testing.assert_array_equal(out.view(np.int64), ranking_exp(t).view(np.int64))


def test_gating_top_k_near_ties_and_special_rows(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    x[0, 5] = x[0, 9] = x[0, 3]  # ties
    x[1, :] = np.float32(40.0) + np.arange(64, dtype=np.float32) * 2**-18  # sigmoid saturates: rank by x
    x[2, 7], x[3, :] = np.nan, -np.inf
    x[4, 3] = np.inf
    bias = np.zeros(64, np.float32)
    bias[::2] = np.float32(2.0**-30)  # a bias too small to change float32 sigmoids: double keys still see it
    for norm_type in (0, 1):
        for with_bias in (False, True):
            args = {"x": x, "biasOptional": bias if with_bias else None, "k": 6, "kGroup": 3, "groupCount": 8}
            args |= {"groupSelectMode": 1, "renorm": 1, "normType": norm_type, "outFlag": True}
            args |= {"routedScalingFactor": 1.5, "eps": 1e-20}
            compare_run(
                emulated,
                reference,
                "MoeGatingTopK",
                args,
                "contiguous",
                f"norm {norm_type} bias {with_bias}",
                exact=EXACT,
            )


def test_permute_through_the_merge_path(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(8)
    indices = rng.integers(0, 4, (13, 3)).astype(np.int64)  # 39 copies: 5 sort tiles, long runs of equal experts
    tokens = rng.standard_normal((13, 16)).astype(np.float16)  # 32-byte rows: the 16-byte word path
    for num_out in (0, 20, -3):
        args = {"tokens": tokens, "indices": indices, "numOutTokens": num_out, "paddedMode": False}
        for layout in ("contiguous", "transposed", "padded"):
            compare_run(small_tile, reference, "MoeTokenPermute", args, layout, f"numOutTokens={num_out}", exact=EXACT)


def test_init_routing_v2_through_the_merge_path(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(9)
    expert = rng.integers(0, 5, (11, 3)).astype(np.int32)  # 33 copies: 5 tiles, uneven experts
    x = rng.standard_normal((11, 6)).astype(np.float32)
    base = {"x": x, "expertIdx": expert, "activeNum": 0, "expertCapacity": 4, "expertNum": 5}
    for drop, flag, before in ((0, 1, False), (0, 2, False), (1, 0, True)):
        args = {**base, "dropPadMode": drop, "expertTokensCountOrCumsumFlag": flag}
        args["expertTokensBeforeCapacityFlag"] = before
        for layout in ("contiguous", "transposed"):
            compare_run(
                small_tile, reference, "MoeInitRoutingV2", args, layout, f"drop {drop} flag {flag}", exact=EXACT
            )


def test_init_routing_v3_through_the_merge_path(small_tile: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(10)
    expert = rng.integers(-1, 7, (11, 3)).astype(np.int32)  # 33 copies: 5 tiles; -1 and 6 lie outside every range
    x = (rng.standard_normal((11, 20)) * 3).astype(np.float16)
    base = {"x": x, "expertIdx": expert, "scaleOptional": None, "offsetOptional": None, "activeNum": 0}
    base |= {"expertCapacity": 4, "expertNum": 6, "dropPadMode": 0, "expertTokensNumType": 1}
    base |= {"expertTokensNumFlag": True, "quantMode": -1, "activeExpertRangeOptional": [1, 5], "rowIdxType": 0}
    smooth = rng.uniform(0.5, 2, (4, 20)).astype(np.float32)
    cases = [
        {},
        {"rowIdxType": 1, "expertTokensNumType": 0, "activeNum": 9},
        {"expertTokensNumType": 2},
        {"quantMode": 1, "scaleOptional": smooth},
        {"quantMode": 0, "scaleOptional": np.float32([3.5]), "offsetOptional": np.float32([0.5]), "rowIdxType": 1},
        {"dropPadMode": 1, "activeExpertRangeOptional": None, "scaleOptional": rng.random(11).astype(np.float32)},
    ]
    for case in cases:
        for layout in ("contiguous", "transposed"):
            compare_run(
                small_tile, reference, "MoeInitRoutingV3", {**base, **case}, layout, str(sorted(case)), exact=EXACT
            )


def _refused(backend: Backend, op: str, args: dict) -> None:
    with pytest.raises(AclnnError) as err:
        eager.run(op, backend, **args)
    assert err.value.code == 161002, str(err.value)


def test_device_index_errors_are_reported_at_synchronisation(emulated: RocmBackend, reference: Backend) -> None:
    for op in ("MoeTokenPermute", "MoeTokenUnpermute", "MoeInitRoutingV2"):
        for e in get_spec(op).error_samples(np.random.default_rng(0)):  # type: ignore[misc]
            if "when the operator runs" in e.note:
                for backend in (reference, emulated):
                    _refused(backend, op, dict(e.args))
    sample = next(iter(get_spec("MoeTokenUnpermute").samples(np.random.default_rng(0))))  # type: ignore[misc]
    broken = dict(sample.args)
    broken["sortedIndices"] = np.asarray(broken["sortedIndices"]).copy()
    broken["sortedIndices"][3] = -1
    for backend in (reference, emulated):
        _refused(backend, "MoeTokenUnpermute", broken)


def test_gating_top_k_backward_index_errors_and_repeats(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(12)
    x_norm = rng.uniform(0.01, 0.99, (5, 40)).astype(np.float32)
    base = {"xNorm": x_norm, "gradY": rng.uniform(-1, 1, (5, 6)).astype(np.float16), "renorm": 0, "normType": 1}
    base |= {"routedScalingFactor": 2.5, "eps": 1e-20}
    idx = np.stack([rng.permutation(40)[:6] for _ in range(5)]).astype(np.int32)
    for bad in (40, -1):
        broken = idx.copy()
        broken[3, 2] = bad
        for backend in (reference, emulated):
            _refused(backend, "MoeGatingTopKBackward", {**base, "expertIdx": broken})
    repeats = idx.copy()
    repeats[0] = 7  # one expert six times: its gradients add up in p order
    repeats[2, 3:] = repeats[2, :3]
    repeats[4, 1] = repeats[4, 5]
    for layout in ("contiguous", "transposed", "padded"):
        compare_run(emulated, reference, "MoeGatingTopKBackward", {**base, "expertIdx": repeats}, layout, "repeats")


def test_sources(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    assert set(ROUTING_OPS) <= set(backend.capabilities().ops)
    prep = GatingTopKPrep(D.ACL_FLOAT, True, 0, 1).source()
    assert "__dadd_rn(buf[i], buf[i + s])" in prep and "acl_rank_exp(" in prep
    assert "fma" not in ranking_exp_source() and " + " not in ranking_exp_source().split("(long long)n")[0]
    assert "__dadd_rn(key[a], key[b])" in prep
    assert "out[p * ors + q] = src[r * srs + q];" in RowGather(2, 1, 16).source()
