"""The reference's QkvRmsNormRopeCache against a composition written here with torch (float64).

torch's ``rms_norm`` of q and k, the half-and-half rotation of CANN's formula, FLOAT32 quantisation, and
``index_copy_`` into the cache seen token-major (the PA_NZ cache permuted to ``[blocks, BlockSize, W/P, P]``
and flattened to ``[slots, W]``): an addressing written independently of the reference's. Plus the codes of
the rules, the index values only a kernel sees, and null BeforeQuant outputs through the C-shaped API.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acl_core import eager
from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.norm_rope_cache import case
from tests.conftest import assert_close
from tests.ops.torch_ref import to_numpy, to_torch

OP = "QkvRmsNormRopeCache"


def ref(**kwargs: Any) -> dict[str, Any]:
    """Run the op on the reference with arguments by official name."""
    return eager.run(OP, "reference", op_args=kwargs)


def f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def _quant(x: torch.Tensor, scale: np.ndarray, offset: np.ndarray | None) -> torch.Tensor:
    v = x.to(torch.float32) / torch.from_numpy(scale.reshape(-1))
    if offset is not None:
        v = v + torch.from_numpy(offset.reshape(-1))
    return torch.nan_to_num(torch.round(v), nan=0.0).clamp(-128, 127).to(torch.int8)


def _nz_index_copy(cache: np.ndarray, rows: torch.Tensor, index: np.ndarray) -> np.ndarray:
    c = to_torch(cache).clone()
    blocks, pieces, block_size, p = c.shape
    token_major = c.permute(0, 2, 1, 3).contiguous().view(blocks * block_size, pieces * p)
    keep = torch.from_numpy(index >= 0)
    token_major.index_copy_(0, torch.from_numpy(index[index >= 0]), rows[keep].to(c.dtype))
    return to_numpy(token_major.view(blocks, block_size, pieces, p).permute(0, 2, 1, 3).contiguous())


def _nd_index_copy(cache: np.ndarray, rows: torch.Tensor, index: np.ndarray) -> np.ndarray:
    c = to_torch(cache).clone()
    flat = c.view(c.shape[0] * c.shape[1], -1)  # [slots, N * D]
    keep = torch.from_numpy(index >= 0)
    flat.index_copy_(0, torch.from_numpy(index[index >= 0]), rows[keep].to(c.dtype))
    return to_numpy(c)


def expected(args: dict[str, Any]) -> dict[str, np.ndarray]:
    """The op's outputs composed with torch."""
    nq, nk, nv = args["headNums"]
    d = args["qkvSize"][3]
    qkv = f64(args["qkv"])
    t = qkv.shape[0]
    heads = qkv.view(t, nq + nk + nv, d)
    cos, sin = f64(args["cos"])[:, None, :], f64(args["sin"])[:, None, :]

    def norm_rope(x: torch.Tensor, gamma: np.ndarray) -> torch.Tensor:
        y = F.rms_norm(x, (d,), weight=f64(gamma), eps=args["epsilon"])
        y1, y2 = y[..., : d // 2], y[..., d // 2 :]
        return y * cos + torch.cat((-y2, y1), dim=-1) * sin

    q = norm_rope(heads[:, :nq], args["qGamma"]).reshape(t, -1)
    k = norm_rope(heads[:, nq : nq + nk], args["kGamma"]).reshape(t, -1)
    v = heads[:, nq + nk :].reshape(t, -1)
    dt = args["qkv"].dtype
    out = {"qOut": q, "qOutBeforeQuant": q, "kOutBeforeQuant": k, "vOutBeforeQuant": v}
    result = {name: to_numpy(x).astype(dt) for name, x in out.items()}
    for which, x in (("k", k), ("v", v)):
        cache = args[f"{which}Cache"]
        if cache.dtype == np.int8:
            rows = _quant(x, args[f"{which}ScaleOptional"], args.get(f"{which}OffsetOptional"))
        else:
            rows = to_torch(to_numpy(x).astype(dt))
        copy = _nd_index_copy if args["cacheModeOptional"] in ("PA", "PA_BNSD") else _nz_index_copy
        result[f"{which}Cache"] = copy(cache, rows, args["index"])
    return result


def _check(args: dict[str, Any]) -> None:
    got = ref(**args)
    want = expected(args)
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        if value.dtype == np.int8 or name.endswith("Cache") or name == "vOutBeforeQuant":
            np.testing.assert_array_equal(got[name].view(np.uint8), value.view(np.uint8), err_msg=name)
        else:  # torch's rms_norm sums in another order: both round one float64 result, rarely apart by 1 ulp
            assert_close(got[name].astype(np.float64), value.astype(np.float64), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("i", range(17))
def test_samples_match_torch(i: int) -> None:
    samples = list(get_spec(OP).samples(np.random.default_rng(11)))
    assert len(samples) == 17
    _check(dict(samples[i].args))


@pytest.mark.parametrize("dt", [D.ACL_FLOAT16, D.ACL_BF16])
def test_caches_only_written_at_index(dt: D) -> None:
    rng = np.random.default_rng(3)
    args = case(rng, dt, 3, 2, (2, 1, 1), block_size=16, blocks=5, pad=2)
    got = ref(**args)
    for name in ("kCache", "vCache"):
        before, after = args[name], got[name]
        changed = np.argwhere((before.view(np.uint16) != after.view(np.uint16)).any(axis=(1, 3)))
        touched = {int(b) * 16 + int(r) for b, r in changed}
        assert touched <= {int(s) for s in args["index"] if s >= 0}
        assert len(touched) >= 3  # the 4 kept tokens' rows (a row may be rewritten with its old bits: rarely)


def test_quantised_values_hand_computed() -> None:
    rng = np.random.default_rng(5)
    args = case(rng, D.ACL_FLOAT16, 1, 1, (1, 1, 1), block_size=32, k_int8=True, v_int8=True, asym=True, pad=0)
    args["vScaleOptional"] = np.full((1, 128), 0.5, np.float32)
    args["vOffsetOptional"] = np.full((1, 128), 1.0, np.float32)
    v = np.zeros(128, np.float16)
    v[:4] = [1.25, -300.0, np.nan, 0.75]  # 2.5+1 -> 3.5 -> 4; -600+1 -> -128; NaN -> 0; 1.5+1 = 2.5 -> 2 (even)
    args["qkv"][0, 256:] = v
    got = ref(**args)
    slot = int(args["index"][0])
    row = got["vCache"][slot // 32, :, slot % 32, :].reshape(-1)
    assert row[:4].tolist() == [4, -128, 0, 2]
    assert row[4:].tolist() == [1] * 124


def test_rotation_by_hand() -> None:
    """cos 0, sin 1 turns y into cat(-y2, y1); gamma 1 and a row of ones keeps y = x / rms = 1 everywhere."""
    rng = np.random.default_rng(1)
    args = case(rng, D.ACL_FLOAT16, 1, 1, (1, 1, 1), pad=0)
    x = np.concatenate([np.full(64, 2.0), np.full(64, -2.0)]).astype(np.float16)
    args["qkv"][0, :128] = x
    args["qGamma"] = np.ones(128, np.float16)
    args["cos"][:] = 0
    args["sin"][:] = 1
    got = ref(**args)
    np.testing.assert_array_equal(got["qOut"][0], np.concatenate([np.full(64, 1.0), np.full(64, 1.0)]))


def _code(**kwargs: Any) -> int:
    with pytest.raises(AclnnError) as info:
        ref(**kwargs)
    return int(info.value.code)


def test_error_samples_carry_their_codes() -> None:
    spec = get_spec(OP)
    assert spec.error_samples is not None
    for sample in spec.error_samples(np.random.default_rng(2)):
        assert _code(**sample.args) == sample.code, sample.note


def test_bad_slot_writes_nothing() -> None:
    rng = np.random.default_rng(4)
    args = case(rng, D.ACL_BF16, 2, 1, (1, 1, 1), pad=0)
    args["index"] = np.array([0, 10**6], np.int64)
    assert _code(**args) == 161002


def c_shaped(backend: Any, args: dict[str, Any], before: bool) -> dict[str, np.ndarray]:
    """The op through the C-shaped front end on ``backend`` (BeforeQuant outputs given, or null); every result."""
    from acl_core import aclnn

    nq, nk, nv = args["headNums"]
    tokens, d = args["qkv"].shape[0], args["qkvSize"][3]
    dt = args["qkv"].dtype
    names = ("qkv", "qGamma", "kGamma", "cos", "sin", "index")
    arrays = {n: eager.to_device(args[n], backend) for n in names}
    arrays["qOut"] = eager.to_device(np.zeros((tokens, nq * d), dt), backend)
    arrays |= {n: eager.to_device(args[n], backend) for n in ("kCache", "vCache")}
    for n in ("kScaleOptional", "vScaleOptional", "kOffsetOptional", "vOffsetOptional"):
        if args.get(n) is not None:
            arrays[n] = eager.to_device(args[n], backend)
    if before:
        for n, heads in (("qOutBeforeQuant", nq), ("kOutBeforeQuant", nk), ("vOutBeforeQuant", nv)):
            arrays[n] = eager.to_device(np.zeros((tokens, heads * d), dt), backend)

    def t(name: str) -> Any:
        return arrays[name].tensor() if name in arrays else None

    size, executor, ret = aclnn.aclnnQkvRmsNormRopeCacheGetWorkspaceSize(
        *(t(n) for n in (*names, "qOut", "kCache", "vCache")),
        *(t(n) for n in ("kScaleOptional", "vScaleOptional", "kOffsetOptional", "vOffsetOptional")),
        aclnn.aclCreateIntArray(list(args["qkvSize"])),
        aclnn.aclCreateIntArray(list(args["headNums"])),
        args["epsilon"],
        "PA_NZ",
        *(t(n) for n in ("qOutBeforeQuant", "kOutBeforeQuant", "vOutBeforeQuant")),
    )
    assert ret == 0, aclnn.aclGetRecentErrMsg()
    assert aclnn.aclnnQkvRmsNormRopeCache(0, size, executor, None) == 0, aclnn.aclGetRecentErrMsg()
    return {n: a.numpy() for n, a in arrays.items() if n not in names}


def test_the_c_front_end_with_and_without_before_quant_outputs() -> None:
    args = case(np.random.default_rng(12), D.ACL_BF16, 2, 2, (2, 1, 1), block_size=32, k_int8=True, asym=True)
    want = ref(**args)
    for before in (False, True):
        got = c_shaped("reference", args, before)
        assert set(got) - {"kScaleOptional", "kOffsetOptional"} == {"qOut", "kCache", "vCache"} | (
            {"qOutBeforeQuant", "kOutBeforeQuant", "vOutBeforeQuant"} if before else set()
        )
        for name in set(got) & set(want):
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
