"""The ops bench's SparseFlashAttention rows on the fake provider: the default row takes the GEMM path, the
ACL_SFA_PATH=block row the block kernel, and the backend's environ is restored after each."""

from __future__ import annotations

import dataclasses

import pytest

from acl_rocm.backend import RocmBackend

torch = pytest.importorskip("torch")


def test_sparse_attention_rows_time_each_path(bench_rocm: RocmBackend) -> None:
    from acl_tools.bench.ops import SIZES, Suite

    sizes = dataclasses.replace(SIZES["small"], sparse=(2, 8, 32, 8, 256, 64), rounds=1)
    suite = Suite(bench_rocm, sizes, progress=lambda line: None, only={"SparseFlashAttention"})
    suite.device = torch.device("cpu")
    before = dict(bench_rocm.environ)
    launched = len(bench_rocm.provider.launches)  # type: ignore[attr-defined]
    suite.sparse_attention()  # type: ignore[attr-defined]
    rows = [(c.op, c.note, c.status) for c in suite.cases]  # type: ignore[attr-defined]
    assert rows == [
        ("SparseFlashAttention decode", "", "ok"),
        ("SparseFlashAttention decode", "ACL_SFA_PATH=block", "ok"),
    ]
    names = {launch.name.split("_")[2] for launch in bench_rocm.provider.launches[launched:]}  # type: ignore[attr-defined]
    assert {"gather", "softmax", "store", "attend"} <= names, names
    assert bench_rocm.provider.gemms  # type: ignore[attr-defined]
    assert dict(bench_rocm.environ) == before
