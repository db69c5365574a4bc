"""Kernel generator of the padding family: one template for reflection, replication and circular padding,
forward and backward, over 1, 2 or 3 padded dims.

Every kernel is a grid-stride loop with one thread per element it writes, and no atomics:

* forward: one thread per output element maps its position, per padded dim, to the input position it
  reads (mirrored, clamped or wrapped) and copies that element's storage (bit-exact for every dtype);
* backward: one thread per input element *gathers* the ``gradOutput`` elements that read it. Per dim
  they form at most three runs ``[start, start + count)`` (the element's own position, and the mirrored
  or wrapped copies; replication's edge elements one run over their whole padding), so the sum walks
  ``3^s`` runs in a fixed order: deterministic, in float32 (float64 for DOUBLE).

Integer arguments travel in the ``Meta`` struct of kernels.grid_stride (``n``, ``shape[A]`` scalars,
``stride[R][S]`` rows). The leading dims are ``[N, C]`` (an unbatched input passes N's stride 0); ``P`` is
a plane's written element count; ``LSIZE`` the input's padded-dim sizes, ``OSIZE`` the output's.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import ctype, load, store
from acl_rocm.kernels.grid_stride import grid_stride_kernel, locate_in_plane, meta_struct, strided_at

MODES: Final = ("reflect", "replicate", "circular")
SCALARS: Final = ("P", "CH", "XS_N", "XS_C", "OS_N", "OS_C")
"""``XS`` the read tensor (self, or gradOutput backward), ``OS`` the written one."""
ROWS: Final = ("BEFORE", "AFTER", "LSIZE", "OSIZE", "XSTRIDE", "OSTRIDE")
RUNS: Final = 3
"""Runs of outputs one input element can feed along one dim (pads below the dim's size)."""


@dataclass(frozen=True)
class PadKernel:
    """One padding kernel: mode, direction, number of padded dims, dtype and index type."""

    mode: str
    backward: bool
    spatial: int
    dtype: D
    index_type: str

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"padding mode must be one of {MODES}, not {self.mode!r}")

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        kind = "backward" if self.backward else "forward"
        return f"acl_pad_{self.mode}_{kind}_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"

    def source(self) -> str:
        """The complete kernel source."""
        return _source(self)


def _source_position(mode: str, idx: str) -> list[str]:
    """``src[d]``: the input position output position ``o[d]`` reads."""
    lines = [f"  {idx} j = o[d] - BEFORE(d);"]
    if mode == "reflect":
        lines += ["  if (j < 0) j = -j;", "  if (j >= LSIZE(d)) j = 2 * (LSIZE(d) - 1) - j;"]
    elif mode == "replicate":
        lines += ["  if (j < 0) j = 0;", "  if (j >= LSIZE(d)) j = LSIZE(d) - 1;"]
    else:
        lines += ["  if (j < 0) j += LSIZE(d);", "  if (j >= LSIZE(d)) j -= LSIZE(d);"]
    return [*lines, "  src[d] = j;"]


def _runs(mode: str) -> list[str]:
    """``first[d][r]`` / ``count[d][r]``: the runs of output positions along dim ``d`` that read ``p[d]``."""
    own = "first[d][0] = p[d] + BEFORE(d); count[d][0] = 1;"
    if mode == "reflect":
        return [
            f"  {own}",
            "  if (p[d] >= 1 && p[d] <= BEFORE(d)) { first[d][1] = BEFORE(d) - p[d]; count[d][1] = 1; }",
            "  if (p[d] <= LSIZE(d) - 2 && p[d] >= LSIZE(d) - 1 - AFTER(d)) {",
            "    first[d][2] = BEFORE(d) + 2 * (LSIZE(d) - 1) - p[d]; count[d][2] = 1; }",
        ]
    if mode == "replicate":
        return [
            "  if (LSIZE(d) == 1) { first[d][0] = 0; count[d][0] = OSIZE(d); }",
            "  else if (p[d] == 0) { first[d][0] = 0; count[d][0] = BEFORE(d) + 1; }",
            "  else if (p[d] == LSIZE(d) - 1) { first[d][0] = p[d] + BEFORE(d); count[d][0] = AFTER(d) + 1; }",
            f"  else {{ {own} }}",
        ]
    return [
        f"  {own}",
        "  if (p[d] < AFTER(d)) { first[d][1] = p[d] + BEFORE(d) + LSIZE(d); count[d][1] = 1; }",
        "  if (p[d] >= LSIZE(d) - BEFORE(d)) { first[d][2] = p[d] + BEFORE(d) - LSIZE(d); count[d][2] = 1; }",
    ]


def _forward(k: PadKernel, idx: str, s: int) -> list[str]:
    x_at = strided_at("n * XS_N + c * XS_C", "src", "XSTRIDE", s)
    return [
        f"{idx} src[{s}];",
        "#pragma unroll",
        f"for (int d = 0; d < {s}; ++d) {{",
        *_source_position(k.mode, idx),
        "}",
        f"out[{strided_at('n * OS_N + c * OS_C', 'o', 'OSTRIDE', s)}] = x[{x_at}];",
    ]


def _backward(k: PadKernel, idx: str, s: int) -> list[str]:
    acc = ctype(D.ACL_DOUBLE if k.dtype == D.ACL_DOUBLE else D.ACL_FLOAT)
    body = [
        f"{idx} first[{s}][{RUNS}], count[{s}][{RUNS}];",
        "#pragma unroll",
        f"for (int d = 0; d < {s}; ++d) {{",
        f"  for (int r = 0; r < {RUNS}; ++r) {{ first[d][r] = 0; count[d][r] = 0; }}",
        *_runs(k.mode),
        "}",
        f"{acc.value} acc = 0;",
    ]
    g_at = " + ".join(["n * XS_N + c * XS_C", *(f"o{d} * XSTRIDE({d})" for d in range(s))])
    inner = [f"acc += {load(f'x[{g_at}]', ctype(k.dtype), acc)};"]
    lines: list[str] = []
    for d in range(s):  # per dim: every run, every position in it (outermost dim first)
        pad = "  " * (2 * d)
        lines.append(f"{pad}for (int r{d} = 0; r{d} < {RUNS}; ++r{d}) {{")
        lines.append(
            f"{pad}  for ({idx} o{d} = first[{d}][r{d}]; o{d} < first[{d}][r{d}] + count[{d}][r{d}]; ++o{d}) {{"
        )
    lines += ["  " * (2 * s) + line for line in inner]
    lines += ["  " * (2 * (s - 1 - d)) + "}}" for d in range(s)]
    body += lines
    body.append(f"out[{strided_at('n * OS_N + c * OS_C', 'p', 'OSTRIDE', s)}] = {store('acc', acc, ctype(k.dtype))};")
    return body


@functools.lru_cache(maxsize=256)
def _source(k: PadKernel) -> str:
    idx, s = k.index_type, k.spatial
    data = ctype(k.dtype).storage
    params = ["const Meta m", f"const {data}* __restrict__ x", f"{data}* __restrict__ out"]
    coord, size = ("p", "LSIZE") if k.backward else ("o", "OSIZE")
    body = locate_in_plane(idx, s, coord, size)
    body += _backward(k, idx, s) if k.backward else _forward(k, idx, s)
    direction = "backward" if k.backward else "forward"
    comment = f"padding: {k.mode} {direction} {s}-D, {k.dtype.short}"
    return grid_stride_kernel(comment, meta_struct(idx, SCALARS, ROWS, s), k.kernel_name, params, idx, body)
