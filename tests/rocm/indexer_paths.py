"""LightningIndexer's rocm paths (``ACL_LI_PATH``) forced on a backend, and the calls that test them.

The calls carry what a top-k over computed scores gets wrong first: equal scores (repeated key rows and
all-zero rows, whose score is exactly 0, with the cut inside them), rows not computed and keys not
visible (short actual lengths, the causal mode: -inf, then -1 padding), sparseCount above the keys,
head dims that are not a multiple of 8 (the scalar key loads), more heads than one round, and a
sparseCount above the select kernel's shared sort (its scratch sort).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.spec.ops.sparse_attention import li_case
from acl_rocm.ops.sparse_attention import LI_PATH_ENV, LI_PATHS

PATHS = LI_PATHS


@contextlib.contextmanager
def li_path(backend: Backend, path: str) -> Iterator[None]:
    """``backend`` runs LightningIndexer through ``path`` inside the block."""
    saved = backend.environ  # type: ignore[attr-defined]
    backend.environ = {**saved, LI_PATH_ENV: path}  # type: ignore[attr-defined]
    try:
        yield
    finally:
        backend.environ = saved  # type: ignore[attr-defined]


def with_ties(args: dict[str, Any], zero: slice, copies: slice, source: int) -> dict[str, Any]:
    """Batch 0's keys ``zero`` all zero (score 0) and ``copies`` equal to key ``source`` (equal scores)."""
    key = args["key"].copy()
    key[0, zero] = 0
    key[0, copies] = key[0, source]
    args["key"] = key
    args["weights"] = np.abs(args["weights"])  # scores >= 0: the zero keys sit at the cut
    return args


def indexer_calls(big: bool) -> list[tuple[str, dict[str, Any]]]:
    """(note, args) of the path tests: emulator sized, or decode sized (``big``) for the GPU."""
    rng = np.random.default_rng(31)
    if big:
        keys, heads, d, count = 32768, 64, 128, 2048
        ties = li_case(rng, D.ACL_BF16, 4, 1, keys, heads, 1, d, count, mode=0, values=True)
        ties = with_ties(ties, slice(4000, 9000), slice(20000, 20500), 77)
        return [
            ("decode 32768 keys, ties at the cut", ties),
            (
                "short and causal lengths",
                li_case(rng, D.ACL_BF16, 3, 2, 9000, heads, 1, d, count, lq=[2, 1, 0], lk=[9000, 1500, 0], mode=3),
            ),
            ("paged", li_case(rng, D.ACL_BF16, 2, 1, 6000, heads, 1, d, count, kv_layout="PA_BSND", lk=[6000, 700])),
            ("sparseCount 8192 (scratch sort)", li_case(rng, D.ACL_FLOAT16, 2, 1, 20000, 16, 1, d, 8192, mode=0)),
        ]
    ties = li_case(rng, D.ACL_BF16, 2, 2, 300, 8, 1, 16, 260, lk=[300, 150], mode=0, values=True)
    ties = with_ties(ties, slice(10, 60), slice(200, 230), 7)
    return [
        ("ties at the cut", ties),
        (
            "short and causal lengths",
            li_case(rng, D.ACL_FLOAT16, 3, 3, 200, 4, 1, 24, 150, lq=[3, 1, 0], lk=[200, 37, 0], mode=3, values=True),
        ),
        ("D=20, 70 heads", li_case(rng, D.ACL_BF16, 1, 2, 150, 70, 1, 20, 40, mode=0, values=True)),
        ("paged", li_case(rng, D.ACL_BF16, 2, 1, 300, 4, 1, 32, 64, kv_layout="PA_BSND", lk=[300, 100], block=64)),
        (
            "packed",
            li_case(rng, D.ACL_BF16, 2, 3, 120, 4, 1, 16, 50, q_layout="TND", kv_layout="TND", lq=[3, 2], lk=[120, 60]),
        ),
        ("sparseCount 5120 (scratch sort)", li_case(rng, D.ACL_BF16, 1, 1, 6000, 2, 1, 8, 5120, mode=0, values=True)),
    ]
