"""Generate docs/KERNELS.md from the specs: per operator, what its kernel receives in Launch.args and Launch.plan.

Run ``python -m tools.kernels_doc`` to rewrite the file, ``--check`` to fail when it is stale.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from acl_core.spec.kernel_args import KERNEL_TYPES
from acl_core.spec.ops import all_specs, get_spec
from acl_core.spec.opspec import Kind, OpSpec, Param
from acl_core.spec.plan import PLAN_KEYS, PlanKey

DOC = Path(__file__).resolve().parent.parent / "docs" / "KERNELS.md"
COMMAND = "python -m tools.kernels_doc"


def sample_plans(spec: OpSpec, rng: np.random.Generator) -> Iterator[dict[str, Any]]:
    """The plan validation builds for each of ``spec``'s valid samples (described at fake addresses, no memory)."""
    from acl_conformance.dtype_cover import checked_sample

    for sample in spec.samples(rng) if spec.samples else ():
        refusal, _, plan = checked_sample(spec, dict(sample.args))
        if refusal is None:
            yield plan


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _name(key: PlanKey) -> str:
    return key.name


def _kernel_type(p: Param) -> str:
    shown = KERNEL_TYPES[p.kind]
    if p.kind is Kind.TENSOR and p.dtypes is not None and len(p.dtypes) <= 4:
        shown += f" ({', '.join(sorted(d.short for d in p.dtypes))})"
    return f"{shown} \\| None" if p.optional and p.kind.is_handle else shown


def render() -> str:
    """docs/KERNELS.md as the specs declare it now."""
    specs = all_specs()  # first: loading the families declares their plan keys
    lines = [
        "# What a kernel receives",
        "",
        f"Generated from the specs by `{COMMAND}` (tests/tools/test_kernels_doc.py fails when it is stale).",
        "",
        "A kernel is called with one `acl_core.backend.Launch`. `Launch.args` maps each parameter of the",
        "kernel's operator (a variant such as InplaceAdd runs its base operator's kernel, with the base",
        "names) to its value in one normalised form, converted once per validated signature by",
        "`acl_core.spec.kernel_args`; `Launch.plan` holds what validation derived, under the keys",
        "`acl_core.spec.plan` declares. The test suite checks every plan against those declarations.",
        "",
        "| C parameter kind | the kernel receives |",
        "| --- | --- |",
        *[f"| `{kind.value}` | `{shown}` |" for kind, shown in KERNEL_TYPES.items()],
        "",
        "An absent optional argument is None. A `Scalar` is `acl_core.spec.kernel_args.Scalar(value, dtype)`:",
        "`value` is already the dtype's Python type (bool, int, float rounded to the dtype, complex).",
        "",
        "## Plan keys",
        "",
        "| key | type | meaning |",
        "| --- | --- | --- |",
        *[
            f"| `{k.name}` | `{_cell(k.type_doc)}` | {_cell(k.meaning)} |"
            for k in sorted(PLAN_KEYS.values(), key=_name)
        ],
        "",
        "## Operators",
        "",
        "The plan keys listed for an operator are those its samples' validations write (`outputs` always).",
        "",
    ]
    for name, spec in sorted(specs.items()):
        kernel = get_spec(spec.kernel_name)
        keys: set[str] = {"outputs"}
        for plan in sample_plans(spec, np.random.default_rng(0)):
            keys |= set(plan)
        lines.append(f"### {name}")
        lines.append("")
        if kernel is not spec:
            lines.append(f"Runs the {kernel.name} kernel, which receives:")
            lines.append("")
        lines.append("| argument | C type | the kernel receives |")
        lines.append("| --- | --- | --- |")
        for p in kernel.params:
            lines.append(f"| `{p.name}` | `{p.c_type or p.kind.value}` | `{_kernel_type(p)}` |")
        lines.append("")
        lines.append("plan: " + ", ".join(f"`{k}`" for k in sorted(keys)))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Write docs/KERNELS.md, or with --check report whether it is current (exit 1 when stale)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/KERNELS.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC} is stale: regenerate it with `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
