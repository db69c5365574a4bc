"""``acl-core bench --suite ops``: the small suite on the reference beside torch on the CPU (no timing is asserted)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import acl_core
from acl_core.backend import Backend, BackendRegistration
from acl_core.capabilities import Capabilities
from acl_core.plugin import hookimpl
from acl_tools.bench.cli import main
from acl_tools.bench.ops import SIZES

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("bench") / "ops.json"
    quick = ["--rounds", "1", "--min-time", "0.001"]  # every row runs; the figures are not the point here
    assert main(["--backend", "reference", "--suite", "ops", "--sizes", "small", *quick, "--out", str(out)]) == 0
    return json.loads(out.read_text()), out


def test_small_suite_writes_a_well_formed_report(small: tuple[dict[str, Any], Path]) -> None:
    report, _ = small
    for key in ("date", "command", "backend", "device", "torch", "cases", "copy_GBps"):
        assert key in report
    assert report["backend"] == "reference" and report["sizes"] == "small"
    assert report["torch"]["version"] and report["torch"]["device"].startswith("cpu")
    assert "--suite ops" in report["command"]
    ops = {c["op"] for c in report["cases"]}
    expected = {"Copy D2D", "Add", "Mul", "Silu", "Mish", "SiluBackward", "Softmax", "LayerNorm", "RmsNorm"}
    expected |= {"GemmaRmsNorm", "Matmul", "AddRmsNormQuant"}
    expected |= {"MseLoss", "SmoothL1Loss"}
    expected |= {"GatherNd", "Take"}
    expected |= {"AvgPool2d", "MaxPool2dWithIndices", "ReflectionPad2d"}
    expected |= {"StridedSlice", "RepeatInterleaveWithDim", "RepeatInterleaveIntWithDim", "EmbeddingDenseBackward"}
    expected |= {"InplaceNormal", "InplaceUniform", "ForeachAddList"}
    expected |= {"TransposeBatchMatMul", "GroupedMatmul", "GroupedMatmulWeightNz", "QuantMatmulWeightNz int8"}
    expected |= {"GroupedMatmulSwigluQuantV2", "GroupedMatmulV5", "GroupedMatmulV5 [N,K] weight"}
    expected |= {"FlashAttentionScoreV3 causal+sink", "RecurrentGatedDeltaRule decode"}
    expected |= {"FlashAttentionScoreGrad causal"}
    expected |= {"SparseFlashAttention decode", "LightningIndexer decode"}
    expected |= {"ScatterPaKvCache", "RopeWithSinCosCacheV2"}
    expected |= {"MoeTokenPermute", "ApplyTopKTopP", "MoeGatingTopK", "MoeTokenUnpermute", "MoeInitRoutingV2"}
    expected |= {"AttentionUpdate", "MoeDistributeDispatchV2", "MoeDistributeCombineV2"}
    expected |= {"MoeTokenPermuteGrad", "MoeTokenUnpermuteGrad"}
    expected |= {"ScatterPaKvCache", "RopeWithSinCosCacheV2", "MlaPrologV2WeightNz decode"}
    expected |= {"ConvolutionBackward", "BatchNormBackward", "HardswishBackwardV2", "MoeGatingTopKBackward"}
    assert expected | {"FlashAttentionScore causal", "Add host two-phase", "Add host phase 2 only"} <= ops
    chains = [c for c in report["cases"] if c["op"].startswith("Chain of")]
    assert [c["op"] for c in chains] == ["Chain of 16 eager", "Chain of 16 replayed"]
    assert set(chains[0]["extra"]) == {"host_us", "gpu_us"} and chains[0]["extra"]["host_us"] > 0
    captures = acl_core.get_backend("reference").capabilities().stream_capture
    for case in report["cases"]:
        if case is chains[1] and not captures:  # the replay row needs a backend that captures
            assert case["status"] == "not supported", case
            continue
        assert case["status"] == "ok", case
        assert {"op", "shape", "dtype", "acl_ms", "torch_ms", "ratio", "metric"} <= set(case)
        assert case["acl_ms"] > 0 and case["torch_ms"] > 0 and case["ratio"] > 0
        assert case["metric"]["unit"] in ("GB/s", "TFLOP/s", "us/call")
        assert case["metric"]["acl"] > 0 and case["metric"]["torch"] > 0
    dtypes = {c["dtype"] for c in report["cases"] if c["op"] == "Matmul"}
    assert dtypes == {"bf16", "float16", "float32"}
    assert all("fraction_of_copy" in c for c in report["cases"] if c["op"] in ("Add", "Mul", "Silu"))


def test_plot_is_a_png_beside_the_json(small: tuple[dict[str, Any], Path]) -> None:
    _, out = small
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_full_sizes_are_refused_on_a_cpu_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "full.json"
    assert main(["--backend", "reference", "--suite", "ops", "--sizes", "full", "--out", str(out)]) == 2
    assert "--sizes full is for a GPU" in capsys.readouterr().err and not out.exists()
    assert SIZES["full"].matmul == 8192 and SIZES["full"].attention == (4, 32, 4096, 128)
    assert SIZES["full"].elementwise_bytes == 256 << 20
    quick = SIZES["full"].timed(0.001, 1)
    assert (quick.min_time, quick.rounds, quick.full, quick.matmul) == (0.001, 1, True, 8192)
    assert SIZES["small"].timed() == SIZES["small"] and not SIZES["small"].full


class _Plugin:
    def __init__(self, *regs: BackendRegistration) -> None:
        self.regs = regs

    @hookimpl
    def acl_core_backends(self) -> Sequence[BackendRegistration]:
        return self.regs


def _without_silu() -> Backend:
    from acl_reference.backend import ReferenceBackend

    class NoSilu(ReferenceBackend):
        def capabilities(self) -> Capabilities:
            caps = super().capabilities()
            return caps.model_copy(update={"ops": tuple(op for op in caps.ops if op != "Silu")})

    backend = NoSilu()
    backend.name = "nosilu"
    return backend


@pytest.fixture
def nosilu() -> Iterator[str]:
    acl_core.reset_plugins()
    acl_core.register_plugin(_Plugin(BackendRegistration("nosilu", _without_silu, priority=-100)))
    yield "nosilu"
    acl_core.reset_plugins()


def test_an_op_the_backend_does_not_claim_is_reported_not_run(nosilu: str, tmp_path: Path) -> None:
    out, png = tmp_path / "nosilu.json", tmp_path / "plot" / "nosilu.png"
    argv = ["--backend", nosilu, "--suite", "ops", "--only", "Silu,Copy", "--out", str(out), "--plot", str(png)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    silu = [c for c in report["cases"] if c["op"] == "Silu"]
    assert len(silu) == 3
    for case in silu:
        assert case["status"] == "not claimed" and case["acl_ms"] is None and case["ratio"] is None
        assert case["torch_ms"] is None
    (copy,) = [c for c in report["cases"] if c["op"] == "Copy D2D"]
    assert copy["status"] == "ok" and copy["ratio"] > 0
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_host_cases_are_timed_in_alternating_rounds(small: tuple[dict[str, Any], Path]) -> None:
    report, _ = small
    host = [c for c in report["cases"] if c["op"].startswith("Add host")]
    assert len(host) == 2 and all(c["note"] == "timed in alternating rounds" for c in host)


def test_interleaved_timing_alternates_which_side_goes_first() -> None:
    from acl_tools.bench.timing import measure_interleaved

    order: list[str] = []
    a = (lambda: order.append("a"), lambda: order.append("|"))
    b = (lambda: order.append("b"), lambda: order.append("|"))
    ta, tb = measure_interleaved(a, b, min_time=0.0, rounds=3)
    rounds = "".join(order).split("|")[:-1]
    timed = [r[0] for r in rounds[-6:]]  # after each side's warm-up and calibration rounds
    assert timed == ["a", "b", "b", "a", "a", "b"]
    assert ta.rounds == tb.rounds == 3 and ta.calls >= 1 and tb.calls >= 1


def test_table_starts_with_a_header_row_and_only_takes_names_in_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "copy.json"
    assert main(["--backend", "reference", "--suite", "ops", "--ops", "copy", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["op", "dtype", "shape", "acl", "torch", "unit", "acl/torch", "time"]
    (row,) = [line for line in lines[2:] if "Copy D2D" in line]
    assert "GB/s" in row and row.split()[-1].startswith("x")
    assert [c["op"] for c in json.loads(out.read_text())["cases"]] == ["Copy D2D"]
