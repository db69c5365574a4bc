"""The reference's MLA family (MlaPrologV2WeightNz / V3) against an independent torch pipeline and invariants.

torch has no MLA pre-processing op, so the pipeline of CANN's documents and kernels (the facts in
:mod:`acl_core.spec.ops.mla`) is written again here in torch: float64 matmuls with bf16 stores where CANN's
kernel stores bf16, the ROPE pair by pair from its element formula, per-head slices of the up-projection,
and the PA_NZ cache addressed through a flat storage view ``[blocks, W/16, BlockSize, 16]``. Then
invariants (the V3 scales, a head permutation, PA_NZ against PA_BSND through the NZ tiling, padding
slots) and the codes of the rules and of the slots only the kernel sees.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core import eager, nz
from acl_core.errors import AclnnError
from acl_core.nz import NzArray
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.mla import mla_case
from tests.ops.torch_ref import to_numpy, to_torch

BF16 = ml_dtypes.bfloat16
V2, V3 = "MlaPrologV2WeightNz", "MlaPrologV3WeightNz"


def ref(op: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``op`` on the reference with arguments by official name."""
    return eager.run(op, "reference", op_args=kwargs)


def refused(op: str, **kwargs: Any) -> AclnnError:
    with pytest.raises(AclnnError) as info:
        ref(op, **kwargs)
    return info.value


def t64(a: Any) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a).astype(np.float64))


def stored(v: torch.Tensor) -> torch.Tensor:
    """A bf16 store and reload (torch's round to nearest even)."""
    return v.to(torch.bfloat16).to(torch.float64)


def torch_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """out[p] = x[2p] cos[p] - x[2p+1] sin[p]; out[p + h] = x[2p+1] cos[p + h] + x[2p] sin[p + h], pair by pair."""
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for p in range(half):
        a, b = x[..., 2 * p], x[..., 2 * p + 1]
        out[..., p] = a * cos[..., p] - b * sin[..., p]
        out[..., p + half] = b * cos[..., p + half] + a * sin[..., p + half]
    return out


def torch_norm(v: torch.Tensor, gamma: torch.Tensor, eps: float, scale: float) -> torch.Tensor:
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * gamma * scale


def torch_cache(cache: np.ndarray, rows: torch.Tensor, slots: np.ndarray, nz_mode: bool) -> np.ndarray:
    """The cache after writing ``rows`` at ``slots``: ND rows, or a flat storage view of NZ blocks."""
    c = to_torch(cache).clone()
    blocks, bs, _, width = c.shape
    tiles = c.reshape(blocks, width // 16, bs, 16) if nz_mode else None
    for t, slot in enumerate(slots.reshape(-1)):
        if slot < 0:
            continue
        block, row = divmod(int(slot), bs)
        value = rows[t].to(torch.bfloat16)
        if tiles is not None:
            tiles[block, :, row, :] = value.reshape(width // 16, 16)
        else:
            c[block, row, 0] = value
    return to_numpy(c)


def torch_prolog(args: dict[str, Any], alpha_q: float = 1.0, alpha_kv: float = 1.0) -> dict[str, np.ndarray]:
    """The documents' pipeline in torch (float64 steps, bf16 stores), per head."""
    x = t64(args["tokenX"])
    lead = x.shape[:-1]
    x = x.reshape(-1, x.shape[-1])
    wdq, wuqqr, wdkvkr = (t64(np.asarray(args[n])) for n in ("weightDq", "weightUqQr", "weightDkvKr"))
    wuk = t64(args["weightUk"])
    heads, d, hckv = wuk.shape
    dr = wdkvkr.shape[1] - hckv
    cos, sin = t64(args["ropeCos"]).reshape(-1, dr), t64(args["ropeSin"]).reshape(-1, dr)
    cq = stored(x @ wdq)
    ckvkr = stored(x @ wdkvkr)
    cqn = stored(torch_norm(cq, t64(args["rmsnormGammaCq"]), 1e-5, alpha_q))
    qcqr = stored(cqn @ wuqqr)
    query, rope = [], []
    for h in range(heads):
        cols = qcqr[:, h * (d + dr) : (h + 1) * (d + dr)]
        query.append(cols[:, :d] @ wuk[h])
        rope.append(torch_rope(cols[:, d:], cos, sin))
    kv = torch_norm(ckvkr[:, :hckv], t64(args["rmsnormGammaCkv"]), 1e-5, alpha_kv)
    kr = torch_rope(ckvkr[:, hckv:], cos, sin)
    nz_mode = args.get("cacheModeOptional") == "PA_NZ"
    slots = np.asarray(args["cacheIndex"])
    return {
        "queryOut": to_numpy(torch.stack(query, 1).reshape(*lead, heads, hckv).to(torch.bfloat16)),
        "queryRopeOut": to_numpy(torch.stack(rope, 1).reshape(*lead, heads, dr).to(torch.bfloat16)),
        "kvCacheRef": torch_cache(args["kvCacheRef"], kv, slots, nz_mode),
        "krCacheRef": torch_cache(args["krCacheRef"], kr, slots, nz_mode),
    }


def assert_same(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    for name, value in want.items():
        np.testing.assert_array_equal(got[name].astype(np.float64), value.astype(np.float64), err_msg=name)


@pytest.mark.parametrize("mode", ["PA_BSND", "PA_NZ"])
@pytest.mark.parametrize("lead", [(7,), (2, 3)], ids=["T", "BS"])
def test_v2_matches_the_documents_pipeline_in_torch(mode: str, lead: tuple[int, ...]) -> None:
    rng = np.random.default_rng(11)
    args = mla_case(rng, lead, he=96, hcq=64, heads=3, d=16, dr=32, hckv=48, blocks=2, block_size=16, mode=mode)
    assert_same(ref(V2, **args), torch_prolog(args))


def test_v3_scales_rmsnorm_outputs_as_documented() -> None:
    rng = np.random.default_rng(12)
    args = mla_case(rng, (5,), mode="PA_NZ")
    got = ref(V3, **args, qcQrScale=0.75, kcScale=1.5)
    assert_same(got, torch_prolog(args, 0.75, 1.5))


def test_power_of_two_scales_scale_the_outputs_exactly() -> None:
    rng = np.random.default_rng(13)
    args = mla_case(rng, (6,))
    base = ref(V2, **args)
    scaled = ref(V3, **args, qcQrScale=2.0, kcScale=0.5)
    for name in ("queryOut", "queryRopeOut"):
        np.testing.assert_array_equal(scaled[name].astype(np.float64), 2 * base[name].astype(np.float64))
    written = np.asarray(args["cacheIndex"]) >= 0
    kv_base = base["kvCacheRef"].reshape(-1, 32)[args["cacheIndex"][written]].astype(np.float64)
    kv_scaled = scaled["kvCacheRef"].reshape(-1, 32)[args["cacheIndex"][written]].astype(np.float64)
    np.testing.assert_array_equal(kv_scaled, kv_base / 2)
    np.testing.assert_array_equal(scaled["krCacheRef"], base["krCacheRef"])  # k^R takes no scale


def test_heads_are_the_weight_column_blocks() -> None:
    """Permuting the heads' (D + Dr)-column blocks of weightUqQr with weightUk's heads permutes the outputs."""
    rng = np.random.default_rng(14)
    args = mla_case(rng, (4,), heads=3)
    perm = [2, 0, 1]
    cols = np.asarray(args["weightUqQr"]).reshape(48, 3, 32)[:, perm].reshape(48, 96)
    turned = {**args, "weightUqQr": NzArray(cols), "weightUk": args["weightUk"][perm].copy()}
    a, b = ref(V2, **args), ref(V2, **turned)
    for name in ("queryOut", "queryRopeOut"):
        np.testing.assert_array_equal(b[name], a[name][:, perm])


def test_rope_of_a_hand_computed_row() -> None:
    """With identity-like weights the q rope part is x's own pairs rotated: checked by hand for one token."""
    he = hcq = 16
    args = mla_case(np.random.default_rng(15), (1,), he=he, hcq=hcq, heads=1, d=16, dr=16, hckv=16, pad=False)
    x = np.zeros((1, he), np.float32)
    x[0, :4] = [1.0, 2.0, 3.0, 4.0]
    eye = np.eye(hcq, dtype=np.float32)
    wuqqr = np.concatenate([eye, eye], axis=1)  # head 0: nope columns and rope columns both read cq
    cos = np.full((1, 16), 0.5, np.float32)
    sin = np.full((1, 16), 0.25, np.float32)
    args |= {
        "tokenX": x.astype(BF16),
        "weightDq": NzArray(eye.astype(BF16)),
        "weightUqQr": NzArray(wuqqr.astype(BF16)),
        "rmsnormGammaCq": np.ones(16, BF16),
        "ropeCos": cos.astype(BF16),
        "ropeSin": sin.astype(BF16),
    }
    rope = ref(V2, **args)["queryRopeOut"].astype(np.float64)[0, 0]
    r = np.sqrt((1 + 4 + 9 + 16) / 16 + 1e-5)  # RmsNorm of [1, 2, 3, 4, 0, ...]
    q = np.array([1.0, 2.0, 3.0, 4.0]) / r
    want = np.zeros(16)
    want[0] = q[0] * 0.5 - q[1] * 0.25  # pair (0, 1) -> out 0 and 8
    want[8] = q[1] * 0.5 + q[0] * 0.25
    want[1] = q[2] * 0.5 - q[3] * 0.25  # pair (2, 3) -> out 1 and 9
    want[9] = q[3] * 0.5 + q[2] * 0.25
    np.testing.assert_allclose(rope, want, rtol=2**-7, atol=0)


def test_pa_nz_caches_are_the_nz_tiling_of_the_pa_bsnd_blocks() -> None:
    rng = np.random.default_rng(16)
    args = mla_case(rng, (9,), hckv=64, dr=32, blocks=2, block_size=32, mode="PA_BSND")
    zeros = {"kvCacheRef": np.zeros((2, 32, 1, 64), BF16), "krCacheRef": np.zeros((2, 32, 1, 32), BF16)}
    bsnd = ref(V2, **{**args, **zeros})
    pa_nz = ref(V2, **{**args, **zeros, "cacheModeOptional": "PA_NZ"})
    for name in zeros:
        nd = bsnd[name][:, :, 0]  # (blocks, BlockSize, W)
        tiles = np.stack([nz.nd_to_nz(block, 16) for block in nd])  # (blocks, W/16, BlockSize, 16)
        np.testing.assert_array_equal(pa_nz[name].reshape(-1), tiles.reshape(-1), err_msg=name)
    for name in ("queryOut", "queryRopeOut"):
        np.testing.assert_array_equal(pa_nz[name], bsnd[name])


def test_padding_slots_leave_the_cache_and_the_queries_are_computed() -> None:
    rng = np.random.default_rng(17)
    args = mla_case(rng, (4,))
    args["cacheIndex"] = np.full(4, -1, np.int64)
    got = ref(V2, **args)
    np.testing.assert_array_equal(got["kvCacheRef"], args["kvCacheRef"])
    np.testing.assert_array_equal(got["krCacheRef"], args["krCacheRef"])
    assert_same(got, torch_prolog(args))


def test_a_slot_out_of_range_is_refused_and_nothing_is_written() -> None:
    rng = np.random.default_rng(18)
    args = mla_case(rng, (3,))
    for bad in (48, -2):
        index = np.array([0, bad, 5], np.int64)
        kv = eager.to_device(args["kvCacheRef"], "reference")
        before = kv.numpy().copy()
        with pytest.raises(AclnnError) as info:
            eager.run(V2, "reference", op_args={**args, "cacheIndex": index, "kvCacheRef": kv})
        assert info.value.code == 161002 and "cacheIndex" in str(info.value)
        np.testing.assert_array_equal(kv.numpy(), before)


@pytest.mark.parametrize("op", [V2, V3])
def test_the_rules_refuse_with_the_documented_codes(op: str) -> None:
    spec = get_spec(op)
    assert spec.error_samples is not None
    for case in spec.error_samples(np.random.default_rng(3)):
        assert refused(op, **case.args).code == int(case.code), case.note


def test_unimplemented_modes_name_themselves() -> None:
    args = mla_case(np.random.default_rng(19), (2,))
    assert "not implemented" in str(refused(V2, **{**args, "cacheModeOptional": "PA_BLK_BSND"}))
    assert "quantised" in str(refused(V2, **{**args, "quantScaleCkvOptional": np.ones((1, 32), np.float32)}))
    assert "weightQuantMode" in str(refused(V3, **{**args, "weightQuantMode": 1}))
    assert "kNopeClipAlpha" in str(refused(V3, **{**args, "kNopeClipAlpha": 0.5}))


def _with_kv(args: dict[str, Any], ckv: torch.Tensor) -> dict[str, Any]:
    """The reference's outputs with kvCacheRef rebuilt from another c^KV (bf16 store, RmsNorm, bf16 store)."""
    out = ref(V2, **args)
    hckv = np.asarray(args["weightUk"]).shape[2]
    assert ckv.shape[-1] == hckv
    kv = torch_norm(stored(ckv), t64(args["rmsnormGammaCkv"]), 1e-5, 1.0)
    nz_mode = args.get("cacheModeOptional") == "PA_NZ"
    return {**out, "kvCacheRef": torch_cache(args["kvCacheRef"], kv, np.asarray(args["cacheIndex"]), nz_mode)}


def test_the_kv_bound_carries_a_float32_gemm_error_but_not_a_bf16_accumulator() -> None:
    # The H100 run of 2026-12-06 failed kvCacheRef by 9 bf16 ulps at -2e-5, an element c^KV's sum cancels:
    # float32 accumulation may miss float64 by γ_He·(|x| @ |W|) there before the bf16 store.
    from tests.rocm.against_reference import class_problems

    rng = np.random.default_rng(21)
    args = mla_case(rng, (16,), he=1024, hcq=64, heads=2, d=16, dr=32, hckv=128, blocks=2, block_size=16)
    he, hckv = 1024, 128
    x = t64(args["tokenX"]).reshape(-1, he)
    w = t64(np.asarray(args["weightDkvKr"]))[:, :hckv]
    expected = ref(V2, **args)
    gamma = he * 2.0**-24 / (1 - he * 2.0**-24)
    worst_f32 = x @ w + 0.9 * gamma * (x.abs() @ w.abs())  # inside float32's worst case for every element
    assert not class_problems(V2, args, _with_kv(args, worst_f32), expected)
    acc = torch.zeros(x.shape[0], hckv, dtype=torch.bfloat16)  # a bf16 running sum over He
    for k in range(he):
        acc = (acc.double() + x[:, k : k + 1] * w[k]).to(torch.bfloat16)
    problems = class_problems(V2, args, _with_kv(args, acc.double()), expected)
    assert [p.output for p in problems] == ["kvCacheRef"]
