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
128-thread blocks. (A split of K across blocks in one wave, ``burst``, measured slower on the H100 on 2026-12-06 —
down 5.89 µs against deep's 4.25, o 5.19 against legacy's 3.54 — and was removed.)"""

_INTS: Final = ("warps", "unroll", "tile", "block", "persist", "grid")


def _show(value: object) -> str:
    return "/".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


AUTO: Final = "auto"
"""The default setting: a preset chosen per product by :func:`auto_preset` (see :func:`policy_for`)."""


def auto_preset(rows: int, n: int, k: int) -> str:
    """The preset ``auto`` takes for ``rows`` activation rows against a weight [N, K]: the measured winners.

    Measured on an H100 80GB (2026-12-06, graph µs per launch, scripts/gemv_config_bench.py, Qwen3-0.6B's
    bf16 decode weights [N x K], in two runs, 09:27 and 10:13; legacy first):

    * M = 1, down [1024 x 3072]: legacy 5.13 / 4.77, ``deep`` 4.39 / 4.23 -- the one shape a preset wins in
      both runs (K split over fewer warps, more loads in flight a lane).
    * Not taken: w16 for o [1024 x 2048] (3.43 vs 3.54 in the first run, 3.25 vs 3.18 in the second), deep
      for qkv at M = 8 (7.54 vs 7.76, then 7.38 vs 7.37); gate_up and qkv at M = 1 and every M = 8 shape
      are fastest, or within 2%, as ``legacy``.

    So ``deep`` where M <= 2 and K >= 2.5 N on a layer-sized weight (N >= 256; M = 2 was not measured and
    follows M = 1), ``legacy`` everywhere else.
    """
    if rows <= 2 and n >= 256 and 2 * k >= 5 * n:
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
