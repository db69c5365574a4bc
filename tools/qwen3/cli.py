"""``acl-core qwen3``: generate, parity (against transformers), bench, make-tiny.

Exit status: 0 success; 1 parity thresholds not met; 2 bad arguments, a missing backend or checkpoint.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acl_core.errors import AclCoreError
from acl_core.extras import MissingExtra, require
from acl_tools.qwen3.attention import DECODE_OPS, PREFILL_OPS
from acl_tools.qwen3.config import DTYPES, UnsupportedCheckpoint
from acl_tools.qwen3.device import DeviceError
from acl_tools.qwen3.weights import CheckpointError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
HF = ("torch", "transformers")
"""What make-tiny, parity and bench's transformers side need (the 'torch' extra)."""


class UsageError(Exception):
    """Bad arguments found after parsing: printed and turned into exit status 2."""


def _ids(text: str) -> list[list[int]]:
    """``1,2,3`` (one prompt) or ``1,2,3;4,5,6`` (a batch of equal-length prompts)."""
    try:
        rows = [[int(v) for v in part.split(",") if v.strip()] for part in text.split(";") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"comma-separated integers (';' between prompts) expected, not {text!r}"
        ) from None
    if not rows or not all(rows):
        raise argparse.ArgumentTypeError("no token ids given")
    return rows


def _batches(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, not {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("positive batch sizes expected")
    return values


def _common(p: argparse.ArgumentParser, *, dtype_default: str = "fp32") -> None:
    p.add_argument("--model", required=True, type=Path, help="Hugging Face Qwen3 checkpoint directory")
    p.add_argument("--backend", default=None, help="backend name (default: ACL_BACKEND or the best available)")
    p.add_argument("--dtype", choices=list(DTYPES), default=dtype_default, help="compute dtype (weights cast at load)")


def _attention(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prefill-attention", choices=PREFILL_OPS, default=None, help="fa | pfa | fia (default by dtype)")
    p.add_argument("--decode-attention", choices=DECODE_OPS, default=None, help="fa | ifa | fia (default by dtype)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acl-core qwen3",
        description="Run Hugging Face Qwen3 checkpoints through aclnn calls on any backend: generate, parity "
        "(against transformers), bench, make-tiny. Exit status: 0 success; 1 parity thresholds not met; 2 bad "
        "arguments, a missing backend, checkpoint or optional dependency.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do (COMMAND --help)")

    g = sub.add_parser("generate", help="generate tokens from a prompt")
    _common(g)
    _attention(g)
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt-ids", type=_ids, help="token ids: 1,2,3 (';' separates equal-length prompts)")
    src.add_argument("--prompt", help="text, tokenized with the checkpoint's tokenizer")
    g.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate per prompt (default 32)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--greedy", action="store_true", help="pick the most probable token (the default)")
    mode.add_argument("--temperature", type=float, default=None, help="sample at this temperature")
    g.add_argument("--top-k", type=int, default=0, help="sample among the k most probable tokens (0: all)")
    g.add_argument("--top-p", type=float, default=1.0, help="sample from the smallest set holding this mass")
    g.add_argument("--seed", type=int, default=0, help="seed of the sampler")
    g.add_argument("--ignore-eos", action="store_true", help="do not stop at the checkpoint's EOS token")
    g.add_argument("--eager", action="store_true", help="launch the decode step op by op instead of replaying it")
    g.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the result as JSON (with what the kernel and plan caches served: acl-core bench --suite "
        "startup reads it)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("parity", help="compare prefill logits and greedy tokens with transformers")
    _common(p)
    _attention(p)
    p.add_argument("--tokens", type=int, default=32, help="greedy tokens to compare")
    p.add_argument("--prompt-ids", type=_ids, default=None, help="prompt ids (default: 16 seeded random ids)")
    p.add_argument("--atol", type=float, default=None, help="a tighter fp32 logits bound than the default one")
    p.add_argument("--hf-device", default=None, help="torch device for transformers (default: the backend's kind)")
    p.add_argument(
        "--noise-floor",
        action="store_true",
        help="also report (not judged) how many greedy tokens transformers' eager and sdpa attention agree on",
    )
    p.add_argument("--out", type=Path, default=None, help="JSON report (default: reports/qwen3-parity-...json)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")

    b = sub.add_parser("bench", help="prefill/decode tokens/s beside transformers")
    _common(b)
    b.add_argument("--batch", type=_batches, default=[1, 8], help="batch sizes, e.g. 1,8")
    b.add_argument("--prompt-len", type=int, default=32, help="prompt tokens per sequence (default 32)")
    b.add_argument("--new-tokens", type=int, default=32, help="tokens generated per sequence (default 32)")
    b.add_argument("--eager", action="store_true", help="acl-core launches the decode step op by op (no replay)")
    _attention(b)
    b.add_argument("--prefill-len", type=int, default=512, help="batch-1 prefill prompt timed on each side (0: none)")
    b.add_argument("--no-transformers", dest="with_transformers", action="store_false", help="skip transformers")
    b.add_argument(
        "--no-torch-graph", dest="with_torch_graph", action="store_false", help="skip the PyTorch CUDA-graph runner"
    )
    b.add_argument("--hf-device", default=None, help="torch device for transformers (default: the backend's kind)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random prompts (default 0)")
    b.add_argument("--repeat", type=int, default=3, help="timed runs per batch size (the median counts)")
    b.add_argument("--out", type=Path, default=None, help="JSON report (default: reports/qwen3-bench-...json)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")

    m = sub.add_parser("make-tiny", help="write a random Qwen3 checkpoint with transformers")
    m.add_argument("dir", type=Path, help="directory to write config.json and model.safetensors to")
    m.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    m.add_argument("--config", choices=["tiny", "qwen3-0.6b"], default="tiny", help="tiny, or Qwen3-0.6B's shape")
    m.add_argument("--untied", action="store_true", help="a separate lm_head instead of the tied embedding")
    m.add_argument("--dtype", choices=list(DTYPES), default=None, help="saved dtype (tiny: fp32, 0.6b: bf16)")
    return parser


def _write(path: Path, report: dict[str, Any], argv: Sequence[str]) -> None:
    report = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": "acl-core qwen3 " + shlex.join(argv),
        **report,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"written to {path}")


def _generate(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from acl_tools.qwen3 import hf
    from acl_tools.qwen3.model import Qwen3Runner
    from acl_tools.qwen3.progress import bar
    from acl_tools.qwen3.sampling import Sampling

    if args.max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    sampling = None
    if args.temperature is not None:
        try:
            sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.top_k or args.top_p != 1.0:
        raise UsageError("--top-k / --top-p need --temperature (sampling); the default is greedy")
    tok = None
    if args.prompt is not None:
        require("transformers", purpose="acl-core qwen3 generate --prompt (the checkpoint's tokenizer)")
        tok = hf.tokenizer(args.model)
        if tok is None:
            raise UsageError(f"{args.model} has no tokenizer; pass --prompt-ids")
        prompts = [tok(args.prompt)["input_ids"]]
    else:
        prompts = args.prompt_ids
    if len({len(p) for p in prompts}) != 1:
        raise UsageError("prompts in one batch must have the same length (padding is not implemented)")
    with bar("loading layers", not args.quiet) as report:
        runner = Qwen3Runner(
            args.model,
            backend=args.backend,
            dtype=args.dtype,
            prefill_attention=args.prefill_attention,
            decode_attention=args.decode_attention,
            progress=report,
        )
    with runner, bar("decoding", not args.quiet) as report:
        g = runner.generate(
            prompts,
            args.max_new_tokens,
            sampling,
            stop_on_eos=not args.ignore_eos,
            replay=False if args.eager else None,
            progress=report,
        )
        attention = runner.attention_ops()
        backend = runner.backend_name
        cache_stats = getattr(runner.session.backend, "cache_stats", None)
        caches = cache_stats() if cache_stats is not None else None
    for i, row in enumerate(g.tokens.tolist()):
        print(f"[{i}] ids: {','.join(str(t) for t in row)}")
        if tok is not None:
            print(f"[{i}] text: {tok.decode(row)}")
    print(
        f"{backend} {args.dtype}: prefill {g.prompt_tokens} tokens in {g.prefill_seconds * 1e3:.1f} ms "
        f"({g.prefill_tokens_per_s:.1f} tok/s); decode {g.decode_steps * g.tokens.shape[0]} tokens in "
        f"{g.decode_seconds * 1e3:.1f} ms ({g.decode_tokens_per_s:.1f} tok/s, "
        f"{'replayed' if g.replayed else 'eager'}); attention: "
        + ", ".join(f"{phase} {op}" for phase, op in attention.items())
    )
    if args.json is not None:
        _write(
            args.json,
            {
                "backend": backend,
                "dtype": args.dtype,
                "attention": attention,
                "prompt_ids": [list(p) for p in prompts],
                "tokens": g.tokens.tolist(),
                "sampling": None if sampling is None else vars(sampling),
                "prefill_s": g.prefill_seconds,
                "decode_s": g.decode_seconds,
                "prefill_tok_s": g.prefill_tokens_per_s,
                "decode_tok_s": g.decode_tokens_per_s,
                "decode_replayed": g.replayed,
                "first_token_clock": g.first_token_clock,
                "caches": caches,
            },
            argv,
        )
    return EXIT_OK


def _parity(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from acl_tools.qwen3 import parity
    from acl_tools.qwen3.progress import bar

    if args.tokens < 1:
        raise UsageError("--tokens must be at least 1")
    require(*HF, purpose="acl-core qwen3 parity")
    prompt = None
    if args.prompt_ids is not None:
        if len(args.prompt_ids) != 1:
            raise UsageError("parity takes one prompt")
        prompt = args.prompt_ids[0]
    try:
        parity.thresholds(args.dtype, False, args.tokens, args.atol)  # the loosest bound; run() applies the exact one
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with bar("parity: decoding", not args.quiet) as report:
        try:
            result = parity.run(
                args.model,
                backend=args.backend,
                dtype=args.dtype,
                tokens=args.tokens,
                prompt=prompt,
                atol=args.atol,
                hf_device=args.hf_device,
                prefill_attention=args.prefill_attention,
                decode_attention=args.decode_attention,
                noise_floor=args.noise_floor,
                progress=report,
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    pre, greedy, lim = result["prefill"], result["greedy"], result["thresholds"]
    verdict = "PASS" if result["passed"] else "FAIL"
    head = f"{result['backend']} {args.dtype} vs transformers ({result['transformers_device']}): "
    truth = result["against_fp32"]
    if truth is None:
        print(
            f"{head}prefill logits max |diff| {pre['max_abs_diff']:.3g} (<= {lim['max_abs_diff']:g}), "
            f"greedy {greedy['agree']}/{greedy['tokens']} tokens equal (need {lim['min_agree']}; "
            f"{greedy['teacher_forced_agree']}/{greedy['tokens']} teacher-forced) -> {verdict}"
        )
    else:
        ours, theirs, ratio = truth["acl"], truth["transformers"], truth["ratio"]
        print(
            f"{head}against the fp32 truth, |error| max {ours['max_abs_err']:.3g} vs {theirs['max_abs_err']:.3g} "
            f"(x{ratio['max']:.2f}), mean {ours['mean_abs_err']:.3g} vs {theirs['mean_abs_err']:.3g} "
            f"(x{ratio['mean']:.2f}; need <= x{lim['error_ratio']:g}); teacher-forced top-1 "
            f"{ours['top1_agree']} vs {theirs['top1_agree']} of {truth['top1_positions']} (need >= "
            f"{truth['min_top1_agree']}); greedy {greedy['agree']}/{greedy['tokens']} equal (not judged) -> {verdict}"
        )
    if greedy["transformers_eager_vs_sdpa_agree"] is not None:
        print(
            f"noise floor (not judged): transformers eager vs sdpa agree on "
            f"{greedy['transformers_eager_vs_sdpa_agree']}/{greedy['tokens']} greedy tokens"
        )
    out = args.out or Path("reports") / f"qwen3-parity-{result['backend']}-{args.dtype}.json"
    _write(out, result, argv)
    return EXIT_OK if result["passed"] else EXIT_FAILED


def _bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from acl_tools.qwen3 import bench
    from acl_tools.qwen3.progress import bar

    if args.prompt_len < 1 or args.new_tokens < 2 or args.repeat < 1 or args.prefill_len < 0:
        raise UsageError("--prompt-len and --repeat must be >= 1, --new-tokens >= 2 and --prefill-len >= 0")
    if args.with_transformers or args.with_torch_graph:
        require(
            *HF,
            purpose="acl-core qwen3 bench (beside transformers and the PyTorch graph runner; "
            "--no-transformers --no-torch-graph runs without)",
        )
    with bar("bench runs", not args.quiet) as report:
        result = bench.run(
            args.model,
            backend=args.backend,
            dtype=args.dtype,
            batches=args.batch,
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
            prefill_len=args.prefill_len,
            replay=False if args.eager else None,
            prefill_attention=args.prefill_attention,
            decode_attention=args.decode_attention,
            with_transformers=args.with_transformers,
            with_torch_graph=args.with_torch_graph,
            hf_device=args.hf_device,
            seed=args.seed,
            repeat=args.repeat,
            progress=report,
        )
    sides = [("acl", "acl"), ("transformers", "hf"), ("torch_graph", "torch graph")]
    sides = [(key, label) for key, label in sides if key in result["rows"][0]]
    header = ["batch"] + [f"{label} {phase} tok/s" for _, label in sides for phase in ("prefill", "decode")]
    rows = []
    for r in result["rows"]:
        rows.append([str(r["batch"])] + [f"{r[k][p + '_tok_s']:.1f}" for k, _ in sides for p in ("prefill", "decode")])
    graph = {True: "CUDA graph", False: "eager, no CUDA device", None: "not run"}[result["torch_graph_cuda_graph"]]
    print(
        f"qwen3 bench: {result['backend']} ({result['device']}) {args.dtype}, prompt {args.prompt_len}, "
        f"{args.new_tokens} new tokens, median of {args.repeat}; transformers eager on "
        f"{result['transformers_device']}; PyTorch static-cache runner on {result['torch_graph_device']} ({graph}); "
        f"acl decode {'replayed' if result['acl_decode_replayed'] else 'eager'}, "
        f"decode prologue {result.get('prologue', 'split')} "
        "(ACL_QWEN3_PROLOGUE)"
    )
    _table(header, rows)
    if result["prefill"]:
        pre = result["prefill"]
        print(
            f"prefill of {pre['prompt_len']} tokens (batch 1), tok/s: "
            + ", ".join(f"{label} {pre[k + '_tok_s']:.1f}" for k, label in sides if k + "_tok_s" in pre)
            + f" (acl enqueue {100 * pre['acl_enqueue_share']:.0f}% of its prefill time)"
        )
    kern = result["acl_decode_kernels_batch1"]
    if kern is not None:
        print(
            f"acl decode at batch 1 (torch.profiler): {kern['kernel_ms_per_token']:.3f} ms of GPU kernels, "
            f"{kern['busy_ms_per_token']:.3f} ms GPU busy, {kern['kernels_per_token']:.0f} kernels per token"
        )
        line = kern["timeline"]
        if line["span_s"] > 0:
            print(
                f"  device timeline of that generation: {1e3 * line['span_s']:.2f} ms span, "
                f"{100 * line['busy_s'] / line['span_s']:.0f}% busy, {1e3 * line['gap_s']:.2f} ms idle in gaps"
            )
            for gap in line["gaps"][:3]:
                print(f"  gap {gap['us']:.0f} us after {gap['after'][:60]} before {gap['before'][:60]}")
    out = args.out or Path("reports") / f"qwen3-bench-{result['backend']}-{args.dtype}.json"
    _write(out, result, argv)
    return EXIT_OK


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(c).rjust(w) for c, w in zip(row, widths)))


def _make_tiny(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from acl_tools.qwen3 import hf

    require(*HF, purpose="acl-core qwen3 make-tiny")
    out = hf.make_checkpoint(
        args.dir, preset=args.config, seed=args.seed, tied=False if args.untied else None, dtype=args.dtype
    )
    print(f"wrote a random {args.config} Qwen3 checkpoint to {out}")
    return EXIT_OK


COMMANDS = {"generate": _generate, "parity": _parity, "bench": _bench, "make-tiny": _make_tiny}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``acl-core qwen3``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    try:
        return COMMANDS[args.command](args, argv)
    except UsageError as exc:
        print(f"acl-core qwen3 {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MissingExtra as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    except (AclCoreError, DeviceError, CheckpointError, UnsupportedCheckpoint, FileNotFoundError) as exc:
        print(f"acl-core qwen3 {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
