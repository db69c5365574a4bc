"""FlashAttentionScoreGrad and RotaryPositionEmbeddingGrad on the rocm backend above the provider seam, on a CPU.

The row, add, store, copy, widen and sink kernels are built with g++ (``kernel_emulator.py``) and run on host
memory; the fake provider's host BLAS computes the GEMMs from the exact GemmCalls the op issues. Spec
samples (every mask / window / GQA / pse / sink form, and layouts a GEMM cannot read, which take the copy)
are compared with the reference under the op's accuracy class, and a tiny temporary budget splits calls into
many chunks.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.attention_grad import AttentionGradRunner, GradProblem
from tests.rocm.against_reference import class_problems
from tests.rocm.kernel_emulator import EmulatedProvider, available


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[RocmBackend, EmulatedProvider]:
    """A backend whose kernels run on the CPU and whose GEMMs run on the host BLAS stand-in."""
    reason = available()
    if reason:
        pytest.skip(reason)
    build = Path(tempfile.gettempdir()) / f"acl-rocm-emulated-{os.getuid()}"
    build.mkdir(exist_ok=True)
    EmulatedProvider.build_dir = build
    provider = EmulatedProvider(blas=True)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path_factory.mktemp("kc"))})
    backend.runtime.ensure_device(0)
    return backend, provider


def _compare(backend: Backend, reference: Backend, op: str, args: dict[str, Any], note: str, layout: str) -> None:
    """rocm's outputs under the op's accuracy class (the table's per-dtype defaults), as the suite judges them."""
    expected = eager.run(op, reference, op_args=dict(args))
    actual = eager.run(op, backend, layout=layout, guard=True, op_args=dict(args))
    assert actual.keys() == expected.keys()
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{op} [{note}] layout={layout}: " + "; ".join(p.message for p in problems)


def _samples(op: str, picks: tuple[int, ...]) -> list[tuple[str, dict[str, Any]]]:
    spec = get_spec(op)
    assert spec.samples is not None
    found = list(spec.samples(np.random.default_rng(5)))
    return [(found[i].note, dict(found[i].args)) for i in picks]


# indices into FlashAttentionScoreGrad's samples: GQA (BSND), MQA (BSH), fp16 BSH, bf16 SBH, the full masks (BNSD,
# BSND), every sparse mode, the float16 causal, both pse forms (BNSD, SBH), the max -inf row (the bf16 33x40 sample
# is left to the GPU tier: the emulator spends 5 s on it)
BASE_PICKS = (4, 5, 6, 13, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28)


def test_samples_match_the_reference_when_emulated(emulated, reference: Backend) -> None:
    backend, _ = emulated
    for note, args in _samples("FlashAttentionScoreGrad", BASE_PICKS):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")


def test_views_a_gemm_cannot_read_are_copied_first(emulated, reference: Backend) -> None:
    backend, _ = emulated
    for note, args in _samples("FlashAttentionScoreGrad", (3, 18)):
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "transposed")
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "padded")


def test_sink_gradient_matches_the_reference_when_emulated(emulated, reference: Backend) -> None:
    backend, _ = emulated
    spec = get_spec("FlashAttentionScoreGradV3")
    assert spec.samples is not None
    with_sink = [s for s in spec.samples(np.random.default_rng(5)) if s.args.get("sinkInOptional") is not None]
    assert with_sink
    for s in with_sink[:4]:
        _compare(backend, reference, "FlashAttentionScoreGradV3", dict(s.args), s.note, "contiguous")


def test_small_budget_splits_into_chunks_with_the_same_result(emulated, reference: Backend) -> None:
    backend, _ = emulated
    runner = backend.attention_grad  # type: ignore[attr-defined]
    assert isinstance(runner, AttentionGradRunner)
    saved = runner.budget
    runner.budget = 600  # a few rows of one head per chunk
    try:
        for note, args in _samples("FlashAttentionScoreGrad", (4, 23, 24)):
            _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
    finally:
        runner.budget = saved


def test_causal_chunks_skip_the_keys_no_row_keeps(emulated) -> None:
    backend, _ = emulated
    runner = backend.attention_grad  # type: ignore[attr-defined]
    p = GradProblem(1, 2, 2, 2048, 2048, 8, D.ACL_BF16, "BNSD", 0.1, (-4096, 0, 0), None, None, None, {})
    chunks = runner.chunks(p)
    work = sum(c.heads * c.rows * c.cols for c in chunks)
    assert work < 0.7 * 2 * 2048 * 2048  # about half the dense products
    assert {c.row0 for c in chunks} == set(range(0, 2048, 512))


def test_rope_grad_samples_match_the_reference_when_emulated(emulated, reference: Backend) -> None:
    backend, _ = emulated
    spec = get_spec("RotaryPositionEmbeddingGrad")
    assert spec.samples is not None
    for i, s in enumerate(spec.samples(np.random.default_rng(5))):
        layouts = ("contiguous", "transposed", "padded") if i % 7 == 0 else ("contiguous",)
        for layout in layouts:
            _compare(backend, reference, "RotaryPositionEmbeddingGrad", dict(s.args), s.note, layout)


def test_rope_grad_without_x_writes_dx_only_when_emulated(emulated, reference: Backend) -> None:
    backend, _ = emulated
    rng = np.random.default_rng(4)
    dy = rng.uniform(-1, 1, (2, 5, 3, 8)).astype(np.float32)
    cos, sin = (rng.uniform(-1, 1, (1, 5, 1, 8)).astype(np.float32) for _ in range(2))
    sentinel = np.full((1, 5, 1, 8), 7.0, np.float32)
    args = {"dy": dy, "cos": cos, "sin": sin, "mode": 1, "dcosOut": sentinel, "dsinOut": sentinel}
    got = eager.run("RotaryPositionEmbeddingGrad", backend, op_args=args)
    want = eager.run("RotaryPositionEmbeddingGrad", reference, op_args=args)
    assert (got["dcosOut"] == 7.0).all() and (got["dsinOut"] == 7.0).all()
    assert not class_problems("RotaryPositionEmbeddingGrad", args, {"dxOut": got["dxOut"]}, {"dxOut": want["dxOut"]})


def test_no_product_takes_tf32_even_where_the_policy_allows_it(emulated, reference: Backend) -> None:
    backend, provider = emulated
    saved = backend.policy
    backend.policy = replace(saved, tf32_enabled=True)  # type: ignore[misc]  # CANN_FAST_TF32 on TF32 hardware
    try:
        provider.gemms.clear()
        note, args = _samples("FlashAttentionScoreGrad", (4,))[0]
        _compare(backend, reference, "FlashAttentionScoreGrad", args, note, "contiguous")
        assert provider.gemms and len(provider.gemms) % 5 == 0  # five products a chunk
        assert not any(call.fast_tf32 for call in provider.gemms)
    finally:
        backend.policy = saved  # type: ignore[misc]
