"""FlashAttentionScoreGrad defects that only fp16/bf16 calls show: its 16-bit class must still catch them.

The fp16/bf16 class (:func:`acl_core.spec.ops.attention_grad._grad_scale_16`) allows what every fused flash
backward does: P and dS rounded to the input type before the second products. :class:`FlashNumericsBackend` is
that model (it must pass, tests/conformance/test_attention_grad_class.py); each mutant is the model with one more
defect on 16-bit calls only (float32 calls stay right, so only the 16-bit class can catch it): the softmax scale
applied twice to dQ and dK, the attention mask dropped when P is recomputed, dS transposed before dK, and dV
accumulated in the 16-bit input type (the bound is not so loose that a 16-bit accumulator fits in it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from acl_reference.kernels.attention_grad import GradCall, grad_call, grad_products, write_grads
from tests.conformance.mutants import Mutant

OP = "FlashAttentionScoreGrad"
OPS = "FlashAttentionScoreGrad*"
SIXTEEN = (DataType.ACL_FLOAT16, DataType.ACL_BF16)
Grads = dict[str, np.ndarray]


def rounding_to(dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    """Rounding to ``dtype`` and back to float64."""
    return lambda x: x.astype(dtype).astype(np.float64)


class FlashNumericsBackend(ReferenceBackend):
    """The reference with P and dS rounded to the 16-bit input type before the second products (cuDNN's numerics)."""

    name = "flash-numerics"

    def __init__(self) -> None:
        super().__init__()
        driver = self.driver

        def grad(launch: Launch) -> None:
            k = RefCall(launch, driver)
            c = grad_call(k)
            if k.dtype("query") not in SIXTEEN:
                write_grads(k, c, grad_products(c, c.probabilities()))
                return
            fl = rounding_to(k.read("query").dtype)
            write_grads(k, c, self.sixteen(c, fl))

        self._kernels[OP] = grad

    def sixteen(self, c: GradCall, fl: Callable[[np.ndarray], np.ndarray]) -> Grads:
        """The gradients of a 16-bit call (``fl`` rounds to its type): the model's; a mutant adds its defect."""
        return grad_products(c, c.probabilities(), fl)


class DoubleScaleBackend(FlashNumericsBackend):
    """dQ and dK scaled twice (scale² where it belongs once)."""

    name = "mutant-attention-grad-double-scale"

    def sixteen(self, c: GradCall, fl: Callable[[np.ndarray], np.ndarray]) -> Grads:
        grads = super().sixteen(c, fl)
        return {**grads, "dq": grads["dq"] * c.scale, "dk": grads["dk"] * c.scale}


class DroppedMaskBackend(FlashNumericsBackend):
    """P recomputed without the attention mask (every key kept)."""

    name = "mutant-attention-grad-dropped-mask"

    def sixteen(self, c: GradCall, fl: Callable[[np.ndarray], np.ndarray]) -> Grads:
        return grad_products(c, c.probabilities(np.ones_like(c.keep)), fl)


class TransposedDsBackend(FlashNumericsBackend):
    """dK from dS's transpose where the call is square (dK = scale·dS·Q for scale·dSᵀ·Q)."""

    name = "mutant-attention-grad-transposed-ds"

    def sixteen(self, c: GradCall, fl: Callable[[np.ndarray], np.ndarray]) -> Grads:
        grads = super().sixteen(c, fl)
        if c.q.shape[2] != c.kx.shape[2]:
            return grads
        return {**grads, "dk": c.scale * np.einsum("bnkq,bnqd->bnkd", grads["ds"], c.q)}


class HalfAccumulatedDvBackend(FlashNumericsBackend):
    """dV accumulated over the query rows in the 16-bit input type (each partial sum rounded)."""

    name = "mutant-attention-grad-16bit-dv-sum"

    def sixteen(self, c: GradCall, fl: Callable[[np.ndarray], np.ndarray]) -> Grads:
        grads = super().sixteen(c, fl)
        p = fl(c.probabilities())
        dv = np.zeros(grads["dv"].shape)
        for row in range(p.shape[2]):
            dv = fl(dv + p[:, :, row, :, None] * c.dout[:, :, row, None, :])
        return {**grads, "dv": dv}


MUTANTS = [
    Mutant("attention-grad-double-scale", "tolerance", "fp16/bf16 dQ and dK scaled twice", DoubleScaleBackend, OPS),
    Mutant("attention-grad-dropped-mask", "tolerance", "fp16/bf16 P recomputed without the mask", DroppedMaskBackend,
           OPS),
    Mutant("attention-grad-transposed-ds", "tolerance", "fp16/bf16 dK from dS untransposed (square calls)",
           TransposedDsBackend, OPS),
    Mutant("attention-grad-16bit-dv-sum", "tolerance", "fp16/bf16 dV summed in the input type",
           HalfAccumulatedDvBackend, OPS),
]  # fmt: skip
