"""Rows of the ops suite for Nonzero and MaskedSelect, beside torch.nonzero / torch.masked_select.

Nonzero over a 64 MiB float32 [4096, 4096] with 10% of the elements non-zero; MaskedSelect of the same matrix
under a bool mask of 50%. Both sides include what makes the result's size known on the host: torch's calls
synchronise themselves, acl's launch is timed with its stream synchronisation, at which out's view shape is
written back. GB/s over the bytes read (the input, the mask) and written (the selected rows). The small size
shrinks the matrix for a CPU run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from acl_core.eager import to_device

if TYPE_CHECKING:
    from acl_tools.bench.ops import Suite

OPS: tuple[str, ...] = ("Nonzero", "MaskedSelect")
"""The ``--only`` names of these rows."""

FULL, SMALL = (4096, 4096), (256, 512)
DENSITY, MASK_DENSITY = 0.1, 0.5


def run_cases(suite: Suite) -> None:
    """Add every row (only where ``--only`` lets it run)."""
    shape = FULL if suite.sizes.norm[0] >= 8192 else SMALL
    x = suite.rng.random(shape, dtype=np.float32)
    x[suite.rng.random(shape) >= DENSITY] = 0.0
    if suite.wanted("Nonzero"):
        _nonzero(suite, x)
    if suite.wanted("MaskedSelect"):
        _masked_select(suite, x, suite.rng.random(shape) < MASK_DENSITY)


def _label(x: np.ndarray, what: str) -> str:
    from acl_tools.bench.ops import _mib

    return f"{_mib(x.nbytes)} [{','.join(map(str, x.shape))}] {what}"


def _nonzero(suite: Suite, x: np.ndarray) -> None:
    from acl_tools.bench.ops import Case

    def acl() -> tuple[Callable[[], None], Any]:
        return suite.prepared("Nonzero", {"self": to_device(x, suite.backend)})

    def torch_fn() -> Callable[[], object]:
        t = suite.torch.from_numpy(x).to(suite.device)
        return lambda: suite.torch.nonzero(t)

    hits = int(np.count_nonzero(x))
    case = Case("Nonzero", _label(x, f"{DENSITY:.0%} non-zero"), "float32", "GB/s", x.nbytes + hits * 16)
    suite.case(case, acl, torch_fn, "Nonzero")


def _masked_select(suite: Suite, x: np.ndarray, mask: np.ndarray) -> None:
    from acl_tools.bench.ops import Case

    def acl() -> tuple[Callable[[], None], Any]:
        args = {"self": to_device(x, suite.backend), "mask": to_device(mask, suite.backend)}
        return suite.prepared("MaskedSelect", args)

    def torch_fn() -> Callable[[], object]:
        t, m = (suite.torch.from_numpy(a).to(suite.device) for a in (x, mask))
        return lambda: suite.torch.masked_select(t, m)

    nbytes = x.nbytes + mask.nbytes + int(np.count_nonzero(mask)) * 4
    case = Case("MaskedSelect", _label(x, f"mask {MASK_DENSITY:.0%}"), "float32", "GB/s", nbytes)
    suite.case(case, acl, torch_fn, "MaskedSelect")
