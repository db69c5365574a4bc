"""The declared schema of :attr:`Launch.plan <acl_core.backend.Launch.plan>`: what validation derived for a kernel.

Every rule that writes a plan key declares it once with :func:`declare` (its name, its type as the docs
show it, a one-line meaning, and the Python types a value may have). docs/KERNELS.md lists, per
operator, the keys its kernel receives. :func:`check_plan` refuses an undeclared key or a value of the
wrong type; validation runs it only while :data:`CHECKING` is on (the test suite turns it on, as does
``ACL_CORE_CHECK_PLAN=1``), so phase 1 pays nothing for it in production.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acl_core.dtypes import DataType


@dataclass(frozen=True)
class PlanKey:
    """One declared plan key."""

    name: str
    type_doc: str
    """The value's type as docs/KERNELS.md shows it, e.g. ``DataType`` or ``'hf32' | 'fp16' | None``."""
    meaning: str
    accepts: tuple[type, ...]
    """The Python types a value may have (None's type where the key may hold None)."""
    choices: tuple[object, ...] | None = None
    """The only values allowed, when the key is an enumeration."""


PLAN_KEYS: dict[str, PlanKey] = {}
"""Every declared key, by name."""

CHECKING = os.environ.get("ACL_CORE_CHECK_PLAN", "") not in ("", "0")
"""Whether validation checks each plan it builds against :data:`PLAN_KEYS` (a debug check)."""


class PlanSchemaError(AssertionError):
    """A rule wrote a plan key it did not declare, or a value of a type it did not declare: a defect of acl-core."""


def declare(
    name: str, type_doc: str, meaning: str, accepts: type | tuple[type, ...], choices: tuple[object, ...] | None = None
) -> PlanKey:
    """Declare plan key ``name`` (once; a second, different declaration of the same name is a defect)."""
    key = PlanKey(name, type_doc, meaning, accepts if isinstance(accepts, tuple) else (accepts,), choices)
    found = PLAN_KEYS.setdefault(name, key)
    if found != key:
        raise PlanSchemaError(f"plan key {name!r} is declared twice, differently: {found} and {key}")
    return key


def check_plan(op: str, plan: Mapping[str, Any]) -> None:
    """Raise :class:`PlanSchemaError` when ``plan`` of operator ``op`` holds an undeclared key or a wrong value."""
    for name, value in plan.items():
        key = PLAN_KEYS.get(name)
        if key is None:
            raise PlanSchemaError(
                f"{op}: plan key {name!r} is not declared (declare it with acl_core.spec.plan.declare)"
            )
        if not isinstance(value, key.accepts):
            raise PlanSchemaError(f"{op}: plan[{name!r}] is a {type(value).__name__}; declared {key.type_doc}")
        if key.choices is not None and value not in key.choices:
            raise PlanSchemaError(f"{op}: plan[{name!r}]={value!r}; declared {key.type_doc}")


_NONE = type(None)
_SEQ = (tuple, list)

# keys written by the shared validator and by rules of several families
declare("outputs", "dict[str, OutInfo | list[OutInfo]]", "each output's shape and dtype from the output rule", dict)
declare("compute", "DataType", "the dtype the op computes in (promoted from its inputs)", DataType)
declare(
    "precision",
    "'hf32' | 'fp16' | None",
    "what cubeMathType does to a cube op's float32 operands: 'hf32' (cubeMathType 1 ALLOW_FP32_DOWN_PRECISION "
    "or 3 USE_HF32) rounds each operand to 10 mantissa bits, nearest-even (acl_core.spec.ops.matmul.round_to_hf32); "
    "'fp16' (2 USE_FP16) rounds each to float16, nearest-even; None (0 KEEP_DTYPE, and every non-float32 compute) "
    "keeps them; products accumulate in float32 either way",
    (str, _NONE),
    ("hf32", "fp16", None),
)
declare("dim", "int", "the dimension the op works along, made non-negative", int)
declare(
    "dims", "tuple[int, ...]", "the dimensions the op works along (reduced, permuted, flipped), non-negative", tuple
)
declare("axes", "tuple[int, ...]", "the normalised axes (the trailing dims the norm covers), non-negative", tuple)
declare(
    "axis",
    "int | None",
    "the axis a quantisation scale or a scatter index runs along (negative: from the end; None: one per-tensor scale)",
    (int, _NONE),
)
declare(
    "sizes", "Sequence[int]", "the sizes of the pieces along `dim` (split) or the output's spatial sizes (conv)", _SEQ
)
declare(
    "mode",
    "int | str",
    "the op's mode decoded: an attention sparse mode (int), a quantisation or rounding mode (str)",
    (int, str),
)
