"""``acl-core bench --kernels`` on a CUDA device: the MX rows' profile names the decode and GEMM kernels (GPU tier)."""

from __future__ import annotations

import pytest

from acl_core.backend import Backend

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("decode", ["tiled", "pair"])
def test_the_mx_rows_profile_shows_the_decode_and_the_gemm(
    rocm: Backend, monkeypatch: pytest.MonkeyPatch, decode: str
) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch.profiler needs a CUDA device (CUPTI)")
    from acl_tools.bench import quant_gemm
    from acl_tools.bench.ops import SIZES, Suite

    monkeypatch.setattr(rocm, "environ", {**rocm.environ, "ACL_QMM_MX_DECODE": decode})
    suite = Suite(rocm, SIZES["small"], lambda _: None, only={"QuantMatmulV5"}, kernels=True)
    quant_gemm.run_cases(suite, sizes=(512,))
    (row,) = [c.to_json() for c in suite.cases if c.op == "QuantMatmulV5 MXFP8"]
    assert row["status"] == "ok", row["status"]
    profile = row["extra"]["profile"]
    names = [k["name"] for k in profile["kernels"]]
    wanted = "acl_qmm_mx_pair_lut8" if decode == "pair" else "acl_qmm_operand_lut8_bf16_e8m0"
    assert any(wanted in n for n in names), names
    assert any("acl_qmm" not in n for n in names), names  # the BLAS GEMM's kernel
    assert 0 < sum(k["share"] for k in profile["kernels"]) <= 1.0 + 1e-9
    assert profile["busy_us"] >= profile["kernel_us"] * 0.5 > 0
