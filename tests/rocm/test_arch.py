"""The architecture table and the policies derived from it (MXFP8_FORCE_HW, CANN_FAST_TF32)."""

from __future__ import annotations

import pytest

from acl_rocm.arch import lookup, nvidia_arch, resolve_policy, with_warp_size


def test_gfx1151_is_rdna35_wave32_without_fp8_mx_or_tf32() -> None:
    a = lookup("gfx1151")
    assert (a.vendor, a.warp_size, a.lane_mask_bits) == ("amd", 32, 32)
    assert "RDNA3.5" in a.family
    assert not a.fp8_matmul_hw and a.fp8_format == "none" and not a.mx_hw and not a.tf32_hw


def test_gfx942_is_cdna3_wave64_with_fnuz_fp8() -> None:
    a = lookup("gfx942:sramecc+:xnack-")
    assert a.name == "gfx942" and a.warp_size == 64 and a.lane_mask_bits == 64
    assert a.fp8_format == "fnuz" and a.fp8_matmul_hw and a.tf32_hw and not a.mx_hw


def test_gfx950_is_cdna4_with_ocp_fp8_and_mx() -> None:
    a = lookup("gfx950")
    assert a.warp_size == 64 and a.fp8_format == "ocp" and a.fp8_matmul_hw and a.mx_hw and a.tf32_hw


def test_sm90_has_fp8_and_tf32_but_not_mx() -> None:
    a = lookup("sm_90")
    assert (a.vendor, a.family, a.warp_size) == ("nvidia", "Hopper", 32)
    assert a.fp8_matmul_hw and a.tf32_hw and not a.mx_hw
    assert lookup("sm_90a") == a
    policy = resolve_policy(a, {})
    assert not policy.mx_use_hw and policy.refusal is None


@pytest.mark.parametrize(
    ("cc", "fp8", "mx", "tf32"),
    [
        ((7, 5), False, False, False),
        ((8, 0), False, False, True),
        ((8, 9), True, False, True),
        ((10, 0), True, True, True),
    ],
)
def test_nvidia_facts_follow_the_compute_capability(cc: tuple[int, int], fp8: bool, mx: bool, tf32: bool) -> None:
    a = nvidia_arch(*cc)
    assert (a.fp8_matmul_hw, a.mx_hw, a.tf32_hw) == (fp8, mx, tf32)
    assert a.name == f"sm_{cc[0]}{cc[1]}" and a.known


def test_mxfp8_force_hw_is_refused_where_no_native_path_exists() -> None:
    policy = resolve_policy(lookup("sm_90"), {"MXFP8_FORCE_HW": "1"})
    assert not policy.mx_use_hw
    assert policy.refusal is not None
    assert "MXFP8_FORCE_HW=1" in policy.refusal and "sm_90" in policy.refusal and "gfx950 or sm_100+" in policy.refusal
    assert resolve_policy(lookup("gfx1151"), {"MXFP8_FORCE_HW": "1"}).refusal is not None


def test_mxfp8_force_hw_is_honoured_where_the_hardware_has_mx() -> None:
    for name in ("gfx950", "sm_100"):
        policy = resolve_policy(lookup(name), {"MXFP8_FORCE_HW": "1"})
        assert policy.mx_use_hw and policy.refusal is None
        assert not resolve_policy(lookup(name), {"MXFP8_FORCE_HW": "0"}).mx_use_hw


def test_tf32_is_used_only_when_asked_and_available() -> None:
    assert not resolve_policy(lookup("sm_90"), {}).tf32_enabled
    assert resolve_policy(lookup("sm_90"), {"CANN_FAST_TF32": "1"}).tf32_enabled
    assert resolve_policy(lookup("gfx942"), {"CANN_FAST_TF32": "1"}).tf32_enabled
    assert not resolve_policy(lookup("gfx1151"), {"CANN_FAST_TF32": "1"}).tf32_enabled
    assert not resolve_policy(lookup("sm_75"), {"CANN_FAST_TF32": "1"}).tf32_enabled


def test_unknown_architectures() -> None:
    a = lookup("gfx1036")
    assert not a.known and a.warp_size == 32 and not a.fp8_matmul_hw
    assert lookup("gfx9a0").warp_size == 64
    assert not lookup("sm_99").known and lookup("sm_99").fp8_matmul_hw
    with pytest.raises(ValueError, match="unknown GPU architecture"):
        lookup("tpu_v5")


def test_the_measured_warp_size_wins() -> None:
    a = with_warp_size(lookup("gfx1151"), 64)
    assert a.warp_size == 64 and a.name == "gfx1151"
    assert with_warp_size(lookup("sm_90"), 32) is lookup("sm_90") or with_warp_size(lookup("sm_90"), 32) == lookup(
        "sm_90"
    )


def test_the_mx_table_agrees_with_acl_cores_hardware_facts() -> None:
    """Conformance checks ``mx_use_hw`` against acl_core.hardware; the backend's table must say the same."""
    from acl_core.hardware import has_mx_instructions
    from acl_rocm.arch import KNOWN_AMD

    for name, info in KNOWN_AMD.items():
        assert has_mx_instructions(name) is info.mx_hw, name
    for major, minor in ((7, 0), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0)):
        assert has_mx_instructions(f"sm_{major}{minor}") is nvidia_arch(major, minor).mx_hw
