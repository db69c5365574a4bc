"""Backend-agnostic clients of acl-core: the CLI's helpers, benchmarks, the Qwen3 runner."""
