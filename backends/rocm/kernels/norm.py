"""Norm kernels on the row template of ``kernels/reduction.py``: statistics per row, then each element.

Operands carry internal names (``x``, ``x2``, ``addend``, ``weight``, ``shift``, ``y``, ``mean``,
``rstd``, ``xout``, running and saved statistics); the op code maps aclnn parameters onto them and
gives every one a stride vector over ``rows × row elements`` (a weight varies only along the row, a
statistic only across rows, GroupNorm's gamma along both). Absent operands are simply not there.
Statistics are in float64 when any operand is float32 (fp16/bf16-only in float32); over zero
elements the mean is 0 and rstd NaN, as the reference writes.
"""

from __future__ import annotations

from typing import Final

from acl_core.dtypes import DataType as D
from acl_rocm.kernels.ctypes_map import convert, ctype
from acl_rocm.kernels.reduction import (
    GENERATORS,
    RowKernel,
    assemble,
    at,
    cache_decl,
    cache_dtype,
    chunk_loop,
    chunk_store,
    chunk_values,
    element_loop,
    is_vector_operand,
    load_as,
    row_leader,
    row_reduce,
    slot,
    store_as,
)

NORM_KINDS: Final = ("layernorm", "rmsnorm", "batchnorm")


def _x(kernel: RowKernel, *names: str) -> str:
    """The row element as the sum of the present operands among ``names`` (in acc)."""
    terms = [f"(acc_t)({load_as(kernel, n, at(kernel, n), kernel.acc)})" for n in names if kernel.has(n)]
    return " + ".join(terms)


def _affine(kernel: RowKernel, expr: str) -> str:
    if kernel.has("weight"):
        w = f"(acc_t)({load_as(kernel, 'weight', at(kernel, 'weight'), kernel.acc)})"
        expr = f"({expr}) * ({'(acc_t)1 + ' if kernel.option('gemma') else ''}{w})"
    if kernel.has("shift"):
        expr = f"({expr}) + (acc_t)({load_as(kernel, 'shift', at(kernel, 'shift'), kernel.acc)})"
    return expr


def _row_stat(kernel: RowKernel, name: str, value: str) -> list[str]:
    return [store_as(kernel, name, at(kernel, name, "base"), value, kernel.acc)] if kernel.has(name) else []


def _cache_x(kernel: RowKernel, *names: str) -> list[str]:
    """Chunk lines: ``cx`` slots = the sum of the present operands among ``names``; ``s`` and ``q`` accumulate
    the slots and their squares when declared (the caller says which by the lines it adds)."""
    lines: list[str] = []
    terms: list[list[str]] = []
    for n in names:
        if kernel.has(n):
            read, values = chunk_values(kernel, n, kernel.acc)
            lines += read
            terms.append([f"(acc_t)({v})" for v in values])
    vec = len(terms[0])
    lines += [f"{slot(kernel, e)} = (cache_t)({' + '.join(t[e] for t in terms)});" for e in range(vec)]
    return lines


HOISTED_WEIGHT_ITEMS: Final = 16
"""Rows cached in at most this many slots a thread also keep the weight in registers, read beside the row
before the reduction (its load latency hidden under the row's instead of paid after the block reduce)."""


def _hoists_weight(kernel: RowKernel) -> bool:
    """Whether the cached path reads the weight beside the row, into ``cw`` (short rows: registers to spare)."""
    n = int(kernel.option("chunks") or 1) * int(kernel.option("vec") or 1)
    return kernel.has("weight") and n <= HOISTED_WEIGHT_ITEMS


def _hoisted_weight(kernel: RowKernel) -> tuple[list[str], list[str]]:
    """(declaration, chunk lines) reading this thread's weight elements into ``cw`` (empty when not hoisted)."""
    if not _hoists_weight(kernel):
        return [], []
    vec, chunks = int(kernel.option("vec") or 1), int(kernel.option("chunks") or 1)
    read, values = chunk_values(kernel, "weight", cache_dtype(kernel))
    return [f"cache_t cw[{chunks * vec}];"], read + [f"cw[k * {vec} + {e}] = {v};" for e, v in enumerate(values)]


def _cached_write(kernel: RowKernel, normalised: str, hoisted: bool = False) -> list[str]:
    """Chunk lines: y = normalised(slot) (* weight) (+ shift); xout = the slot (when present).

    ``hoisted``: the weight was read into ``cw`` beside the row (:func:`_hoisted_weight`).
    """
    vec = int(kernel.option("vec") or 1)
    lines: list[str] = []
    cache = cache_dtype(kernel)
    results = [normalised.format(v=slot(kernel, e)) for e in range(vec)]
    weight = "({r}) * (cache_t)((acc_t)1 + (acc_t)({w}))" if kernel.option("gemma") else "({r}) * (cache_t)({w})"
    for name, combine in (("weight", weight), ("shift", "({r}) + (cache_t)({w})")):
        if name == "weight" and hoisted and kernel.has(name):
            values = [f"cw[k * {vec} + {e}]" for e in range(vec)]
            results = [combine.format(r=r, w=w) for r, w in zip(results, values)]
        elif kernel.has(name):
            read, values = chunk_values(kernel, name, cache)
            lines += read
            results = [combine.format(r=r, w=w) for r, w in zip(results, values)]
    lines += chunk_store(kernel, "y", results, cache)
    if kernel.has("xout"):
        lines += chunk_store(kernel, "xout", [slot(kernel, e) for e in range(vec)], cache)
    return lines


def _layernorm_cached(kernel: RowKernel) -> str:
    """LayerNorm with the row read once into registers: exact two-pass mean and variance over the cache."""
    vec = int(kernel.option("vec") or 1)
    body = [cache_decl(kernel), "const AclSum add;", "acc_t s = (acc_t)0;"]
    sums = [f"s += (acc_t){slot(kernel, e)};" for e in range(vec)]
    body += chunk_loop(kernel, _cache_x(kernel, "x", "x2", "addend") + sums)
    body += ["s = acl_block_reduce(s, add);", "const acc_t mean = s / (acc_t)len;", "acc_t q = (acc_t)0;"]
    squares = [f"{{ const acc_t d = (acc_t){slot(kernel, e)} - mean; q += d * d; }}" for e in range(vec)]
    body += chunk_loop(kernel, squares)
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += [
        "if (threadIdx.x == 0) {",
        *("  " + s for s in _row_stat(kernel, "mean", "mean")),
        *("  " + s for s in _row_stat(kernel, "rstd", "rstd")),
        "}",
    ]
    body += ["const cache_t mean_c = (cache_t)mean, rstd_c = (cache_t)rstd;"]
    body += chunk_loop(kernel, _cached_write(kernel, "({v} - mean_c) * rstd_c"))
    return assemble(kernel, body)


def _rmsnorm_cached(kernel: RowKernel) -> str:
    """RmsNorm with the row read once into registers (in-place twins: every read precedes the first write)."""
    vec = int(kernel.option("vec") or 1)
    declare, weight = _hoisted_weight(kernel)
    body = [cache_decl(kernel), *declare, "const AclSum add;", "acc_t q = (acc_t)0;"]
    squares = [f"q += (acc_t){slot(kernel, e)} * (acc_t){slot(kernel, e)};" for e in range(vec)]
    body += chunk_loop(kernel, weight + _cache_x(kernel, "x", "x2") + squares)
    body += [row_reduce(kernel, "q"), "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += [f"if ({row_leader(kernel)}) {{", *("  " + s for s in _row_stat(kernel, "rstd", "rstd")), "}"]
    body += ["const cache_t rstd_c = (cache_t)rstd;"]
    body += chunk_loop(kernel, _cached_write(kernel, "{v} * rstd_c", hoisted=bool(declare)))
    return assemble(kernel, body)


def _raw_loads(kernel: RowKernel, names: tuple[str, ...], guard: str) -> list[str]:
    """Lines reading this lane's chunks of every operand in ``names`` into registers (``r_<name>``), all issued
    before any arithmetic: an aligned operand as one ``AclVec`` a chunk, another element by element."""
    vec, chunks, block = int(kernel.option("vec") or 1), int(kernel.option("chunks") or 1), kernel.block
    lines: list[str] = []
    reads: list[str] = []
    for name in names:
        k, storage = kernel.index(name), ctype(kernel.operand(name).dtype).storage
        if is_vector_operand(kernel, name):
            vt = f"AclVec<{storage}, {vec}>"
            lines.append(f"{vt} r_{name}[{chunks}];")
            reads.append(f"r_{name}[k] = *reinterpret_cast<const {vt}*>(p_{name} + (base[{k}] + c * {vec}));")
        else:
            lines.append(f"{storage} r_{name}[{chunks * vec}];")
            reads += [
                f"r_{name}[k * {vec} + {e}] = p_{name}[base[{k}] + (c * {vec} + {e}) * m.stride[{k}][ACL_OUTER]];"
                for e in range(vec)
            ]
    lines += ["#pragma unroll", f"for (int k = 0; k < {chunks}; ++k) {{"]
    lines.append(f"  const idx_t c = (idx_t)threadIdx.x + (idx_t)k * (idx_t){block};")
    if guard:
        lines += [f"  if ({guard}) {{", *("    " + r for r in reads), "  }"]
    else:
        lines += ["  " + r for r in reads]
    return [*lines, "}"]


def _raw(kernel: RowKernel, name: str, e: int, target: D) -> str:
    """The expression of element ``e`` of chunk ``k`` of a :func:`_raw_loads` register array, as ``target``."""
    src, vec = ctype(kernel.operand(name).dtype), int(kernel.option("vec") or 1)
    bits = f"r_{name}[k].v[{e}]" if is_vector_operand(kernel, name) else f"r_{name}[k * {vec} + {e}]"
    return convert(src.decode.format(x=bits), src, ctype(target))


def _rmsnorm_warps(kernel: RowKernel) -> str:
    """RmsNorm on the warps layout: a block of W warps a row; every lane loads all its chunks of x (x2, weight)
    first, then sums squares (a partial a chunk, in ``acc``), reduces by a butterfly over its warp and, for W > 1,
    one shared-memory exchange of the W warp sums (one barrier; a second only when the block takes another row);
    y and xout leave as they came in (16-byte stores where aligned). The cached path's arithmetic: cx = (cache_t)
    (x + x2) in acc, rstd = 1 / sqrt(sum(cx²) / len + eps), y = cx * (cache_t)rstd * weight."""
    vec, chunks, warps = int(kernel.option("vec") or 1), int(kernel.option("chunks") or 1), int(kernel.option("warps"))
    guard = "" if kernel.option("exact") else f"c * {vec} < len"
    names = tuple(n for n in ("x", "x2", "weight") if kernel.has(n))
    body = [cache_decl(kernel), *_raw_loads(kernel, names, guard)]
    body += [f"acc_t qk[{chunks}];", "#pragma unroll", f"for (int k = 0; k < {chunks}; ++k) {{", "  qk[k] = (acc_t)0;"]
    inner = []
    # fp16/bf16 rows cached as float: x + x2 summed in float, the same bits as the cached path's float64 sum rounded
    # to float (both are exact floats, and float64 carries more than twice float's bits: the double rounding is
    # innocuous); it leaves the float64 pipe only the widening and the square's FMA
    sum_type = cache_dtype(kernel)
    for e in range(vec):
        terms = " + ".join(f"(cache_t)({_raw(kernel, n, e, sum_type)})" for n in ("x", "x2") if kernel.has(n))
        v = slot(kernel, e)
        inner += [f"{v} = (cache_t)({terms});", f"qk[k] += (acc_t){v} * (acc_t){v};"]
    guard_c = f"(idx_t)threadIdx.x + (idx_t)k * (idx_t){kernel.block}"
    if guard:
        body += [f"  const idx_t c = {guard_c};", f"  if ({guard}) {{", *("    " + x for x in inner), "  }"]
    else:
        body += ["  " + x for x in inner]
    body += ["}", "acc_t q = qk[0];"] + [f"q += qk[{k}];" for k in range(1, chunks)]
    body.append("for (int o = ACL_WARP_SIZE / 2; o > 0; o >>= 1) q += (acc_t)ACL_SHFL_XOR(q, o);")
    if warps > 1:
        body += [
            f"__shared__ acc_t warp_sums[{warps}];",
            "if (threadIdx.x % ACL_WARP_SIZE == 0) warp_sums[threadIdx.x / ACL_WARP_SIZE] = q;",
            "__syncthreads();",
            "q = warp_sums[0];",
            *(f"q += warp_sums[{w}];" for w in range(1, warps)),
        ]
    if kernel.option("fast_rsqrt"):  # the hardware reciprocal square root (+ Newton in double), a reciprocal
        body += ["const acc_t rstd = acl_rsqrt_fast(q * ((acc_t)1 / (acc_t)len) + (acc_t)eps);"]
    else:
        body += ["const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += ["if (threadIdx.x == 0) {", *("  " + s for s in _row_stat(kernel, "rstd", "rstd")), "}"]
    body += ["const cache_t rstd_c = (cache_t)rstd;", "#pragma unroll", f"for (int k = 0; k < {chunks}; ++k) {{"]
    results = [f"{slot(kernel, e)} * rstd_c" for e in range(vec)]
    if kernel.has("weight"):
        w = [_raw(kernel, "weight", e, cache_dtype(kernel)) for e in range(vec)]
        if kernel.option("gemma"):
            results = [f"({r}) * (cache_t)((acc_t)1 + (acc_t)({v}))" for r, v in zip(results, w)]
        else:
            results = [f"({r}) * (cache_t)({v})" for r, v in zip(results, w)]
    writes = chunk_store(kernel, "y", results, cache_dtype(kernel))
    if kernel.has("xout"):
        writes += chunk_store(kernel, "xout", [slot(kernel, e) for e in range(vec)], cache_dtype(kernel))
    body.append(f"  const idx_t c = {guard_c};")
    if guard:
        body += [f"  if ({guard}) {{", *("    " + x for x in writes), "  }"]
    else:
        body += ["  " + x for x in writes]
    body.append("}")
    if warps > 1:  # the block's next row rewrites warp_sums: every warp must have read this row's first
        body.append("if (row + (idx_t)gridDim.x < m.n) __syncthreads();")
    source = assemble(kernel, body)
    if not kernel.option("fast_rsqrt"):
        return source
    head, sep, tail = source.partition("// row kernel")
    return head + FAST_RSQRT + sep + tail


FAST_RSQRT: Final = r"""
// 1/sqrt(x) from the hardware's reciprocal square root: rsqrt (double: MUFU.RSQ64H and Newton steps, within an
// ulp or two of float64, far below a float32 rstd's ulp) and rsqrtf (2 ulp of float32, for fp16/bf16-only rows);
// the emulator's host build takes the exact quotient
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
ACL_DEV float acl_rsqrt_fast(float x) { return rsqrtf(x); }
ACL_DEV double acl_rsqrt_fast(double x) { return rsqrt(x); }
#else
ACL_DEV float acl_rsqrt_fast(float x) { return 1.0f / sqrtf(x); }
ACL_DEV double acl_rsqrt_fast(double x) { return 1.0 / sqrt(x); }
#endif
"""


def _layernorm(kernel: RowKernel) -> str:
    """x = x (+ x2) (+ addend); mean and rstd over the row; y = (x - mean) * rstd (* weight) (+ shift)."""
    if kernel.cached:
        return _layernorm_cached(kernel)
    x = _x(kernel, "x", "x2", "addend")
    body = ["const AclSum add;", "acc_t s = (acc_t)0;"]
    body += element_loop(kernel, [f"s += {x};"])
    body += ["s = acl_block_reduce(s, add);", "const acc_t mean = len > 0 ? s / (acc_t)len : (acc_t)0;"]
    body += ["acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t d = ({x}) - mean;", "q += d * d;"])
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += [
        "if (threadIdx.x == 0) {",
        *("  " + s for s in _row_stat(kernel, "mean", "mean")),
        *("  " + s for s in _row_stat(kernel, "rstd", "rstd")),
        "}",
    ]
    write = [f"const acc_t v = {x};", f"const acc_t r = {_affine(kernel, '(v - mean) * rstd')};"]
    write.append(store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc))
    if kernel.has("xout"):
        write.append(store_as(kernel, "xout", at(kernel, "xout"), "v", kernel.acc))
    body += element_loop(kernel, write)
    return assemble(kernel, body)


def _rmsnorm(kernel: RowKernel) -> str:
    """x = x (+ x2); rstd = 1 / sqrt(mean(x²) + eps); y = x * rstd * weight (xout = x, stored after reading)."""
    if kernel.option("warps"):
        return _rmsnorm_warps(kernel)
    if kernel.cached:
        return _rmsnorm_cached(kernel)
    x = _x(kernel, "x", "x2")
    body = ["const AclSum add;", "acc_t q = (acc_t)0;"]
    body += element_loop(kernel, [f"const acc_t v = {x};", "q += v * v;"])
    body += ["q = acl_block_reduce(q, add);", "const acc_t rstd = acl_rsqrt(q / (acc_t)len + (acc_t)eps);"]
    body += ["if (threadIdx.x == 0) {", *("  " + s for s in _row_stat(kernel, "rstd", "rstd")), "}"]
    write = [f"const acc_t v = {x};", f"const acc_t r = {_affine(kernel, 'v * rstd')};"]
    write.append(store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc))
    if kernel.has("xout"):
        write.append(store_as(kernel, "xout", at(kernel, "xout"), "v", kernel.acc))
    body += element_loop(kernel, write)
    return assemble(kernel, body)


def _batchnorm(kernel: RowKernel) -> str:
    """One row per channel: batch statistics (training) or running ones (inference), then each element."""
    x = _x(kernel, "x")
    training = bool(kernel.option("training"))
    body = [
        "if (len == 0) {",  # CANN returns before computing: saved statistics 0 / NaN, running ones untouched
        "  if (threadIdx.x == 0) {",
        *("    " + s for s in _row_stat(kernel, "save_mean", "(acc_t)0")),
        *("    " + s for s in _row_stat(kernel, "save_invstd", "acl_nan((acc_t)0)")),
        "  }",
        "  continue;",
        "}",
    ]
    if training:
        body += ["const AclSum add;", "acc_t s = (acc_t)0;"]
        body += element_loop(kernel, [f"s += {x};"])
        body += ["s = acl_block_reduce(s, add);", "const acc_t mean = s / (acc_t)len;", "acc_t q = (acc_t)0;"]
        body += element_loop(kernel, [f"const acc_t d = ({x}) - mean;", "q += d * d;"])
        body += [
            "q = acl_block_reduce(q, add);",
            "const acc_t var = q / (acc_t)len;",
            "const acc_t rstd = acl_rsqrt(var + (acc_t)eps);",
            "if (threadIdx.x == 0) {",
            *("  " + s for s in _row_stat(kernel, "save_mean", "mean")),
            *("  " + s for s in _row_stat(kernel, "save_invstd", "rstd")),
            "  const acc_t unbiased = len > 1 ? var * (acc_t)len / (acc_t)(len - 1) : acl_nan((acc_t)0);",
            "  const acc_t keep = (acc_t)1 - (acc_t)momentum;",
        ]
        for name, stat in (("running_mean", "mean"), ("running_var", "unbiased")):
            if kernel.has(name):
                old = load_as(kernel, name, at(kernel, name, "base"), kernel.acc)
                body.append(
                    "  "
                    + store_as(
                        kernel, name, at(kernel, name, "base"), f"keep * ({old}) + (acc_t)momentum * {stat}", kernel.acc
                    )
                )
        body.append("}")
    else:
        mean = (
            load_as(kernel, "running_mean", at(kernel, "running_mean", "base"), kernel.acc)
            if kernel.has("running_mean")
            else "0"
        )
        var = (
            load_as(kernel, "running_var", at(kernel, "running_var", "base"), kernel.acc)
            if kernel.has("running_var")
            else "1"
        )
        body += [f"const acc_t mean = (acc_t)({mean});", f"const acc_t rstd = acl_rsqrt((acc_t)({var}) + (acc_t)eps);"]
    write = [
        f"const acc_t r = {_affine(kernel, f'(({x}) - mean) * rstd')};",
        store_as(kernel, "y", at(kernel, "y"), "r", kernel.acc),
    ]
    body += element_loop(kernel, write)
    return assemble(kernel, body)


GENERATORS.update({"layernorm": _layernorm, "rmsnorm": _rmsnorm, "batchnorm": _batchnorm})
