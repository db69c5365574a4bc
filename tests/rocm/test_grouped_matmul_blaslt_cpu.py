"""``ACL_GMM_KERNEL=blaslt`` on the CPU: the op plumbing, the arrays kernel and the refusals; the cuBLASLt recipe.

On the kernel emulator with the fake provider's NumPy grouped GEMM (which reads the pointer, size and alpha / beta
arrays back from fake device memory when it runs, and asserts the library's 16-byte rule): every GroupedMatmulV5
sample in every layout against the reference (the GPU tier's own test function), M-axis groups with empty ones in
both list types, dtypes and weight layouts (rows past the last group untouched), a bad group list (every group 0
rows, 161002), a capture replaying like eager, and the calls the path refuses (each reason logged and kept, the
result still right). With a fake cuBLASLt module, the nvidia provider's calls: grouped layouts over the call's
arrays made and destroyed per call, device pointer mode, one heuristic per signature, the heuristic's refusal, and
why the grouped GEMM is unavailable. What only a GPU proves (``test_gpu_gmm_blaslt.py``): that this cuBLASLt runs
the problem, its values and speed.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.errors import AclnnError
from acl_rocm.backend import RocmBackend
from acl_rocm.providers import blaslt_grouped
from acl_rocm.providers.amd import AmdProvider
from acl_rocm.providers.base import DeviceProperties, GroupedGemmCall
from acl_rocm.providers.nvidia import NvidiaProvider
from tests.rocm import test_gpu_gmm_blaslt as gpu
from tests.rocm import test_gpu_grouped_matmul as v5
from tests.rocm.gemm_tolerance import gemm_tolerance
from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend
from tests.rocm.test_gemm_plan_store_cpu import AlgoLt, _store_provider

OP = "GroupedMatmulV5"
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def lt_backend(tmp_path_factory: pytest.TempPathFactory) -> RocmBackend:
    backend: RocmBackend = emulated_backend(
        tmp_path_factory.mktemp("kc"), EmulatedProvider(blas=True, grouped_blas=True)
    )
    return backend


@pytest.mark.parametrize("layout", ["contiguous", "padded", "transposed"])
def test_v5_samples(lt_backend: RocmBackend, reference: Backend, layout: str) -> None:
    gpu.test_v5_samples(lt_backend, reference, layout)


def _moe(rng: np.random.Generator, counts: list[int], k: int, n: int, dtype: Any, list_type: int) -> dict[str, Any]:
    args = gpu._groups_args(rng, counts, k, n, dtype, uncovered=7)
    if list_type == 0:
        args["groupListOptional"] = np.cumsum(counts)
        args["groupListType"] = 0
    return args


@pytest.mark.parametrize("weight_layout", ["kn", "nk"])
@pytest.mark.parametrize("list_type", [0, 1])
@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_m_groups(lt_backend: RocmBackend, dtype: Any, list_type: int, weight_layout: str) -> None:
    """Empty groups, both list types, dtypes and weight layouts: float64's product under a K-term bound; the 7 rows
    past the last group keep their sentinel; the provider saw the call's signature."""
    counts, k, n = [0, 5, 16, 0, 9, 24, 1], 72, 48
    args = _moe(np.random.default_rng(1), counts, k, n, dtype, list_type)
    provider = lt_backend.provider
    assert isinstance(provider, EmulatedProvider)
    with gpu.forced(lt_backend) as paths:
        got = gpu._run(lt_backend, args, weight_layout)
    assert paths == [("blaslt", None)]
    call = provider.grouped_gemms[-1]
    assert (call.groups, call.n, call.k, call.rows_hint) == (len(counts), n, k, sum(counts) + 7)
    assert call.transpose_a == (weight_layout == "nk") and provider.grouped_rows[-1] == counts
    assert call.alignments == (256, 16, 32)  # W_g 6,912 bytes apart; x rows 144 bytes, out rows 96
    x, w = args["x"][0].astype(np.float64), args["weight"][0].astype(np.float64)
    want, start = np.full(got.shape, -7.0), 0
    for g, rows in enumerate(counts):
        want[start : start + rows] = x[start : start + rows] @ w[g]
        start += rows
    assert np.all(got[start:] == -7), "rows past the last group were written"
    atol, rtol = gemm_tolerance(want[:start].astype(dtype), k)
    np.testing.assert_allclose(got[:start].astype(np.float64), want[:start], atol=atol, rtol=rtol)


def test_bad_group_list_runs_every_group_empty_and_raises_161002(lt_backend: RocmBackend) -> None:
    provider = lt_backend.provider
    assert isinstance(provider, EmulatedProvider)
    args = _moe(np.random.default_rng(2), [3, 2, 6], 16, 8, BF16, 1)
    args["groupListOptional"] = np.array([3, 2, 6], np.int64)
    args["groupListType"] = 0  # decreasing ends: a bad list
    with gpu.forced(lt_backend) as paths, pytest.raises(AclnnError) as err:
        eager.run(OP, lt_backend, **args)
    assert err.value.code == 161002 and paths == [("blaslt", None)]
    assert provider.grouped_rows[-1] == [0, 0, 0]
    args["groupListOptional"] = np.array([3, 5, 11], np.int64)
    with gpu.forced(lt_backend):
        eager.run(OP, lt_backend, **args)  # the stream is usable afterwards
    assert provider.grouped_rows[-1] == [3, 2, 6]


def test_captured_call_replays_like_eager(lt_backend: RocmBackend) -> None:
    gpu.test_captured_call_replays_like_eager(lt_backend)


def _narrow_k(a: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    return a | {"x": [a["x"][0][:, :60]], "weight": [a["weight"][0][:, :60]]}


def _x_list(a: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    x, w = a["x"][0], a["weight"][0]
    return v5._base(x=[x[:10], x[10:30]], weight=[w[0], w[1]], splitItem=2, groupType=0)


REFUSED = {
    "bias": ("bias", lambda a, rng: a | {"biasOptional": [v5._arr(rng, (3, 48), np.float16)]}, np.float16),
    "float32": ("fp16 / bf16", lambda a, rng: a, np.float32),
    "K off the 16-byte grid": ("16-byte", _narrow_k, BF16),
    "x list": ("M-axis", _x_list, BF16),
}
"""Calls the library path refuses: (a word of the reason, how the call is made, dtype)."""


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_calls_take_the_kernels_with_the_reason(
    lt_backend: RocmBackend, reference: Backend, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    word, make, dtype = REFUSED[case]
    rng = np.random.default_rng(3)
    args = make(_moe(rng, [10, 20, 5], 64, 48, dtype, 1), rng)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.grouped_matmul"), gpu.forced(lt_backend) as paths:
        v5._check(lt_backend, reference, args)
    (path, why), runner = paths[-1], lt_backend.grouped_matmul
    assert path != "blaslt" and word in (why or ""), (path, why)
    assert runner.last_refusal == why and f"ACL_GMM_KERNEL=blaslt refused: {why}" in caplog.text


def test_heuristic_refusal_and_missing_binding_fall_back(tmp_path: Path, reference: Backend) -> None:
    args = _moe(np.random.default_rng(4), [10, 0, 25], 64, 48, BF16, 1)
    for provider, word in (
        (EmulatedProvider(blas=True, grouped_blas=True, grouped_refusal="no grouped algorithm"), "no grouped"),
        (EmulatedProvider(blas=True), "without a grouped GEMM"),
    ):
        backend = emulated_backend(tmp_path / word.replace(" ", "_"), provider)
        with gpu.forced(backend) as paths:
            v5._check(backend, reference, dict(args))
        assert paths[-1][0] == "mma" and word in (paths[-1][1] or "")
        assert not provider.grouped_gemms
    assert "not bound" in (AmdProvider.grouped_gemm_unavailable(object.__new__(AmdProvider)) or "")


# ----------------------------------------------------------------------------- the cuBLASLt recipe (fake module)
class GroupedLt(AlgoLt):
    """AlgoLt with cuBLASLt 13's grouped layouts, pointer modes and grouped preferences."""

    def __init__(self, version: int = 130300, found: int = 1) -> None:
        super().__init__(version)
        self.found = found
        self.grouped: list[tuple[int, ...]] = []
        names = ("POINTER_MODE", "ALPHA_BATCH_STRIDE", "BETA_BATCH_STRIDE")
        self.MatmulDescAttribute = SimpleNamespace(**vars(self.MatmulDescAttribute), **dict.fromkeys(names, 0))
        for i, name in enumerate(names):
            setattr(self.MatmulDescAttribute, name, 20 + i)
        keys = ("GROUPED_DESC_D_AVERAGE_ROWS", "GROUPED_DESC_D_AVERAGE_COLS", "GROUPED_AVERAGE_REDUCTION_DIM")
        for i, name in enumerate(keys):
            setattr(self.MatmulPreferenceAttribute, name, 30 + i)
        widths = ("GROUPED_ROWS_COLS_ARRAY_INTEGER_WIDTH", "GROUPED_LD_ARRAY_INTEGER_WIDTH")
        for i, name in enumerate(widths):
            setattr(self.MatrixLayoutAttribute, name, 40 + i)
        self.IntegerWidth = SimpleNamespace(WIDTH_32=0, WIDTH_64=1)
        self.PointerMode = SimpleNamespace(HOST=0, DEVICE=1)
        self.values: dict[str, dict[int, int]] = {}
        for kind in ("matmul_desc", "matrix_layout", "matmul_preference"):
            setattr(self, f"{kind}_set_attribute", self._keeper(kind))

    def _keeper(self, kind: str) -> Any:
        """A setter recording the value when it is set (the caller's buffer does not outlive the call)."""

        def keep(obj: int, key: int, address: int, size: int) -> None:
            self.values.setdefault(kind, {})[key] = ctypes.c_int64.from_address(address).value

        keep.__name__ = f"{kind}_set_attribute"
        return keep

    def grouped_matrix_layout_create(self, dtype: int, groups: int, rows: int, cols: int, ld: int) -> int:
        self.grouped.append((dtype, groups, rows, cols, ld))
        return self._create("grouped_matrix_layout_create")

    def matmul_algo_get_heuristic(self, *args: Any) -> None:
        super().matmul_algo_get_heuristic(*args)
        ctypes.c_int32.from_address(args[-1]).value = self.found

    def attributes(self, kind: str) -> dict[int, int]:
        """The last value each attribute key of ``kind`` (``matmul_desc`` ...) was set to."""
        return self.values.get(kind, {})


def _grouped_provider(lt: GroupedLt, tmp_path: Path, arch: str = "sm_90") -> NvidiaProvider:
    provider = _store_provider(lt, tmp_path)
    provider.device_properties = lambda index: DeviceProperties(  # type: ignore[method-assign]
        index, "NVIDIA H100", arch, 32, 132, 1 << 30, False, 1024, 2**31 - 1, 49152, 1 << 25
    )
    return provider


def _grouped_call(transpose_a: bool = False, rows: int = 16384) -> GroupedGemmCall:
    return GroupedGemmCall(27, 27, 64, 1408, 2048, rows, transpose_a, 0x10000, 0x20000, 0x30000, (256, 64, 32))


def test_the_provider_makes_layouts_per_call_and_a_plan_per_signature(tmp_path: Path) -> None:
    lt = GroupedLt()
    provider = _grouped_provider(lt, tmp_path)
    assert provider.grouped_gemm_unavailable() is None
    for transposed in (False, True, True):
        assert provider.grouped_gemm(_grouped_call(transposed), 0x9000, 1 << 20, 7) is None
    assert lt.count("heuristic") == 2 and lt.count("matmul") == 3
    m, n, k, lda, ldb, ldd = (0x20000 + i * 64 * 4 for i in range(6))
    plain, transposed = lt.grouped[:3], lt.grouped[3:6]
    assert plain == [(14, 64, n, k, lda), (14, 64, k, m, ldb), (14, 64, n, m, ldd)]
    assert transposed[0] == (14, 64, k, n, lda) and lt.grouped[6:] == transposed
    assert len(lt.live) == 4, "per-call layouts destroyed; two signatures' descriptor and preference kept"
    desc, pref, layout = (lt.attributes(kind) for kind in ("matmul_desc", "matmul_preference", "matrix_layout"))
    assert desc[20] == 1 and desc[21] == desc[22] == 0 and desc[1] == 1  # device mode, one alpha / beta, TRANSA
    assert pref[30] == 1408 and pref[31] == 16384 // 64 and pref[32] == 2048 and layout[40] == layout[41] == 0
    assert [pref[key] for key in (6, 7, 8, 9)] == [256, 64, 32, 32]  # MIN_ALIGNMENT_A / B / C / D_BYTES
    args = [a for name, a in lt.calls if name == "matmul"][-1]
    assert args[2] == 0x30000 and args[7] == 0x30004 and args[3] == 0x10000
    assert args[5] == 0x10000 + 64 * 8 and args[8] == args[10] == 0x10000 + 128 * 8 and args[-1] == 7
    provider.close()
    assert not lt.live


def test_the_heuristic_refusal_is_kept_and_nothing_enqueued(tmp_path: Path) -> None:
    lt = GroupedLt(found=0)
    provider = _grouped_provider(lt, tmp_path)
    for _ in range(2):
        assert "no grouped algorithm" in (provider.grouped_gemm(_grouped_call(), 0x9000, 1 << 20, 7) or "")
    assert lt.count("heuristic") == 1 and lt.count("matmul") == 0


@pytest.mark.parametrize(
    ("version", "arch", "word"), [(130100, "sm_90", "13.2"), (130300, "sm_100", "sm_100"), (130300, "sm_90", None)]
)
def test_unavailable_names_version_and_device(tmp_path: Path, version: int, arch: str, word: str | None) -> None:
    provider = _grouped_provider(GroupedLt(version), tmp_path, arch)
    why = provider.grouped_gemm_unavailable()
    assert (why is None) if word is None else word in (why or "")
    bare = AlgoLt(130300)
    assert "grouped_matrix_layout_create" in (_grouped_provider(bare, tmp_path).grouped_gemm_unavailable() or "")  # type: ignore[arg-type]
    assert blaslt_grouped.MIN_VERSION == 130200
