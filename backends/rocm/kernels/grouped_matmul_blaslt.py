"""The kernel that turns GroupedMatmulV5's descriptor table into cuBLASLt's grouped GEMM arrays.

After :class:`~acl_rocm.kernels.grouped_matmul.GmmPrep` has written every group's row range from the device group
list (and set the flag on a bad list), a thread per group writes, in cuBLASLt's column-major view
(D_g (N x M_g) = W_g^T (N x K) . X_g^T (K x M_g)): the pointers of W_g, of x at row M0 and of out at row M0
(int64, three blocks of ``groups``); the rows M_g, N, K and the leading dimensions of W, x and out (int32, six
blocks); and alpha 1, beta 0 (float32). Every group gets 0 rows when the flag is set, so the library writes
nothing and the driver's deferred check raises 161002 as the kernels' early return does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.grouped_matmul import hashed_name, kernel_source

ARRAY_SCALARS: Final = ("TRANSPOSED", "IN_BYTES", "OUT_BYTES")
"""The kernel's Meta scalars: weight stored [N, K] (lda = WSN), x's and out's element bytes."""
SIZE_ARRAYS: Final = ("ROWS", "N", "K", "LDA", "LDB", "LDD")
"""The int32 blocks of the size array, in order."""
THREADS: Final = 256


def layout(groups: int) -> tuple[int, int, int]:
    """Byte offsets of the size and scalar arrays in one buffer (the pointers first, at 0) and its bytes."""
    sizes = 3 * groups * 8
    scalars = sizes + len(SIZE_ARRAYS) * groups * 4
    scalars = -(-scalars // 8) * 8
    return sizes, scalars, scalars + 8


@dataclass(frozen=True)
class GmmBlasltArrays:
    """Descriptor table -> cuBLASLt grouped pointers, sizes and alpha / beta (one source for every call)."""

    index_type: str = "long long"

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return hashed_name("ltarrays", self)

    def source(self) -> str:
        """The complete kernel source."""
        return _source(self)


@functools.cache
def _source(k: GmmBlasltArrays) -> str:
    meta = f"struct Meta {{ long long n; long long shape[{len(ARRAY_SCALARS)}]; long long stride[1][1]; }};"
    defines = [f"#define {name} m.shape[{i}]" for i, name in enumerate(ARRAY_SCALARS)]
    blocks = {name: i for i, name in enumerate(SIZE_ARRAYS)}

    def size(name: str, value: str) -> str:
        return f"  sizes[{blocks[name]} * groups + g] = (int)({value});"

    body = [
        *defines,
        "const long long groups = m.n;",
        "const bool bad = *flag != 0;",
        "const long long step = (long long)gridDim.x * blockDim.x;",
        "for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += step) {",
        "  const long long* e = table + g * NFIELDS;",
        "  const long long row0 = bad ? 0 : e[F_M0];",
        "  pointers[g] = e[F_W];",
        "  pointers[groups + g] = e[F_X] + (row0 * e[F_XSR] + e[F_K0] * e[F_XSC]) * IN_BYTES;",
        "  pointers[2 * groups + g] = e[F_OUT] + row0 * e[F_OSR] * OUT_BYTES;",
        size("ROWS", "bad ? 0 : e[F_M1] - e[F_M0]"),
        size("N", "e[F_N]"),
        size("K", "e[F_K1] - e[F_K0]"),
        size("LDA", "TRANSPOSED ? e[F_WSN] : e[F_WSK]"),
        size("LDB", "e[F_XSR]"),
        size("LDD", "e[F_OSR]"),
        "}",
        "if (blockIdx.x == 0 && threadIdx.x == 0) { scalars[0] = 1.0f; scalars[1] = 0.0f; }",
    ]
    params = ["const Meta m", "const long long* table", "const int* flag", "long long* pointers", "int* sizes"]
    params.append("float* scalars")
    return kernel_source("cuBLASLt grouped arrays", meta, k.kernel_name, params, body, THREADS)


@dataclass(frozen=True)
class GmmBlaslt:
    """The runner's stand-in for cuBLASLt's grouped GEMM in its path report (no kernel of its own)."""

    dtype: D
    bias: D | None
    out: D | None = None

    path: ClassVar[str] = "blaslt"
    tile_m: ClassVar[int] = 0
    tile_n: ClassVar[int] = 0
