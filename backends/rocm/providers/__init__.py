"""Runtime providers: the vendor side of the backend's one seam (:class:`RuntimeProvider`)."""

from __future__ import annotations

from acl_rocm.providers.base import DeviceProperties, GemmCall, Matrix, RuntimeProvider


def open_provider(platform: str) -> RuntimeProvider:
    """The provider for ``platform`` (imports that vendor's bindings)."""
    if platform == "nvidia":
        from acl_rocm.providers.nvidia import NvidiaProvider

        return NvidiaProvider()
    if platform == "amd":
        from acl_rocm.providers.amd import AmdProvider

        return AmdProvider()
    raise ValueError(f"unknown HIP platform {platform!r}")


__all__ = ["DeviceProperties", "GemmCall", "Matrix", "RuntimeProvider", "open_provider"]
