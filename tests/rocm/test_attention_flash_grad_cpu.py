"""FlashAttentionScoreGrad's flash path (``ACL_ATTENTION_GRAD_PATH=flash``) on the CPU kernel emulator.

The pre-pass, the key-major dK / dV kernel and the query-major dQ kernel of
:mod:`acl_rocm.kernels.attention_flash_grad` run on the emulator (the matrix layer's software path in layout 1,
and layout 2's 64-lane bookkeeping once) over small shapes with ragged tails: D 64 and 128, fp16 and bf16, GQA,
causal (top-left and bottom-right), a band, no mask, an explicit mask with a fully masked row, BSND / BNSD / BSH,
compared with the reference under the op's accuracy class (the fp16/bf16 class allows P and dS rounded to 16 bits).
A sink (FlashAttentionScoreGradV3) runs the kernels too (dsink from the pre-pass's terms); the refusals (fp32, pse,
D 256) take the composed path, the reason on the debug log.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, AclErrorCode
from acl_core.spec.ops.attention import compressed_mask
from acl_rocm.kernels.attention_flash_grad import flash_grad_source, grad_instance, parse_config, tiles
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.ops.attention_flash_grad import CONFIG_ENV
from acl_rocm.ops.attention_grad_cudnn import PATH_ENV
from tests.rocm.against_reference import class_problems
from tests.rocm.prefill import sentinel_outputs
from tests.rocm.test_attention_cpu import reference as reference
from tests.rocm.test_attention_flash_cpu import _backend
from tests.rocm.test_attention_grad_cpu import _samples
from tests.rocm.test_gpu_attention_grad import _as_bnsd, _as_bsh, _call


@pytest.fixture(scope="module")
def flash_backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """An emulated backend (layout 1, host BLAS for the composed fallbacks) with the flash backward switched on."""
    backend = _backend(tmp_path_factory, 1)
    backend.environ = {**backend.environ, PATH_ENV: "flash"}  # type: ignore[attr-defined]
    return backend


def check_flash_grad(backend: Backend, reference: Backend, op: str, args: dict[str, Any], note: str) -> None:
    """The flash path ran and its outputs pass the op's accuracy class against the reference."""
    runner = backend.attention_grad  # type: ignore[attr-defined]
    runner.last_path = None
    expected = eager.run(op, reference, **args)
    actual = eager.run(op, backend, **args, **sentinel_outputs(op, args, expected))
    assert runner.last_path == "flash", f"{note}: the {runner.last_path} path ran"
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{op} [{note}]: " + "; ".join(p.message for p in problems)


CASES = {
    "no mask GQA 4/2 BSND 40x75 D64 bf16": (ml_dtypes.bfloat16, (1, 4, 2, 40, 75, 64), {}, None),
    "causal top-left BNSD 70x70 D64 fp16": (
        np.float16, (1, 2, 1, 70, 70, 64), {"attenMaskOptional": compressed_mask(), "sparseMode": 2}, _as_bnsd),
    "causal bottom-right BSND 33x80 D128 bf16": (
        ml_dtypes.bfloat16, (1, 2, 2, 33, 80, 128), {"attenMaskOptional": compressed_mask(), "sparseMode": 3}, None),
    "band BSH 50x66 D64 fp16 pre 9 next 4": (
        np.float16, (2, 2, 2, 50, 66, 64),
        {"attenMaskOptional": compressed_mask(), "sparseMode": 4, "preTokens": 9, "nextTokens": 4}, _as_bsh),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_flash_grad_matches_the_reference(flash_backend: Backend, reference: Backend, case: str) -> None:
    dtype, dims, extra, relayout = CASES[case]
    op, args = _call(np.random.default_rng(7), dtype, *dims, **extra)
    if relayout is not None:
        args = relayout(args)
    check_flash_grad(flash_backend, reference, op, args, case)


def test_flash_grad_explicit_mask_and_window(flash_backend: Backend, reference: Backend) -> None:
    rng = np.random.default_rng(8)
    mask = rng.uniform(size=(1, 1, 37, 45)) < 0.3
    mask[:, :, 5, :] = True  # a fully masked row: dQ 0 there, P 0 in dK / dV
    extra = {"attenMaskOptional": mask, "preTokens": 20, "nextTokens": 6}
    op, args = _call(rng, np.float16, 1, 2, 1, 37, 45, 128, **extra)
    check_flash_grad(flash_backend, reference, op, args, "mask + window, GQA 2/1, D128 fp16")


def test_flash_grad_in_the_64_lane_layout(tmp_path_factory: pytest.TempPathFactory, reference: Backend) -> None:
    backend = _backend(tmp_path_factory, 2)  # AMD CDNA's bookkeeping: 64 lanes, P / dS through the warp's scratch
    backend.environ = {**backend.environ, PATH_ENV: "flash"}  # type: ignore[attr-defined]
    extra = {"attenMaskOptional": compressed_mask(), "sparseMode": 3}
    op, args = _call(np.random.default_rng(9), ml_dtypes.bfloat16, 1, 2, 1, 30, 41, 64, **extra)
    check_flash_grad(backend, reference, op, args, "layout 2, causal bottom-right GQA 2/1")


@pytest.mark.parametrize("layout", ["padded", "transposed"])
def test_flash_grad_on_views_with_element_loads(flash_backend: Backend, reference: Backend, layout: str) -> None:
    op, args = _call(np.random.default_rng(10), np.float16, 1, 2, 2, 21, 35, 32)
    runner = flash_backend.attention_grad  # type: ignore[attr-defined]
    runner.last_path = None
    expected = eager.run(op, reference, op_args=dict(args))
    actual = eager.run(op, flash_backend, layout=layout, guard=True, op_args=dict(args))
    assert runner.last_path == "flash"
    problems = class_problems(op, args, actual, expected)
    assert not problems, f"{layout}: " + "; ".join(p.message for p in problems)


def test_flash_grad_agrees_with_the_composed_path(flash_backend: Backend) -> None:
    """The log-sum-exp convention (lse = max + log sum; +inf where the sum is 0): the two paths agree normwise."""
    mask = np.zeros((1, 1, 24, 30), bool)
    mask[:, :, 3, :] = True  # max -inf, sum 0: P 0 on both paths
    op, args = _call(np.random.default_rng(11), ml_dtypes.bfloat16, 1, 2, 2, 24, 30, 64, attenMaskOptional=mask)
    runner = flash_backend.attention_grad  # type: ignore[attr-defined]
    flash = eager.run(op, flash_backend, **args)
    assert runner.last_path == "flash"
    saved = flash_backend.environ  # type: ignore[attr-defined]
    flash_backend.environ = {**saved, PATH_ENV: "blas"}  # type: ignore[attr-defined]
    try:
        composed = eager.run(op, flash_backend, **args)
        assert runner.last_path == "blas"
    finally:
        flash_backend.environ = saved  # type: ignore[attr-defined]
    for name, value in composed.items():
        c, f = np.asarray(value, np.float64), np.asarray(flash[name], np.float64)
        assert np.max(np.abs(c - f)) <= 2e-2 * np.max(np.abs(c)), name  # bf16: P and dS rounded on the flash path
    assert not np.any(np.asarray(flash["dqOut"])[0, 3]), "dQ of the fully masked row (BSND row 3)"


def test_samples_under_the_switch(flash_backend: Backend, reference: Backend, caplog: pytest.LogCaptureFixture) -> None:
    """Every FlashAttentionScoreGrad sample with the switch on: the ones the kernels take (fp16 / bf16, D a multiple
    of 16) run flash, the rest (fp32, D 8, pse) the composed path with the reason logged; all under the class."""
    runner = flash_backend.attention_grad  # type: ignore[attr-defined]
    paths: dict[str, str] = {}
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.attention_grad"):
        for note, args in _samples("FlashAttentionScoreGrad", tuple(range(31))):
            runner.last_path = None
            expected = eager.run("FlashAttentionScoreGrad", reference, **args)
            actual = eager.run("FlashAttentionScoreGrad", flash_backend, **args)
            problems = class_problems("FlashAttentionScoreGrad", args, actual, expected)
            assert not problems, f"[{note}] ({runner.last_path}): " + "; ".join(p.message for p in problems)
            paths[note] = runner.last_path
    assert paths["bf16 GQA 4/2, Sq=33 Skv=40 D=16"] == "flash"
    assert paths["float32 GQA 4/2"] == "blas" and paths["pse [B,N,Sq,Skv]"] == "blas"
    assert "blas path (flash: float32 inputs" in caplog.text and "blas path (flash: head dim 8" in caplog.text


def test_refusals_take_the_composed_path(flash_backend: Backend, reference: Backend) -> None:
    runner = flash_backend.attention_grad  # type: ignore[attr-defined]
    rng = np.random.default_rng(12)
    for note, (dtype, d, extra) in {
        "pse": (np.float16, 64, {"pse": rng.uniform(-1, 1, (1, 2, 9, 12)).astype(np.float16)}),
        "D 256": (ml_dtypes.bfloat16, 256, {}),
    }.items():
        op, args = _call(rng, dtype, 1, 2, 2, 9, 12, d, **extra)
        runner.last_path = None
        expected = eager.run(op, reference, **args)
        actual = eager.run(op, flash_backend, **args)
        assert runner.last_path == "blas", note
        problems = class_problems(op, args, actual, expected)
        assert not problems, f"{note}: " + "; ".join(p.message for p in problems)


@pytest.mark.parametrize("stages", ["1", "2"])
def test_flash_grad_walks_many_tiles_in_either_stage_count(
    flash_backend: Backend, reference: Backend, monkeypatch: pytest.MonkeyPatch, stages: str
) -> None:
    """ACL_FLASH_GRAD_CONFIG's 32-key dQ tiles and 16-row dK/dV steps: five key tiles, ten steps (five row tiles of two
    query heads), every buffer reused, in one stage and in two."""
    monkeypatch.setattr(flash_backend, "environ", {**flash_backend.environ, CONFIG_ENV: f"128=q32k16s{stages}"})  # type: ignore[attr-defined]
    extra = {"attenMaskOptional": compressed_mask(), "sparseMode": 3}
    op, args = _call(np.random.default_rng(13), ml_dtypes.bfloat16, 1, 2, 1, 70, 150, 128, **extra)
    check_flash_grad(flash_backend, reference, op, args, f"{stages} stages")
    inst = flash_backend.attention_grad.flash.last_instance  # type: ignore[attr-defined]
    assert (inst.bcq, inst.brk, inst.stages) == (32, 16, int(stages))  # type: ignore[attr-defined]


def test_a_bad_config_is_a_typed_error(flash_backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flash_backend, "environ", {**flash_backend.environ, CONFIG_ENV: "q64k32s3"})  # type: ignore[attr-defined]
    op, args = _call(np.random.default_rng(14), np.float16, 1, 1, 1, 8, 8, 64)
    with pytest.raises(AclError) as err:
        eager.run(op, flash_backend, **args)
    assert err.value.code == AclErrorCode.ACL_ERROR_INVALID_PARAM


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_grad_sources_compile_without_spills(tmp_path: Path, head_dim: int) -> None:
    """sm_90 cubins of the three kernels (both stage counts, element loads once): matrix instructions, no spills."""
    instances = [grad_instance(D.ACL_BF16, head_dim, True, (*tiles(head_dim), stages)) for stages in (1, 2)]
    instances.append(grad_instance(D.ACL_FLOAT16, head_dim, False))
    for n, inst in enumerate(instances):
        for kernel in ("prep", "dkv", "dq"):
            path = tmp_path / f"g{n}{kernel}.cu"
            path.write_text(flash_grad_source(inst, kernel))
            cubin = tmp_path / f"g{n}{kernel}.cubin"
            cmd = ["nvcc", "-cubin", "-arch=sm_90", "-Xptxas", "-v", *compile_options(32), str(path), "-o", str(cubin)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            assert " 0 bytes spill stores" in done.stderr, f"{inst} {kernel}: {done.stderr}"
            if kernel != "prep":
                ptx = subprocess.run(
                    ["nvcc", "-ptx", "-arch=sm_90", *compile_options(32), str(path), "-o", "-"],
                    capture_output=True,
                    text=True,
                    timeout=300,
                ).stdout
                assert "mma.sync.aligned.m16n8k16" in ptx and "ldmatrix" in ptx
                assert ("cp.async.cg.shared.global" in ptx) == inst.vec
                assert "ex2.approx.ftz.f32" in ptx


def test_flash_grad_with_a_sink(flash_backend: Backend, reference: Backend) -> None:
    """V3's sink: the statistics include it, the pre-pass writes each row's -p_sink Di, the composed sum makes dsink."""
    rng = np.random.default_rng(15)
    sink = rng.uniform(-2, 2, 4).astype(np.float32)
    extra = {"sink": sink, "attenMaskOptional": compressed_mask(), "sparseMode": 2}
    op, args = _call(rng, np.float16, 1, 4, 2, 29, 35, 64, **extra)
    assert op == "FlashAttentionScoreGradV3"
    check_flash_grad(flash_backend, reference, op, args, "sink, causal, GQA 4/2")


def test_config_parsing() -> None:
    assert parse_config("") == {}
    assert parse_config("q64k32s1") == {None: (64, 32, 1)}
    assert parse_config("128=q64k32s1, 64=q32k64s2") == {128: (64, 32, 1), 64: (32, 64, 2)}
    for bad in ("q64k32", "q48k32s2", "q64k128s2", "256=q64k32s2", "x=q64k32s2"):
        with pytest.raises(ValueError):
            parse_config(bad)
