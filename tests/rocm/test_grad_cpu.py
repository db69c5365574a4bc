"""The row backward ops (acl_core.spec.ops.grad) on the kernel emulator: what a GPU run cannot observe.

``tests/rocm/test_gpu_grad.py`` proves their values on a GPU; the launches a call makes are only visible through
the emulator's provider, which records them.
"""

from __future__ import annotations

import numpy as np

from acl_core import eager
from acl_core.backend import Backend


def test_layer_norm_backward_is_one_row_and_one_column_launch(emulated: Backend) -> None:
    """dx and both weight gradients come from two device launches (no host round trip between them)."""
    provider = emulated.provider  # type: ignore[attr-defined]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 32)).astype(np.float32)
    mean = x.mean(-1, keepdims=True)
    rstd = (1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)).astype(np.float32)
    args = {"gradOut": x, "input": x, "normalizedShape": [32], "mean": mean, "rstd": rstd}
    eager.run("LayerNormBackward", emulated, **args, outputMask=[True, True, True])
    provider.launches.clear()
    eager.run("LayerNormBackward", emulated, **args, outputMask=[True, True, True])
    names = [launch.name for launch in provider.launches]
    assert sum("norm_grad" in n for n in names) == 1 and sum("col_grad" in n for n in names) == 1, names
