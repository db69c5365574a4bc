"""GroupedMatmulV5 through cuBLASLt's device-sized grouped GEMM (``ACL_GMM_KERNEL=blaslt``) against the reference.

GPU tier. Every GroupedMatmulV5 sample (contiguous, padded and transposed views) with the switch forced: the calls
the library takes (fp16 / bf16 M-axis groups of a device list, no bias, 16-byte grid) and the refused ones (which
must name their reason and still match); the tile-shape rows (empty, 1-row and partial groups; N 1,408 / 320 / 64 /
256; K tails) in both weight layouts and both dtypes, rows past the last group keeping their sentinel; the MoE layer
(64 uneven experts, empty ones, K 2,048, N 1,408, bf16) against the reference and the default path; a bad group
list (161002, nothing written); a captured call replaying bit for bit like its eager runs. Each case asserts the
library ran where it should (``last_path == "blaslt"``).

Skipped, with the provider's reason, only where :meth:`grouped_gemm_unavailable` says the library's grouped GEMM is
not there (another platform, cuBLASLt before 13.2, a device other than sm_90, the CPU emulator); a refusal of the
heuristic on a device where it is bound fails the tests instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_core.spec.ops import get_spec
from tests.conftest import assert_close
from tests.rocm import test_gpu_grouped_matmul as v5
from tests.rocm.capture_harness import replays_like_eager
from tests.rocm.test_gpu_gmm_wgmma import _compare, _groups_args, _moe_case, _run

pytestmark = pytest.mark.gpu
OP = "GroupedMatmulV5"
BF16 = ml_dtypes.bfloat16


@contextmanager
def forced(backend: Backend, kernel: str | None = "blaslt") -> Iterator[list[tuple[str, str | None]]]:
    """``kernel`` forced while inside; yields (path, refusal) of every grouped GEMM the runner reported."""
    runner = backend.grouped_matmul  # type: ignore[attr-defined]
    paths: list[tuple[str, str | None]] = []
    report = runner._report

    def recording(message: str, gemm: Any, groups: int, grid: int) -> None:
        report(message, gemm, groups, grid)
        paths.append((gemm.path, runner.last_refusal))

    runner.forced_kernel, runner._report = kernel, recording
    try:
        yield paths
    finally:
        runner.forced_kernel = None
        del runner._report


@pytest.fixture
def library(rocm: Backend) -> Backend:
    """The rocm backend where the provider binds a library grouped GEMM; skips with the provider's reason elsewhere."""
    why = rocm.grouped_matmul.blaslt_unavailable()  # type: ignore[attr-defined]
    if why is not None:
        pytest.skip(f"no library grouped GEMM here: {why}")
    return rocm


def takes_library(args: dict[str, Any]) -> bool:
    """Whether a V5 call is one the library path takes in the contiguous layout (fp16 / bf16 M-axis groups of a
    device list, no bias, the same dtype out, 16-byte leading dimensions)."""
    x, w = args["x"], args["weight"]
    if len(x) != 1 or args.get("groupType") != 0 or args.get("groupListOptional") is None:
        return False
    if args.get("biasOptional") is not None or args.get("scaleOptional") is not None:
        return False
    if np.dtype(x[0].dtype) not in (np.dtype(np.float16), np.dtype(BF16)):
        return False
    out = args.get("out")
    if out is not None and np.dtype(out[0].dtype) != np.dtype(x[0].dtype):
        return False
    return x[0].shape[-1] % 8 == 0 and all(t.shape[-1] % 8 == 0 for t in w)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_v5_samples(library: Backend, reference: Backend, layout: str) -> None:
    """Every sample matches the reference; every refused call names its reason; in the contiguous layout the calls
    :func:`takes_library` names run on the library."""
    taken = 0
    for sample in get_spec(OP).samples(np.random.default_rng(7)):  # type: ignore[misc]
        args = dict(sample.args)
        with forced(library) as paths:
            try:
                v5._check(library, reference, args, layout)
            except AssertionError as exc:
                raise AssertionError(f"[{sample.note}] layout={layout}\n{exc}") from None
        for path, why in paths:
            assert path == "blaslt" or why, f"[{sample.note}] {path} without a reason"
        if layout == "contiguous" and takes_library(args):
            assert [p for p, _ in paths] == ["blaslt"], f"[{sample.note}] took {paths}"
        taken += sum(p == "blaslt" for p, _ in paths)
    assert taken or layout != "contiguous", "no sample ran on the library"


ROWS = [0, 1, 63, 64, 65, 0, 127, 128, 129, 200]
"""Rows per group: empty, one row, partial and full tiles of any tiling."""


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize(("k", "n"), [(200, 1408), (2048, 320), (64, 64), (136, 256)])
def test_group_shapes(library: Backend, reference: Backend, k: int, n: int, weight_layout: str) -> None:
    """bf16 and fp16, both weight layouts; rows past the last group keep their sentinel."""
    rng = np.random.default_rng(k * n)
    for dtype in (BF16, np.float16):
        args = _groups_args(rng, ROWS, k, n, dtype)
        want = eager.run(OP, reference, **args)["out"][0]
        with forced(library) as paths:
            got = _run(library, args, weight_layout)
        assert [p for p, _ in paths] == ["blaslt"], paths
        _compare(got, want, k, sum(ROWS))


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
def test_moe_layer(library: Backend, weight_layout: str) -> None:
    """64 experts of uneven M (empty ones), K 2,048, N 1,408, bf16: the reference's accuracy class and a K-term sum's
    bound, and within that bound of the default path's result."""
    groups, m, k, n = v5.MOE
    args, want = _moe_case(groups, m, k, n)
    with forced(library) as paths:
        got = _run(library, args, weight_layout)
    assert [p for p, _ in paths] == ["blaslt"], paths
    assert_close(got[: m - 77], want[: m - 77])
    _compare(got, want, k, m - 77)
    with forced(library, None) as default_paths:
        default = _run(library, args, weight_layout)
    assert default_paths and default_paths[0][0] != "blaslt"
    _compare(got, default, k, m - 77)


@pytest.mark.parametrize(("group_list", "list_type"), [([3, 2, 6], 0), ([3, 6, 7], 0), ([3, -1, 4], 1)])
def test_bad_group_lists_raise_161002(library: Backend, group_list: list[int], list_type: int) -> None:
    rng = np.random.default_rng(0)
    args = v5._base(
        x=[v5._arr(rng, (6, 16), BF16)],
        weight=[v5._arr(rng, (3, 16, 8), BF16)],
        groupListOptional=np.array(group_list, np.int64),
        splitItem=3,
        groupType=0,
        groupListType=list_type,
    )
    with forced(library) as paths, pytest.raises(AclnnError) as err:
        eager.run(OP, library, **args)
    assert err.value.code == 161002 and [p for p, _ in paths] == ["blaslt"]
    good = {**args, "groupListOptional": np.array([3, 3, 0] if list_type else [3, 6, 6], np.int64)}
    with forced(library):
        eager.run(OP, library, **good)  # the stream is usable afterwards


def test_captured_call_replays_like_eager(library: Backend) -> None:
    """The arrays kernel and the library's GEMM recorded into a graph: each replay equals its eager run bit for bit."""
    rng = np.random.default_rng(9)
    args = _groups_args(rng, [40, 0, 17, 64, 9], 128, 96, BF16)
    with forced(library) as paths:
        replays_like_eager(library, OP, args)
    assert paths and {p for p, _ in paths} == {"blaslt"}, paths
