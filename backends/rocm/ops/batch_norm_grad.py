"""BatchNorm's backward ops on the GPU: per-channel sums, a per-channel finish, an elementwise apply.

BatchNormBackward runs all three (the sums only where a gradient needs them; inference's gradInput needs
none); BatchNormReduceBackward the sums and the finish; BatchNormElemtBackward the finish (reading sumDy,
sumDyXmu and the counter's total on the device) and the apply. Sums accumulate in fp32; every output is
rounded once. Temporaries are stream-ordered; nothing passes through the host.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from acl_core.backend import Kernel, Launch
from acl_core.spec.ops.batch_norm_grad import REDUCE_OUTPUTS
from acl_core.tensor import AclTensor
from acl_rocm.driver import handle
from acl_rocm.kernels.batch_norm_grad import BLOCK_THREADS, Apply, ChannelSums, Finish
from acl_rocm.launch import KernelArgs, LaunchConfig
from acl_rocm.ops.elementwise import Prepared
from acl_rocm.views import INT32_LIMIT, coalesce

if TYPE_CHECKING:
    from acl_rocm.backend import RocmBackend

OPS = ("BatchNormBackward", "BatchNormReduceBackward", "BatchNormElemtBackward")


def _index_type(*tensors: AclTensor | None) -> str:
    reach = [sum((d - 1) * abs(s) for d, s in zip(t.view_dims, t.strides) if d > 0) for t in tensors if t is not None]
    numel = [t.numel for t in tensors if t is not None]
    return "int" if max([*reach, *numel, 0]) <= INT32_LIMIT // 2 else "long long"


def _address(t: AclTensor) -> ctypes.c_void_p:
    return KernelArgs.pointer(t.data + t.offset * (t.dtype.info.storage_bits // 8))


def _others(*tensors: AclTensor) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The dims around the channel (dim 0, then dims 2… coalesced where every tensor walks them contiguously):
    their sizes and each tensor's strides over them (fewer dims, less index arithmetic per element)."""
    x = tensors[0]
    before = coalesce(x.view_dims[:1], [t.strides[:1] for t in tensors])
    after = coalesce(x.view_dims[2:], [t.strides[2:] for t in tensors])
    return before.shape + after.shape, [b + a for b, a in zip(before.strides, after.strides)]


def _opt(launch: Launch, name: str) -> AclTensor | None:
    t = launch.args.get(name)
    return t if isinstance(t, AclTensor) else None


def _stride(t: AclTensor | None) -> int:
    return t.strides[0] if t is not None else 0


class BatchNormGradRunner:
    """Turns the BatchNorm backward Launches into the three kernels of acl_rocm.kernels.batch_norm_grad."""

    def __init__(self, backend: RocmBackend) -> None:
        self.backend = backend
        self.split_elements = BLOCK_THREADS * 8
        """The fewest elements of a channel one block of the sums kernel takes on (tests lower it)."""

    def kernels(self) -> dict[str, Kernel]:
        """The three ops."""
        return {
            "BatchNormBackward": self.batch_norm_backward,
            "BatchNormReduceBackward": self.reduce_backward,
            "BatchNormElemtBackward": self.elemt_backward,
        }

    # ------------------------------------------------------------------ launching
    def _launch(self, kernel: Any, meta: list[int], values: list[Any], config: LaunchConfig, stream: int) -> None:
        function = self.backend.function(kernel.source(), kernel.kernel_name)
        args = KernelArgs([KernelArgs.index_array(meta, kernel.index_type), *values])
        self.backend.elementwise.launch_prepared(Prepared(function, config, args), stream)

    def _per_channel_config(self, channels: int, block: int) -> LaunchConfig:
        p = self.backend.properties
        return LaunchConfig((max(1, min(channels, p.compute_units * 8, p.max_grid_x)), 1, 1), (block, 1, 1))

    def splits(self, channels: int, per_channel: int) -> int:
        """Blocks per channel of the sums kernel: enough to fill the device, each with ``split_elements`` or more."""
        p = self.backend.properties
        fill = -(-p.compute_units * 8 // max(channels, 1))
        return max(1, min(fill, -(-per_channel // self.split_elements), 65535))

    def _sums(
        self, dy: AclTensor, x: AclTensor, mean: AclTensor | None, splits: int, scratch: int, stream: int
    ) -> None:
        """``scratch`` [splits, 2, C] fp32: the partial Σdy, Σdy·(x - mean) of each channel's splits."""
        c = x.view_dims[1]
        sizes, (xs, dys) = _others(x, dy)
        kernel = ChannelSums(x.dtype, mean.dtype if mean is not None else None, len(sizes), _index_type(dy, x))
        meta = [c, x.numel // max(c, 1), dy.strides[1], x.strides[1], _stride(mean), *sizes, *dys, *xs]
        values = [
            _address(dy),
            _address(x),
            *([_address(mean)] if mean is not None else []),
            KernelArgs.pointer(scratch),
        ]
        config = self._per_channel_config(c, BLOCK_THREADS)
        self._launch(kernel, meta, values, LaunchConfig((config.grid[0], splits, 1), config.block), stream)

    def _finish(
        self,
        channels: int,
        sums: tuple[int, int] | tuple[AclTensor, AclTensor],
        mean: AclTensor | None,
        invstd: tuple[str, AclTensor | None],
        weight: AclTensor | None,
        count: float | AclTensor,
        outputs: tuple[AclTensor | None, AclTensor | None, AclTensor | None, AclTensor | None],
        coefficients: int,
        training: bool,
        eps: float,
        stream: int,
    ) -> None:
        """Per-channel outputs and (``coefficients`` != 0: their address) the apply pass's [4, C] fp32 rows."""
        kind, inv = invstd
        scratch = sums if isinstance(sums[0], int) else None
        counter = count if isinstance(count, AclTensor) else None
        kernel = Finish(
            sums=None if scratch is not None else (sums[0].dtype, sums[1].dtype),  # type: ignore[union-attr]
            mean=mean.dtype if mean is not None else None,
            invstd_kind=kind,
            invstd=inv.dtype if inv is not None else None,
            weight=weight.dtype if weight is not None else None,
            counter=counter.dtype if counter is not None else None,
            counter_dims=counter.rank if counter is not None else 1,
            outputs=tuple(t.dtype if t is not None else None for t in outputs),
            coefficients=bool(coefficients),
            training=training,
            index_type=_index_type(counter) if counter is not None else "int",
        )
        s1, s2 = (0, 0) if scratch is not None else (sums[0].strides[0], sums[1].strides[0])  # type: ignore[union-attr]
        meta = [channels, s1, s2, _stride(mean), _stride(inv), _stride(weight), *(_stride(t) for t in outputs)]
        meta += [counter.numel if counter is not None else 0, scratch[1] if scratch is not None else 0]
        meta += list(counter.view_dims) + list(counter.strides) if counter is not None else [1, 0]
        values: list[Any] = [KernelArgs.pointer(scratch[0])] if scratch is not None else [_address(t) for t in sums]  # type: ignore[arg-type]
        values += [_address(t) for t in (mean, inv, weight, counter) if t is not None]
        values += [_address(t) for t in outputs if t is not None]
        if coefficients:
            values.append(KernelArgs.pointer(coefficients))
        values += [ctypes.c_float(eps), ctypes.c_float(0.0 if counter is not None else float(count))]  # type: ignore[arg-type]
        p = self.backend.properties
        grid = max(1, min(-(-channels // BLOCK_THREADS), p.max_grid_x))
        self._launch(kernel, meta, values, LaunchConfig((grid, 1, 1), (BLOCK_THREADS, 1, 1)), stream)

    def _apply(self, dy: AclTensor, x: AclTensor, coef: int, dx: AclTensor, centred: bool, stream: int) -> None:
        sizes, (xs, dys, dxs) = _others(x, dy, dx)
        c = x.view_dims[1]
        kernel = Apply(x.dtype, dx.dtype, len(sizes) + 1, _index_type(dy, x, dx), centred)
        shape = (sizes[0], c, *sizes[1:])
        meta = [x.numel, c, *shape]
        for strides, t in ((dys, dy), (xs, x), (dxs, dx)):
            meta += [strides[0], t.strides[1], *strides[1:]]
        values = [_address(dy), *([_address(x)] if centred else []), KernelArgs.pointer(coef), _address(dx)]
        self._launch(kernel, meta, values, self.backend.elementwise_config(x.numel, 1), stream)

    def _temp(self, nbytes: int, stream: int, temps: list[int]) -> int:
        address = self.backend.provider.malloc_async(max(nbytes, 4), stream)
        temps.append(address)
        return address

    def _free(self, temps: list[int], stream: int) -> None:
        for address in temps:
            self.backend.provider.free_async(address, stream)

    # ------------------------------------------------------------------ the ops
    def batch_norm_backward(self, launch: Launch) -> None:
        """gradInput / gradWeight / gradBias as outputMask asks."""
        dy, x = launch.args["gradOut"], launch.args["input"]
        assert isinstance(dy, AclTensor) and isinstance(x, AclTensor)
        want_input, want_weight, want_bias = launch.plan["output_mask"]
        training = bool(launch.args["training"])
        c = x.view_dims[1]
        dx = _opt(launch, "gradInput") if want_input else None
        dx = dx if dx is not None and dx.numel else None
        if c == 0 or (dx is None and not want_weight and not want_bias):
            return
        if training:
            mean, invstd = _opt(launch, "saveMean"), ("invstd", _opt(launch, "saveInvstd"))
        else:
            var = _opt(launch, "runningVar")
            mean, invstd = _opt(launch, "runningMean"), ("var" if var is not None else "eps", var)
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            count = x.numel // c
            scratch, splits = 0, 1
            if want_weight or want_bias or (training and dx is not None):
                splits = self.splits(c, count)
                scratch = self._temp(2 * c * splits * 4, stream, temps)
                self._sums(dy, x, mean, splits, scratch, stream)
            coef = self._temp(4 * c * 4, stream, temps) if dx is not None else 0
            gw = _opt(launch, "gradWeight") if want_weight else None
            gb = _opt(launch, "gradBias") if want_bias else None
            eps = float(launch.args["eps"])
            # inference needs no sums for gradInput: the finish reads zeros it never uses
            sums = (scratch if scratch else self._zeros(2 * c, stream, temps), splits)
            weight = _opt(launch, "weight")
            outputs = (None, None, gw, gb)
            self._finish(c, sums, mean, invstd, weight, float(count), outputs, coef, training, eps, stream)
            if dx is not None:
                self._apply(dy, x, coef, dx, training, stream)
        finally:
            self._free(temps, stream)

    def _zeros(self, floats: int, stream: int, temps: list[int]) -> int:
        address = self._temp(floats * 4, stream, temps)
        self.backend.provider.memset(address, 0, floats * 4, stream)
        return address

    def reduce_backward(self, launch: Launch) -> None:
        """sumDy, sumDyXmu, gradWeight, gradBias as inputG / weightG / biasG ask."""
        dy, x = launch.args["gradOut"], launch.args["input"]
        assert isinstance(dy, AclTensor) and isinstance(x, AclTensor)
        mask = launch.plan["output_mask"]
        outputs = tuple(_opt(launch, n) if m else None for n, m in zip(REDUCE_OUTPUTS, mask))
        if not any(t is not None for t in outputs):
            return
        c = x.view_dims[1]
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            splits = self.splits(c, x.numel // c)
            scratch = self._temp(2 * c * splits * 4, stream, temps)
            mean = _opt(launch, "mean")
            self._sums(dy, x, mean, splits, scratch, stream)
            invstd = ("invstd", _opt(launch, "invstd"))
            self._finish(c, (scratch, splits), mean, invstd, None, 1.0, outputs, 0, False, 0.0, stream)  # type: ignore[arg-type]
        finally:
            self._free(temps, stream)

    def elemt_backward(self, launch: Launch) -> None:
        """gradInput from the reduced sums and the counter's total."""
        dy, x, dx = launch.args["gradOut"], launch.args["input"], launch.args["gradInput"]
        assert isinstance(dy, AclTensor) and isinstance(x, AclTensor) and isinstance(dx, AclTensor)
        if x.numel == 0:
            return
        c = x.view_dims[1]
        sum_dy, sum_dy_xmu, counter = launch.args["sumDy"], launch.args["sumDyXmu"], launch.args["counter"]
        assert isinstance(sum_dy, AclTensor) and isinstance(sum_dy_xmu, AclTensor) and isinstance(counter, AclTensor)
        stream = handle(launch.stream)
        temps: list[int] = []
        try:
            coef = self._temp(4 * c * 4, stream, temps)
            invstd = ("invstd", _opt(launch, "invstd"))
            nothing = (None, None, None, None)
            mean, weight = _opt(launch, "mean"), _opt(launch, "weight")
            self._finish(c, (sum_dy, sum_dy_xmu), mean, invstd, weight, counter, nothing, coef, True, 0.0, stream)
            self._apply(dy, x, coef, dx, True, stream)
        finally:
            self._free(temps, stream)


RUNNER = BatchNormGradRunner
