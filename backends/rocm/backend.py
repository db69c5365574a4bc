"""The HIP Backend object: a provider, the acl driver over it, kernels, and capabilities measured on the device."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from importlib import metadata

from acl_core.backend import RELAUNCH, Backend, Kernel, Launch
from acl_core.capabilities import Capabilities, Platform, declared_formats, derive_op_dtypes
from acl_core.dtypes import DataType as D
from acl_core.errors import AclError, BackendUnavailableError, RtErrorCode
from acl_core.formats import Format
from acl_core.spec.collective import CollectiveEngine
from acl_core.spec.ops import all_specs
from acl_rocm.arch import ArchPolicy, lookup, resolve_policy, with_warp_size
from acl_rocm.collectives import NcclEngine, open_engine
from acl_rocm.compiler import KernelCache, cache_dir
from acl_rocm.driver import RocmDriver, handle
from acl_rocm.kernels.ctypes_map import SUPPORTED
from acl_rocm.kernels.prelude import compile_options
from acl_rocm.launch import DEFAULT_DYNAMIC_SHARED, LaunchConfig, elementwise_config
from acl_rocm.ops import build_runners
from acl_rocm.ops.elementwise import ElementwiseRunner
from acl_rocm.ops.matmul import MatmulRunner
from acl_rocm.ops.quant_matmul import QuantMatmulRunner
from acl_rocm.pdl import triggers, with_trigger
from acl_rocm.plan_cache import PlanCache
from acl_rocm.platform import detect
from acl_rocm.prefetch import Prefetcher
from acl_rocm.providers import open_provider
from acl_rocm.providers.base import DeviceProperties, RuntimeProvider

NAME = "rocm"


class RocmBackend(Backend):
    """HIP kernels on one platform (amd or nvidia), behind one :class:`RuntimeProvider`."""

    name = NAME

    def __init__(self, provider: RuntimeProvider, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.environ: Mapping[str, str] = env
        self.provider = provider
        self._driver = RocmDriver(provider)
        count = provider.device_count()
        if count <= 0:
            raise BackendUnavailableError(
                NAME, f"no {provider.platform} GPU is visible to the runtime (device count 0); check the driver"
            )
        self.device_count = count
        provider.set_device(0)
        self.properties: DeviceProperties = provider.device_properties(0)
        arch = with_warp_size(lookup(self.properties.arch), self.properties.warp_size)
        self.policy: ArchPolicy = resolve_policy(arch, env)
        if self.policy.refusal:
            raise BackendUnavailableError(NAME, self.policy.refusal)
        self.options = compile_options(self.properties.warp_size)
        self.cache = KernelCache(
            compile_fn=provider.compile,
            arch=self.properties.arch,
            compiler_version=provider.compiler_version(),
            platform=provider.platform,
            directory=cache_dir(env),
        )
        self.plans = PlanCache.from_env(env)
        """Library plans (cuBLASLt algorithms, cuDNN execution plans) kept beside the kernel cache."""
        provider.plan_cache = self.plans
        self._functions: dict[tuple[int, str], object] = {}
        self._modules: dict[tuple[int, str], object] = {}
        self._lock = threading.Lock()
        self.runners = build_runners(self)
        self.elementwise: ElementwiseRunner = self.runners["elementwise"]
        self.matmul: MatmulRunner = self.runners["matmul"]
        self.quant_matmul: QuantMatmulRunner = self.runners["quant_matmul"]
        self._kernels: dict[str, Kernel] = {}
        self._collectives: tuple[NcclEngine | None, str] | None = None
        for runner in self.runners.values():
            self._kernels.update(runner.kernels())
        self.capture_refused: dict[str, str] = capture_refusals(self.runners)
        for op, why in self.capture_refused.items():
            if op in self._kernels:
                self._kernels[op] = _refusing_capture(self._driver, op, why, self._kernels[op])
        self.prefetch = Prefetcher(self)
        """aclrtCmoAsync's prefetch kernel (``ACL_CMO_CONFIG``; ``use_config`` switches it in-process)."""
        self._driver.prefetcher = self.prefetch
        self._driver.before_capture.append(self.prefetch.prepare_capture)
        for runner in self.runners.values():
            prepare = getattr(runner, "prepare_capture", None)
            if prepare is not None:
                self._driver.before_capture.append(prepare)

    @classmethod
    def start(cls) -> RocmBackend:
        """Detect the platform, open its provider and the first device (BackendUnavailableError if none)."""
        probe = detect()
        if probe.platform is None:
            raise BackendUnavailableError(NAME, probe.reason or "no HIP platform")
        try:
            provider = open_provider(probe.platform)
        except ImportError as exc:
            raise BackendUnavailableError(NAME, f"{probe.platform} bindings failed to import: {exc}") from exc
        try:
            return cls(provider)
        except AclError as exc:
            raise BackendUnavailableError(NAME, f"the {probe.platform} runtime failed to start: {exc}") from exc

    # ------------------------------------------------------------------ Backend
    @property
    def driver(self) -> RocmDriver:
        """The acl driver over the provider."""
        return self._driver

    @property
    def collectives(self) -> CollectiveEngine | None:
        """HCCL over NCCL (nvidia) / RCCL (amd), or None when the provider has no collective library."""
        with self._lock:
            if self._collectives is None:
                self._collectives = open_engine(self.provider)
                if self._collectives[0] is not None:
                    self._collectives[0].capturing = self._driver.capturing
        return self._collectives[0]

    @property
    def kernels(self) -> Mapping[str, Kernel]:
        """GPU kernels by operator name."""
        return self._kernels

    def dlpack_device(self) -> tuple[int, int]:
        """DLPack's kDLCUDA (nvidia) or kDLROCM (amd) and the current device."""
        return (2 if self.provider.platform == "nvidia" else 10, self.provider.get_device())

    # ------------------------------------------------------------------ kernels
    def elementwise_config(self, numel: int, per_thread: int = 4) -> LaunchConfig:
        """The grid-stride launch for ``numel`` elements, ``per_thread`` per thread per trip, on this device."""
        p = self.properties
        return elementwise_config(
            numel,
            per_thread=per_thread,
            warp_size=p.warp_size,
            compute_units=p.compute_units,
            max_threads_per_block=p.max_threads_per_block,
            max_grid=p.max_grid_x,
        )

    def function(
        self, source: str, name: str, dynamic_shared: int = 0, arch_specific: bool = False, static_shared: int = 0
    ) -> object:
        """The loaded kernel ``name`` of ``source`` on the current device (compiled or cached once).

        ``dynamic_shared``: the bytes of dynamic shared memory its launches pass; where they and ``static_shared``
        (at least the kernel's static shared bytes, where the caller knows them) pass the 48 KiB every kernel may
        take, the kernel is opted in once (the provider's :meth:`set_max_dynamic_shared`: without it a launch may
        pass only 48 KiB less the static bytes), and above the device's opt-in maximum the call is refused.
        ``arch_specific``: compiled for the device's arch-specific target (the provider's :meth:`arch_specific`,
        e.g. ``sm_90a`` for ``wgmma``) instead of its architecture; refused where there is none.
        """
        device = self.provider.get_device()
        found = self._functions.get((device, source))
        opt_in = dynamic_shared > 0 and dynamic_shared + static_shared > DEFAULT_DYNAMIC_SHARED
        if found is not None and not opt_in:
            return found
        if dynamic_shared > self.properties.max_shared_memory:
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                f"kernel {name} needs {dynamic_shared} bytes of shared memory; "
                f"{self.properties.name} allows {self.properties.max_shared_memory} a block",
            )
        if found is not None:
            return found
        compiled = source
        if triggers(self.environ) and self.provider.programmatic_unavailable() is None:
            compiled = with_trigger(source, name)  # ACL_PDL: a PDL GEMV after this kernel may start early
        target = None
        if arch_specific:
            target = self.provider.arch_specific(self.properties.arch)
            if target is None:
                raise AclError(
                    RtErrorCode.ACL_ERROR_RT_FEATURE_NOT_SUPPORT,
                    f"kernel {name} needs an arch-specific target; {self.properties.arch} has none",
                )
        key, image = self.cache.image(compiled, name, self.options, target)
        with self._lock:
            module = self._modules.get((device, key))
            if module is None:
                module = self._modules[(device, key)] = self.provider.module_load(image)
            function = self.provider.module_function(module, name)
            if opt_in:
                self.provider.set_max_dynamic_shared(function, dynamic_shared)
            self._functions[(device, source)] = function
        return function

    def cache_stats(self) -> dict[str, dict[str, object]]:
        """What the kernel cache and the plan cache served in this process (the startup benchmark reads it)."""
        return {
            "kernels": {"directory": str(self.cache.directory), **vars(self.cache.stats)},
            "plans": {"directory": str(self.plans.directory), **self.plans.stats.as_dict()},
        }

    # ------------------------------------------------------------------ capabilities
    @functools.cached_property
    def _claims(self) -> tuple[dict[str, tuple[D, ...]], tuple[Format, ...]]:
        """Per-op dtypes and the formats, from the kernel tables alone (no device query, no collectives)."""
        specs = all_specs()
        claimed = [s for s in specs.values() if s.kernel_name in self._kernels]
        return derive_op_dtypes(claimed, SUPPORTED), declared_formats(claimed)

    def claim(self, op: str) -> tuple[frozenset[D], frozenset[Format]]:
        """What phase 1 lets through for ``op``: the same sets :meth:`capabilities` reports, without opening engines."""
        op_dtypes, formats = self._claims
        return frozenset(op_dtypes.get(op, SUPPORTED)), frozenset(formats)

    @functools.cache  # noqa: B019 - one backend object per process
    def capabilities(self) -> Capabilities:
        """What this device and these kernels do, read from the device and the kernel tables."""
        p = self.properties
        arch = self.policy.arch
        _free, total = self.provider.mem_info()
        specs = all_specs()
        ops = tuple(sorted(n for n, s in specs.items() if s.kernel_name in self._kernels))
        op_dtypes, formats = self._claims
        engine = self.collectives
        blas_ops = [n for n in ("Matmul", "Mm", "BatchMatMul", "Addmm", "Baddbmm") if n in self._kernels]
        notes = {
            "provider": f"{self.provider.platform} ({self.provider.compiler_name})",
            "arch_family": arch.family,
            "arch_known": str(arch.known).lower(),
            "matrix_cores": str(arch.matrix_cores).lower(),
            "fp8_format": arch.fp8_format,
            "fp8_matrix_hw": f"{str(arch.fp8_matmul_hw).lower()} (hardware)",
            "mx_hw": f"{str(arch.mx_hw).lower()} (hardware; the native MX GEMM is not implemented: MX dequantises)",
            "quant_matmul": self.quant_matmul.unavailable() or self.quant_matmul.path_note(),
            "gemm": self.matmul.unavailable() or f"{self.provider.platform} BLAS ({', '.join(blas_ops)})",
            "compute_units": str(p.compute_units),
            "l2_cache_bytes": str(p.l2_cache_bytes),
            "kernel_cache": str(self.cache.directory),
            "plan_cache": str(self.plans.directory or "off (ACL_PLAN_CACHE)"),
            "collectives": _collective_note(engine, self._collectives),
            "mc2": self.runners["mc2"].note(),
            "cmo_prefetch": self.prefetch.describe(),
            "cmo_prefetch_native": str(self.prefetch.native).lower(),
            "stream_capture": self._driver.capture_unavailable()
            or f"{self.provider.platform} graphs (relaxed capture mode; see backends/rocm/README.md)",
            **{k: v for k, v in self.provider.versions().items()},
        }
        return Capabilities(
            backend=NAME,
            backend_version=_version(),
            platform=Platform.NVIDIA if self.provider.platform == "nvidia" else Platform.AMD,
            device_name=p.name,
            architecture=arch.name,
            device_count=self.device_count,
            compute_units=p.compute_units,
            memory_bytes=total or p.total_memory,
            warp_size=p.warp_size,
            unified_memory=p.integrated,
            dtypes=tuple(sorted(SUPPORTED)),
            formats=formats,
            ops=ops,
            op_dtypes=op_dtypes,
            mx_use_hw=False,  # no native MX GEMM yet, even where policy.mx_use_hw holds (gfx950, sm_100+)
            fp8_matmul_hw=self.quant_matmul.fp8_hw and "QuantMatmulV5" in self._kernels,
            tf32_hw=arch.tf32_hw,
            tf32_enabled=self.policy.tf32_enabled and "Matmul" in self._kernels,
            attention_path=self.runners["attention"].describe_paths()
            if "FlashAttentionScore" in self._kernels
            else "none",
            nz_fidelity="none",
            stream_capture=self._driver.capture_unavailable() is None,
            capture_refused_ops=tuple(sorted(op for op in self.capture_refused if op in self._kernels)),
            collective_engine=engine.name if engine is not None else None,
            collective_max_ranks=engine.max_ranks() if engine is not None else 0,
            notes=notes,
        )


def capture_refusals(runners: Mapping[str, object]) -> dict[str, str]:
    """Operator → why its phase 2 needs the host, from each family runner's ``capture_refused`` mapping."""
    out: dict[str, str] = {}
    for runner in runners.values():
        out.update(getattr(runner, "capture_refused", {}))
    return out


def _refusing_capture(driver: RocmDriver, op: str, why: str, kernel: Kernel) -> Kernel:
    """``kernel``, refusing a capturing stream with 107041, the shared runtime's code for an op that refuses capture.

    The runtime refuses such an op before phase 2 reaches the backend; this covers a driver-level
    capture (``driver.capture_begin`` without the aclmdlRI front end) too.
    """

    def run(launch: Launch) -> None:
        if driver.capturing(handle(launch.stream)):
            raise AclError(
                RtErrorCode.ACL_ERROR_RT_CAPTURE_MODE_BLOCK_ASYNC,
                f"{op} needs the host in phase 2 on rocm and cannot be captured: {why}",
            )
        kernel(launch)
        fast = launch.memo.get(RELAUNCH)
        if fast is not None and not getattr(fast, "refuses_capture", False):
            launch.memo[RELAUNCH] = _relaunch_outside_capture(driver, fast)

    return run


def _relaunch_outside_capture(driver: RocmDriver, fast: Callable[[object], bool]) -> Callable[[object], bool]:
    """A memoised fast path that declines a capturing stream, so the call reaches the refusing kernel."""

    def relaunch(stream: object) -> bool:
        return not driver.capturing(handle(stream)) and fast(stream)

    relaunch.refuses_capture = True  # type: ignore[attr-defined]
    return relaunch


def _collective_note(engine: NcclEngine | None, opened: tuple[NcclEngine | None, str] | None) -> str:
    if engine is None:
        return f"none: {opened[1] if opened else 'not probed'}"
    v = engine.nccl_version
    return f"{engine.name} {v // 10000}.{v // 100 % 100}.{v % 100} via {engine.lib.binding}"


def _version() -> str:
    try:
        return metadata.version("acl-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"
