"""Helpers to run the reference backend and PyTorch's CPU result side by side."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from acl_core import eager
from acl_core.errors import AclnnError
from acl_core.spec.opspec import OpSpec

TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}


def to_torch(a: np.ndarray) -> torch.Tensor:
    """A torch CPU tensor with the same dtype and values (bf16 through float32)."""
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """NumPy copy of a torch tensor (bf16 as ml_dtypes.bfloat16)."""
    import ml_dtypes

    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.detach().numpy().copy()


def ref(op: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``op`` on the reference backend through the Pythonic layer."""
    return eager.run(op, "reference", **kwargs)


def check_samples_and_errors(spec: OpSpec, seed: int = 7) -> None:
    """Every conformance sample of ``spec`` runs on the reference with outputs (notes unique); every error
    sample fails with its declared code."""
    rng = np.random.default_rng(seed)
    assert spec.samples is not None and spec.error_samples is not None
    notes = []
    for sample in spec.samples(rng):
        assert ref(spec.name, **sample.args), f"{spec.name} {sample.note}: no outputs"
        notes.append(sample.note)
    assert notes and len(notes) == len(set(notes)), f"{spec.name}: duplicate sample notes"
    for err in spec.error_samples(rng):
        with pytest.raises(AclnnError) as info:
            ref(spec.name, **err.args)
        assert int(info.value.code) == err.code, f"{spec.name} {err.note}: {info.value}"
