"""Results a little wrong: within the old atol/rtol table, outside each op's accuracy class (issue 14 class 1)."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from acl_core.backend import Launch
from acl_core.dtypes import DataType
from acl_reference.backend import ReferenceBackend
from acl_reference.call import RefCall
from tests.conformance.mutants import Mutant
from tests.conformance.planted import Kernel, replace_kernel


def _after(backend: ReferenceBackend, op: str, change: Callable[[RefCall, np.ndarray], np.ndarray | None]) -> None:
    """Run ``op``'s reference kernel, then let ``change`` rewrite its ``out`` (None leaves it)."""
    driver = backend.driver

    def make(original: Kernel) -> Kernel:
        def mutated(launch: Launch) -> None:
            original(launch)
            k = RefCall(launch, driver)
            new = change(k, k.read("out"))
            if new is not None:
                k.write("out", new)

        return mutated

    replace_kernel(backend, op, make)


class ThreeUlpAddBackend(ReferenceBackend):
    """float32 Add lands 3 ulp above the exactly rounded sum for normal results (3 ulp < 1.3e-6 relative)."""

    name = "mutant-add-3ulp"

    def __init__(self) -> None:
        super().__init__()

        def nudge(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if out.dtype != np.float32:
                return None
            normal = np.isfinite(out) & (np.abs(out) >= np.finfo(np.float32).tiny) & (np.abs(out) < 2.0**100)
            up = np.where(normal, out, np.float32(1))
            for _ in range(3):
                up = np.nextafter(up, np.float32(np.inf), dtype=np.float32)
            return np.where(normal, up, out)

        _after(self, "Add", nudge)


def _truncate_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 → bf16 by dropping the low 16 bits (round toward zero, the classic cheap conversion)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(ml_dtypes.bfloat16)  # exact: the value already is a bf16


class TruncatingBf16Backend(ReferenceBackend):
    """Every Cast to bf16 truncates instead of rounding to nearest even (off by one ulp on about half)."""

    name = "mutant-bf16-truncation"

    def __init__(self) -> None:
        super().__init__()

        def truncate(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if k.dtype("out") != DataType.ACL_BF16 or k.dtype("self").numpy is None:
                return None
            exact = k.read("self").astype(np.float64)
            finite = np.isfinite(exact)
            return np.where(finite, _truncate_to_bf16(np.where(finite, exact, 0).astype(np.float32)), out)

        _after(self, "Cast", truncate)


class Float64InFloat32Backend(ReferenceBackend):
    """float64 Sqrt computed in float32 and widened back where the value fits float32 (a float32-only fast path)."""

    name = "mutant-float64-as-float32"

    def __init__(self) -> None:
        super().__init__()

        def narrow(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if out.dtype != np.float64:
                return None
            x = k.read("self")
            fits = np.isfinite(x) & (np.abs(x) < 2.0**100) & ((np.abs(x) > 2.0**-100) | (x == 0))
            with np.errstate(all="ignore"):
                narrow = np.sqrt(np.where(fits, x, 0).astype(np.float32)).astype(np.float64)
            return np.where(fits, narrow, out)

        _after(self, "Sqrt", narrow)


class UnsignedZeroNegBackend(ReferenceBackend):
    """Neg computed as 0 - x: Neg(+0.0) gives +0.0 instead of -0.0."""

    name = "mutant-neg-zero-sign"

    def __init__(self) -> None:
        super().__init__()

        def subtract(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if out.dtype.kind not in "fV":
                return None
            wide = k.read("self").astype(np.float64)
            return (0.0 - wide).astype(out.dtype)

        _after(self, "Neg", subtract)


class HalfAccumulatorBackend(ReferenceBackend):
    """ReduceSum of a bf16 result accumulates in bf16, element by element (no float32 accumulator)."""

    name = "mutant-reduce-16bit-accumulator"

    def __init__(self) -> None:
        super().__init__()

        def accumulate(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if k.dtype("out") != DataType.ACL_BF16:
                return None
            x = k.read("self").astype(out.dtype)
            axes = tuple(sorted({d % x.ndim for d in k.plan["dims"]})) if x.ndim else ()
            if not axes:
                axes = tuple(range(x.ndim))
            moved = np.moveaxis(x, axes, tuple(range(len(axes)))).reshape(-1, *np.delete(x.shape, axes))
            total = np.zeros(moved.shape[1:], out.dtype)
            for term in moved:
                total = (total.astype(np.float32) + term.astype(np.float32)).astype(out.dtype)
            return total.reshape(out.shape)

        _after(self, "ReduceSum", accumulate)


class MisplacedNanBackend(ReferenceBackend):
    """Maximum returns the non-NaN operand where one is NaN (fmax semantics instead of NaN propagation)."""

    name = "mutant-maximum-drops-nan"

    def __init__(self) -> None:
        super().__init__()

        def fmax(k: RefCall, out: np.ndarray) -> np.ndarray | None:
            if out.dtype.kind not in "fV":
                return None
            a, b = (k.read(n).astype(np.float64) for n in ("self", "other"))
            return np.fmax(a, b).astype(out.dtype)

        _after(self, "Maximum", fmax)


MUTANTS = [
    Mutant("add-3ulp", "tolerance", "float32 Add 3 ulp off", ThreeUlpAddBackend, ops="Add"),
    Mutant("bf16-truncation", "tolerance", "Cast to bf16 truncates", TruncatingBf16Backend, ops="Cast"),
    Mutant("float64-as-float32", "tolerance", "float64 Sqrt in float32", Float64InFloat32Backend, ops="Sqrt"),
    Mutant("neg-zero-sign", "tolerance", "Neg(+0) is +0", UnsignedZeroNegBackend, ops="Neg"),
    Mutant(
        "reduce-16bit-accumulator",
        "tolerance",
        "ReduceSum accumulates bf16 in bf16",
        HalfAccumulatorBackend,
        ops="ReduceSum",
    ),
    # NaN positions were compared before issue 14 too: this member guards that the ulp rewrite keeps them exact
    Mutant("maximum-drops-nan", "tolerance", "Maximum ignores NaN", MisplacedNanBackend, ops="Maximum"),
]
