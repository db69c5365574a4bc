"""The grouped quantised GEMMs' reference against PyTorch CPU expressions of the documented formulas,
hand-computed cases and invariants (NZ and ND forms agree, cumulative and count group lists agree)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from acl_core.dtypes import DataType as D
from acl_core.errors import AclnnError
from acl_core.nz import NzArray
from acl_core.spec.ops import gmm_quant
from tests.ops.torch_ref import check_samples_and_errors, ref

F32 = torch.float32


@pytest.mark.parametrize("spec", gmm_quant.SPECS, ids=lambda s: s.name)
def test_conformance_samples_run_and_error_samples_fail_as_declared(spec) -> None:  # type: ignore[no-untyped-def]
    check_samples_and_errors(spec, 7)


def _torch_gmmsq(x: np.ndarray, w: np.ndarray, ws: np.ndarray, xs: np.ndarray, ends: list[int]) -> tuple:
    """The documented A8W8 formula in torch: per group an int64 GEMM, float32 scales, SiLU·gate, per-row INT8."""
    m, n = x.shape[0], w.shape[2]
    out = torch.zeros((m, n // 2), dtype=torch.int64)
    scale = torch.zeros(m, dtype=F32)
    start = 0
    for g, end in enumerate(ends):
        acc = torch.from_numpy(x[start:end]).long() @ torch.from_numpy(w[g]).long()
        c = acc.to(F32) * torch.from_numpy(ws[g].astype(np.float32)) * torch.from_numpy(xs[start:end])[:, None]
        c64 = c.double()
        s = (torch.nn.functional.silu(c64[:, : n // 2]) * c64[:, n // 2 :]).to(F32)
        amax = s.abs().amax(dim=-1)
        row_scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
        out[start:end] = torch.round((s / row_scale[:, None]).double()).clamp(-128, 127).long()
        scale[start:end] = row_scale
        start = end
    return out.numpy(), scale.numpy()


def _gmmsq_args(rng: np.random.Generator, m: int, k: int, n: int, ends: list[int], **extra: object) -> dict:
    groups = len(ends)
    return {
        "x": rng.integers(-127, 128, (m, k)).astype(np.int8),
        "weight": [rng.integers(-127, 128, (groups, k, n)).astype(np.int8)],
        "weightScale": [rng.uniform(0.5 / k, 2.0 / k, (groups, n)).astype(np.float32)],
        "weightAssistMatrix": None,
        "bias": None,
        "xScale": rng.uniform(1 / 128, 4 / 128, m).astype(np.float32),
        "smoothScale": None,
        "groupList": np.array(ends, np.int64),
        "dequantMode": 0,
        "dequantDtype": 28,
        "quantMode": 0,
        "groupListType": 0,
        "tuningConfig": None,
        **extra,
    }


@pytest.mark.parametrize("scale_dtype", [np.float32, np.float16, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_gmmsq_matches_torch(scale_dtype: type, rng: np.random.Generator) -> None:
    args = _gmmsq_args(rng, 40, 96, 64, [10, 10, 33])
    args["weightScale"] = [args["weightScale"][0].astype(scale_dtype)]
    got = ref("GroupedMatmulSwigluQuantV2", **args)
    want_q, want_s = _torch_gmmsq(args["x"], args["weight"][0], args["weightScale"][0], args["xScale"], [10, 10, 33])
    np.testing.assert_array_equal(got["outputScale"][:33], want_s[:33])
    np.testing.assert_array_equal(got["output"][:33], want_q[:33])
    assert np.abs(got["output"][:33]).max() == 127  # every row's maximum maps to ±127
    np.testing.assert_array_equal(got["output"][33:], 0)  # rows past the groups: written with 0 (choice)
    np.testing.assert_array_equal(got["outputScale"][33:], 0)


def test_gmmsq_hand_computed() -> None:
    """One group, K = 1: C = x·w·ws·xs, S = silu(C_act)·C_gate, then round(S / (max|S| / 127))."""
    x = np.array([[2], [0]], np.int8)
    w = np.array([[[1, -3, 2, 1]]], np.int8)  # N = 4: act half [1, -3], gate half [2, 1]
    args = _gmmsq_args(np.random.default_rng(0), 2, 1, 4, [2])
    args |= {"x": x, "weight": [w], "weightScale": [np.full((1, 4), 0.5, np.float32)]}
    args["xScale"] = np.array([1.0, 1.0], np.float32)
    got = ref("GroupedMatmulSwigluQuantV2", **args)
    c = np.array([1.0, -3.0, 2.0, 1.0])  # 2 * [1, -3, 2, 1] * 0.5
    s = (c[:2] / (1 + np.exp(-c[:2])) * c[2:]).astype(np.float32)
    scale = np.float32(np.abs(s).max() / np.float32(127))
    np.testing.assert_array_equal(got["outputScale"], [scale, 1.0])  # the zero row: scale 1, as DequantSwigluQuant
    np.testing.assert_array_equal(got["output"][0], np.rint(s / scale))
    np.testing.assert_array_equal(got["output"][1], [0, 0])


def test_gmmsq_forms_agree(rng: np.random.Generator) -> None:
    """ND and FRACTAL_NZ weights, one [E, K, N] or E [K, N] tensors, cumulative or counts: one result."""
    args = _gmmsq_args(rng, 30, 64, 48, [7, 19, 30])
    want = ref("GroupedMatmulSwigluQuantV2", **args)
    w, ws = args["weight"][0], args["weightScale"][0]
    forms = [
        ("GroupedMatmulSwigluQuantV2", {**args, "weight": [NzArray(w)]}),
        ("GroupedMatmulSwigluQuantV2", {**args, "weight": list(w), "weightScale": list(ws)}),
        ("GroupedMatmulSwigluQuantV2", {**args, "groupList": np.array([7, 12, 11], np.int64), "groupListType": 1}),
        ("GroupedMatmulSwigluQuantWeightNzV2", {**args, "weight": [NzArray(v) for v in w], "weightScale": list(ws)}),
    ]
    v1 = {k: v for k, v in args.items() if k not in ("weightAssistMatrix", "smoothScale", "dequantMode")}
    v1 = {k: v for k, v in v1.items() if k not in ("dequantDtype", "quantMode", "groupListType", "tuningConfig")}
    forms.append(("GroupedMatmulSwigluQuantWeightNZ", {**v1, "weight": NzArray(w), "weightScale": ws, "offset": None}))
    for op, form in forms:
        got = ref(op, **form)
        np.testing.assert_array_equal(got["output"], want["output"], err_msg=op)
        np.testing.assert_array_equal(got["outputScale"], want["outputScale"], err_msg=op)


@pytest.mark.parametrize(
    ("ends", "list_type"), [([3, 2], 0), ([-1, 4], 1), ([3, 41], 0), ([30, 11], 1)], ids=["down", "neg", "past", "sum"]
)
def test_gmmsq_bad_group_list_is_161002(ends: list[int], list_type: int, rng: np.random.Generator) -> None:
    args = _gmmsq_args(rng, 40, 32, 16, [1, 2], groupList=np.array(ends, np.int64), groupListType=list_type)
    with pytest.raises(AclnnError) as info:
        ref("GroupedMatmulSwigluQuantV2", **args)
    assert int(info.value.code) == 161002


def _qgmmd_args(rng: np.random.Generator, m: int, k: int, n: int, ends: list[int], **extra: object) -> dict:
    groups = len(ends)
    return {
        "x": rng.uniform(-2, 2, (m, k)).astype(np.float16),
        "weight": rng.integers(-127, 128, (groups, n, k)).astype(np.int8),
        "weightScale": rng.uniform(0.2 / k, 1.0 / k, (groups, n)).astype(np.float32),
        "groupList": np.array(ends, np.int64),
        "biasOptional": None,
        "xScaleOptional": None,
        "xOffsetOptional": None,
        "smoothScaleOptional": None,
        "xQuantMode": "pertoken",
        "transposeWeight": True,
        **extra,
    }


def _torch_qgmmd(args: dict, out0: np.ndarray) -> np.ndarray:
    """The documented formula in torch: smooth, (dynamic) scale, round, per-group GEMM with weight^T, dequantise."""
    x = torch.from_numpy(args["x"]).to(F32)
    if args["smoothScaleOptional"] is not None:
        x = x * torch.from_numpy(args["smoothScaleOptional"]).to(F32)
    xs_arg = args["xScaleOptional"]
    if xs_arg is None:
        scale = x.abs().amax(dim=-1) / 127.0
    else:
        scale = torch.from_numpy(xs_arg).to(F32).expand(x.shape[0])
    q = torch.where(scale[:, None] == 0, torch.zeros_like(x), x / scale[:, None])
    xq = torch.round(q.double()).clamp(-128, 127).long()
    ws = args["weightScale"]
    packed = ws.dtype == np.int64
    wsf = torch.from_numpy(ws.astype(np.int32).view(np.float32) if packed else ws)
    out = torch.zeros(out0.shape, dtype=F32)
    start = 0
    for g, end in enumerate(args["groupList"]):
        acc = (xq[start:end] @ torch.from_numpy(args["weight"][g]).long().T).to(F32)
        v = acc * wsf[g]
        out[start:end] = v if packed else v * scale[start:end, None]
        start = int(end)
    return out.to(torch.float16).numpy()


@pytest.mark.parametrize("case", ["dynamic", "smoothed", "pertoken", "pertensor", "packed"])
def test_qgmmd_matches_torch(case: str, rng: np.random.Generator) -> None:
    args = _qgmmd_args(rng, 24, 64, 48, [5, 5, 21])
    if case == "smoothed":
        args["smoothScaleOptional"] = rng.uniform(0.5, 1.5, 64).astype(np.float16)
    elif case == "pertoken":
        args["xScaleOptional"] = rng.uniform(0.01, 0.03, 24).astype(np.float32)
    elif case == "pertensor":
        args |= {"xScaleOptional": np.array([0.02], np.float32), "xQuantMode": "pertensor"}
    elif case == "packed":
        xs = np.array([0.015], np.float16)
        ws = (args["weightScale"] * np.float32(xs[0])).astype(np.float32)
        args |= {"xScaleOptional": xs, "xQuantMode": "pertensor", "weightScale": ws.view(np.int32).astype(np.int64)}
    out0 = np.full((24, 48), 7.0, np.float16)
    got = ref("QuantGroupedMatmulDequant", **args, out=out0.copy())["out"]
    np.testing.assert_array_equal(got, _torch_qgmmd(args, out0))
    np.testing.assert_array_equal(got[21:], 0.0)  # rows past the last group: 0 (choice)


def test_qgmmd_nz_equals_nd(rng: np.random.Generator) -> None:
    args = _qgmmd_args(rng, 16, 32, 32, [9, 16])
    want = ref("QuantGroupedMatmulDequant", **args)["out"]
    nz = {**args, "weight": NzArray(args["weight"])}
    np.testing.assert_array_equal(ref("QuantGroupedMatmulDequant", **nz)["out"], want)
    np.testing.assert_array_equal(ref("QuantGroupedMatmulDequantWeightNZ", **nz)["out"], want)


def test_qgmmd_dynamic_zero_row_is_zero(rng: np.random.Generator) -> None:
    args = _qgmmd_args(rng, 4, 16, 16, [4])
    args["x"][1] = 0
    got = ref("QuantGroupedMatmulDequant", **args)["out"]
    np.testing.assert_array_equal(got[1], 0)
    assert D.ACL_FLOAT16.numpy == got.dtype
