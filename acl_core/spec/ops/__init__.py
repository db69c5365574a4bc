"""The operator registry: every aclnn operator, declared once, one module per family.

A family module defines ``SPECS``, a list of :class:`~acl_core.spec.opspec.OpSpec`. The registry
imports the families listed in ``FAMILIES`` the first time an operator is looked up.
"""

from __future__ import annotations

import importlib
import threading

from acl_core.spec.opspec import OpSpec

FAMILIES: tuple[str, ...] = (
    "elementwise",
    "reduction",
    "norm",
    "matmul",
    "convolution",
    "conv_grad",
    "batch_norm_grad",
    "attention",
    "linear_attention",
    "sparse_attention",
    "mla",
    "moe",
    "movement",
    "quant",
    "layout",
    "mc2",
    "versions",
    "activation",
    "pointwise_math",
    "grad",
    "norm_quant",
    "index_ops",
    "loss",
    "class_loss",
    "foreach",
    "optim",
    "random",
    "matmul_variants",
    "serving",
    "kv_cache",
    "quant_vllm",
    "gmm_quant",
    "norm_rope_cache",
    "attention_grad",
    "pooling",
    "index_shape",
    "bitwise",
    "pointwise_ternary",
    "padding",
    "select",
)

_lock = threading.Lock()
_specs: dict[str, OpSpec] = {}


def _load() -> dict[str, OpSpec]:
    if _specs:
        return _specs
    with _lock:
        if not _specs:
            found: dict[str, OpSpec] = {}
            for family in FAMILIES:
                module = importlib.import_module(f"{__name__}.{family}")
                for spec in module.SPECS:
                    if spec.name in found:
                        raise RuntimeError(f"operator {spec.name} is declared twice ({family})")
                    found[spec.name] = spec
            _specs.update(found)
    return _specs


def get_spec(name: str) -> OpSpec:
    """The spec of operator ``name`` (no ``aclnn`` prefix); KeyError when none is declared."""
    return _load()[name]


def all_specs() -> dict[str, OpSpec]:
    """Every declared operator by name."""
    return dict(_load())


__all__ = ["FAMILIES", "OpSpec", "all_specs", "get_spec"]
