"""The attention family and Addmm/Baddbmm on the GPU, compared with the NumPy reference (GPU tier).

Every sample of every claimed op runs contiguous (every third also as padded and transposed views)
and must agree with the reference within the conformance tolerances; larger shapes check the
key tiling (several tiles, long decode caches) against the reference too.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import from_numpy
from acl_core.errors import AclError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.attention import compressed_mask
from acl_rocm.ops.attention import OPS
from acl_rocm.ops.matmul import SCALED_OPS
from conformance.tolerances import lookup
from tests.conftest import assert_close
from tests.rocm.prefill import sentinel_outputs

pytestmark = pytest.mark.gpu

CLAIMED = (*OPS, *SCALED_OPS, "InplaceAddmm", "InplaceBaddbmm")


def _compare(op: str, got: dict, expected: dict, note: str, tolerance: tuple[float, float] | None) -> None:
    assert got.keys() == expected.keys(), note
    for name, value in expected.items():
        if name == "softmaxOutOut":  # reserved: neither backend writes it
            continue
        actual = got[name]
        assert actual.dtype == value.dtype and actual.shape == value.shape, f"{op} [{note}] {name}"
        tol = lookup(op, from_numpy(value.dtype), "rocm", tolerance)
        try:
            assert_close(actual, value, atol=tol.atol, rtol=tol.rtol)
        except AssertionError as exc:
            raise AssertionError(f"{op} [{note}] {name}\n{exc}") from None


@pytest.mark.parametrize("op", CLAIMED)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    if op not in rocm.capabilities().ops:  # the Inplace twins run the base op's kernel, so ask the claims
        pytest.skip(f"{op} is not claimed here (BLAS: {rocm.matmul.unavailable()})")  # type: ignore[attr-defined]
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(2024)))
    assert samples
    for i, sample in enumerate(samples):
        expected = eager.run(op, reference, op_args=sample.args)
        for layout in ("contiguous", "padded", "transposed") if i % 3 == 0 else ("contiguous",):
            got = eager.run(op, rocm, layout=layout, guard=True, op_args=sample.args)
            _compare(op, got, expected, f"{sample.note} layout={layout}", sample.tolerance)


def _case(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.float32])
def test_flash_attention_across_many_key_tiles(rocm: Backend, reference: Backend, dtype: object) -> None:
    rng = np.random.default_rng(5)
    b, nq, nkv, sq, skv, d = 2, 8, 2, 300, 700, 128
    args = {
        "query": _case(rng, (b, sq, nq * d), np.dtype(dtype)),
        "key": _case(rng, (b, skv, nkv * d), np.dtype(dtype)),
        "value": _case(rng, (b, skv, nkv * d), np.dtype(dtype)),
        "attenMaskOptional": compressed_mask(),
        "scaleValue": 1 / np.sqrt(d),
        "keepProb": 1.0,
        "preTokens": 2147483647,
        "nextTokens": 2147483647,
        "headNum": nq,
        "inputLayout": "BSH",
        "innerPrecise": 0,
        "sparseMode": 3,
    }
    expected = eager.run("FlashAttentionScore", reference, **args)
    got = eager.run("FlashAttentionScore", rocm, **args)
    _compare("FlashAttentionScore", got, expected, "causal 300x700 D=128 GQA", None)


def test_decode_against_a_long_cache(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(6)
    b, nq, nkv, skv, d = 2, 16, 4, 4096, 128
    args = {
        "query": _case(rng, (b, nq, 1, d), np.float16),
        "key": [_case(rng, (b, nkv, skv, d), np.float16)],
        "value": [_case(rng, (b, nkv, skv, d), np.float16)],
        "actualSeqLengths": [4096, 1000],
        "numHeads": nq,
        "scaleValue": 1 / np.sqrt(d),
        "inputLayout": "BNSD",
        "numKeyValueHeads": nkv,
    }
    expected = eager.run("IncreFlashAttention", reference, **args)
    got = eager.run("IncreFlashAttention", rocm, **args)
    _compare("IncreFlashAttention", got, expected, "decode 4096-key cache", None)


# ----------------------------------------------------------------------------- FlashAttentionScore paths
def _fa_args(
    rng: np.random.Generator, dtype: object, layout: str, b: int, n: int, nkv: int, sq: int, skv: int, d: int, mode: int
) -> dict:
    from acl_core.spec.ops.attention import _to_layout

    def make(heads: int, s: int) -> np.ndarray:
        return _to_layout(rng.uniform(-1, 1, (b, heads, s, d)), layout).astype(np.dtype(dtype))

    args = {
        "query": make(n, sq),
        "key": make(nkv, skv),
        "value": make(nkv, skv),
        "scaleValue": 1 / np.sqrt(d),
        "keepProb": 1.0,
        "preTokens": 2147483647,
        "nextTokens": 2147483647,
        "headNum": n,
        "inputLayout": layout,
        "innerPrecise": 0,
        "sparseMode": mode,
    }
    if mode:
        args["attenMaskOptional"] = compressed_mask()
    return args


def _path_tolerances(path: str, dtype: np.dtype) -> tuple[tuple[float, float], tuple[float, float]]:
    """(output, statistics) tolerances of a path: P rounded to fp16/bf16 before P V costs a few of its ulps."""
    eps = {np.dtype(np.float16): 2.0**-10, np.dtype("bfloat16"): 2.0**-7}.get(dtype)
    out = (1e-5, 1e-5) if eps is None else (4 * eps, 4 * eps)
    stats = (1e-4, 1e-4) if path == "cudnn" else (1e-5, 1e-5)
    return out, stats


def _run_path(rocm: Backend, path: str, args: dict, outs: dict | None = None) -> dict:
    """FlashAttentionScore on ``path``; ``outs`` (NaN-filled) keep another path's stale results out."""
    runner = rocm.attention  # type: ignore[attr-defined]
    runner.path_override = path
    try:
        got = eager.run("FlashAttentionScore", rocm, **args, **(outs or {}))
        assert runner.last_path == path
        return got
    finally:
        runner.path_override = None


def _check_path(rocm: Backend, reference: Backend, path: str, args: dict, note: str) -> None:
    expected = eager.run("FlashAttentionScore", reference, **args)
    got = _run_path(rocm, path, args, sentinel_outputs("FlashAttentionScore", args, expected))
    (oa, orr), (sa, sr) = _path_tolerances(path, args["query"].dtype)
    for name, (atol, rtol) in (
        ("attentionOutOut", (oa, orr)),
        ("softmaxMaxOut", (sa, sr)),
        ("softmaxSumOut", (sa, sr)),
    ):
        a, e = got[name].astype(np.float64), expected[name].astype(np.float64)
        finite = np.isfinite(e)
        error = np.abs(a[finite] - e[finite]) / (atol + rtol * np.abs(e[finite]))  # -inf maxima left to assert_close
        worst = float(np.max(error, initial=0.0))
        try:
            assert_close(got[name], expected[name], atol=atol, rtol=rtol)
        except AssertionError as exc:
            raise AssertionError(f"{path} [{note}] {name}: worst error / tolerance = {worst:.3g}\n{exc}") from None


def test_cudnn_frontend_loads(rocm: Backend) -> None:
    import importlib.util

    runner = rocm.attention  # type: ignore[attr-defined]
    if importlib.util.find_spec("cudnn") is None:
        pytest.skip("nvidia-cudnn-frontend is not installed here")
    assert runner.cudnn.refusal() is None, runner.cudnn.refusal()
    assert runner.cudnn.version()
    assert "cuDNN SDPA" in rocm.capabilities().attention_path


@pytest.mark.parametrize("path", ["blas", "cudnn", "flash"])
@pytest.mark.parametrize("dtype", [np.float16, "bfloat16", np.float32])
@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH", "SBH"])
@pytest.mark.parametrize("mode", [0, 2, 3])
def test_flash_attention_paths_match_reference(
    rocm: Backend, reference: Backend, path: str, dtype: object, layout: str, mode: int
) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    if path == "cudnn" and runner.cudnn.refusal() is not None:
        pytest.skip(runner.cudnn.refusal())
    rng = np.random.default_rng(zlib.crc32(f"{path} {dtype} {layout} {mode}".encode()))  # hash() is salted
    args = _fa_args(rng, dtype, layout, 2, 4, 2, 193, 257, 64, mode)
    if path in ("cudnn", "flash") and np.dtype(dtype) == np.float32:
        with pytest.raises(AclError, match="float32 inputs"):
            _run_path(rocm, path, args)
        return
    _check_path(rocm, reference, path, args, f"{np.dtype(dtype)} {layout} sparse {mode} GQA 4/2 Sq=193 Skv=257")


@pytest.mark.parametrize("path", ["kernel", "flash", "blas", "cudnn"])
def test_flash_attention_paths_at_prefill_size(rocm: Backend, reference: Backend, path: str) -> None:
    runner = rocm.attention  # type: ignore[attr-defined]
    if path == "cudnn" and runner.cudnn.refusal() is not None:
        pytest.skip(runner.cudnn.refusal())
    args = _fa_args(np.random.default_rng(9), "bfloat16", "BNSD", 1, 4, 4, 2048, 2048, 128, 3)
    _check_path(rocm, reference, path, args, "bf16 causal 2048 D=128")


def test_blas_path_with_masks_windows_and_pse(rocm: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(12)
    base = _fa_args(rng, np.float16, "BSND", 2, 2, 2, 150, 170, 32, 0)
    mask = rng.uniform(size=(2, 1, 150, 170)) < 0.3
    mask[:, :, 7, :] = True  # a fully masked row
    cases = {
        "sparse 0 mask + window": {**base, "attenMaskOptional": mask, "preTokens": 40, "nextTokens": 5},
        "sparse 1 mask": {**base, "attenMaskOptional": mask, "sparseMode": 1},
        "sparse 4 band": {
            **base,
            "attenMaskOptional": compressed_mask(),
            "sparseMode": 4,
            "preTokens": 9,
            "nextTokens": 3,
        },
        "sparse 3 Sq > Skv": {**_fa_args(rng, np.float16, "BSND", 1, 2, 2, 170, 150, 32, 3)},
        "pse": {**base, "realShiftOptional": rng.uniform(-1, 1, (2, 2, 150, 170)).astype(np.float16)},
    }
    for note, args in cases.items():
        _check_path(rocm, reference, "blas", args, note)


def test_large_calls_take_flash_or_blas_without_cudnn(rocm: Backend, reference: Backend) -> None:
    from acl_rocm.ops.attention_cudnn import CudnnSdpa

    def missing() -> object:
        raise ModuleNotFoundError("No module named 'cudnn'")

    runner = rocm.attention  # type: ignore[attr-defined]
    saved = runner.cudnn
    runner.cudnn = CudnnSdpa(rocm, loader=missing)  # type: ignore[arg-type]
    try:
        assert "did not load" in str(runner.cudnn.refusal())
        args = _fa_args(np.random.default_rng(4), "bfloat16", "BNSD", 2, 8, 8, 512, 512, 64, 3)
        expected = eager.run("FlashAttentionScore", reference, **args)
        got = eager.run("FlashAttentionScore", rocm, **args, **sentinel_outputs("FlashAttentionScore", args, expected))
        want = "flash" if runner.flash.slow() is None else "blas"  # flash where the device has matrix instructions
        assert runner.last_path == want
        (oa, orr), _ = _path_tolerances(want, args["query"].dtype)
        assert_close(got["attentionOutOut"], expected["attentionOutOut"], atol=oa, rtol=orr)
    finally:
        runner.cudnn = saved
