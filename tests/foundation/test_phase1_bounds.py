"""Phase 1 stays bounded and refuses what no call may do (issue 17, items 8 and 9).

Item 8: phase 1 does no work proportional to element counts or attribute values before the checks
that would refuse the call (SplitTensor on a 2^32 x 2^32 stride-0 view used to build 2^32 section
sizes before looking at the output list). Item 9: a written tensor whose elements share storage
(a stride-0 output, an in-place operand that is a broadcast view) and an input of 2^63 elements or
more are refused in phase 1 with 161002, instead of failing in phase 2 or succeeding silently.

The sweeps run phase 1 of every declared operator on adversarial views, each call under a deadline
and the whole sweep under an address-space cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from acl_core import aclnn, eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.formats import Format as F
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Role
from acl_core.tensor import AclTensor
from tests.foundation.adversarial import (
    DEADLINE,
    INTERNAL,
    Baseline,
    memory_cap,
    phase1,
    run_phase1,
    view,
)

INVALID = 161002


def _float_tensor(backend: Backend, shape: tuple[int, ...]) -> tuple[eager.DeviceArray, AclTensor]:
    da = eager.to_device(np.zeros(shape, np.float32), backend)
    return da, da.tensor()


# ----------------------------------------------------------------------------- item 8
@pytest.mark.parametrize(
    ("side", "fragment"),
    [
        (2**32, "an int64_t counts at most"),  # the fuzzer's case: 2^64 elements
        (2**31, "holds 1 tensors; expected 2147483648"),  # 2^62 elements: a legal input, one section each
    ],
)
def test_split_tensor_of_a_huge_broadcast_view_is_refused_at_once(backend: Backend, side: int, fragment: str) -> None:
    """side x side over 4 bytes, one-element sections, an output list of one: refused, not 2^31 sizes built."""
    store, _ = _float_tensor(backend, (1,))
    huge = aclnn.aclCreateTensor([side, side], 0, [0, 0], 0, 2, [1], store.address)
    _out_store, out = _float_tensor(backend, (1, 4))
    spec = get_spec("SplitTensor")
    with memory_cap():
        ret, message = phase1(
            spec, {"self": huge, "splitSections": 1, "dim": 0, "out": aclnn.aclCreateTensorList([out])}, DEADLINE
        )
    assert ret == INVALID and fragment in message, message


@pytest.mark.parametrize("op", ["PromptFlashAttention", "IncreFlashAttention", "FusedInferAttentionScore"])
def test_attention_on_a_huge_batch_is_refused_before_per_batch_lists(op: str, baselines: dict[str, Baseline]) -> None:
    """A stride-0 batch of 2^32 on every input: attentionOut is checked before B lengths are listed."""
    base = baselines[op]
    args = dict(base.args)
    for _label, p, index, t in base.tensors():
        if p.role is Role.IN and t.rank and t.numel:
            strides = list(t.strides)
            strides[0] = 0
            args = _replaced(base, args, p.name, index, view(t, [2**32, *t.view_dims[1:]], strides))
    with memory_cap():
        ret, message = run_phase1(base, args)
    assert ret == INVALID and "attentionOut has shape" in message, (ret, message)


def _replaced(base: Baseline, args: dict[str, Any], name: str, index: int | None, t: AclTensor) -> dict[str, Any]:
    return Baseline(base.spec, args).with_tensor(name, index, t)


# ----------------------------------------------------------------------------- item 9
def test_a_stride_0_output_is_refused(backend: Backend) -> None:
    _keep, x = _float_tensor(backend, (2, 3))
    out_store, _ = _float_tensor(backend, (3,))
    out = aclnn.aclCreateTensor([2, 3], 0, [0, 1], 0, 2, [3], out_store.address)
    _ws, ex, ret = aclnn.aclnnAddGetWorkspaceSize(x, x, aclnn.aclCreateScalar(1.0, 0), out)
    assert ret == INVALID and ex is None
    assert "out is written, but elements of its view share storage" in aclnn.aclGetRecentErrMsg()


def test_an_in_place_operand_that_is_a_broadcast_view_is_refused(backend: Backend) -> None:
    _keep, other = _float_tensor(backend, (2, 3))
    row_store, _ = _float_tensor(backend, (3,))
    broadcast = aclnn.aclCreateTensor([2, 3], 0, [0, 1], 0, 2, [3], row_store.address)
    ret = aclnn.aclnnInplaceAddGetWorkspaceSize(broadcast, other, aclnn.aclCreateScalar(1.0, 0))[2]
    assert ret == INVALID and "selfRef is written" in aclnn.aclGetRecentErrMsg()
    # the same broadcast view is a fine input
    _keep_out, out = _float_tensor(backend, (2, 3))
    assert aclnn.aclnnAddGetWorkspaceSize(broadcast, other, aclnn.aclCreateScalar(1.0, 0), out)[2] == 0


def test_operands_that_are_the_very_view_written_stay_accepted(backend: Backend) -> None:
    """CANN's in-place forms: an input that is the output's own view is not an overlap."""
    _keep, x = _float_tensor(backend, (2, 3))
    alpha = aclnn.aclCreateScalar(1.0, 0)
    assert aclnn.aclnnInplaceAddGetWorkspaceSize(x, x, alpha)[2] == 0
    assert aclnn.aclnnAddGetWorkspaceSize(x, x, alpha, x)[2] == 0
    # but an output overlapping part of an input is refused, as before
    shifted = aclnn.aclCreateTensor([1, 3], 0, [3, 1], 2, 2, [2, 3], x.data)
    row = aclnn.aclCreateTensor([1, 3], 0, [3, 1], 0, 2, [2, 3], x.data)
    assert aclnn.aclnnAddGetWorkspaceSize(row, row, alpha, shifted)[2] == INVALID
    assert "overlaps" in aclnn.aclGetRecentErrMsg()


def test_an_input_of_2_64_elements_is_refused(backend: Backend) -> None:
    keep, _ = _float_tensor(backend, (1,))
    huge = aclnn.aclCreateTensor([2**32, 2**32], 0, [0, 0], 0, 2, [1], keep.address)
    _out_keep, out = _float_tensor(backend, ())
    _ws, _ex, ret = aclnn.aclnnReduceSumGetWorkspaceSize(huge, aclnn.aclCreateIntArray([0, 1]), False, 0, out)
    assert ret == INVALID and "an int64_t counts at most" in aclnn.aclGetRecentErrMsg()


@pytest.mark.parametrize(
    ("dims", "strides", "overlaps"),
    [
        ((2, 3), (3, 1), False),  # contiguous
        ((3, 2), (1, 3), False),  # transposed
        ((2, 3), (8, 2), False),  # gaps
        ((2, 3), (0, 1), True),  # a broadcast row
        ((1, 3), (0, 1), False),  # stride 0 on a dim of one element repeats nothing
        ((3, 2), (1, 2), True),  # 6 elements on 5 locations
        ((3, 2), (2, 3), False),  # interleaved without a collision: 0 2 4 / 3 5 7
        ((3, 3), (2, 4), True),  # interleaved: 4 = 2*2 = 1*4
        ((2, 2**40), (2**41 + 1, 2), False),  # large, settled by the stride test alone
    ],
)
def test_self_overlap_of_a_view(dims: tuple[int, ...], strides: tuple[int, ...], overlaps: bool) -> None:
    t = AclTensor.create(dims, D.ACL_FLOAT, strides, 0, F.ACL_FORMAT_ND, None, 0x1000)
    assert t.overlaps_itself is overlaps


# ----------------------------------------------------------------------------- sweeps over every operator
def test_every_declared_operator_has_a_valid_call_to_sweep_from(baselines: dict[str, Baseline]) -> None:
    assert sorted(baselines) == sorted(all_specs())


def _plain(t: AclTensor) -> bool:
    return not t.format.is_private and t.numel > 0


def _huge_inputs(base: Baseline) -> Iterator[tuple[str, dict[str, Any]]]:
    """Inputs swapped for stride-0 views with a dim 2^32 times larger, or every dim huge."""
    for label, p, index, t in base.tensors():
        if p.role is not Role.IN or not _plain(t) or not t.rank:
            continue
        for d in range(t.rank):
            dims, strides = list(t.view_dims), list(t.strides)
            dims[d], strides[d] = dims[d] << 32, 0
            yield f"{label} dim {d} x 2^32", base.with_tensor(p.name, index, view(t, dims, strides))
        side = 1 << (62 // t.rank)
        yield f"{label} every dim {side}", base.with_tensor(p.name, index, view(t, [side] * t.rank, [0] * t.rank))
    for d in range(8):  # one dim grown on every input at once, so shape rules agree and the rule goes deeper
        args, changed = dict(base.args), False
        for _, p, index, t in base.tensors():
            if p.role is Role.IN and _plain(t) and t.rank > d:
                dims, strides = list(t.view_dims), list(t.strides)
                dims[d], strides[d] = dims[d] << 30, 0
                args = _replaced(base, args, p.name, index, view(t, dims, strides))
                changed = True
        if changed:
            yield f"every input's dim {d} x 2^30", args


def test_phase1_is_bounded_on_huge_broadcast_inputs(baselines: dict[str, Baseline]) -> None:
    """Any answer is fine (a huge broadcast input is legal), but within the deadline and not a defect."""
    problems, calls = [], 0
    with memory_cap():
        for name, base in baselines.items():
            for label, args in _huge_inputs(base):
                calls += 1
                ret, message = run_phase1(base, args)
                if ret == "overrun" or ret in INTERNAL:
                    problems.append(f"{name} ({label}): {ret} {message}")
    assert calls > 1000 and not problems, "\n".join(problems)


def test_overlapping_outputs_are_refused_for_every_operator(baselines: dict[str, Baseline]) -> None:
    problems, calls = [], 0
    with memory_cap():
        for name, base in baselines.items():
            for label, p, index, t in base.tensors():
                if not p.writes or not _plain(t) or t.numel < 2:
                    continue
                calls += 1
                broadcast = view(t, list(t.view_dims), [0] * t.rank)
                ret, message = run_phase1(base, base.with_tensor(p.name, index, broadcast))
                if ret != INVALID or "share storage" not in message:
                    problems.append(f"{name} ({label} with stride 0): {ret} {message}")
    assert calls > 200 and not problems, "\n".join(problems)


def test_inputs_of_2_64_elements_are_refused_for_every_operator(baselines: dict[str, Baseline]) -> None:
    problems, calls = [], 0
    with memory_cap():
        for name, base in baselines.items():
            for label, p, index, t in base.tensors():
                if p.role is not Role.IN or not _plain(t) or (p.max_rank is not None and p.max_rank < 2):
                    continue
                calls += 1
                dims = [2**32, 2**32, *t.view_dims[2:]]  # a rank-1 input becomes rank 2: no rank-1 view is that big
                ret, message = run_phase1(base, base.with_tensor(p.name, index, view(t, dims, [0] * len(dims))))
                if ret != INVALID or "an int64_t counts at most" not in message:
                    problems.append(f"{name} ({label} of {dims}): {ret} {message}")
    assert calls > 250 and not problems, "\n".join(problems)
