"""Rows of the ops suite for the MoE routing ops, beside torch's usual formulations of them.

MoeTokenPermute, MoeInitRoutingV2 (dropless, expert cumsum) and MoeTokenUnpermute over a prefill batch of an MoE
layer (4096 bf16 tokens of 2048, top-8 of 64 experts; ``--sizes full``), MoeGatingTopK as DeepSeek-V3's router
(4096 tokens over 256 experts, 8 groups, top-4 groups, top-8), MoeDistributeDispatchV2 / CombineV2 on one rank
(the all-gather a copy; on rocm each ``ACL_MC2_ROUTE`` and ``ACL_MC2_ROWS`` choice forced for a row of its own,
again at a decode step's tokens), and MoeTokenPermuteGrad / MoeTokenUnpermuteGrad as a training step's backward
(4096 tokens of 4096). GB/s over the bytes both sides must move: rows read and written, indices, probabilities.
The small size shrinks every shape for a CPU run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.dtypes import DataType as D
from acl_core.eager import to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = (
    "MoeTokenPermute",
    "MoeGatingTopK",
    "MoeInitRoutingV2",
    "MoeTokenUnpermute",
    "MoeDistributeDispatchV2",
    "MoeDistributeCombineV2",
    "MoeTokenPermuteGrad",
    "MoeTokenUnpermuteGrad",
)
"""The ``--only`` names of these rows."""

PERMUTE: dict[str, tuple[int, int, int, int]] = {"small": (256, 256, 8, 64), "full": (4096, 2048, 8, 64)}
"""MoeTokenPermute rows: (tokens, hidden, top-k, experts) per suite size (full: a prefill batch of an MoE layer)."""
MOE_GRAD: dict[str, tuple[int, int, int]] = {"small": (256, 256, 8), "full": (4096, 4096, 8)}
"""MoeTokenPermuteGrad / MoeTokenUnpermuteGrad rows: (tokens, hidden, top-k) per suite size (full: a training
step's MoE layer backward, bf16)."""
GATING: dict[str, tuple[int, int, int, int, int]] = {"small": (64, 64, 8, 4, 8), "full": (4096, 256, 8, 4, 8)}
"""MoeGatingTopK rows: (tokens, experts, groups, kept groups, k) per suite size (full: DeepSeek-V3's router)."""
MC2_ROUTES = ("block", "grid")
"""rocm's ACL_MC2_ROUTE choices timed beside the default (forced on its mc2 runner): a DispatchV2 row each."""
MC2_ROWS = ("row",)
"""rocm's ACL_MC2_ROWS choices timed beside the default (forced on its mc2 runner, default routing): a row each."""
DISPATCH_DECODE_TOKENS = 64
"""The decode-sized MoeDistributeDispatchV2 rows' tokens (each ACL_MC2_ROUTE and ACL_MC2_ROWS timed there too)."""

BF16 = D.ACL_BF16
"""The dtype of every row's token rows (MoeGatingTopK's logits are float32)."""
ITEM = BF16.info.storage_bits // 8
"""Bytes of a bf16 element."""

Make = Callable[[], tuple[Callable[[], None], Any]]
"""An acl side: plans the call, returns (launch, cleanup)."""


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    size = "full" if suite.sizes.full else "small"
    tokens, hidden, top_k, experts = PERMUTE[size]
    if suite.wanted("MoeTokenPermute"):
        _permute(suite, tokens, hidden, top_k, experts, _routing(suite, tokens, top_k, experts))
    _gating_top_k(suite, *GATING[size])
    idx = _routing(suite, tokens, top_k, experts)
    _init_routing_v2(suite, tokens, hidden, top_k, experts, idx)
    _unpermute(suite, tokens, hidden, top_k)
    _distribute(suite, tokens, hidden, top_k, experts, idx)
    _permute_grad(suite, *MOE_GRAD[size])
    _unpermute_grad(suite, *MOE_GRAD[size])


# ------------------------------------------------------------------ the frame the rows share
def _routing(suite: Suite, tokens: int, top_k: int, experts: int) -> np.ndarray:
    """Each token's ``top_k`` distinct experts of ``experts`` (int32 [tokens, top_k])."""
    return np.stack([suite.rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)


def _torch(suite: Suite, host: np.ndarray) -> Any:
    """``host`` as a torch tensor on the torch device (same dtype)."""
    return suite.torch.from_numpy(host).to(suite.device)


def _label(tokens: int, hidden: int, top_k: int, experts: int | None = None, what: str = "") -> str:
    """A row's shape column: tokens x hidden, top-k (of the experts), then ``what``."""
    return f"{tokens}x{hidden} top-{top_k}" + (f"/{experts}" if experts else "") + what


def _row(
    suite: Suite, op: str, label: str, nbytes: int, note: str, acl: Make, torch_fn: Callable[[], Any], dtype: D = BF16
) -> None:
    """Time ``op``'s row (GB/s over ``nbytes``; the row claims ``op``) beside torch."""
    from acl_tools.bench.ops import Case

    suite.case(Case(op, label, dtype.short, "GB/s", nbytes, note=note), acl, torch_fn, op)


# ------------------------------------------------------------------ the rows
def _permute(suite: Suite, tokens: int, hidden: int, top_k: int, experts: int, idx: np.ndarray) -> None:
    """MoeTokenPermute (bf16 tokens, top-k of E experts, none dropped) vs torch's stable argsort + index_select.

    The metric counts the permuted rows read and written and the indices: what both sides must move.
    """
    op = "MoeTokenPermute"

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"tokens": suite.array((tokens, hidden), BF16), "indices": to_device(idx, suite.backend)}
        return suite.prepared(op, {**args, "numOutTokens": 0, "paddedMode": False})

    def torch_fn() -> Callable[[], object]:
        x = suite.tensor((tokens, hidden), BF16)
        flat = _torch(suite, idx).reshape(-1)

        def run() -> object:
            order = suite.torch.argsort(flat, stable=True)
            return x.index_select(0, order // top_k), suite.torch.argsort(order)

        return run

    rows = tokens * top_k
    nbytes = 2 * rows * hidden * ITEM + 2 * rows * 4
    _row(suite, op, _label(tokens, hidden, top_k, experts), nbytes, "torch: argsort + index_select", acl, torch_fn)


def _gating_top_k(suite: Suite, tokens: int, experts: int, groups: int, kept: int, k: int) -> None:
    """DeepSeek-V3 routing (sigmoid + bias, top-2-sum group scores, kept groups, top-k, scaled) vs vLLM's torch."""
    op = "MoeGatingTopK"
    if not suite.wanted(op):
        return
    dtype = D.ACL_FLOAT
    scale, eps = 2.5, 1e-20
    bias_host = (suite.rng.standard_normal(experts) * 0.1).astype(np.float32)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "x": suite.array((tokens, experts), dtype),
            "biasOptional": to_device(bias_host, suite.backend),
        }
        args |= {"k": k, "kGroup": kept, "groupCount": groups, "groupSelectMode": 1, "renorm": 0}
        args |= {"normType": 1, "outFlag": False, "routedScalingFactor": scale, "eps": eps}
        return suite.prepared(op, args)

    def torch_fn() -> Callable[[], object]:
        torch = suite.torch
        x = suite.tensor((tokens, experts), dtype)
        bias = _torch(suite, bias_host)

        def run() -> object:
            scores = x.sigmoid()
            biased = scores + bias
            grouped = biased.view(tokens, groups, -1).topk(2, dim=-1).values.sum(-1)
            chosen = grouped.topk(kept, dim=-1).indices
            mask = torch.zeros_like(grouped).scatter_(1, chosen, 1.0)
            mask = mask.unsqueeze(-1).expand(tokens, groups, experts // groups).reshape(tokens, experts)
            top = biased.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1).indices
            weights = scores.gather(1, top)
            return weights / (weights.sum(-1, keepdim=True) + eps) * scale, top

        return run

    nbytes = tokens * experts * 4 + tokens * k * 8
    note = "torch: sigmoid, group top-2 sums, topk, mask, topk, gather, renorm (vLLM's grouped_topk)"
    label = f"[{tokens},{experts}] {groups} groups top-{kept}, top-{k}"
    _row(suite, op, label, nbytes, note, acl, torch_fn, dtype)


def _init_routing_v2(suite: Suite, tokens: int, hidden: int, top_k: int, experts: int, idx: np.ndarray) -> None:
    """MoeInitRoutingV2 dropless with the expert cumsum vs torch's stable argsort, index_select and bincount."""
    op = "MoeInitRoutingV2"
    if not suite.wanted(op):
        return

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"x": suite.array((tokens, hidden), BF16), "expertIdx": to_device(idx, suite.backend)}
        args |= {"activeNum": 0, "expertCapacity": 0, "expertNum": experts, "dropPadMode": 0}
        return suite.prepared(op, {**args, "expertTokensCountOrCumsumFlag": 1, "expertTokensBeforeCapacityFlag": False})

    def torch_fn() -> Callable[[], object]:
        torch = suite.torch
        x = suite.tensor((tokens, hidden), BF16)
        flat = _torch(suite, idx).reshape(-1)

        def run() -> object:
            order = torch.argsort(flat, stable=True)
            cumsum = torch.bincount(flat, minlength=experts).cumsum(0)
            return x.index_select(0, order // top_k), torch.argsort(order), cumsum

        return run

    rows = tokens * top_k
    nbytes = 2 * rows * hidden * ITEM + 2 * rows * 4
    note = "torch: argsort, index_select, argsort, bincount + cumsum"
    _row(suite, op, _label(tokens, hidden, top_k, experts, " dropless"), nbytes, note, acl, torch_fn)


def _ep_args(experts: int) -> dict[str, Any]:
    """The EP attributes of a one-rank (acl_core_self) MoeDistribute call."""
    from acl_core.spec.collective import SELF_GROUP_NAME

    args: dict[str, Any] = {"groupEp": SELF_GROUP_NAME, "epWorldSize": 1, "epRankId": 0, "moeExpertNum": experts}
    args |= {"groupTp": "", "tpWorldSize": 0, "tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0}
    return args | {"sharedExpertRankNum": 0, "globalBs": 0, "commAlg": None}


def _distribute(suite: Suite, tokens: int, hidden: int, top_k: int, experts: int, idx: np.ndarray) -> None:
    """MoeDistributeDispatchV2 / CombineV2 on one rank (the all-gather is a copy) vs torch's routing and sum."""
    weights = suite.rng.uniform(0, 1, (tokens, top_k)).astype(np.float32)
    wanted = suite.wanted("MoeDistributeDispatchV2")
    routes = suite.choices("mc2", "forced_route", MC2_ROUTES) if wanted else []
    copies = suite.choices("mc2", "forced_rows", MC2_ROWS)[1:] if wanted else []
    for route in routes:
        _dispatch_row(suite, tokens, hidden, top_k, experts, idx, route)
    for rows in copies:
        _dispatch_row(suite, tokens, hidden, top_k, experts, idx, None, rows)
    decode = DISPATCH_DECODE_TOKENS
    for route in routes if tokens > decode else []:
        _dispatch_row(suite, decode, hidden, top_k, experts, idx[:decode], route)  # where the one block may win
    for rows in copies if tokens > decode else []:
        _dispatch_row(suite, decode, hidden, top_k, experts, idx[:decode], None, rows)
    _combine_row(suite, tokens, hidden, top_k, experts, idx, weights)


def _dispatch_row(
    suite: Suite,
    tokens: int,
    hidden: int,
    top_k: int,
    experts: int,
    idx: np.ndarray,
    route: str | None,
    rows_copy: str | None = None,
) -> None:
    """One MoeDistributeDispatchV2 row; ``route`` (``ACL_MC2_ROUTE``) and ``rows_copy`` (``ACL_MC2_ROWS``) forced
    on rocm's mc2 runner while timed (None: as set)."""
    op = "MoeDistributeDispatchV2"

    def make() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"x": suite.array((tokens, hidden), BF16)}
        args |= {"expertIds": to_device(idx, suite.backend), "scalesOptional": None}
        args |= {"xActiveMaskOptional": None, "expertScalesOptional": None}
        args |= {"quantMode": 0, "expertTokenNumsType": 0}
        return suite.prepared(op, args | _ep_args(experts))

    def acl() -> tuple[Callable[[], None], Any]:
        return suite.forced("mc2", "forced_rows", rows_copy, lambda: suite.forced("mc2", "forced_route", route, make))

    def torch_fn() -> Callable[[], object]:
        torch = suite.torch
        x = suite.tensor((tokens, hidden), BF16)
        flat = _torch(suite, idx).reshape(-1)

        def run() -> object:
            gathered = x.clone()  # a one-rank all-gather
            order = torch.argsort(flat, stable=True)
            counts = torch.bincount(flat, minlength=experts)
            return gathered.index_select(0, order // top_k), counts.cumsum(0), counts

        return run

    nbytes = (tokens + tokens * top_k) * hidden * ITEM + 2 * tokens * hidden * 2
    note = "torch: clone (the all-gather), stable argsort, index_select, bincount + cumsum"
    note = note if route is None else f"ACL_MC2_ROUTE={route}; {note}"
    note = note if rows_copy is None else f"ACL_MC2_ROWS={rows_copy}; {note}"
    _row(suite, op, _label(tokens, hidden, top_k, experts, ", 1 rank"), nbytes, note, acl, torch_fn)


def _combine_row(
    suite: Suite, tokens: int, hidden: int, top_k: int, experts: int, idx: np.ndarray, weights: np.ndarray
) -> None:
    """The MoeDistributeCombineV2 row on the one-rank dispatch's tables."""
    from acl_core.spec.ops.mc2 import one_rank_dispatch_tables

    op = "MoeDistributeCombineV2"
    if not suite.wanted(op):
        return
    rows = tokens * top_k
    tables = one_rank_dispatch_tables(idx, None, experts)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {"expandX": suite.array((rows, hidden), BF16)}
        args |= {
            "expertIds": to_device(idx, suite.backend),
            "assistInfoForCombine": to_device(tables["assist"], suite.backend),
        }
        args |= {"epSendCounts": to_device(tables["counts"], suite.backend)}
        args |= {"expertScales": to_device(weights, suite.backend), "tpSendCountsOptional": None}
        args |= {"xActiveMaskOptional": None, "activationScaleOptional": None, "weightScaleOptional": None}
        args |= {"groupListOptional": None, "expandScalesOptional": None, "sharedExpertXOptional": None}
        args |= {"outDtype": 0, "commQuantMode": 0, "groupListType": 0}
        return suite.prepared(op, args | _ep_args(experts))

    def torch_fn() -> Callable[[], object]:
        torch = suite.torch
        y = suite.tensor((rows, hidden), BF16)
        flat = _torch(suite, idx).reshape(-1)
        w = _torch(suite, weights)

        def run() -> object:
            gathered = y.clone()  # a one-rank all-gather
            where = torch.argsort(torch.argsort(flat, stable=True))  # each copy's row
            picked = gathered.index_select(0, where).view(tokens, top_k, hidden).double()
            return (picked * w.double().unsqueeze(-1)).sum(1).to(y.dtype)

        return run

    nbytes = 2 * rows * hidden * ITEM + tokens * hidden * ITEM
    note = "torch: clone (the all-gather), argsort twice, index_select, float64 weighted sum"
    _row(suite, op, _label(tokens, hidden, top_k, experts, ", 1 rank"), nbytes, note, acl, torch_fn)


def _unpermute(suite: Suite, tokens: int, hidden: int, top_k: int) -> None:
    """MoeTokenUnpermute (bf16 rows, bf16 probs) vs torch's index_select, multiply and sum over the top-k."""
    op = "MoeTokenUnpermute"
    if not suite.wanted(op):
        return
    rows = tokens * top_k
    order = suite.rng.permutation(rows).astype(np.int32)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "permutedTokens": suite.array((rows, hidden), BF16),
            "sortedIndices": to_device(order, suite.backend),
        }
        args |= {"probsOptional": suite.array((tokens, top_k), BF16), "paddedMode": False}
        return suite.prepared(op, {**args, "restoreShapeOptional": None})

    def torch_fn() -> Callable[[], object]:
        permuted, probs = suite.tensor((rows, hidden), BF16), suite.tensor((tokens, top_k), BF16)
        index = _torch(suite, order).long()

        def run() -> object:
            picked = permuted.index_select(0, index).view(tokens, top_k, hidden)
            return (picked * probs.unsqueeze(-1)).sum(dim=1)

        return run

    nbytes = (rows + tokens) * hidden * ITEM + rows * (4 + ITEM)
    note = "torch: index_select, multiply by probs, sum over top-k"
    _row(suite, op, _label(tokens, hidden, top_k), nbytes, note, acl, torch_fn)


def _permute_grad(suite: Suite, tokens: int, hidden: int, top_k: int) -> None:
    """MoeTokenPermuteGrad (bf16 rows) vs torch's index_select, reshape and sum over the top-k."""
    op = "MoeTokenPermuteGrad"
    if not suite.wanted(op):
        return
    rows = tokens * top_k
    order = suite.rng.permutation(rows).astype(np.int32)

    def acl() -> tuple[Callable[[], None], Any]:
        args = {
            "permutedOutputGrad": suite.array((rows, hidden), BF16),
            "sortedIndices": to_device(order, suite.backend),
        }
        return suite.prepared(op, {**args, "numTopk": top_k, "paddedMode": False})

    def torch_fn() -> Callable[[], object]:
        grad = suite.tensor((rows, hidden), BF16)
        index = _torch(suite, order).long()

        def run() -> object:
            return grad.index_select(0, index).view(tokens, top_k, hidden).sum(dim=1)

        return run

    nbytes = (rows + tokens) * hidden * ITEM + rows * 4
    note = "torch: index_select, reshape, sum over top-k"
    _row(suite, op, _label(tokens, hidden, top_k), nbytes, note, acl, torch_fn)


def _unpermute_grad(suite: Suite, tokens: int, hidden: int, top_k: int) -> None:
    """MoeTokenUnpermuteGrad (bf16 rows and probs) vs torch: the weighted rows put back, probs' dot products."""
    op = "MoeTokenUnpermuteGrad"
    if not suite.wanted(op):
        return
    rows = tokens * top_k
    order = suite.rng.permutation(rows).astype(np.int32)

    def acl() -> tuple[Callable[[], None], Any]:
        args: dict[str, Any] = {
            "permutedTokens": suite.array((rows, hidden), BF16),
            "unpermutedTokensGrad": suite.array((tokens, hidden), BF16),
            "sortedIndices": to_device(order, suite.backend),
        }
        args |= {"probsOptional": suite.array((tokens, top_k), BF16), "paddedMode": False}
        return suite.prepared(op, {**args, "restoreShapeOptional": None})

    def torch_fn() -> Callable[[], object]:
        permuted, grad = suite.tensor((rows, hidden), BF16), suite.tensor((tokens, hidden), BF16)
        probs = suite.tensor((tokens, top_k), BF16)
        index = _torch(suite, order).long()

        def run() -> object:
            picked = permuted.index_select(0, index).view(tokens, top_k, hidden)
            probs_grad = suite.torch.bmm(picked, grad.unsqueeze(-1)).squeeze(-1)
            weighted = (grad.unsqueeze(1) * probs.unsqueeze(-1)).view(rows, hidden)
            return suite.torch.empty_like(permuted).index_copy_(0, index, weighted), probs_grad

        return run

    nbytes = (2 * rows + tokens) * hidden * ITEM + rows * (4 + 2 * ITEM)
    note = "torch: index_select + bmm (probs grad), multiply + index_copy_ (rows)"
    _row(suite, op, _label(tokens, hidden, top_k), nbytes, note, acl, torch_fn)
