"""The frame the convolution, pooling and padding kernels share: a grid-stride loop over ``m.n`` elements.

Integer arguments travel in one ``Meta`` struct (``n``, ``shape[A]`` scalars, ``stride[R][S]`` per-spatial-dim
rows) whose fields ``#define`` lines name (the batch-norm backward's kernels use it too); the helpers below write
that struct, the kernel around a loop body, and the index expressions the bodies use over ``[N, C, spatial...]``
views.
"""

from __future__ import annotations

from typing import Final

from acl_rocm.kernels.prelude import PRELUDE

BLOCK_THREADS: Final = 256


def meta_struct(index_type: str, scalars: tuple[str, ...], rows: tuple[str, ...], spatial: int) -> list[str]:
    """The Meta struct (no array of length 0) and one ``#define`` per field name."""
    lines = [
        f"struct Meta {{ {index_type} n; {index_type} shape[{max(len(scalars), 1)}]; "
        f"{index_type} stride[{max(len(rows), 1)}][{max(spatial, 1)}]; }};"
    ]
    lines += [f"#define {name} m.shape[{i}]" for i, name in enumerate(scalars)]
    lines += [f"#define {name}(d) m.stride[{i}][d]" for i, name in enumerate(rows)]
    return lines


def grid_stride_kernel(comment: str, meta: list[str], name: str, params: list[str], idx: str, body: list[str]) -> str:
    """The complete source: prelude, ``// comment``, the Meta lines, and ``body`` run once per element ``i``."""
    return "\n".join(
        [
            PRELUDE,
            f"// {comment}",
            *meta,
            f'extern "C" __global__ void __launch_bounds__({BLOCK_THREADS}) {name}(',
            "    " + ",\n    ".join(params) + ") {",
            f"  const {idx} grid_step = ({idx})gridDim.x * ({idx})blockDim.x;",
            f"  for ({idx} i = ({idx})blockIdx.x * ({idx})blockDim.x + ({idx})threadIdx.x; i < m.n; i += grid_step) {{",
            *("    " + line for line in body),
            "  }",
            "}",
            "",
        ]
    )


def unflatten(index_type: str, flat: str, out: str, size: str, spatial: int) -> list[str]:
    """``out[d]`` = row-major coordinates of ``flat`` over the sizes ``size(d)``."""
    return [
        f"{index_type} {out}[{spatial}];",
        f"{{ {index_type} rest = {flat};",
        "  #pragma unroll",
        f"  for (int d = {spatial - 1}; d >= 0; --d) {{ {out}[d] = rest % {size}(d); rest /= {size}(d); }} }}",
    ]


def locate_in_plane(idx: str, spatial: int, coord: str, size: str) -> list[str]:
    """Element ``i``'s plane (``n``, ``c``; ``P`` elements a plane, ``CH`` planes an image) and ``coord[d]`` in it."""
    return [
        f"const {idx} flat = i % P;",
        f"const {idx} plane = i / P;",
        f"const {idx} c = plane % CH;",
        f"const {idx} n = plane / CH;",
        *unflatten(idx, "flat", coord, size, spatial),
    ]


def strided_at(base: str, coord: str, strides: str, spatial: int) -> str:
    """``base + coord[0] * strides(0) + ...``: the element offset of spatial position ``coord``."""
    return " + ".join([base, *(f"{coord}[{d}] * {strides}({d})" for d in range(spatial))])
