"""AscendQuant(V3), AscendAntiQuant, DynamicQuant(V2) and DynamicMxQuant on the rocm backend, on the CPU.

The generated kernels run in the g++ kernel emulator (``kernel_emulator.py``): every spec sample of
the six ops is compared byte for byte with the reference, contiguous and through padded (offset,
strided) and transposed input views with guarded outputs, plus edge rows and blocks (zeros, NaN, Inf,
overflow) the samples do not reach. Launch shapes are checked on the fake provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.versions import SPECS as VERSION_SPECS
from acl_rocm.backend import RocmBackend
from acl_rocm.ops.quant import OPS
from tests.rocm.fake_provider import FakeProvider


def same_bytes(got: dict[str, Any], want: dict[str, Any], note: str) -> None:
    """Every output equal bit for bit (NaN payloads and signed zeros included)."""
    assert set(got) == set(want), note
    for name, w in want.items():
        g = got[name]
        assert g.dtype == w.dtype and g.shape == w.shape, f"{note}: {name} {g.dtype}{g.shape} != {w.dtype}{w.shape}"
        gb = np.ascontiguousarray(g).view(np.uint8).reshape(-1)
        wb = np.ascontiguousarray(w).view(np.uint8).reshape(-1)
        bad = np.flatnonzero(gb != wb)
        assert not bad.size, (
            f"{note}: {name}: {bad.size} bytes differ, first at {bad[:6]}: {gb[bad[:6]]} != {wb[bad[:6]]}"
        )


def compare(emulated: Backend, reference: Backend, op: str, args: dict[str, Any], note: str) -> None:
    """``op`` on both backends, contiguous and through padded and transposed inputs (guarded outputs).

    The reference runs with the same placement: an in-place op that changes its tensor's format
    (TransMatmulWeight) is read back through the placed view, so its result depends on the placement.
    """
    for layout in ("contiguous", "padded", "transposed"):
        want = eager.run(op, reference, layout=layout, **args)
        got = eager.run(op, emulated, layout=layout, guard=True, **args)
        same_bytes(got, want, f"{op} {note} @{layout}")


VERSIONS = tuple(s.name for s in VERSION_SPECS if s.base in OPS)  # they run their base's kernels


@pytest.mark.parametrize("op", (*OPS, *VERSIONS))
def test_every_sample_matches_the_reference(emulated: RocmBackend, reference: Backend, op: str) -> None:
    spec = get_spec(op)
    assert spec.samples is not None
    samples = list(spec.samples(np.random.default_rng(7)))
    assert samples
    for sample in samples:
        compare(emulated, reference, op, sample.args, sample.note)


def _edge_rows(rng: np.random.Generator) -> np.ndarray:
    x = rng.uniform(-60000, 60000, (6, 40)).astype(np.float16)
    x[1] = 0
    x[2, 3] = np.inf
    x[3, :] = rng.uniform(-1e-6, 1e-6, 40).astype(np.float16)  # subnormal fp16 row
    x[4, 5] = -65504
    return x


def test_dynamic_quant_edges(emulated: RocmBackend, reference: Backend) -> None:
    """Zero rows, an Inf row, subnormal rows, rows longer than a block, grouped smooth scales."""
    rng = np.random.default_rng(5)
    x = _edge_rows(rng)
    for code in (2, 29, 3, 35, 36):
        compare(emulated, reference, "DynamicQuantV2", {"x": x, "dstType": code}, f"edges dstType {code}")
    for code in (2, 3):
        args = {"x": x, "dstType": code, "offsetOut": np.zeros(6, np.float32)}
        compare(emulated, reference, "DynamicQuantV2", args, f"asymmetric edges {code}")
    long = rng.uniform(-3, 3, (3, 600)).astype(ml_dtypes.bfloat16)
    smooth = rng.uniform(0.5, 2, (4, 600)).astype(ml_dtypes.bfloat16)
    group = np.array([0, 1, 1, 2], np.int32)  # an empty first group; row 2 past the last count uses group 3
    args = {"x": long, "smoothScalesOptional": smooth, "groupIndexOptional": group, "dstType": 2}
    compare(emulated, reference, "DynamicQuantV2", args, "long rows, grouped")


def test_ascend_quant_edges(emulated: RocmBackend, reference: Backend) -> None:
    """Overflow to NaN (E4M3FN) and Inf (E5M2), saturation of integers, ties of every rounding mode."""
    x = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 300.0, -300.0, 1e30, -1e30, np.inf, -np.inf, 0.0, -0.0, 7.5, 8.5]])
    x = x.astype(np.float32)
    one = np.ones(16, np.float32)
    for mode, code in (("round", 2), ("floor", 2), ("ceil", 29), ("trunc", 2), ("round", 3)):
        args = {"x": x, "scale": one, "offset": None, "sqrtMode": False, "roundMode": mode, "dstType": code}
        compare(emulated, reference, "AscendQuant", args, f"{mode} {code}")
    big = np.array([[100.0, 460.0, 500.0, -1e5, 6e4, 1e38, 0.01, -3.0]], np.float32)
    for code in (35, 36):
        args = {"x": big, "scale": np.full(8, 1.0, np.float32), "offset": None, "sqrtMode": False}
        compare(
            emulated, reference, "AscendQuantV3", args | {"roundMode": "round", "dstType": code, "axis": -1}, f"{code}"
        )


def test_mx_quant_edges(emulated: RocmBackend, reference: Backend) -> None:
    """Zero, tiny, huge and Inf blocks; a tail block; every FLOAT4 mode; both scale algorithms."""
    rng = np.random.default_rng(9)
    x = rng.uniform(-5, 5, (3, 72)).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] *= 1e-30
    x[1, 32:64] *= 1e30
    x[2, 40] = np.inf
    for code, alg, mode in ((36, 0, "rint"), (35, 0, "rint"), (36, 1, "rint"), (35, 1, "rint"), (40, 0, "floor")):
        args = {"x": x, "axis": -1, "dstType": code, "blocksize": 32, "scaleAlg": alg, "roundModeOptional": mode}
        compare(emulated, reference, "DynamicMxQuant", args, f"{code} alg {alg} {mode}")


def test_launch_shapes_on_the_fake_provider(tmp_path: Path) -> None:
    provider = FakeProvider()
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    assert set(OPS) <= set(backend.capabilities().ops)
    x = np.ones((5, 300), np.float16)
    eager.run("DynamicQuantV2", backend, x=x, dstType=2)
    last = provider.launches[-1]
    assert last.name.startswith("acl_quant_dynamic_")
    assert last.grid[0] == 5 and last.block[0] == 256  # one block per row, a full block for a long row
    eager.run("DynamicQuantV2", backend, x=np.ones((5, 8), np.float16), dstType=2)
    assert provider.launches[-1].block[0] == backend.properties.warp_size  # short rows: one warp
    eager.run("DynamicMxQuant", backend, x=np.ones((4, 96), np.float32), axis=-1, dstType=36, blocksize=32, scaleAlg=0)
    assert "acl_to_e4m3fn(" in provider.launches[-1].source and "ldexp" in provider.launches[-1].source
