"""The HIP backend of acl-core: AMD GPUs through hip-python, NVIDIA GPUs through the CUDA Python bindings.

Everything above :mod:`acl_rocm.providers` (kernel sources, launch configurations, op code, the acl
driver, capability detection) is shared by both platforms. Importing this package imports no vendor
library; the provider for the detected platform is imported when the backend starts.
"""

from __future__ import annotations

__all__: list[str] = []
