"""Qwen3 end to end on the aclnn contract: a runner, parity with transformers, a benchmark, random checkpoints.

The runner (:class:`~acl_tools.qwen3.model.Qwen3Runner`) reaches the device only through the acl
runtime and aclnn operators, so it runs unchanged on whichever backend is selected.
"""

from acl_tools.qwen3.config import Qwen3Config, UnsupportedCheckpoint
from acl_tools.qwen3.model import Generation, Qwen3Runner
from acl_tools.qwen3.sampling import Sampling

__all__ = ["Generation", "Qwen3Config", "Qwen3Runner", "Sampling", "UnsupportedCheckpoint"]
