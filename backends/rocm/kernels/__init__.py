"""HIP/CUDA-common C++ kernel sources: a small prelude and generators (elementwise first)."""

from __future__ import annotations
