"""Every operator has a declared accuracy class; the few still on the per-dtype table say why, and are these."""

from __future__ import annotations

import numpy as np

from acl_core.spec.accuracy import KINDS, RESOLVED_KINDS, accuracy_of
from acl_core.spec.ops import all_specs, get_spec

STILL_ON_THE_TABLE = {
    "GeluV2",
    "FastGelu",
    "BatchNorm",
    "GroupedMatmulV5",
    "FlashAttentionScore",
    "FlashAttentionVarLenScore",
    "PromptFlashAttention",
    "IncreFlashAttention",
    "FusedInferAttentionScore",
    "RotaryPositionEmbedding",
    "ApplyRotaryPosEmb",
    "RecurrentGatedDeltaRule",
    "SparseFlashAttention",
    "AscendQuant",
    "AscendQuantV3",
    "AscendAntiQuant",
    "DynamicQuant",
    "DynamicQuantV2",
    "DynamicMxQuant",
    "QuantMatmulV3",
    "QuantMatmulV4",
    "WeightQuantBatchMatmulV2",
    # versions (spec/ops/versions.py) run their base's kernel and take its class
    *(f"FusedInferAttentionScoreV{v}" for v in (2, 3, 4, 5)),
    *(f"PromptFlashAttentionV{v}" for v in (2, 3)),
    *(f"IncreFlashAttentionV{v}" for v in (2, 3, 4)),
    "DynamicQuantV3",
    "DynamicQuantV4",
    "GroupedMatmulV4",
    "FlashAttentionScoreV2",
    "FlashAttentionScoreV3",
    "FlashAttentionScoreV4",
    "FlashAttentionVarLenScoreV2",
    "FlashAttentionVarLenScoreV4",
    "FlashAttentionVarLenScoreV5",
    "DynamicMxQuantV2",
    "WeightQuantBatchMatmulV3",
    "ApplyRotaryPosEmbV2",
    "WeightQuantBatchMatmulNz",  # WeightQuantBatchMatmulV2's class: its weight read from FRACTAL_NZ
    "RotaryPositionEmbeddingV2",
    "InterleaveRope",
    # the kv_cache family's rotary ops (the rotation negates half of x, as RotaryPositionEmbedding's)
    "KvRmsNormRopeCache",
    "RopeWithSinCosCacheV2",
    "RopeWithSinCosCache",
    "QkvRmsNormRopeCache",  # the same rotation after RmsNorm, beside INT8 quantised caches
    "RotaryPositionEmbeddingGrad",  # the rotation negates half of dy·sin and of x, as RotaryPositionEmbedding's
}
"""TODO.md's issue-14 section lists these with their reasons (each spec's ``table(reason)``)."""

BY_CALL = {
    "QuantMatmulV5": {"reduction", "table"},
    "QuantMatmulWeightNz": {"reduction", "table"},
    # float32 under the composite bound of its products; fp16/bf16 under it plus P's and dS's roundings to 16 bits
    **{f"FlashAttentionScoreGrad{v}": {"composite"} for v in ("", "V2", "V3", "V4")},
}
"""Ops whose class depends on the call (``by_call``), with the kinds it may resolve to."""


def _specs() -> list:
    return [get_spec(s) if isinstance(s, str) else s for s in all_specs()]


def test_every_op_declares_a_class() -> None:
    assert [s.name for s in _specs() if accuracy_of(s) is None] == []
    assert all(c.kind in RESOLVED_KINDS for s in _specs() for c in accuracy_of(s).classes)  # type: ignore[union-attr]


def test_the_ops_still_on_the_table_are_the_listed_ones_with_reasons() -> None:
    on_table = {s.name: accuracy_of(s) for s in _specs() if (a := accuracy_of(s)) is not None and a.kind == "table"}
    assert set(on_table) == STILL_ON_THE_TABLE
    assert all(len(a.reason) > 40 for a in on_table.values() if a is not None)


def test_by_call_classes_resolve_to_the_listed_kinds_each_table_choice_with_its_reason() -> None:
    by_call = {s.name: accuracy_of(s) for s in _specs() if (a := accuracy_of(s)) is not None and a.kind == "by_call"}
    assert set(by_call) == set(BY_CALL)
    for name, accuracy in by_call.items():
        assert accuracy is not None
        assert {c.kind for c in accuracy.classes} == BY_CALL[name], name
        assert all(c.kind in KINDS and c.kind != "by_call" for c in accuracy.classes)
        assert all(len(c.reason) > 40 for c in accuracy.classes if c.kind == "table"), name


def test_every_sample_resolves_to_a_compared_kind() -> None:
    for spec in _specs():
        accuracy = accuracy_of(spec)
        if accuracy is None or accuracy.kind != "by_call" or spec.samples is None:
            continue
        seen = {accuracy_of(spec, s.args).kind for s in spec.samples(np.random.default_rng(0))}  # type: ignore[union-attr]
        assert seen == BY_CALL[spec.name], (spec.name, seen)  # the samples exercise every kind it may take


def test_families_that_left_the_table() -> None:
    kinds = {s.name: accuracy_of(s).kind for s in _specs()}  # type: ignore[union-attr]
    for op in ("Var", "VarCorrection", "VarMean", "Std", "StdMeanCorrection", "GroupNorm", "AddLayerNorm"):
        assert kinds[op] == "composite", op
    for op in ("NpuFormatCast", "TransMatmulWeight", "MoeInitRouting"):
        assert kinds[op] == "exact", op
    for op in (
        "Convolution",
        "MatmulWeightNz",
        "MoeFinalizeRouting",
        "MatmulAllReduce",
        "AllGatherMatmul",
        "MatmulReduceScatter",
    ):
        assert kinds[op] == "reduction", op
    assert kinds["SwiGlu"] == "ulp" and kinds["MoeGatingTopKSoftmax"] == "composite"
