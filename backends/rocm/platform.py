"""Which HIP platform this machine offers (amd or nvidia), found without importing a vendor library.

``ACL_HIP_PLATFORM=amd|nvidia`` forces the choice. Otherwise a platform counts as present when its
Python bindings are installed (``importlib.util.find_spec``, no import) and its runtime library is on
the library path. The answer is a :class:`PlatformProbe`: the platform, or the reason none can run.
"""

from __future__ import annotations

import ctypes.util
import glob
import importlib.util
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

PlatformName = Literal["amd", "nvidia"]
PLATFORMS: Final[tuple[PlatformName, ...]] = ("amd", "nvidia")
ENV_PLATFORM: Final = "ACL_HIP_PLATFORM"

_AMD_LIBRARY: Final = "libamdhip64.so"
_NVIDIA_DRIVER_LIBRARY: Final = "libcuda.so.1"
_SYSTEM_LIBRARY_DIRS: Final = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
    "/usr/lib/wsl/lib",
)


@dataclass(frozen=True)
class PlatformProbe:
    """The outcome of platform detection: ``platform`` when one can run, else ``reason`` with the remedy."""

    platform: PlatformName | None
    reason: str | None


def module_present(name: str) -> bool:
    """True when module ``name`` (dotted) is installed, checked without importing anything."""
    head, _, rest = name.partition(".")
    try:
        spec = importlib.util.find_spec(head)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    if not rest:
        return True
    locations = list(spec.submodule_search_locations or ())
    parts = rest.split(".")
    for location in locations:
        path = os.path.join(location, *parts)
        if os.path.isdir(path) or glob.glob(path + ".py") or glob.glob(path + ".*.so") or glob.glob(path + ".pyd"):
            return True
    return False


def _library_dirs(environ: Mapping[str, str], extra: Iterable[str]) -> list[str]:
    dirs = [d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs.extend(extra)
    dirs.extend(_SYSTEM_LIBRARY_DIRS)
    return dirs


def find_library(filename: str, environ: Mapping[str, str], extra_dirs: Iterable[str] = ()) -> str | None:
    """The path of shared library ``filename`` (or a versioned sibling), without loading it."""
    for directory in _library_dirs(environ, extra_dirs):
        candidates = [os.path.join(directory, filename), *sorted(glob.glob(os.path.join(directory, filename + ".*")))]
        for candidate in candidates:
            if os.path.exists(candidate):
                return candidate
    stem = filename.removeprefix("lib").split(".so")[0]
    return ctypes.util.find_library(stem)


def rocm_dirs(environ: Mapping[str, str]) -> list[str]:
    """Library folders of a ROCm install: ``$ROCM_PATH/lib``, ``$HIP_PATH/lib``, /opt/rocm*/lib."""
    roots = [environ.get("ROCM_PATH", ""), environ.get("HIP_PATH", ""), "/opt/rocm", *sorted(glob.glob("/opt/rocm-*"))]
    return [os.path.join(r, "lib") for r in roots if r]


def amd_reason(environ: Mapping[str, str]) -> str | None:
    """None when the amd platform can start here, else why not (with the remedy)."""
    if find_library(_AMD_LIBRARY, environ, rocm_dirs(environ)) is None:
        return f"no HIP runtime: {_AMD_LIBRARY} not found; install ROCm or set ROCM_PATH"
    if not module_present("hip.hip"):
        return "no HIP Python bindings: hip-python not installed; pip install 'acl-core[rocm]'"
    return None


def nvidia_reason(environ: Mapping[str, str]) -> str | None:
    """None when the nvidia platform can start here, else why not (with the remedy)."""
    if not module_present("cuda.bindings"):
        return "no CUDA runtime: cuda-bindings not installed; pip install 'acl-core[nvidia]'"
    if find_library(_NVIDIA_DRIVER_LIBRARY, environ) is None:
        return f"no CUDA driver: {_NVIDIA_DRIVER_LIBRARY} not found; install the NVIDIA driver"
    return None


def detect(environ: Mapping[str, str] | None = None) -> PlatformProbe:
    """The HIP platform to use here, or the reason there is none; ``ACL_HIP_PLATFORM`` forces one."""
    env = os.environ if environ is None else environ
    forced = env.get(ENV_PLATFORM, "").strip().lower()
    if forced:
        if forced not in PLATFORMS:
            return PlatformProbe(None, f"{ENV_PLATFORM}={forced!r} is not one of amd, nvidia; unset it or fix it")
        reason = amd_reason(env) if forced == "amd" else nvidia_reason(env)
        if reason is not None:
            return PlatformProbe(None, f"{reason} ({ENV_PLATFORM}={forced} forces this platform)")
        return PlatformProbe(forced, None)
    amd = amd_reason(env)
    if amd is None:
        return PlatformProbe("amd", None)
    nvidia = nvidia_reason(env)
    if nvidia is None:
        return PlatformProbe("nvidia", None)
    return PlatformProbe(None, f"{amd}; {nvidia}")
