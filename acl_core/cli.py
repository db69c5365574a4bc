"""The ``acl-core`` command line: backends, capabilities, conformance, benchmarks, the Qwen3 runner."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from importlib import metadata

from acl_core.errors import AclCoreError
from acl_core.extras import missing_extra
from acl_core.plugin import get_backend, list_backends

DESCRIPTION = (
    "Ascend CANN's acl runtime, aclnn operators and HCCL on pluggable backends: list the backends, show what a "
    "device can do, prove a backend against the reference, benchmark it, run Qwen3 on it."
)


def _cmd_backends(args: argparse.Namespace) -> int:
    rows = []
    for status in list_backends():
        platform = device = version = "-"
        if status.available and args.probe:
            try:
                caps = get_backend(status.name).capabilities()
                platform, device, version = caps.platform.value, caps.device_name, caps.backend_version
            except AclCoreError as exc:
                rows.append((status.name, f"unavailable: {exc.message}", "-", "-", "-"))
                continue
        state = "available" if status.available else f"unavailable: {status.reason}"
        rows.append((status.name, state, platform, device, version))
    if args.json:
        keys = ("name", "status", "platform", "device", "version")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return 0
    _table(("backend", "status", "platform", "device", "version"), rows)
    return 0


def _cmd_caps(args: argparse.Namespace) -> int:
    try:
        caps = get_backend(args.name).capabilities()
    except AclCoreError as exc:
        print(f"acl-core: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(caps.to_json())
        return 0
    data = caps.to_jsonable()
    nominal = data.pop("nominal")
    notes = data.pop("notes")
    rows = []
    for key, value in data.items():
        if isinstance(value, list):
            value = f"{len(value)}: " + ", ".join(str(v) for v in value[:12]) + (" …" if len(value) > 12 else "")
        elif key == "op_dtypes":
            value = f"{len(value)} ops, each with its own dtypes (--json lists them)"
        elif key == "memory_bytes":
            value = f"{value} ({value / (1 << 30):.1f} GiB)"
        if key in nominal:
            value = f"{value} (nominal: {nominal[key]})"
        rows.append((key, str(value)))
    rows += [(f"note: {key}", text) for key, text in notes.items()]
    _table(("capability", "value"), rows)
    return 0


DELEGATED = {
    "conformance": ("acl_conformance.cli", "prove a backend against the reference (see --help)"),
    "bench": ("acl_tools.bench", "benchmarks side by side with NumPy / PyTorch (see --help)"),
    "qwen3": ("acl_tools.qwen3.cli", "run, check and make Qwen3 checkpoints (see --help)"),
}
"""Subcommands whose own parsers live with their packages; acl-core hands them the rest of argv."""


def _delegate(command: str, argv: list[str]) -> int:
    """Run a delegated subcommand; a missing optional module is one line naming its extra (status 2)."""
    prog = f"acl-core {command}"
    if command == "qwen3" and argv and not argv[0].startswith("-"):
        prog += f" {argv[0]}"
    try:
        module = importlib.import_module(DELEGATED[command][0])
        return int(module.main(argv))
    except ImportError as exc:
        missing = missing_extra(exc, prog)
        if missing is None:
            raise
        print(missing, file=sys.stderr)
        return 2


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        for row in (header, *rows):
            print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
        return
    table = Table(*header)
    for row in rows:
        table.add_row(*(escape(str(c)) for c in row))  # reasons hold brackets: pip install 'acl-core[nvidia]'
    Console().print(table)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    parser = argparse.ArgumentParser(prog="acl-core", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"acl-core {_version()}", help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do (COMMAND --help)")

    p = sub.add_parser("backends", help="list installed backends and whether they can run here")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--no-probe", dest="probe", action="store_false", help="do not start available backends")
    p.set_defaults(handler=_cmd_backends)

    p = sub.add_parser("caps", help="show what a backend's device can do (measured; configured figures say nominal)")
    p.add_argument("name", nargs="?", default=None, help="backend name (default: ACL_BACKEND or the best available)")
    p.add_argument("--json", action="store_true", help="print the capability model as JSON")
    p.set_defaults(handler=_cmd_caps)

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, help=text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``acl-core`` and ``python -m acl_core``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return _delegate(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


def _version() -> str:
    """The installed distribution's version."""
    try:
        return metadata.version("acl-core")
    except metadata.PackageNotFoundError:
        return "0+unknown"
