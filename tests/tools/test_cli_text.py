"""The command lines' own text: help for every option and positional, no tracker wording or reST markup, --version."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from importlib import metadata

import pytest

from acl_conformance import cli as conformance_cli
from acl_core import cli as core_cli
from acl_tools import launch
from acl_tools.bench import cli as bench_cli
from acl_tools.bench import collectives, compare_collectives
from acl_tools.qwen3 import cli as qwen3_cli

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "acl-core": core_cli.build_parser,
    "acl-core conformance": conformance_cli.build_parser,
    "acl-core bench": bench_cli.build_parser,
    "acl-core qwen3": qwen3_cli._parser,
    "acl_tools.bench.collectives": collectives.build_parser,
    "acl_tools.bench.compare_collectives": compare_collectives.build_parser,
    "acl_tools.launch": launch.build_parser,
}


def _walk(parser: argparse.ArgumentParser, name: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every subcommand parser under it."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _walk(child, f"{name} {sub}")


def _all() -> list[tuple[str, argparse.ArgumentParser]]:
    return [pair for name, build in PARSERS.items() for pair in _walk(build(), name)]


@pytest.mark.parametrize(("name", "parser"), _all(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_and_positional_has_help(name: str, parser: argparse.ArgumentParser) -> None:
    missing = [
        "/".join(a.option_strings) or a.dest
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help and a.help.strip())
    ]
    assert not missing, f"{name}: no help for {', '.join(missing)}"


@pytest.mark.parametrize(("name", "parser"), _all(), ids=lambda v: v if isinstance(v, str) else "")
def test_help_has_no_tracker_wording_or_rest_markup(name: str, parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert "``" not in text, f"{name}: reST double backticks in its help"
    assert not re.search(r"\bissue", text, re.IGNORECASE), f"{name}: tracker wording in its help"


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        core_cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"acl-core {metadata.version('acl-core')}"


def test_parity_refusal_names_no_tracker_issue() -> None:
    from acl_tools.qwen3 import parity

    with pytest.raises(ValueError, match="only tighten") as refused:
        parity.thresholds("fp32", True, 8, atol=1.0)
    assert "issue" not in str(refused.value)
