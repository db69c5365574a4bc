"""Every operator has a declared accuracy class; the few still on the per-dtype table say why, and are these."""

from __future__ import annotations

from acl_core.spec.accuracy import accuracy_of
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
    "AscendQuant",
    "AscendQuantV3",
    "AscendAntiQuant",
    "DynamicQuant",
    "DynamicQuantV2",
    "DynamicMxQuant",
    "QuantMatmulV3",
    "QuantMatmulV4",
    "QuantMatmulV5",
    "WeightQuantBatchMatmulV2",
    # versions (spec/ops/versions.py) run their base's kernel and take its class
    *(f"FusedInferAttentionScoreV{v}" for v in (2, 3, 4)),
    *(f"PromptFlashAttentionV{v}" for v in (2, 3)),
    *(f"IncreFlashAttentionV{v}" for v in (2, 3, 4)),
    "DynamicQuantV3",
    "DynamicQuantV4",
    "GroupedMatmulV4",
    "FlashAttentionScoreV2",
    "FlashAttentionVarLenScoreV2",
    "DynamicMxQuantV2",
    "WeightQuantBatchMatmulV3",
    "ApplyRotaryPosEmbV2",
}
"""TODO.md's issue-14 section lists these with their reasons (each spec's ``table(reason)``)."""


def _specs() -> list:  # type: ignore[type-arg]
    return [get_spec(s) if isinstance(s, str) else s for s in all_specs()]


def test_every_op_declares_a_class() -> None:
    assert [s.name for s in _specs() if accuracy_of(s) is None] == []


def test_the_ops_still_on_the_table_are_the_listed_ones_with_reasons() -> None:
    on_table = {s.name: accuracy_of(s) for s in _specs() if (a := accuracy_of(s)) is not None and a.kind == "table"}
    assert set(on_table) == STILL_ON_THE_TABLE
    assert all(len(a.reason) > 40 for a in on_table.values() if a is not None)


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
