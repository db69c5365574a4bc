"""A Qwen3 checkpoint's configuration, read from its ``config.json`` (transformers 4 and 5 spellings)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from acl_core.dtypes import DataType

DTYPES: dict[str, DataType] = {"fp32": DataType.ACL_FLOAT, "fp16": DataType.ACL_FLOAT16, "bf16": DataType.ACL_BF16}
"""The runner's ``--dtype`` names and the aclDataType each computes in."""


class UnsupportedCheckpoint(ValueError):
    """The checkpoint uses a Qwen3 feature this runner does not implement (the message says which)."""


@dataclass(frozen=True)
class Qwen3Config:
    """The facts of a Qwen3 checkpoint the runner needs."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]

    @property
    def qkv_size(self) -> int:
        """Rows of the fused q/k/v projection: (Nq + 2 Nkv) * D."""
        return (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Qwen3Config:
        """Parse a config.json dictionary, refusing what the runner does not implement."""
        model_type = raw.get("model_type")
        if model_type not in (None, "qwen3"):
            raise UnsupportedCheckpoint(f"model_type {model_type!r} is not qwen3")
        if raw.get("attention_bias"):
            raise UnsupportedCheckpoint("attention_bias=true is not implemented (Qwen3 checkpoints have none)")
        if raw.get("use_sliding_window"):
            raise UnsupportedCheckpoint("use_sliding_window=true is not implemented")
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise UnsupportedCheckpoint(f"hidden_act {act!r} is not implemented; Qwen3 uses silu")
        rope = raw.get("rope_parameters") or {}
        scaling = raw.get("rope_scaling") or {}
        kinds = {rope.get("rope_type"), scaling.get("rope_type") or scaling.get("type")} - {None, "default"}
        if kinds:
            raise UnsupportedCheckpoint(f"rope type {kinds.pop()!r} is not implemented; only the default rope is")
        theta = rope.get("rope_theta", raw.get("rope_theta"))
        if theta is None:
            raise UnsupportedCheckpoint("config.json names no rope_theta")
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        eos = raw.get("eos_token_id")
        eos_ids = tuple(int(e) for e in (eos if isinstance(eos, list) else [] if eos is None else [eos]))
        cfg = cls(
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            max_position_embeddings=int(raw.get("max_position_embeddings", 32768)),
            eos_token_ids=eos_ids,
        )
        if cfg.num_attention_heads % cfg.num_key_value_heads:
            raise UnsupportedCheckpoint(
                f"{cfg.num_attention_heads} query heads are not a multiple of {cfg.num_key_value_heads} kv heads"
            )
        if cfg.head_dim % 2:
            raise UnsupportedCheckpoint(f"head_dim {cfg.head_dim} is odd; rotary embedding needs an even one")
        return cfg

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> Qwen3Config:
        """Read ``model_dir/config.json``."""
        path = Path(model_dir) / "config.json"
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dictionary."""
        data = asdict(self)
        data["eos_token_ids"] = list(self.eos_token_ids)
        return data


def parse_dtype(name: str) -> DataType:
    """The aclDataType of a ``--dtype`` name (fp32, fp16, bf16)."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}") from None
