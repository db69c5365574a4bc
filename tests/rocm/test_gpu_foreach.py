"""Every Foreach op the rocm backend claims, on the GPU against the reference under its class (GPU tier).

Cases: the specs' own samples (every dtype, lists of 1, 3 and 41 tensors — past one launch's
:data:`~acl_rocm.kernels.foreach.SLOTS` — every scalar carrier, NaN/Inf/±0 where the op is float),
contiguous and, every third sample, as padded, transposed and offset views; then lists whose tensors
cross the block and the per-slot block cap with empty members beside full ones, every ForeachNorm
mode, the kernel-side roundMode check, and the error cases.
``ACL_ROCM_EMULATE=1`` runs it on the CPU kernel emulator (slow: the long sizes shrink).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclCoreError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.foreach import ROWS
from acl_rocm.kernels.foreach import BLOCK, SLOTS
from acl_rocm.ops import foreach as foreach_ops
from acl_rocm.ops.foreach import MAX_BLOCKS_PER_SLOT, PER_THREAD
from tests.rocm.against_reference import assert_errors_match_reference, assert_matches_reference

pytestmark = pytest.mark.gpu

OPS = sorted(foreach_ops.OPS)
EMULATED = os.environ.get("ACL_ROCM_EMULATE") == "1"
PER_BLOCK = BLOCK * PER_THREAD
CAPPED = PER_BLOCK * MAX_BLOCKS_PER_SLOT + 7
"""A tensor longer than one slot's block cap: its blocks must stride over it."""


def test_every_foreach_op_is_claimed(rocm: Backend) -> None:
    assert {r.name for r in ROWS} == set(OPS)
    assert set(OPS) <= set(rocm.capabilities().ops)


@pytest.mark.parametrize("op", OPS)
def test_matches_reference(rocm: Backend, reference: Backend, op: str) -> None:
    samples = list(get_spec(op).samples(np.random.default_rng(2026)))  # type: ignore[misc]
    assert samples, f"{op} produced no samples"
    for i, sample in enumerate(samples):
        if EMULATED and i % 3:
            continue
        assert_matches_reference(rocm, reference, op, dict(sample.args), "contiguous", sample.note)
        if i % 3 == 0:
            for layout in ("padded", "transposed", "offset"):
                assert_matches_reference(rocm, reference, op, dict(sample.args), layout, sample.note)


def _sizes() -> list[int]:
    """Member sizes across the block and cap boundaries, an empty one among them, more members than SLOTS."""
    edges = [1, PER_BLOCK - 1, PER_BLOCK, PER_BLOCK + 1, 0, 3 * PER_BLOCK + 5]
    if not EMULATED:
        edges += [CAPPED, 2 * CAPPED + 1]
    return [edges[i % len(edges)] for i in range(SLOTS + 5)]


def _boundary_args(op: str, rng: np.random.Generator) -> dict[str, Any]:
    """``op``'s arguments with members of :func:`_sizes` (every scalar carrier is represented)."""
    sizes = _sizes()

    def members() -> list[np.ndarray]:
        return [rng.uniform(0.5, 2.0, n).astype(np.float32) for n in sizes]

    if op == "ForeachAddList":  # a one-element alpha tensor
        return {"x1": members(), "x2": members(), "alpha": np.array([-0.5], np.float32)}
    if op == "ForeachMulScalarList":  # an aclScalarList, one value per member
        return {"x": members(), "scalars": [float(v) for v in rng.uniform(-2, 2, len(sizes))]}
    if op == "ForeachAddcmulScalarList":  # a per-member scalars tensor
        scalars = rng.uniform(-2, 2, len(sizes)).astype(np.float32)
        return {"x1": members(), "x2": members(), "x3": members(), "scalars": scalars}
    assert op == "ForeachSqrt"
    return {"x": members()}


@pytest.mark.parametrize("op", ["ForeachAddList", "ForeachMulScalarList", "ForeachAddcmulScalarList", "ForeachSqrt"])
def test_members_cross_block_cap_and_slot_boundaries(rocm: Backend, reference: Backend, op: str) -> None:
    args = _boundary_args(op, np.random.default_rng(7))
    note = f"{len(_sizes())} members, sizes {sorted(set(_sizes()))}"
    assert_matches_reference(rocm, reference, op, args, "contiguous", note)
    assert_matches_reference(rocm, reference, op, args, "offset", note)


@pytest.mark.parametrize("cap", [1, 2, 128])
def test_fewer_blocks_a_slot_walk_the_same_elements(rocm: Backend, reference: Backend, cap: int) -> None:
    """ACL_FOREACH_BLOCKS (forced on the runner): members larger than cap blocks walk their slot grid-stride."""
    runner = rocm.foreach  # type: ignore[attr-defined]
    runner.forced_blocks = cap
    try:
        for op in ("ForeachAddList", "ForeachSqrt"):
            args = _boundary_args(op, np.random.default_rng(cap))
            assert_matches_reference(rocm, reference, op, args, "contiguous", f"{cap} blocks a slot")
            assert_matches_reference(rocm, reference, op, args, "offset", f"{cap} blocks a slot")
    finally:
        runner.forced_blocks = None


@pytest.mark.parametrize("config", ["scan", "grid2d"])
def test_each_slot_lookup_walks_the_same_elements(rocm: Backend, reference: Backend, config: str) -> None:
    """ACL_FOREACH_CONFIG (forced on the runner): members of unequal sizes across two launches, either lookup."""
    runner = rocm.foreach  # type: ignore[attr-defined]
    runner.forced_config = config
    try:
        for op in ("ForeachAddList", "ForeachAddcmulScalarList"):
            args = _boundary_args(op, np.random.default_rng(3))
            assert_matches_reference(rocm, reference, op, args, "contiguous", f"{config} slot lookup")
            assert_matches_reference(rocm, reference, op, args, "offset", f"{config} slot lookup")
    finally:
        runner.forced_config = None


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 0.0, math.inf, -math.inf])
def test_norm_every_mode(rocm: Backend, reference: Backend, p: float) -> None:
    rng = np.random.default_rng(11)
    n = 3 * PER_BLOCK + 1 if EMULATED else CAPPED
    xs = [rng.normal(0, 1, m).astype(np.float32) for m in (1, 7, n)]
    xs[1][2] = 0.0
    assert_matches_reference(rocm, reference, "ForeachNorm", {"x": xs, "scalar": p}, "contiguous", f"p={p}")


def test_round_mode_outside_1_to_6_is_refused_on_the_device(rocm: Backend) -> None:
    xs = [np.full(9, 2.5, np.float32), np.full(3, -1.5, np.float32)]
    outs = [np.full(9, 7.0, np.float32), np.full(3, 7.0, np.float32)]
    with pytest.raises(AclCoreError) as err:
        eager.run("ForeachRoundOffNumber", rocm, x=xs, roundMode=np.array([9], np.int8), out=outs)
    assert err.value.code == 161002 and "roundMode" in str(err.value)
    ok = eager.run("ForeachRoundOffNumber", rocm, x=xs, roundMode=np.array([1], np.int8))["out"]
    assert [list(o) for o in ok] == [[2.0] * 9, [-2.0] * 3]


@pytest.mark.parametrize("op", OPS)
def test_errors_match_the_reference(rocm: Backend, reference: Backend, op: str) -> None:
    assert_errors_match_reference(rocm, reference, op)
