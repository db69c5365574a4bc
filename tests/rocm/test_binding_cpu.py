"""The shared runner binding (``acl_rocm.ops.binding``): kernel names, family memo keys, plan-once memo."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from acl_core.backend import Launch
from acl_core.spec.ops import get_spec
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.binding import family_key, memo_plan, named_kernel, named_kernels


def _launch() -> Launch:
    return Launch(get_spec("Add"), {}, {}, 0, 0, None)


def _backend(device: int) -> RocmBackend:
    return cast(RocmBackend, SimpleNamespace(provider=SimpleNamespace(get_device=lambda: device)))


def test_kernels_are_named_after_their_op_and_pass_it_on() -> None:
    seen: list[tuple[str, Launch]] = []
    kernels = named_kernels(("Add", "Mul"), lambda op, launch: seen.append((op, launch)))
    assert {op: k.__name__ for op, k in kernels.items()} == {"Add": "rocm_Add", "Mul": "rocm_Mul"}
    launch = _launch()
    kernels["Mul"](launch)
    assert seen == [("Mul", launch)]
    single = named_kernel("SparseFlashAttention", lambda launch: seen.append(("one", launch)))
    assert single.__name__ == "rocm_SparseFlashAttention"
    single(launch)
    assert seen[-1] == ("one", launch)


def test_family_keys_name_the_device_and_each_variant_set() -> None:
    backend = _backend(3)
    assert family_key(backend, "norm") == "rocm.norm@3"
    assert family_key(backend, "norm", None) == "rocm.norm@3"
    assert family_key(backend, "reduction", "warps") == "rocm.reduction@3:warps"
    assert family_key(backend, "attention_grad", "cudnn", "") == "rocm.attention_grad@3:cudnn:"
    assert family_key(backend, "select", 8, False) == "rocm.select@3:8:False"


def test_a_plan_is_made_once_per_memo_even_when_it_is_none() -> None:
    launch, calls = _launch(), []

    def plan() -> Any:
        calls.append(1)
        return None

    assert memo_plan(launch, "rocm.x@0", plan) is None
    assert memo_plan(launch, "rocm.x@0", plan) is None
    assert calls == [1] and launch.memo == {"rocm.x@0": None}
    assert memo_plan(launch, "rocm.x@1", lambda: "other") == "other"  # another device plans apart


def test_a_failing_plan_leaves_nothing_behind() -> None:
    launch = _launch()

    def plan() -> Any:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        memo_plan(launch, "rocm.x@0", plan)
    assert launch.memo == {}
