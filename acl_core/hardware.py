"""Instruction-set facts of device architectures that capability claims can be checked against.

A backend reports its device's ``architecture`` (``gfx950``, ``sm_90``, ``x86_64``) in its
capabilities; conformance uses these facts to refuse a claim the architecture cannot honour
(``mx_use_hw`` on a device without MX matrix instructions). Backends may derive their own tables
from them; they are deliberately small: only what is certain is answered, anything else is None.
"""

from __future__ import annotations

import re
from typing import Final

MX_AMD: Final = frozenset({"gfx950"})
"""AMD architectures with native microscaling (MX) matrix instructions (CDNA4)."""
MX_NVIDIA_MIN_CC: Final = 100
"""NVIDIA compute capability from which the tensor cores take MX block-scaled operands (Blackwell)."""
CPU_ARCHITECTURES: Final = frozenset(
    {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "ppc64le", "s390x", "riscv64"}
)
"""Host CPU architectures (``platform.machine()``): none has MX matrix instructions."""
KNOWN_AMD_WITHOUT_MX: Final = frozenset(
    {"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102"}
    | {"gfx1150", "gfx1151", "gfx1200", "gfx1201"}
)
"""AMD architectures known to have no MX matrix instructions."""

_SM = re.compile(r"^sm_(\d+)[af]?$")


def has_mx_instructions(architecture: str) -> bool | None:
    """Whether ``architecture`` (as a device reports it) has MX matrix instructions; None when unknown."""
    base = architecture.strip().split(":", 1)[0].lower()
    if base in MX_AMD:
        return True
    if base in KNOWN_AMD_WITHOUT_MX or base in CPU_ARCHITECTURES:
        return False
    m = _SM.match(base)
    if m:
        return int(m.group(1)) >= MX_NVIDIA_MIN_CC
    return None
