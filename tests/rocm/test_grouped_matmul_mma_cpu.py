"""GroupedMatmulV5's matrix-instruction grouped GEMM (``kernels/grouped_matmul_mma.py``) on the CPU kernel emulator.

Through the op (emulated backend, 32-lane warps: the NVIDIA fragment layout on the software matrix path):
fp16 and bf16 M-axis groups with empty groups, one group spanning several 128-row tiles and M, N, K not
multiples of the tiles; weights given [g, K, N] and as the transposed [g, N, K] storage; the 16-byte copy
path and the element path (unaligned K, N, strided views); K-axis groups; the MX mode after decoding;
against the reference within the GEMM tolerance, with the path the runner reports. Then the kernel alone
on a hand-built descriptor table in every fragment layout (1 NVIDIA, 2 CDNA 64-lane, 3 RDNA3, 4 RDNA4)
against NumPy's float64 product of the same 16-bit inputs, and the launches on the fake provider.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from acl_core import eager, lowp
from acl_core.backend import Backend
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError
from acl_core.formats import Format
from acl_core.tensor import AclTensor, AclTensorList
from acl_rocm.backend import RocmBackend
from acl_rocm.kernels.grouped_matmul import FIELD, FIELDS, GmmKernel
from acl_rocm.kernels.grouped_matmul_mma import (
    ALTERNATIVES,
    BASE,
    CONFIGS,
    DEFAULT,
    GmmConfig,
    GmmMmaKernel,
    parse_config,
)
from acl_rocm.kernels.mma import LAYOUT_WARP, LAYOUTS
from acl_rocm.kernels.prelude import compile_options
from tests.rocm import kernel_emulator
from tests.rocm.fake_provider import FakeProvider
from tests.rocm.gemm_tolerance import gemm_tolerance

OP = "GroupedMatmulV5"
BF16 = ml_dtypes.bfloat16


def _base(**extra: object) -> dict[str, object]:
    return {"splitItem": 3, "groupType": 0, "groupListType": 1, "actType": 0, **extra}


def _arr(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(dtype)


def _transposed(backend: Backend, w: np.ndarray) -> tuple[AclTensorList, eager.DeviceArray]:
    """weight [g, K, N] as the transposed view CANN takes: stored [g, N, K] (K contiguous)."""
    stored = eager.to_device(np.ascontiguousarray(np.swapaxes(w, 1, 2)), backend)
    g, k, n = w.shape
    view = AclTensor((g, k, n), stored.dtype, (n * k, 1, k), 0, Format.ACL_FORMAT_ND, (g, n, k), stored.address)
    return AclTensorList.create([view]), stored


def _check(
    emulated: RocmBackend,
    reference: Backend,
    args: dict,
    path: str,
    transposed: bool = False,
    layout: str = "contiguous",
) -> None:
    """The emulated result against the reference (the tolerance of a K-term product sum), and the path taken."""
    expected = eager.run(OP, reference, **args)["out"][0]
    run_args = dict(args)
    keep = None
    if transposed:
        run_args["weight"], keep = _transposed(emulated, args["weight"][0])
    emulated.grouped_matmul.last_path = None
    got = eager.run(OP, emulated, layout=layout, **run_args)["out"][0]
    del keep
    assert emulated.grouped_matmul.last_path == path
    assert got.dtype == expected.dtype and got.shape == expected.shape
    k = args["x"][0].shape[1]
    atol, rtol = gemm_tolerance(expected, k)
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=atol, rtol=rtol)


def _m_groups(rng: np.random.Generator, dtype: object, counts: list[int], m: int, k: int, n: int) -> dict:
    bias_dt = np.float16 if dtype == np.float16 else np.float32
    g = len(counts)
    return _base(
        x=[_arr(rng, (m, k), dtype)],
        weight=[_arr(rng, (g, k, n), dtype)],
        biasOptional=[_arr(rng, (g, n), bias_dt)],
        groupListOptional=np.array(counts, np.int64),
        out=[np.full((m, n), 3, dtype)],  # rows no group covers keep it
    )


CASES = [
    # (counts, m, k, n): empty groups, a group over two 128-row tiles, tails in every dimension
    ([0, 150, 1, 0, 20], 180, 40, 136),  # 16-byte copies (K and N multiples of 8), K tail of 8 in a 32 slice
    ([3, 0, 131], 140, 37, 70),  # element loads: K and N not multiples of 8
    ([0, 0, 290, 0], 300, 72, 260),  # one group over 3 x 3 tiles, the others empty
]


@pytest.mark.parametrize("dtype", [BF16, np.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("transposed", [False, True], ids=["kn", "nk"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=["copies", "elements", "one-group"])
def test_m_groups_match_the_reference(
    emulated: RocmBackend, reference: Backend, dtype: object, transposed: bool, case: int
) -> None:
    counts, m, k, n = CASES[case]
    args = _m_groups(np.random.default_rng(case), dtype, counts, m, k, n)
    _check(emulated, reference, args, "mma", transposed)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_configurations_through_the_op(emulated: RocmBackend, reference: Backend, config: str) -> None:
    """Each ``ACL_GMM_CONFIG`` choice (forced on the runner): bf16 out (paired 16-bit stores), a bias, both weight
    layouts, the copy and the element paths."""
    runner = emulated.grouped_matmul
    runner.forced_config = config
    try:
        for case, transposed in ((0, False), (1, True), (2, True)):
            counts, m, k, n = CASES[case]
            _check(
                emulated, reference, _m_groups(np.random.default_rng(case), BF16, counts, m, k, n), "mma", transposed
            )
            assert runner.last_config == config
    finally:
        runner.forced_config = None


def test_strided_views_take_element_loads(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(3)
    args = _m_groups(rng, BF16, [40, 0, 60], 100, 48, 40)
    for layout in ("padded", "offset", "transposed"):
        _check(emulated, reference, args, "mma", layout=layout)


def test_k_groups(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(4)
    x, w = _arr(rng, (70, 96), np.float16), _arr(rng, (96, 130), np.float16)
    for ends in ([16, 16, 56, 96], [13, 13, 50, 90]):  # group starts on 8-element boundaries, then not
        args = {
            **_base(splitItem=2, groupType=2, groupListType=0),
            "x": [x],
            "weight": [w],
            "groupListOptional": np.array(ends, np.int64),
        }
        _check(emulated, reference, args, "mma")


def test_mx_operands_decode_then_take_the_mma_kernel(emulated: RocmBackend, reference: Backend) -> None:
    rng = np.random.default_rng(5)
    counts, k, n = [70, 0, 129], 96, 48
    m, g, kb = sum(counts) + 3, len(counts), -(-k // 64)
    args = _base(
        x=[rng.uniform(-6, 6, (m, k)).astype(ml_dtypes.float8_e4m3fn)],
        weight=[rng.uniform(-6, 6, (g, k, n)).astype(ml_dtypes.float8_e4m3fn)],
        scaleOptional=[lowp.e8m0_array(rng.integers(122, 130, (g, kb, n, 2)))],
        perTokenScaleOptional=[lowp.e8m0_array(rng.integers(122, 130, (m, kb, 2)))],
        groupListOptional=np.array(counts, np.int64),
        splitItem=2,
        out=[np.full((m, n), -7, np.float32)],
    )
    expected = eager.run(OP, reference, **args)["out"][0]
    emulated.grouped_matmul.last_path = None
    got = eager.run(OP, emulated, **args)["out"][0]
    assert emulated.grouped_matmul.last_path == "mma"
    np.testing.assert_array_equal(got[sum(counts) :], -7)
    # the decoded codes and their products are exact; fp32 additions in another order: k * 2^-24 * sum |x w|
    magnitudes = {
        "x": [np.abs(args["x"][0])],
        "weight": [np.abs(args["weight"][0])],
        "out": [np.zeros((m, n), np.float32)],
    }
    sums = eager.run(OP, reference, **{**args, **magnitudes})["out"][0].astype(np.float64)
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    assert np.all(error <= k * 2.0**-24 * sums), float(np.max(error - k * 2.0**-24 * sums))


def test_simt_switch_and_the_reported_path(
    emulated: RocmBackend, reference: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    args = _m_groups(np.random.default_rng(6), BF16, [5, 9], 20, 24, 16)
    runner = emulated.grouped_matmul
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.grouped_matmul"):
        _check(emulated, reference, args, "mma")
        runner.forced_kernel = "simt"
        try:
            _check(emulated, reference, args, "simt")
        finally:
            runner.forced_kernel = None
    lines = [r.getMessage() for r in caplog.records if r.name == "acl_rocm.grouped_matmul"]
    assert any("path=mma (bf16 -> bf16, bias float32, groups=2, 128x128 tiles" in line for line in lines), lines
    assert any("path=simt" in line and "ACL_GMM_KERNEL=simt" in line for line in lines), lines
    f32 = {k: [a.astype(np.float32) for a in args[k]] for k in ("x", "weight", "out")}
    _check(emulated, reference, {**args, **f32}, "simt")  # fp32 stays on the SIMT kernel (no TF32)


# ----------------------------------------------------------------------------- the kernel alone, every layout
def _group_row(x: np.ndarray, w: np.ndarray, out: np.ndarray, bias: np.ndarray | None, **rest: int) -> list[int]:
    row = dict.fromkeys(FIELDS, 0)
    row |= {"X": x.ctypes.data, "W": w.ctypes.data, "OUT": out.ctypes.data, **rest}
    if bias is not None:
        row |= {"BIAS": bias.ctypes.data, "BSN": 1}
    return [row[f] for f in FIELDS]


def _launch(kernel: GmmMmaKernel, layout: int, rows: list[list[int]]) -> None:
    """Number the tiles as the group-list pass does, then run every block of the grid."""
    tiles = 0
    for row in rows:
        row[FIELD["TILE"]] = tiles
        m = row[FIELD["M1"]] - row[FIELD["M0"]]
        tiles += -(-m // kernel.tile_m) * -(-row[FIELD["N"]] // kernel.tile_n)
    table = np.array([*rows, [0] * (FIELD["TILE"]) + [tiles]], np.int64)
    flag = np.zeros(1, np.int32)
    warp = LAYOUT_WARP[layout]
    options = [f"-DACL_WARP_SIZE={warp}", f"-DACL_LANE_MASK_BITS={warp}", f"-DACL_MMA_LAYOUT={layout}"]
    lib = kernel_emulator._library(kernel.source(), kernel.kernel_name, options)
    meta = (ctypes.c_longlong * 3)(len(rows), 0, 0)
    holders = [meta, ctypes.c_void_p(table.ctypes.data), ctypes.c_void_p(flag.ctypes.data)]
    params = (ctypes.c_void_p * 3)(*(ctypes.addressof(h) for h in holders))
    grid = (ctypes.c_uint(tiles + 1), ctypes.c_uint(1), ctypes.c_uint(1))
    lib.emu_launch(*grid, ctypes.c_uint(kernel.threads), ctypes.cast(params, ctypes.c_void_p))


@pytest.fixture(scope="module")
def _build_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = kernel_emulator.available()
    if reason:
        pytest.skip(f"the kernel emulator is unavailable: {reason}")
    if kernel_emulator.EmulatedProvider.build_dir is None:
        kernel_emulator.EmulatedProvider.build_dir = tmp_path_factory.mktemp("gmm-mma-build")


KERNEL_CASES = [
    *((layout, "base", 40) for layout in LAYOUTS),
    (1, "base", 200),
    # K 200: more slices than stages (the ring wraps), a K tail
    *((1, name, 200) for name in CONFIGS if name != "base"),
    (2, "128x128x32-w2x4-s4-b2", 200),  # 64-lane warps: half as many along N
    (2, "64x128x32-w2x2-s4-b3", 200),
    (3, "128x128x64-w2x4-s3-b2", 72),
]


@pytest.mark.usefixtures("_build_dir")
@pytest.mark.parametrize(("layout", "config", "k"), KERNEL_CASES, ids=[f"L{c[0]}-{c[1]}-K{c[2]}" for c in KERNEL_CASES])
def test_kernel_in_every_fragment_layout(layout: int, config: str, k: int) -> None:
    rng = np.random.default_rng(20 + layout)
    bf16 = layout % 2 == 1
    dtype = BF16 if bf16 else np.float16
    acl = D.ACL_BF16 if bf16 else D.ACL_FLOAT16
    m, n = 150, 136
    x = rng.uniform(-1, 1, (m, k)).astype(dtype)
    w_kn = rng.uniform(-1, 1, (k, n)).astype(dtype)
    w_nk = rng.uniform(-1, 1, (n, k)).astype(dtype)
    # stored with NaN past K (row padding of x and the [N, K] weight, rows of the [K, N] one): never to be read
    xs, kns, nks = (
        np.full((m, k + 8), np.nan, dtype),
        np.full((k + 8, n), np.nan, dtype),
        np.full((n, k + 8), np.nan, dtype),
    )
    xs[:, :k], kns[:k], nks[:, :k] = x, w_kn, w_nk
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    common = {"K1": k, "N": n, "XSR": k + 8, "XSC": 1, "OSR": n, "OSC": 1}
    rows = [
        _group_row(xs, kns, out, bias, M0=0, M1=131, WSK=n, WSN=1, **common),  # 16-byte copies, [K, N]
        _group_row(xs, nks, out, None, M0=131, M1=131, WSK=1, WSN=k + 8, **common),  # empty
        _group_row(xs, nks, out, None, M0=131, M1=150, WSK=1, WSN=k + 8, **common),  # 16-byte copies, [N, K]
    ]
    # element loads: K range [3, k - 3), x read through its transpose; N 135 of rows 136 apart (a lone last column)
    odd = np.full((m, n), np.nan, np.float32)
    xt = np.ascontiguousarray(x.T)
    k0, k1 = 3, k - 3
    rows.append(
        _group_row(xt, kns, odd, None, M0=0, M1=m, K0=k0, K1=k1, N=n - 1, XSR=1, XSC=m, WSK=n, WSN=1, OSR=n, OSC=1)
    )
    # output rows an odd number of elements apart: one element a store
    odd_rows = np.full((m, n + 1), np.nan, np.float32)
    rows.append(_group_row(xs, nks, odd_rows, bias, M0=0, M1=m, WSK=1, WSN=k + 8, **{**common, "OSR": n + 1}))
    _launch(GmmMmaKernel(acl, D.ACL_FLOAT, D.ACL_FLOAT, config=parse_config(config)), layout, rows)
    x64, kn64, nk64 = (a.astype(np.float64) for a in (x, w_kn, w_nk))
    want = np.concatenate([x64[:131] @ kn64 + bias, x64[131:] @ nk64.T])
    tol = {"rtol": 1e-5, "atol": 1e-5 * k, "err_msg": f"layout {layout}, {config}"}
    np.testing.assert_allclose(out, want, **tol)  # type: ignore[arg-type]
    np.testing.assert_allclose(odd[:, :-1], x64[:, k0:k1] @ kn64[k0:k1, :-1], **tol)  # type: ignore[arg-type]
    assert np.isnan(odd[:, -1]).all()
    np.testing.assert_allclose(odd_rows[:, :n], x64 @ nk64.T + bias, **tol)  # type: ignore[arg-type]
    assert np.isnan(odd_rows[:, n]).all()


def _aligned(shape: tuple[int, int]) -> np.ndarray:
    """An int8 array of ``shape`` filled with 127 whose data starts on a 64-byte boundary (the 16-byte copies apply)."""
    raw = np.full(shape[0] * shape[1] + 64, 127, np.int8)
    skip = -raw.ctypes.data % 64
    return raw[skip : skip + shape[0] * shape[1]].reshape(shape)


INT8_CASES = [
    *((layout, "128x128x32-w2x2-s4", 96) for layout in LAYOUTS),
    (1, "base", 96),
    # K 272: more slices than stages (the ring wraps), a 16-byte K tail
    *((1, name, 272) for name in CONFIGS if name not in ("base", "128x128x32-w2x2-s4")),
    (2, "128x128x32-w2x4-s4-b2", 160),
    (1, "128x128x16-w2x4-s4", 96),  # 4-row units of the [K, N] weight (8 warps, 32 bytes of K a slice)
]


@pytest.mark.usefixtures("_build_dir")
@pytest.mark.parametrize(("layout", "config", "k"), INT8_CASES, ids=[f"L{c[0]}-{c[1]}-K{c[2]}" for c in INT8_CASES])
def test_int8_kernel_is_exact_in_every_fragment_layout(layout: int, config: str, k: int) -> None:
    """INT8 x INT8 into INT32 on each staging path, bit for bit against NumPy's int64 product."""
    rng = np.random.default_rng(30 + layout)
    m, n = 150, 136
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w_kn = rng.integers(-128, 128, (k, n), dtype=np.int8)
    w_nk = rng.integers(-128, 128, (n, k), dtype=np.int8)
    x[0], w_kn[:, 0], w_nk[0] = -128, -128, -128  # the largest products, K of them
    # stored with 0x7f past K (row padding of x and the [N, K] weight, rows of the [K, N] one): never to be read
    xs, kns, nks = (_aligned((m, k + 16)), _aligned((k + 16, n)), _aligned((n, k + 16)))
    xs[:, :k], kns[:k], nks[:, :k] = x, w_kn, w_nk
    sentinel = np.iinfo(np.int32).min
    out = np.full((m, n), sentinel, np.int32)
    common = {"K1": k, "N": n, "XSR": k + 16, "XSC": 1, "OSR": n, "OSC": 1}
    rows = [
        _group_row(xs, kns, out, None, M0=0, M1=131, WSK=n, WSN=1, **common),  # x copied, [K, N] words transposed
        _group_row(xs, nks, out, None, M0=131, M1=131, WSK=1, WSN=k + 16, **common),  # empty
        _group_row(xs, nks, out, None, M0=131, M1=150, WSK=1, WSN=k + 16, **common),  # both copied, [N, K]
    ]
    # byte loads: K range [3, k - 5) (odd ends), x read through its transpose; N 135 of rows 136 apart
    odd = np.full((m, n), sentinel, np.int32)
    xt = np.ascontiguousarray(x.T)
    k0, k1 = 3, k - 5
    rows.append(
        _group_row(xt, kns, odd, None, M0=0, M1=m, K0=k0, K1=k1, N=n - 1, XSR=1, XSC=m, WSK=n, WSN=1, OSR=n, OSC=1)
    )
    # a [K, N] weight whose N (132) is a multiple of 4 but not of 16, K range [16, k - 16) in whole chunks; output
    # rows an odd number of elements apart: one element a store
    odd_rows = np.full((m, n + 1), sentinel, np.int32)
    k2 = k - 16
    rows.append(
        _group_row(
            xs, kns, odd_rows, None, M0=0, M1=m, K0=16, K1=k2, N=132, XSR=k + 16, XSC=1, WSK=n, WSN=1, OSR=n + 1, OSC=1
        )
    )
    _launch(GmmMmaKernel(D.ACL_INT8, None, D.ACL_INT32, config=parse_config(config)), layout, rows)
    x64, kn64, nk64 = (a.astype(np.int64) for a in (x, w_kn, w_nk))
    want = np.concatenate([x64[:131] @ kn64, x64[131:] @ nk64.T])
    msg = f"layout {layout}, {config}"
    np.testing.assert_array_equal(out, want, err_msg=msg)
    np.testing.assert_array_equal(odd[:, :-1], x64[:, k0:k1] @ kn64[k0:k1, :-1], err_msg=msg)
    assert (odd[:, -1] == sentinel).all()
    np.testing.assert_array_equal(odd_rows[:, :132], x64[:, 16:k2] @ kn64[16:k2, :132], err_msg=msg)
    assert (odd_rows[:, 132:] == sentinel).all()


def test_int8_kernel_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="int8 into int32 only"):
        GmmMmaKernel(D.ACL_INT8, None, D.ACL_FLOAT)
    with pytest.raises(ValueError, match="int8 into int32 only"):
        GmmMmaKernel(D.ACL_INT8, D.ACL_FLOAT, D.ACL_INT32)
    text = GmmMmaKernel(D.ACL_INT8, None, D.ACL_INT32, config=DEFAULT).source()
    body = text.split('extern "C"')[-1]
    assert "#define GMM_I8 1" in text and "acl_mma_i8" in text
    for call in (
        "gmm_tile_pipe<true, true, false>",
        "gmm_tile_pipe<false, true, false>",
        "gmm_tile_pipe<true, false, false>",
    ):
        assert call in body
    assert "#define GMM_I8 0" in GmmMmaKernel(D.ACL_BF16, None).source()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_each_operand_dtype_compiles_with_nvcc(tmp_path: Path, arch: str) -> None:
    """The 16-bit and the int8 kernels (pipelined and legacy loops) compile; int8 issues m16n8k32.s8 on sm_80+."""
    for dtype, bias, out in ((D.ACL_BF16, D.ACL_FLOAT, D.ACL_BF16), (D.ACL_INT8, None, D.ACL_INT32)):
        for config in (DEFAULT, BASE):
            kernel = GmmMmaKernel(dtype, bias, out, config=config)
            path = tmp_path / f"{kernel.kernel_name}.cu"
            path.write_text(kernel.source())
            ptx = tmp_path / f"{kernel.kernel_name}.ptx"
            done = subprocess.run(
                ["nvcc", "-ptx", f"-arch={arch}", *compile_options(32), str(path), "-o", str(ptx)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
            text = ptx.read_text()
            assert ("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32" in text) == (dtype == D.ACL_INT8)
            assert "mma.sync.aligned.m16n8k16" in text or dtype == D.ACL_INT8


# ----------------------------------------------------------------------------- launches (fake provider)
def test_launch_shape_and_kernel_choice(tmp_path: Path) -> None:
    provider = FakeProvider(arch="sm_80")  # sm_90's auto takes the wgmma kernel (test_grouped_matmul_wgmma_cpu.py)
    backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    rng = np.random.default_rng(0)
    groups, m, n = 10, 1000, 300
    args = _base(
        x=[_arr(rng, (m, 64), BF16)],
        weight=[_arr(rng, (groups, 64, n), BF16)],
        groupListOptional=np.full(groups, 7, np.int64),
    )
    provider.launches.clear()
    eager.run(OP, backend, **args)
    prep, gemm = provider.launches[-2:]
    assert prep.name.split("_")[2] == "prep" and gemm.name.split("_")[2] == "mma"
    assert gemm.block == (128, 1, 1) and gemm.grid == ((-(-m // 128) + groups) * -(-n // 128), 1, 1)
    assert backend.grouped_matmul.last_path == "mma"
    backend.grouped_matmul.forced_kernel = "simt"
    eager.run(OP, backend, **args)
    assert provider.launches[-1].name.split("_")[2] == "gemm" and provider.launches[-1].block == (256, 1, 1)
    runner = backend.grouped_matmul
    runner.forced_kernel = None
    assert isinstance(runner.gemm(D.ACL_FLOAT, None, D.ACL_FLOAT), GmmKernel)
    # auto takes the int8 matrix kernel on NVIDIA (m16n8k32.s8, INT8_AUTO_MMA); simt keeps the SIMT one
    assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmMmaKernel)
    assert isinstance(runner.gemm(D.ACL_FLOAT16, D.ACL_FLOAT16, D.ACL_FLOAT16), GmmMmaKernel)
    backend.grouped_matmul.forced_kernel = "mma"
    assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmMmaKernel)  # sm_80: m16n8k32.s8
    backend.grouped_matmul.forced_kernel = "simt"
    assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmKernel)
    backend.grouped_matmul.forced_kernel = None
    with pytest.raises(ValueError, match="float16 / bfloat16 / int8"):
        GmmMmaKernel(D.ACL_FLOAT, None)


def test_configurations_parse_launch_and_refuse(tmp_path: Path) -> None:
    assert parse_config("base") == CONFIGS["base"] and str(CONFIGS["base"]) == "base"
    for name, config in CONFIGS.items():
        assert parse_config(name) == config and str(config) == name
    assert parse_config("128x64x32-w2x2-s3") == GmmConfig(128, 64, 32, 2, 2, 3)
    for bad in ("128x128", "128x128x48-w2x2-s3", "128x128x32-w2x3-s3", "256x256x64-w2x4-s4", "128x128x32-w2x2-s1"):
        with pytest.raises(ValueError, match=r"neither a name|grouped GEMM configuration"):
            parse_config(bad)
    provider = FakeProvider()
    env = {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GMM_CONFIG": "128x128x32-w2x4-s4-b2", "ACL_GMM_KERNEL": "mma"}
    backend = RocmBackend(provider, env)
    backend.runtime.ensure_device(0)
    rng = np.random.default_rng(0)
    groups, m, n = 10, 1000, 300
    args = _base(
        x=[_arr(rng, (m, 64), BF16)],
        weight=[_arr(rng, (groups, 64, n), BF16)],
        groupListOptional=np.full(groups, 7, np.int64),
    )
    eager.run(OP, backend, **args)
    gemm = provider.launches[-1]
    config = CONFIGS["128x128x32-w2x4-s4-b2"]
    assert gemm.block == (256, 1, 1) and config.shared_bytes == 4 * (128 * 40 * 2) * 2
    # opted in above the 48 KiB default (the fake launch refuses more shared memory than the opt-in)
    assert provider.dynamic_shared[gemm.name] == config.shared_bytes
    assert "__launch_bounds__(256, 2)" in GmmMmaKernel(D.ACL_BF16, None, config=config).source()
    backend.grouped_matmul.forced_config = "64x128x32-w2x2-s4-b3"
    eager.run(OP, backend, **args)
    assert provider.launches[-1].grid == ((-(-m // 64) + groups) * -(-n // 128), 1, 1)
    backend.grouped_matmul.forced_config = "128x128x48-w2x2-s3"
    with pytest.raises(AclError, match="ACL_GMM_CONFIG='128x128x48-w2x2-s3'"):
        eager.run(OP, backend, **args)


def test_the_default_configuration_and_its_fallback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Unset ACL_GMM_CONFIG: the measured best (80 KiB, opted in); a device offering less: base, logged once."""
    assert str(DEFAULT) == "128x128x32-w2x2-s4" and DEFAULT.shared_bytes == 80 * 1024
    assert str(DEFAULT) not in ALTERNATIVES and "base" in ALTERNATIVES and set(ALTERNATIVES) <= set(CONFIGS)
    rng = np.random.default_rng(0)
    args = _base(
        x=[_arr(rng, (300, 64), BF16)],
        weight=[_arr(rng, (3, 64, 200), BF16)],
        groupListOptional=np.full(3, 100, np.int64),
    )
    for opt_in, want in ((232448, DEFAULT), (DEFAULT.shared_bytes, DEFAULT), (DEFAULT.shared_bytes - 1, BASE)):
        provider = FakeProvider(shared_opt_in=opt_in)
        backend = RocmBackend(provider, {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GMM_KERNEL": "mma"})
        backend.runtime.ensure_device(0)
        runner = backend.grouped_matmul
        assert runner.default() == "128x128x32-w2x2-s4"
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="acl_rocm.grouped_matmul"):
            eager.run(OP, backend, **args)
            eager.run(OP, backend, **args)
        assert runner.last_config == str(want), opt_in
        gemm = provider.launches[-1]
        assert gemm.block == (want.threads, 1, 1)
        fallback = [r for r in caplog.records if "the base configuration instead" in r.getMessage()]
        assert len(fallback) == (1 if want is BASE else 0), opt_in
        if want is DEFAULT:
            assert provider.dynamic_shared[gemm.name] == DEFAULT.shared_bytes
        else:
            assert gemm.name not in provider.dynamic_shared  # static 40 KiB: nothing to opt into


def test_no_matrix_instructions_keep_the_simt_kernel_unless_forced(tmp_path: Path) -> None:
    backend = RocmBackend(FakeProvider(arch="sm_75"), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    runner = backend.grouped_matmul
    assert isinstance(runner.gemm(D.ACL_BF16, None, D.ACL_BF16), GmmKernel)
    assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmKernel)
    runner.forced_kernel = "mma"  # the layer's software path: slow, but what the emulator runs
    assert isinstance(runner.gemm(D.ACL_BF16, None, D.ACL_BF16), GmmMmaKernel)
    assert isinstance(runner.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmMmaKernel)
    # AMD: the layer issues no int8 matrix instruction there, so auto keeps INT8 on the SIMT kernel
    on_cdna = RocmBackend(FakeProvider(arch="gfx942"), {"ACL_KERNEL_CACHE": str(tmp_path)})
    on_cdna.runtime.ensure_device(0)
    assert isinstance(on_cdna.grouped_matmul.gemm(D.ACL_BF16, None, D.ACL_BF16), GmmMmaKernel)
    assert isinstance(on_cdna.grouped_matmul.gemm(D.ACL_INT8, None, D.ACL_INT32), GmmKernel)
    env = {"ACL_KERNEL_CACHE": str(tmp_path), "ACL_GMM_KERNEL": "simt"}
    on_sm90 = RocmBackend(FakeProvider(), env)
    on_sm90.runtime.ensure_device(0)
    assert on_sm90.grouped_matmul.kernel_mode() == "simt"
    assert isinstance(on_sm90.grouped_matmul.gemm(D.ACL_FLOAT16, None, D.ACL_FLOAT16), GmmKernel)


def test_source_uses_the_matrix_layer() -> None:
    text = GmmMmaKernel(D.ACL_BF16, D.ACL_FLOAT, D.ACL_BF16).source()
    body = text.split('extern "C"')[-1]
    assert "gmm_tile<true, true, true>" in body and "gmm_tile<false, false, true>" in body
    assert "acl_cp_async16" in text and "acl_mma_load_b_nk" in text and "acl_mma_load_b_kn" in text
    assert "__launch_bounds__(128)" in text and "bias[col * bsn]" in body
