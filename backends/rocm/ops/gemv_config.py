"""The nk GEMV kernel's shape policy, selectable by ``ACL_GEMV_CONFIG`` (issue 15: decode GEMVs at HBM speed).

The small-M ``nk`` kernel (weight [N, K], K contiguous) can be shaped several ways for a given product:
outputs per warp (``tile``), warps of a block splitting K (``ksplit``), 16-byte weight loads per lane in
flight (``unroll``), threads per block, the weight load's cache hints, and a grid capped at a few blocks
per compute unit that loops over the output tile groups. Which one is fastest is a GPU measurement, so the
choice is a setting: ``auto`` (the default: the measured winner per shape, :func:`auto_preset`), a preset
name, ``key=value`` items, or a preset followed by items that change it (``deep,block=128``). Every choice
computes the same sums in a fixed, documented order (each lane's chunks in K order, the warp's butterfly, the
K parts in warp order); only how K is partitioned differs, so results may differ between choices in the last
bits, within Matmul's accuracy class, never between runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

GEMV_CONFIG_ENV: Final = "ACL_GEMV_CONFIG"


@dataclass(frozen=True)
class NkPolicy:
    """How the nk GEMV kernel's shape is chosen for a product (see :func:`acl_rocm.ops.matmul.nk_shape`)."""

    name: str = "legacy"
    warps: int = 32
    """Target warps per compute unit: K is split between a block's warps while the tiles alone give fewer."""
    unroll: int = 4
    """The most 16-byte weight loads per lane and output issued before the first is used."""
    tile: int = 0
    """Outputs per warp; 0: the legacy rule (2 from M = 2, or where N alone fills the device twice)."""
    budget: tuple[int, int, int] = (8, 4, 4)
    """16-byte weight registers a lane may hold (tile × unroll) for M ≤ 2, M ≤ 8 and M ≤ 16."""
    block: int = 256
    """Threads per block."""
    loads: str = "plain"
    """Weight loads: ``plain`` or ``stream`` (CUDA: ld.global.nc, L1 no-allocate, 256-byte L2 prefetch)."""
    persist: int = 0
    """Blocks per compute unit the grid is capped at (each block looping over tile groups); 0: no cap."""
    grid: int = 0
    """An absolute cap on the grid (tests: makes small products loop); 0: none."""

    def budget_for(self, rows: int) -> int:
        """16-byte weight registers per lane at ``rows`` activation rows."""
        return self.budget[0] if rows <= 2 else self.budget[1] if rows <= 8 else self.budget[2]

    def describe(self) -> str:
        """The policy as ``ACL_GEMV_CONFIG`` items (its name first)."""
        items = [f"{f.name}={_show(getattr(self, f.name))}" for f in dataclasses.fields(self) if f.name != "name"]
        return ",".join([self.name, *items])


PRESETS: Final[dict[str, NkPolicy]] = {
    "legacy": NkPolicy(),
    "stream": NkPolicy("stream", loads="stream"),
    "wave": NkPolicy("wave", loads="stream", persist=4),
    "w16": NkPolicy("w16", warps=16, unroll=8, budget=(8, 8, 4), loads="stream"),
    "deep": NkPolicy("deep", warps=8, unroll=8, tile=2, budget=(16, 8, 4), loads="stream"),
    "row": NkPolicy("row", warps=0, unroll=8, tile=1, budget=(8, 8, 4), block=128, loads="stream"),
}
"""The named choices. ``legacy``: the shape measured on 2026-12-06 (``auto``, the default, picks among these per
shape: :func:`auto_preset`). ``stream``: the same with
streaming weight loads. ``wave``: ``stream`` with at most 4 blocks (32 warps) per compute unit, looping (no
partial second wave). ``w16``: half the warps per unit, so K splits less and each lane keeps up to 8 loads
in flight. ``deep``: two outputs per warp at every M, a quarter of the warps per unit, up to 16 weight
vectors per lane at M ≤ 2. ``row``: one warp per output over all of K (no split, no shared memory),
128-thread blocks."""

_INTS: Final = ("warps", "unroll", "tile", "block", "persist", "grid")


def _show(value: object) -> str:
    return "/".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


AUTO: Final = "auto"
"""The default setting: a preset chosen per product by :func:`auto_preset` (see :func:`policy_for`)."""


def auto_preset(rows: int, n: int, k: int) -> str:
    """The preset ``auto`` takes for ``rows`` activation rows against a weight [N, K]: the measured winners.

    Measured on an H100 80GB (2026-12-06, graph µs per launch, scripts/gemv_config_bench.py, Qwen3-0.6B's
    bf16 decode weights [N x K]; legacy first):

    * M = 1: down [1024 x 3072] legacy 5.13, deep 4.39 (K = 3N: ``deep``); o [1024 x 2048] legacy 3.54,
      w16 3.43 (K = 2N: ``w16``); gate_up [6144 x 1024] legacy 6.61 is the fastest; qkv [4096 x 1024] legacy
      5.06, row 4.95 and w16 4.96 are within 2% (kept ``legacy``).
    * M = 8: qkv legacy 7.76, deep 7.54 (N = 4K: ``deep``); o legacy 5.55, w16 5.35 (K = 2N: ``w16``);
      gate_up legacy 10.6 (w16 / deep 10.7) and down legacy 7.18 (deep 7.23): ``legacy``.

    The bands follow :attr:`NkPolicy.budget`'s (M <= 2, M <= 8); M = 2 and M = 3..7 were not measured and
    take their band's choice; M > 8 (not measured) stays ``legacy``. The boundaries between the measured
    K / N ratios (3, 2, 1/4, 1/6) are not measured either: each rule covers the ratios nearest its shape.
    """
    if rows <= 2:
        if 2 * k >= 5 * n:  # K >= 2.5 N: down (K = 3N)
            return "deep"
        if 2 * k >= 3 * n:  # 1.5 N <= K < 2.5 N: o (K = 2N)
            return "w16"
        return "legacy"
    if rows <= 8:
        if 2 * k >= 3 * n and 2 * k < 5 * n:  # o (K = 2N)
            return "w16"
        if 2 * n >= 7 * k and 2 * n < 9 * k:  # 3.5 K <= N < 4.5 K: qkv (N = 4K)
            return "deep"
    return "legacy"


def policy_for(policy: NkPolicy, rows: int, n: int, k: int) -> NkPolicy:
    """The concrete policy of one product: ``auto``'s preset for (M, N, K), any other policy itself."""
    return PRESETS[auto_preset(rows, n, k)] if policy.name == AUTO else policy


def parse(setting: str) -> NkPolicy:
    """The policy ``setting`` names (empty: ``auto``); ValueError says what is wrong with it.

    ``auto`` is a marker (its fields are ``legacy``'s) that :func:`policy_for` resolves per product; it
    takes no ``key=value`` items (name a preset to change one).
    """
    items = [x.strip() for x in setting.split(",") if x.strip()]
    if not items or items[0] == AUTO:
        if len(items) > 1:
            raise ValueError(f"{AUTO} takes no key=value items (it picks a preset per shape); name a preset instead")
        return NkPolicy(AUTO)
    policy = PRESETS["legacy"]
    if items and "=" not in items[0]:
        if items[0] not in PRESETS:
            raise ValueError(f"unknown preset {items[0]!r} (known: {', '.join(PRESETS)})")
        policy = PRESETS[items.pop(0)]
    changes: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ValueError(f"{item!r}: expected key=value after the preset")
        if key in _INTS:
            if not value.isdigit():
                raise ValueError(f"{key}={value!r}: expected a whole number")
            changes[key] = int(value)
        elif key == "budget":
            parts = value.split("/")
            if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
                raise ValueError(f"budget={value!r}: expected three positive numbers a/b/c (M<=2, M<=8, M<=16)")
            changes[key] = tuple(int(p) for p in parts)
        elif key == "loads":
            if value not in ("plain", "stream"):
                raise ValueError(f"loads={value!r}: expected plain or stream")
            changes[key] = value
        else:
            raise ValueError(f"unknown key {key!r} (known: {', '.join([*_INTS, 'budget', 'loads'])})")
    if changes:
        policy = dataclasses.replace(policy, name=f"{policy.name}+", **changes)  # type: ignore[arg-type]
    if policy.block not in (64, 128, 256, 512, 1024):
        raise ValueError(f"block={policy.block}: expected 64, 128, 256, 512 or 1024 threads")
    if policy.tile not in (0, 1, 2, 4):
        raise ValueError(f"tile={policy.tile}: expected 0 (the legacy rule), 1, 2 or 4")
    if policy.unroll < 1:
        raise ValueError("unroll must be at least 1")
    return policy
