"""SparseFlashAttention's GEMM path on the CPU emulator (kernels in g++, the GEMMs in the fake provider's float64).

Every sample in every layout on each path (``ACL_SFA_PATH``), each checked to have taken the path it names
(the GEMMs the provider saw, the debug log); a refused call (bad lengths) writes nothing on the GEMM path;
without a GEMM, and on ``block``, the block kernel runs; a bad setting is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclnnError
from acl_core.spec.ops import get_spec
from acl_core.spec.ops.sparse_attention import sfa_case
from acl_rocm.kernels.sparse_attention_gemm import SfaGemmInstance, sfa_gemm_source
from acl_rocm.ops.matmul import WORKSPACE_BYTES
from tests.rocm.against_reference import assert_matches_reference, class_problems

OP = "SparseFlashAttention"
SAMPLES = list(get_spec(OP).samples(np.random.default_rng(12)))  # type: ignore[misc]
LOGGER = "acl_rocm.sparse_attention"


@pytest.fixture(scope="module")
def with_blas(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """An emulated rocm backend whose provider has a (host float64) GEMM."""
    from tests.rocm.kernel_emulator import EmulatedProvider, emulated_backend

    return emulated_backend(Path(tmp_path_factory.mktemp("kc")), EmulatedProvider(blas=True))


@pytest.fixture
def on_path(with_blas: Backend, request: pytest.FixtureRequest) -> Iterator[Backend]:
    """``with_blas`` under ``ACL_SFA_PATH`` = the test's parameter."""
    saved = with_blas.environ  # type: ignore[attr-defined]
    with_blas.environ = {**saved, "ACL_SFA_PATH": request.param}  # type: ignore[attr-defined]
    try:
        yield with_blas
    finally:
        with_blas.environ = saved  # type: ignore[attr-defined]


def _gemms(backend: Backend) -> int:
    return len(backend.provider.gemms)  # type: ignore[attr-defined]


@pytest.mark.parametrize("on_path", ["gemm", "block"], indirect=True)
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.note for s in SAMPLES])
def test_every_sample_on_each_path(
    on_path: Backend, reference: Backend, sample, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    path = on_path.environ["ACL_SFA_PATH"]  # type: ignore[attr-defined]
    # the block kernel's layouts: test_sparse_attention_cpu.py (the emulator's time is shared)
    for layout in ("contiguous", "padded", "transposed") if path == "gemm" else ("contiguous",):
        before = _gemms(on_path)
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            caplog.clear()
            assert_matches_reference(on_path, reference, OP, sample.args, layout, f"{sample.note} {layout} {path}")
        text = caplog.text
        if path == "gemm":
            assert "gemm path (" in text, text
            assert _gemms(on_path) == before + 2
        else:
            assert "block kernel (ACL_SFA_PATH=block)" in text, text
            assert _gemms(on_path) == before


@pytest.mark.parametrize("on_path", ["gemm"], indirect=True)
@pytest.mark.parametrize(
    ("kv_layout", "block", "mode", "lse"),
    [("BSND", 1, 0, True), ("TND", 3, 3, True), ("PA_BSND", 2, 3, False), ("BSND", 4, 3, True)],
)
def test_gemm_path_layouts_modes_and_statistics(
    on_path: Backend, reference: Backend, kv_layout: str, block: int, mode: int, lse: bool
) -> None:
    """Several query rows and kv heads, lengths, causal rows, repeated and past-the-limit entries, -1 ends."""
    rng = np.random.default_rng(31 + block)
    q_layout = "TND" if kv_layout == "TND" else "BSND"
    args = sfa_case(
        rng, D.ACL_BF16, 2, 3, 40, 4, 2, 24, 8, 12, block, lq=[3, 2], lk=[40, 17], mode=mode, lse=lse,
        q_layout=q_layout, kv_layout=kv_layout,
    )  # fmt: skip
    idx = args["sparseIndices"]
    idx.reshape(-1, idx.shape[-1])[0, 3] = idx.reshape(-1, idx.shape[-1])[0, 2]  # a repeated entry counts twice
    idx.reshape(-1, idx.shape[-1])[1, 5] = -1  # ends that row
    assert_matches_reference(on_path, reference, OP, args, "contiguous", f"{kv_layout} block {block} mode {mode}")


@pytest.mark.parametrize("on_path", ["gemm", "block"], indirect=True)
def test_value_passed_as_key(on_path: Backend, reference: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """One device tensor as key and value (absorb mode, the bench's call): the GEMM path reads V from the gathered K."""
    args = sfa_case(np.random.default_rng(8), D.ACL_BF16, 2, 2, 48, 8, 1, 32, 8, 20, 1, lk=[48, 30], mode=0, lse=True)
    expected = eager.run(OP, reference, op_args=args)
    kv = eager.to_device(args["key"], on_path)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        actual = eager.run(OP, on_path, op_args={**args, "key": kv, "value": kv})
    if on_path.environ["ACL_SFA_PATH"] == "gemm":  # type: ignore[attr-defined]
        assert "value from the gathered keys" in caplog.text, caplog.text
        compiled = on_path.provider.compiled  # type: ignore[attr-defined]
        assert any(n.startswith("acl_sfa_gather_bf16_d32_r8_k8_") for n in compiled)  # 16-byte copies, no V gather
    problems = class_problems(OP, args, actual, expected)
    assert not problems, "; ".join(p.message for p in problems)


@pytest.mark.parametrize("on_path", ["gemm", "block"], indirect=True)
def test_a_call_without_lengths_launches_no_check(on_path: Backend, reference: Backend) -> None:
    """The bench's decode form (BSND, no lengths, no table): nothing for the check kernel to read, so no check launch;
    the kernels read the unchecked scratch word as their flag and the result is the reference's. With lengths the
    check comes back."""
    launches = on_path.provider.launches  # type: ignore[attr-defined]
    args = sfa_case(np.random.default_rng(5), D.ACL_BF16, 2, 1, 48, 8, 1, 32, 8, 20, 1, mode=0)
    assert "actualSeqLengthsKv" not in args and "actualSeqLengthsQuery" not in args
    before = len(launches)
    assert_matches_reference(on_path, reference, OP, args, "contiguous", "no lengths")
    names = [launch.name for launch in launches[before:]]
    assert names and not any("_check_" in n for n in names), names
    before = len(launches)
    lengths = {"actualSeqLengthsKv": np.asarray([48, 30], np.int32)}
    assert_matches_reference(on_path, reference, OP, {**args, **lengths}, "contiguous", "kv lengths")
    assert any("_check_" in launch.name for launch in launches[before:])


@pytest.mark.parametrize("on_path", ["gemm", "block"], indirect=True)
def test_a_call_without_lengths_replays_like_eager(on_path: Backend) -> None:
    """Captured on a stream, the unchecked call (its flag a word of the capture's scratch, its launches packed once)
    replays bit for bit like its eager runs."""
    from tests.rocm.capture_harness import replays_like_eager

    args = sfa_case(np.random.default_rng(15), D.ACL_BF16, 2, 1, 40, 4, 1, 16, 8, 12, 1, mode=0, lse=True)
    replays_like_eager(on_path, OP, args)


@pytest.mark.parametrize("on_path", ["gemm"], indirect=True)
def test_rows_over_the_budget_run_in_chunks(
    on_path: Backend, reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """A budget of two query rows' temporaries (11,264 bytes past the workspace here; three need 17,152): the 8 rows
    (BSND, two batches, lengths, causal, blocks of 2, two kv heads, statistics) run in 4 chunks of 2."""
    path = on_path.sparse_attention.sfa_gemm  # type: ignore[attr-defined]
    args = sfa_case(
        np.random.default_rng(9), D.ACL_BF16, 2, 4, 30, 4, 2, 16, 8, 10, 2, lq=[4, 3], lk=[30, 21], lse=True
    )
    saved = path.budget
    path.budget = WORKSPACE_BYTES + 12000
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            assert_matches_reference(on_path, reference, OP, args, "contiguous", "chunks of 2 rows")
    finally:
        path.budget = saved
    assert "(8 rows x 2 kv heads, chunks of 2," in caplog.text, caplog.text


@pytest.mark.parametrize("on_path", ["gemm"], indirect=True)
def test_a_refused_call_writes_nothing_on_the_gemm_path(on_path: Backend) -> None:
    args = sfa_case(np.random.default_rng(4), D.ACL_BF16, 2, 2, 20, 2, 1, 8, 4, 6, 1, lk=[20, 9])
    lengths = np.asarray([20, 21], np.int32)  # 21 > S2: 161002 at synchronisation
    out = eager.to_device(np.full((2, 2, 2, 8), 3.0, np.float32).astype(args["query"].dtype), on_path)
    before = _gemms(on_path)
    with pytest.raises(AclnnError) as err:
        eager.run(OP, on_path, op_args={**args, "actualSeqLengthsKv": lengths, "attentionOutOut": out})
    assert err.value.code == 161002
    assert _gemms(on_path) == before + 2  # the GEMM path ran; its store kernel saw the flag
    np.testing.assert_array_equal(out.numpy().astype(np.float32), np.full((2, 2, 2, 8), 3.0, np.float32))


def test_without_a_gemm_the_block_kernel_runs(
    emulated: Backend, reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    sample = SAMPLES[0]
    saved = emulated.environ  # type: ignore[attr-defined]
    emulated.environ = {**saved, "ACL_SFA_PATH": "gemm"}  # type: ignore[attr-defined]
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            assert_matches_reference(emulated, reference, OP, sample.args, "contiguous", sample.note)
    finally:
        emulated.environ = saved  # type: ignore[attr-defined]
    assert "block kernel (gemm path refused: no GEMM" in caplog.text


def test_a_bad_setting_is_refused(with_blas: Backend) -> None:
    saved = with_blas.environ  # type: ignore[attr-defined]
    with_blas.environ = {**saved, "ACL_SFA_PATH": "fast"}  # type: ignore[attr-defined]
    try:
        with pytest.raises(AclError, match="ACL_SFA_PATH"):
            eager.run(OP, with_blas, op_args=SAMPLES[0].args)
    finally:
        with_blas.environ = saved  # type: ignore[attr-defined]


def test_sources_name_their_kernels() -> None:
    for inst in (SfaGemmInstance(D.ACL_BF16, 512, 64, False, 8), SfaGemmInstance(D.ACL_FLOAT16, 7, 0, True)):
        for which in ("gather", "softmax", "store"):
            assert f"{inst.name(which)}(" in sfa_gemm_source(inst, which)
