"""The elementwise vector path on a CPU: when it is chosen, what it generates, and what it computes.

Generated kernels run in the g++ emulator (``kernel_emulator.py``) on host memory, so the 16-byte
vector loads, the scalar tail, the narrower vectors of misaligned views and the general strided
fallback are all compared with the reference without a GPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.tensor import AclTensor
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.elementwise import (
    UFUNCS,
    VECTOR_UNROLL,
    Instance,
    Operand,
    generate,
    lowp_results,
    vector_width,
    vectorizable,
)
from acl_rocm.ops.elementwise import choose_vector
from acl_rocm.views import coalesce
from tests.conftest import assert_close
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.offset_views import empty_placed, placed

BF16 = np.dtype("bfloat16")


def _tensor(n: int, dtype: D, address: int, offset: int = 0, stride: int = 1) -> AclTensor:
    return AclTensor((n,), dtype, (stride,), offset, 2, (offset + n * stride,), address)


def _operands(*specs: tuple[str, D, bool, str]) -> list[Operand]:
    return [Operand(name, dt, D.ACL_FLOAT, not write, write, cls) for name, dt, write, cls in specs]


def test_vector_width_moves_16_bytes_of_the_widest_operand() -> None:
    assert vector_width([2, 2, 2]) == 8 and vector_width([4, 4]) == 4 and vector_width([4, 2]) == 4
    assert vector_width([8]) == 2 and vector_width([1, 1]) == 16 and vector_width([16]) == 1
    with pytest.raises(ValueError):
        vector_width([])


def test_choose_vector_needs_rank_one_unit_strides_and_alignment() -> None:
    n = 1000
    ops = _operands(("self", D.ACL_FLOAT16, False, "unit"), ("out", D.ACL_FLOAT16, True, "unit"))
    a, out = _tensor(n, D.ACL_FLOAT16, 4096), _tensor(n, D.ACL_FLOAT16, 8192)
    geometry = coalesce((n,), [(1,), (1,)])
    assert choose_vector(geometry, [a, out], ops) == 8
    assert choose_vector(geometry, [_tensor(n, D.ACL_FLOAT16, 4096, offset=4), out], ops) == 4  # 8-byte aligned
    assert choose_vector(geometry, [_tensor(n, D.ACL_FLOAT16, 4096, offset=2), out], ops) == 2
    assert choose_vector(geometry, [_tensor(n, D.ACL_FLOAT16, 4096, offset=1), out], ops) == 1  # scalar path
    strided = coalesce((n,), [(2,), (1,)])
    assert choose_vector(strided, [_tensor(n, D.ACL_FLOAT16, 4096, stride=2), out], ops) == 1
    two_d = coalesce((10, 100), [(200, 1), (100, 1)])
    assert two_d.ndim == 2 and choose_vector(two_d, [a, out], ops) == 1
    broadcast = coalesce((n,), [(0,), (1,)])
    assert choose_vector(broadcast, [a, out], ops) == 8  # a broadcast operand is read once, the output vectorised
    mixed = _operands(("self", D.ACL_FLOAT, False, "unit"), ("out", D.ACL_FLOAT16, True, "unit"))
    assert choose_vector(geometry, [_tensor(n, D.ACL_FLOAT, 4096), out], mixed) == 4
    assert choose_vector(coalesce((1,), [(1,), (1,)]), [a, out], ops) == 1  # one element: nothing to vectorise


def _instance(op: str, vec: int, classes: tuple[str, ...], storage: D = D.ACL_FLOAT16) -> Instance:
    u = UFUNCS[op]
    names = [n for n, _ in u.inputs if n != "alpha"] + [u.output[0]]
    ops = tuple(Operand(n, storage, D.ACL_FLOAT, n != u.output[0], n == u.output[0], c) for n, c in zip(names, classes))
    types = (("F", D.ACL_FLOAT), ("T", D.ACL_FLOAT))
    return Instance(u, ops, (), (), D.ACL_FLOAT, 1, "int", types=types, unroll=VECTOR_UNROLL, vec=vec)


def test_vector_source_loads_and_stores_whole_vectors_and_has_a_scalar_tail() -> None:
    src = generate(_instance("Mul", 8, ("unit", "zero", "unit")))
    assert "AclVec<unsigned short, 8> q_self[" in src and "reinterpret_cast<const AclVec<unsigned short, 8>*>" in src
    assert "*reinterpret_cast<AclVec<unsigned short, 8>*>(p_out + c * 8) = s_out;" in src
    assert "const float b_other = acl_h2f(p_other[0]);" in src  # the broadcast operand, read once
    assert "const int nvec = n / 8;" in src and "for (int i = nvec * 8 +" in src and "p_out[i] =" in src
    assert f"for (int u = 0; u < {VECTOR_UNROLL}; ++u)" in src
    assert "template <class T, int N> struct alignas(sizeof(T) * N) AclVec" in src
    scalar = generate(_instance("Mul", 1, ("unit", "zero", "unit")))
    assert "AclVec<unsigned short" not in scalar
    with pytest.raises(ValueError):
        generate(_instance("Mul", 8, ("any", "unit", "unit")))
    assert not vectorizable(_instance("Mul", 1, ("unit", "unit", "zero")))


def test_sigmoid_takes_the_fast_form_only_for_16_bit_results() -> None:
    half = _instance("Silu", 8, ("unit", "unit"))
    assert lowp_results(half) and "acl_sigmoid_lowp(self)" in generate(half)
    single = _instance("Silu", 4, ("unit", "unit"), D.ACL_FLOAT)
    assert not lowp_results(single) and "acl_sigmoid(self)" in generate(single).split("// ---- end of prelude")[1]


def test_plan_takes_the_vector_path_for_contiguous_calls(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    x = np.ones(4099, np.float16)
    provider.launches.clear()
    eager.run("Add", backend, self=x, other=x, alpha=1.0)
    eager.run("Add", backend, layout="padded", self=x.reshape(1, -1), other=x.reshape(1, -1), alpha=1.0)
    sources = [launch.source for launch in provider.launches if "acl_ew_Add" in launch.name]
    assert len(sources) == 2
    assert "AclVec<unsigned short, 8>" in sources[0]
    assert "AclVec<unsigned short" not in sources[1]  # padded rows: the general strided path


def _values(n: int, dtype: np.dtype, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    x[:6] = [np.inf, -np.inf, np.nan, 0.0, -90.0, 90.0]
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("offset", [0, 1, 4])
def test_emulated_vector_and_tail_match_the_reference(
    emulated: RocmBackend, reference: Backend, dtype: np.dtype, offset: int
) -> None:
    n = 1000 + 13  # whole vectors then a tail
    a, b = _values(n, dtype, 1), _values(n, dtype, 2)
    for op, args in (("Add", {"alpha": 1.5}), ("Mul", {}), ("Silu", {})):
        inputs = {"self": a} if op == "Silu" else {"self": a, "other": b}
        expected = eager.run(op, reference, **inputs, **args)["out"]
        placed_inputs = {k: placed(emulated, v, offset) for k, v in inputs.items()}
        out = empty_placed(emulated, (n,), expected.dtype, offset)
        eager.run(op, emulated, **placed_inputs, **args, out=out)
        assert_close(out.numpy(), expected)
        for arr in (*placed_inputs.values(), out):
            arr.free()


def test_emulated_broadcast_and_mixed_widths(emulated: RocmBackend, reference: Backend) -> None:
    n = 77
    a = _values(n, np.float16, 3)
    one = np.array([2.5], np.float16)
    for args in ({"self": a, "other": one}, {"self": one, "other": a}):
        assert_close(eager.run("Mul", emulated, **args)["out"], eager.run("Mul", reference, **args)["out"])
    x = _values(n, np.float32, 4)
    cast = {"self": x, "dtype": int(D.ACL_FLOAT16)}  # fp32 in, fp16 out: 4-element vectors of both widths
    assert_close(eager.run("Cast", emulated, **cast)["out"], eager.run("Cast", reference, **cast)["out"])
