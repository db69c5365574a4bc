"""Reference kernels, one module per operator family, registered by name with :func:`kernel`."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from acl_reference.call import ComputedCall, RefCall

RefKernel = Callable[[RefCall], None]

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
    "activation",
    "pointwise_math",
    "grad",
    "norm_quant",
    "index_ops",
    "loss",
    "class_loss",
    "foreach",
    "serving",
    "optim",
    "random",
    "matmul_variants",
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

_KERNELS: dict[str, RefKernel] = {}


def kernel(*names: str, computed: bool = False) -> Callable[[RefKernel], RefKernel]:
    """Register a function as the reference kernel of the operators ``names``.

    ``computed``: the kernel computes wide (float64 / int64) what CANN computes in
    ``plan["compute"]``; its writes then round to that dtype before the output's (a float32 sum
    written to a float64 output keeps its float32 rounding), see :meth:`RefCall.write_computed`.
    """

    def register(fn: RefKernel) -> RefKernel:
        entry = fn
        if computed:

            def entry(k: RefCall) -> None:
                fn(ComputedCall(k.launch, k.driver))

            entry.__name__ = entry.__qualname__ = fn.__name__
            entry.__doc__ = fn.__doc__
        for name in names:
            if name in _KERNELS:
                raise RuntimeError(f"reference kernel {name} registered twice")
            _KERNELS[name] = entry
        return fn

    return register


def all_kernels() -> dict[str, RefKernel]:
    """Every reference kernel by operator name (imports the family modules once)."""
    # every family, every time (imports are cached): one family imported directly beforehand must not
    # make the registry look complete
    for family in FAMILIES:
        importlib.import_module(f"{__name__}.{family}")
    return dict(_KERNELS)
