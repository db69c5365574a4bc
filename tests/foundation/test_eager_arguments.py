"""eager.run refuses arguments it cannot pass with a typed 161002, never a silent default or a bare ValueError."""

from __future__ import annotations

import numpy as np
import pytest

from acl_core import eager
from acl_core.errors import AclnnError

INVALID = 161002


def test_unknown_keyword_is_refused_not_dropped() -> None:
    """A misspelt argument used to be ignored, running the op with the parameter's default."""
    x = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(AclnnError) as info:
        eager.run("Add", self=x, other=x, alpha=1.0, alpah=2.0)
    assert info.value.code == INVALID and "alpah" in info.value.message


@pytest.mark.parametrize(
    ("name", "value"),
    [("self", "x"), ("self", [[1.0, 2.0], [3.0]]), ("self", np.array([object()])), ("self", np.array(["a"]))],
)
def test_values_no_tensor_holds_are_refused(name: str, value: object) -> None:
    """Strings, ragged lists and object arrays as tensors used to escape as ValueError."""
    with pytest.raises(AclnnError) as info:
        eager.run("Abs", **{name: value})
    assert info.value.code == INVALID and name in info.value.message


@pytest.mark.parametrize("value", ["2", b"2", np.ones(3)])
def test_scalars_must_be_numbers(value: object) -> None:
    """A numeric string used to be parsed by float(); an array escaped as TypeError."""
    with pytest.raises(AclnnError) as info:
        eager.run("Muls", self=np.ones(3, dtype=np.float32), other=value)
    assert info.value.code == INVALID


def test_tensor_list_with_a_bad_member_frees_the_good_ones() -> None:
    """Members placed before the one that fails are freed, not left to the garbage collector."""
    from acl_core.plugin import get_backend

    rt = get_backend().runtime
    rt.ensure_device()
    live = len(rt.memory.live())
    with pytest.raises(AclnnError):
        eager.run("Cat", tensors=[np.ones(3, dtype=np.float32), "x"], dim=0)
    assert len(rt.memory.live()) == live
