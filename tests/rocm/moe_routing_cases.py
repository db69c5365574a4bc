"""The MoE routing ops the routing tests cover, shared by the CPU (emulator) and GPU tiers.

The legacy routing ops (MoeGatingTopKSoftmax, MoeInitRouting, MoeFinalizeRouting) are test_gpu_sort_moe.py's,
the permute gradients test_gpu_moe_grad.py's.
"""

from __future__ import annotations

ROUTING_OPS: tuple[str, ...] = (
    "MoeGatingTopK",
    "MoeTokenPermute",
    "MoeTokenUnpermute",
    "MoeInitRoutingV2",
    "MoeInitRoutingV3",
    "MoeGatingTopKBackward",
)
"""Each op's samples and error samples run against the reference in both tiers (in this order)."""
