"""Kernel generator of FRACTAL_NZ <-> ND copies, by the index formula of :mod:`acl_core.nz`.

``NZ[..., j // C0, i // 16, i % 16, j % C0] = ND[..., i, j]``: ND -> NZ walks every NZ storage element
(a gather, so padding positions get zero bits); NZ -> ND walks every element of the ND view (a gather
from the NZ storage). Elements are moved as raw bits of their width (4-bit ones as nibbles through
:c:func:`acl_nib_get` / :c:func:`acl_nib_set`), so every type, NaN payloads included, is copied
exactly. The ND side goes through its own view (``Meta``: batch dims, row and column strides as
arguments); a transposed NZ view reads the stored matrix with rows and columns swapped.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from acl_rocm.kernels.lowp import LOWP_PRELUDE
from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256
_WORDS: Final[dict[int, str]] = {8: "unsigned char", 16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


@dataclass(frozen=True)
class NzCopy:
    """One direction of the NZ <-> ND copy for elements of ``bits`` bits and ``batch`` batch dims.

    Meta: ``n`` positions, ``shape`` = the batch dims, ``stride[0]`` = the ND view's batch strides.
    Scalars: the logical matrix ``rows`` x ``cols`` the NZ storage tiles, ``c0``, the tile counts
    ``n1`` / ``c1``, the ND view's row / column strides ``sr`` / ``sc``, and both base element offsets.
    """

    bits: int
    batch: int
    to_nz: bool
    transposed: bool = False

    @functools.cached_property
    def kernel_name(self) -> str:
        """The kernel's extern "C" name."""
        return f"acl_nz_copy_{hashlib.sha1(repr(self).encode()).hexdigest()[:12]}"

    def _get(self, ptr: str, at: str) -> str:
        return f"acl_nib_get({ptr}, {at})" if self.bits == 4 else f"{ptr}[{at}]"

    def _set(self, ptr: str, at: str, value: str) -> str:
        return f"acl_nib_set({ptr}, {at}, {value});" if self.bits == 4 else f"{ptr}[{at}] = {value};"

    def source(self) -> str:
        """The complete kernel source."""
        word = "unsigned char" if self.bits == 4 else _WORDS[self.bits]
        nd, nz = ("src", "dst") if self.to_nz else ("dst", "src")
        params = [
            "const Meta m",
            f"{'const ' if self.to_nz else ''}{word}* {nd}",
            f"{'' if self.to_nz else 'const '}{word}* {nz}",
            "const long long nd_base",
            "const long long nz_base",
            "const long long rows",
            "const long long cols",
            "const long long c0",
            "const long long n1",
            "const long long c1",
            "const long long sr",
            "const long long sc",
        ]
        body = ["const long long step = (long long)gridDim.x * blockDim.x;"]
        body.append("for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < m.n; q += step) {")
        if self.to_nz:
            body += [
                "  long long r = q;",
                "  const long long j0 = r % c0; r /= c0;",
                "  const long long i0 = r % 16; r /= 16;",
                "  const long long i1 = r % n1; r /= n1;",
                "  const long long j1 = r % c1;",
                "  const long long b = r / c1;",
                "  const long long i = i1 * 16 + i0, j = j1 * c0 + j0;",
                f"  {word} v = 0;",
                "  if (i < rows && j < cols) {",
                *("    " + line for line in self._batch("b", "nd_at")),
                f"    v = {self._get(nd, 'nd_at + i * sr + j * sc')};",
                "  }",
                "  " + self._set(nz, "nz_base + q", "v"),
            ]
        else:
            # the ND view is (batch, vr, vc); a transposed NZ view stores its (vc, vr) matrix
            vr, vc = ("cols", "rows") if self.transposed else ("rows", "cols")
            i, j = ("vj", "vi") if self.transposed else ("vi", "vj")
            body += [
                f"  const long long vj = q % {vc};",
                f"  const long long vi = (q / {vc}) % {vr};",
                f"  const long long b = q / ({vc} * {vr});",
                f"  const long long i = {i}, j = {j};",
                "  const long long at = nz_base + (((b * c1 + j / c0) * n1 + i / 16) * 16 + i % 16) * c0 + j % c0;",
                *("  " + line for line in self._batch("b", "nd_at")),
                "  " + self._set(nd, "nd_at + vi * sr + vj * sc", self._get(nz, "at")),
            ]
        body.append("}")
        direction = "ND -> NZ" if self.to_nz else "NZ -> ND" + (" (transposed view)" if self.transposed else "")
        return "\n".join(
            [
                PRELUDE,
                LOWP_PRELUDE if self.bits == 4 else "",
                f"// FRACTAL_NZ copy {direction}, {self.bits}-bit elements",
                f"struct Meta {{ long long n; long long shape[{max(self.batch, 1)}]; "
                f"long long stride[1][{max(self.batch, 1)}]; }};",
                f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {self.kernel_name}(',
                "    " + ",\n    ".join(params) + ") {",
                *("  " + line for line in body),
                "}",
            ]
        )

    def _batch(self, b: str, out: str) -> list[str]:
        """C lines: ``out`` = nd_base plus the ND batch offset of flat batch index ``b``."""
        return [
            f"long long {out} = nd_base;",
            f"{{ long long rest = {b};",
            f"  for (int d = {max(self.batch, 1) - 1}; d >= 0; --d) {{",
            f"    {out} += (rest % m.shape[d]) * m.stride[0][d]; rest /= m.shape[d];",
            "  } }",
        ]
