"""Helpers of the reference tests whose ops copy values exactly (movement, index ops) against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acl_core.errors import AclnnError
from tests.conftest import assert_close
from tests.ops.torch_ref import ref, to_numpy


def data(rng: np.random.Generator, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Random values of ``dtype`` (small integers, so every dtype holds them exactly)."""
    if dtype is np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(-8, 9, size=shape).astype(dtype)


def same(got: np.ndarray, want: torch.Tensor | np.ndarray) -> None:
    """Exact equality (the ops copy values; nothing is rounded) with the dtype checked too."""
    want_np = to_numpy(want) if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.dtype == want_np.dtype, f"{got.dtype} != {want_np.dtype}"
    assert_close(got, want_np, atol=0, rtol=0)


def fails(code: int, op: str, **kwargs: object) -> AclnnError:
    """Run ``op`` on the reference and return the AclnnError it must raise with ``code``."""
    with pytest.raises(AclnnError) as exc:
        ref(op, **kwargs)
    assert exc.value.code == code, exc.value.message
    return exc.value
