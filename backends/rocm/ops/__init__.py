"""Operator code of the HIP backend, one module per family: from a validated Launch to kernel launches.

Each family module defines ``RUNNER``, a class built with the backend whose ``kernels()`` maps
operator names to kernels. The backend builds every family listed in ``FAMILIES``, in order, so a
later family may use an earlier one (matmul uses elementwise for its gathers). A family names its kernels
``rocm_<op>`` and keeps a signature's plan in ``launch.memo`` through :mod:`acl_rocm.ops.binding`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

FAMILIES: tuple[str, ...] = (
    "elementwise",
    "matmul",
    "mc2",
    "convolution",
    "conv_grad",
    "batch_norm_grad",
    "grouped_matmul",
    "attention",
    "linear_attention",
    "sparse_attention",
    "movement",
    "index_ops",
    "reduction",
    "loss",
    "class_loss",
    "norm",
    "grad",
    "sort",
    "moe",
    "index_put",
    "quant_matmul",
    "quant",
    "layout",
    "norm_quant",
    "random",
    "foreach",
    "matmul_variants",
    "serving",
    "kv_cache",
    "quant_vllm",
    "gmm_quant",
    "mla",
    "optim",
    "norm_rope_cache",
    "attention_grad",
    "pooling",
    "index_shape",
    "padding",
    "select",
)


def build_runners(backend: RocmBackend) -> dict[str, Any]:
    """One runner per family, by family name."""
    runners: dict[str, Any] = {}
    for family in FAMILIES:
        module = importlib.import_module(f"{__name__}.{family}")
        runners[family] = module.RUNNER(backend)
        setattr(backend, family, runners[family])  # earlier families are reachable from later ones
    return runners
