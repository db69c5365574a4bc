"""Known GPU architectures and the hardware facts the backend derives from them.

An architecture name is what the device reports: ``gfx942`` (features after a colon are ignored) on
AMD, ``sm_90`` (compute capability 9.0) on NVIDIA. Unknown NVIDIA architectures are derived from the
compute capability; unknown AMD architectures get only what is certain (wavefront size by family).

Policy flags that depend on the environment are resolved here too: ``MXFP8_FORCE_HW=1`` forces the
native microscaling path only where one exists (elsewhere it is refused with the reason), and
``CANN_FAST_TF32=1`` allows TF32 for fp32 GEMM where the hardware has it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

Vendor = Literal["amd", "nvidia"]
Fp8Format = Literal["none", "fnuz", "ocp"]

ENV_MX_FORCE: Final = "MXFP8_FORCE_HW"
ENV_FAST_TF32: Final = "CANN_FAST_TF32"


@dataclass(frozen=True)
class ArchInfo:
    """Hardware facts of one GPU architecture."""

    name: str
    vendor: Vendor
    family: str
    warp_size: int
    matrix_cores: bool
    fp8_format: Fp8Format
    fp8_matmul_hw: bool
    mx_hw: bool
    tf32_hw: bool
    known: bool = True

    @property
    def lane_mask_bits(self) -> int:
        """Width of a ballot / lane mask (one bit per lane)."""
        return self.warp_size


def _amd(name: str, family: str, wave: int, *, matrix: bool, fp8: Fp8Format, mx: bool, tf32: bool) -> ArchInfo:
    return ArchInfo(name, "amd", family, wave, matrix, fp8, fp8 != "none", mx, tf32)


KNOWN_AMD: Final[Mapping[str, ArchInfo]] = {
    a.name: a
    for a in (
        _amd("gfx906", "GCN5 (Vega 20)", 64, matrix=False, fp8="none", mx=False, tf32=False),
        _amd("gfx908", "CDNA1 (MI100)", 64, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx90a", "CDNA2 (MI200)", 64, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx942", "CDNA3 (MI300)", 64, matrix=True, fp8="fnuz", mx=False, tf32=True),
        _amd("gfx950", "CDNA4 (MI350)", 64, matrix=True, fp8="ocp", mx=True, tf32=True),
        _amd("gfx1030", "RDNA2", 32, matrix=False, fp8="none", mx=False, tf32=False),
        _amd("gfx1100", "RDNA3", 32, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx1101", "RDNA3", 32, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx1102", "RDNA3", 32, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx1150", "RDNA3.5", 32, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx1151", "RDNA3.5 (Strix Halo)", 32, matrix=True, fp8="none", mx=False, tf32=False),
        _amd("gfx1200", "RDNA4", 32, matrix=True, fp8="ocp", mx=False, tf32=False),
        _amd("gfx1201", "RDNA4", 32, matrix=True, fp8="ocp", mx=False, tf32=False),
    )
}
"""AMD architectures by gfx name. CDNA3's xf32 counts as a TF32-class fp32 GEMM mode."""

_NVIDIA_FAMILIES: Final = (
    (120, "Blackwell (consumer)"),
    (100, "Blackwell"),
    (90, "Hopper"),
    (89, "Ada Lovelace"),
    (86, "Ampere (consumer)"),
    (80, "Ampere"),
    (75, "Turing"),
    (70, "Volta"),
    (60, "Pascal"),
)
KNOWN_NVIDIA: Final = frozenset({60, 61, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121})


def nvidia_arch(major: int, minor: int) -> ArchInfo:
    """Facts of compute capability ``major.minor``: fp8 matrix from sm_89, MX from sm_100, TF32 from sm_80."""
    cc = major * 10 + minor
    family = next((f for start, f in _NVIDIA_FAMILIES if cc >= start), "pre-Pascal")
    return ArchInfo(
        name=f"sm_{cc}",
        vendor="nvidia",
        family=family,
        warp_size=32,
        matrix_cores=cc >= 70,
        fp8_format="ocp" if cc >= 89 else "none",
        fp8_matmul_hw=cc >= 89,
        mx_hw=cc >= 100,
        tf32_hw=cc >= 80,
        known=cc in KNOWN_NVIDIA,
    )


_GFX = re.compile(r"^gfx[0-9a-f]+$")
_SM = re.compile(r"^sm_(\d+)([0-9])[af]?$")


def lookup(name: str) -> ArchInfo:
    """Facts for an architecture name as a device reports it (``gfx942:sramecc+:xnack-``, ``sm_90``)."""
    base = name.strip().split(":", 1)[0].lower()
    if base in KNOWN_AMD:
        return KNOWN_AMD[base]
    if _GFX.match(base):
        wave = 32 if base.startswith(("gfx10", "gfx11", "gfx12")) else 64
        return ArchInfo(base, "amd", "unknown AMD", wave, False, "none", False, False, False, known=False)
    m = _SM.match(base)
    if m:
        return nvidia_arch(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"unknown GPU architecture {name!r}: expected gfx… or sm_…")


@dataclass(frozen=True)
class ArchPolicy:
    """What the backend may use on an architecture, given the environment."""

    arch: ArchInfo
    mx_use_hw: bool
    tf32_enabled: bool
    refusal: str | None = None


def _flag(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def resolve_policy(arch: ArchInfo, environ: Mapping[str, str] | None = None) -> ArchPolicy:
    """``mx_use_hw`` and TF32 use on ``arch``; ``refusal`` says why a forced setting cannot be honoured."""
    env = os.environ if environ is None else environ
    forced_mx = _flag(env, ENV_MX_FORCE)
    refusal = None
    if forced_mx is True and not arch.mx_hw:
        refusal = (
            f"{ENV_MX_FORCE}=1 asks for native microscaling (MX) GEMM, but {arch.name} ({arch.family}) has no MX "
            "matrix instructions (they need gfx950 or sm_100+); unset MXFP8_FORCE_HW to use the emulated path"
        )
    mx_use_hw = arch.mx_hw and forced_mx is not False
    tf32 = arch.tf32_hw and _flag(env, ENV_FAST_TF32) is True
    return ArchPolicy(arch, mx_use_hw, tf32, refusal)


def with_warp_size(arch: ArchInfo, warp_size: int) -> ArchInfo:
    """``arch`` with the warp size the device actually reports (the measurement wins over the table)."""
    return arch if arch.warp_size == warp_size else replace(arch, warp_size=warp_size)
