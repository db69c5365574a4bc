"""Programmatic dependent launch (NVIDIA sm_90+), selectable by ``ACL_PDL`` (issue 15: decode's fixed costs).

A kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may be scheduled before the kernel
before it in the stream ends: once every block of that predecessor has executed ``griddepcontrol.launch_dependents``
(``ACL_PDL_LAUNCH_DEPENDENTS()``) or exited. It must execute ``griddepcontrol.wait`` (``ACL_PDL_WAIT()``), which
returns once the predecessor has completed and its memory is visible, before it reads anything the predecessor
wrote or writes anything it reads. Only the GEMV kernels wait (``acl_rocm.kernels.gemv``), so only they are
launched with the attribute; every other kernel compiled while ``ACL_PDL`` is on lets its successor be scheduled
as soon as it starts (:func:`with_trigger`; harmless before a plainly launched successor, which waits for the whole
kernel as always). CUDA 12.3+ captures the programmatic edge into a graph. HIP has no such launch: there, and before
sm_90, the setting is logged and ignored (:meth:`RuntimeProvider.programmatic_unavailable`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

PDL_ENV: Final = "ACL_PDL"
"""``0``: off; ``1`` / ``l2`` / unset: a GEMV prefetches its first weight pass into L2, waits, then loads (correct
whatever the predecessor wrote); ``regs``: it loads its first pass into registers before the wait (correct only
where the predecessor does not write the weight: model parameters)."""
DEFAULT: Final = "1"
"""``ACL_PDL`` where unset: on since 2026-12-06 (H100, results/h100-2026-12-06i: the Qwen3-0.6B bf16 decode step
0.969 ms of GPU busy time a token with it and the short-cache decode kernel's ``bpdl``, against 1.013 without; bf16
and fp32 parity passed, and the decode / GEMV / Qwen3 / paged GPU tier, 736 tests, under it)."""
TRIGGER_ENV: Final = "ACL_PDL_TRIGGER"
"""With ``ACL_PDL`` on: ``1`` / unset, every other kernel triggers its dependents as it starts; ``0``: none does
(a PDL GEMV is then scheduled as its predecessor's blocks exit: it hides only the launch and the memory flush)."""
MODES: Final = {"0": "", "off": "", "": "", "1": "l2", "on": "l2", "l2": "l2", "regs": "regs"}
TRIGGER: Final = "ACL_PDL_LAUNCH_DEPENDENTS();"


def setting(environ: Mapping[str, str]) -> str:
    """The GEMV PDL mode ``ACL_PDL`` asks for: ``""`` (off), ``l2`` or ``regs``; ValueError for another value."""
    value = environ.get(PDL_ENV, DEFAULT).strip().lower()
    if value not in MODES:
        raise ValueError(f"{PDL_ENV}={value!r}: expected 0, 1, l2 or regs")
    return MODES[value]


def triggers(environ: Mapping[str, str]) -> bool:
    """Whether kernels compiled under ``environ`` trigger their dependents early (ACL_PDL on, ACL_PDL_TRIGGER not 0)."""
    try:
        on = setting(environ) != ""
    except ValueError:
        return False  # the GEMV plan refuses the value with its CANN code
    return on and environ.get(TRIGGER_ENV, "1").strip() != "0"


def with_trigger(source: str, name: str) -> str:
    """``source`` with ``ACL_PDL_LAUNCH_DEPENDENTS();`` first in kernel ``name``'s body (unchanged where the body
    is not found, already triggers, or waits itself: a GEMV's successor is a norm, launched plainly)."""
    found = re.search(rf"\b{re.escape(name)}\(([^(){{}};]*)\)\s*\{{", source)
    if found is None or TRIGGER in source or "ACL_PDL_WAIT();" in source[found.end() :]:
        return source
    return f"{source[: found.end()]}\n  {TRIGGER}{source[found.end() :]}"
