"""Kernel sources: the prelude, the ufunc table and the generated elementwise kernels (text, not compiled here)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from acl_core.dtypes import DataType as D
from acl_core.spec.ops import get_spec
from acl_core.spec.opspec import Kind
from acl_rocm.kernels.ctypes_map import C_TYPES, SUPPORTED, convert, ctype, load, store
from acl_rocm.kernels.elementwise import (
    UFUNCS,
    UNROLL,
    Instance,
    Operand,
    ScalarArg,
    Ufunc,
    generate,
    ufunc,
    unroll_for,
)
from acl_rocm.kernels.prelude import PRELUDE, compile_options


def test_prelude_takes_warp_size_and_mask_width_as_defines() -> None:
    assert "#error" in PRELUDE and "ACL_WARP_SIZE" in PRELUDE and "ACL_LANE_MASK_BITS" in PRELUDE
    assert "typedef unsigned long long acl_lane_mask_t" in PRELUDE and "typedef unsigned int acl_lane_mask_t" in PRELUDE
    assert not re.search(r"#include", PRELUDE), "the prelude must need no vendor header"
    assert compile_options(32) == ("-std=c++17", "-DACL_WARP_SIZE=32", "-DACL_LANE_MASK_BITS=32")
    assert "-DACL_LANE_MASK_BITS=64" in compile_options(64)
    with pytest.raises(ValueError):
        compile_options(16)


def test_prelude_has_a_software_path_and_each_platforms_fast_path() -> None:
    for name in ("acl_h2f_soft", "acl_f2h_soft", "acl_f2b_soft", "__HIPCC_RTC__", "__CUDA_ARCH__", "cvt.rn.f16.f32"):
        assert name in PRELUDE
    assert PRELUDE.count("{") == PRELUDE.count("}")


@pytest.mark.parametrize("name", sorted(UFUNCS))
def test_every_ufunc_names_its_ops_official_parameters(name: str) -> None:
    u = UFUNCS[name]
    spec = get_spec({"DivModTrue": "DivMod", "GeluBackwardV2Tanh": "GeluBackwardV2"}.get(name, name))
    params = {p.name: p for p in spec.params}
    for param, _ in (*u.inputs, u.output):
        assert param in params, f"{name}: {param} is not a parameter of aclnn{spec.name}"
    assert params[u.output[0]].writes
    for param, _ in u.inputs:
        assert params[param].kind in (Kind.TENSOR, Kind.SCALAR, Kind.FLOAT, Kind.INT, Kind.BOOL)
        assert u.uses(param) or name == "InplaceZero", f"{name}: the body never reads {param}"


def test_signature_parsing() -> None:
    u = ufunc("X", "a:T, b:F -> out:B", "a < b")
    assert u.inputs == (("a", "T"), ("b", "F")) and u.output == ("out", "B") and not u.statements
    assert ufunc("Y", "a:T -> out:T", "r = a; if (a < 0) r = -a;").statements
    for bad in ("a:T", "a:Q -> out:T", "a:T -> x:T, y:T", "1a:T -> out:T"):
        with pytest.raises(ValueError):
            ufunc("Z", bad, "a")


def test_conversions_follow_the_cast_rules() -> None:
    f32, f16, bf16, i8, u64, b = (
        ctype(d) for d in (D.ACL_FLOAT, D.ACL_FLOAT16, D.ACL_BF16, D.ACL_INT8, D.ACL_UINT64, D.ACL_BOOL)
    )
    assert load("p[o]", f16, f32) == "acl_h2f(p[o])"
    assert load("p[o]", bf16, f32) == "acl_b2f(p[o])"
    assert store("r", f32, f16) == "acl_f2h(r)"
    assert convert("x", f32, i8) == "acl_f2i((double)(x), -128.0, 127.0)"
    assert convert("x", f32, u64).startswith("acl_f2u((double)(x), 1.8446744073709552e+19")
    assert convert("x", f32, b) == "((x) != 0)"
    assert store("r", ctype(D.ACL_INT64), i8) == "((signed char)(r))"
    assert load("p[o]", b, ctype(D.ACL_INT32)) == "((long long)((p[o] != 0)))"
    assert set(C_TYPES) == SUPPORTED and D.ACL_COMPLEX64 not in SUPPORTED
    assert all(ctype(d).value in ("float", "double", "long long", "unsigned long long", "bool") for d in SUPPORTED)


def _instance(ndim: int = 1, index: str = "int", stride: str = "unit") -> Instance:
    ops = (
        Operand("self", D.ACL_FLOAT16, D.ACL_FLOAT16, True, False, stride),
        Operand("other", D.ACL_INT32, D.ACL_FLOAT16, True, False, "zero" if ndim == 1 else "any"),
        Operand("out", D.ACL_FLOAT16, D.ACL_FLOAT16, False, True, stride),
    )
    types = (("B", D.ACL_BOOL), ("F", D.ACL_FLOAT16), ("O", D.ACL_FLOAT16), ("T", D.ACL_FLOAT16))
    return Instance(
        UFUNCS["Add"], ops, (ScalarArg("alpha", D.ACL_FLOAT16),), (), D.ACL_FLOAT16, ndim, index, True, types
    )


def test_generated_kernel_structure() -> None:
    inst = _instance()
    src = generate(inst)
    assert src.startswith(PRELUDE)
    assert f'extern "C" __global__ void __launch_bounds__(256) {inst.kernel_name}(' in src
    assert "const Meta m" in src and "struct Meta { int n; int shape[1]; int stride[3][1]; };" in src
    assert "const unsigned short* __restrict__ p_self" in src and "unsigned short* __restrict__ p_out" in src
    assert "const float alpha" in src and "typedef float T;" in src  # fp16 computes in fp32
    assert "v_self[u] = acl_h2f(p_self[o0]);" in src
    assert "v_other[u] = ((float)(((long long)(p_other[o1]))));" in src
    assert "const int o0 = i;" in src and "const int o1 = (int)0;" in src  # unit and broadcast strides
    assert "p_out[w2[u]] = acl_f2h(r);" in src
    assert f"for (int u = 0; u < {UNROLL}; ++u)" in src and "#pragma unroll" in src
    assert src.count("{") == src.count("}")


def test_generated_index_math_unravels_every_dimension() -> None:
    src = generate(_instance(ndim=3, index="long long", stride="any"))
    assert "struct Meta { long long n; long long shape[3]; long long stride[3][3]; };" in src
    assert "rest % m.shape[2]; rest /= m.shape[2];" in src and "rest % m.shape[1]; rest /= m.shape[1];" in src
    assert "rest % m.shape[0]" not in src  # the outermost coordinate is what is left
    for k in range(3):
        for d in range(3):
            assert f"o{k} += c * m.stride[{k}][{d}];" in src


def test_kernel_names_are_unique_per_instance() -> None:
    names = {_instance().kernel_name, _instance(ndim=2).kernel_name, _instance(index="long long").kernel_name}
    assert len(names) == 3 and all(re.fullmatch(r"acl_ew_Add_[0-9a-f]{12}", n) for n in names)
    assert _instance().kernel_name == _instance().kernel_name


def test_statement_bodies_and_constants() -> None:
    clamp = UFUNCS["Clamp"]
    ops = (
        Operand("self", D.ACL_INT32, D.ACL_INT32, True, False),
        Operand("out", D.ACL_INT32, D.ACL_INT32, False, True),
    )
    scalars = (ScalarArg("clipValueMin", D.ACL_INT32, False), ScalarArg("clipValueMax", D.ACL_INT32, True))
    src = generate(Instance(clamp, ops, scalars, (), D.ACL_INT32, 2, "int", False, (("T", D.ACL_INT32),)))
    assert "const bool has_clipValueMin = false;" in src and "const bool has_clipValueMax = true;" in src
    assert "long long r;" in src and "{ r = self; if (has_clipValueMin)" in src
    assert "__restrict__" not in src
    u: Ufunc = UFUNCS["DivMod"]
    src = generate(
        Instance(
            u,
            (*ops[:1], Operand("other", D.ACL_INT32, D.ACL_INT32, True, False), ops[1]),
            (),
            (("mode", 2),),
            D.ACL_INT32,
            1,
            "int",
        )
    )
    assert "const long long mode = 2LL;" in src


def test_unroll_is_an_instance_parameter() -> None:
    assert unroll_for([4, 4]) == unroll_for([2, 4]) == unroll_for([1, 8]) == UNROLL
    with pytest.raises(ValueError):
        unroll_for([0])
    src = generate(replace(_instance(), unroll=8))
    assert "for (int u = 0; u < 8; ++u)" in src and "v_self[8]" in src and "blockDim.x * 8;" in src
