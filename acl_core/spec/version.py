"""Later versions of declared operators (``aclnnXxxV2``…): declared as their official arguments mapped onto a base op.

A version reuses its base's validation, reference kernel and every backend's kernel: its call is turned
into a call of the base (``OpSpec.base`` / ``OpSpec.base_args``), so a backend claims the version exactly
when it claims the base. What the version adds is declared beside it as :class:`Added`: the parameter,
the values that keep the base's behaviour (null for a tensor, the documented default for an attribute),
and why any other value is refused with 161002. Base parameters the version does not have are given
fixed values (``fixed``). Samples and error samples come from the base's, renamed, plus one refusal per
added parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from acl_core.spec.opspec import (
    INVALID,
    Call,
    ErrorSample,
    ErrorSampleFn,
    Infos,
    Kind,
    OpSpec,
    Param,
    Sample,
    SampleFn,
    invalid,
)
from acl_core.tensor import AclTensor


@dataclass(frozen=True)
class Added:
    """A parameter a version adds: the values that keep its base's behaviour, and why others are refused."""

    param: Param
    why: str
    neutral: tuple[Any, ...] | None = (None,)
    """None: every value is accepted (the version's ``check`` gives the parameter its meaning)."""
    refused: Any = None
    """A value the error samples pass to show the refusal (None: one is made from the parameter's kind)."""


ADDED: dict[str, Mapping[str, Added]] = {}
"""What each declared version adds over its base, by version name."""

PASSTHROUGH: dict[str, Mapping[str, str]] = {}
"""Added parameters a version implements, by version name: its parameter -> the name its base's kernels read."""


def _is_neutral(value: Any, neutral: tuple[Any, ...] | None) -> bool:
    """Whether ``value`` (a handle, a plain value or a NumPy array) is one of the base-preserving values."""
    if neutral is None:
        return True
    if value is None or isinstance(value, (bool, int, float, str)):
        return any(value is n if n is None or isinstance(n, bool) else value == n for n in neutral)
    return False  # a tensor / array handle: only null keeps the base's behaviour


def _refusal_value(param: Param) -> Any:
    """A value of ``param``'s kind that no version here accepts (for the generated error samples)."""
    if param.kind is Kind.TENSOR:
        return np.ones((2,), np.float16)
    if param.kind is Kind.TENSOR_LIST:
        return [np.ones((2,), np.float16)]
    if param.kind is Kind.INT_ARRAY:
        return [1]
    if param.kind is Kind.INT:
        return 1
    if param.kind is Kind.BOOL:
        return True
    if param.kind is Kind.FLOAT:
        return 1.0
    raise ValueError(f"give Added({param.name}) a refused= value")


def version_of(
    base: OpSpec,
    name: str,
    order: Sequence[str | Param],
    *,
    added: Mapping[str, Added] | None = None,
    rename: Mapping[str, str] | None = None,
    fixed: Mapping[str, Any] | None = None,
    check: Callable[[Call], None] | None = None,
    adapt: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    as_list: Sequence[str] = (),
    passthrough: Mapping[str, str] | None = None,
    outputs: Callable[[Call, Infos], Infos] | None = None,
    samples: SampleFn | None = None,
    error_samples: ErrorSampleFn | None = None,
    more_errors: ErrorSampleFn | None = None,
    summary: str = "",
) -> OpSpec:
    """Declare ``name`` as a version of ``base``.

    ``order`` lists the version's parameters in official order: a name (the base's parameter of that
    name, or of that name less an ``Optional`` suffix, or ``rename[name]``, renamed; or an ``added``
    one) or a :class:`Param` (declared anew, mapped to the base by the same rule). ``check`` runs the
    version's own rules before the base's; ``adapt`` turns a base case's renamed arguments into the
    version's (None: the case does not apply). ``as_list`` names plain tensors whose base parameter
    is a tensor list: the base's rules take the tensor as it is, its kernel gets a one-entry list.
    ``more_errors`` adds error cases for ``check``'s rules to the derived ones. ``passthrough`` maps
    added parameters the version implements (``neutral=None``, given their meaning by ``check``) to
    the name the base's kernels read them under (absent from a base call, so a kernel reads
    ``args.get(name)``). ``outputs`` adjusts the output infos the base's rules gave (a version that
    lays an output out otherwise), after ``check`` and the base's rules ran.
    """
    added = dict(added or {})
    rename = dict(rename or {})
    fixed = dict(fixed or {})
    passthrough = dict(passthrough or {})
    for pname in passthrough:
        if pname not in added or added[pname].neutral is not None:
            raise ValueError(f"{name}.{pname}: only an added parameter with neutral=None passes through")
    base_names = set(base.param_names)
    to_base_name: dict[str, str] = {}
    params: list[Param] = []
    for entry in order:
        pname = entry if isinstance(entry, str) else entry.name
        if pname in added:
            params.append(added[pname].param)
            continue
        target = rename.get(pname) or (
            pname if pname in base_names else pname.removesuffix("Optional") if pname.endswith("Optional") else pname
        )
        if target not in base_names:
            raise ValueError(f"{name}.{pname} maps to no parameter of {base.name}")
        to_base_name[pname] = target
        params.append(replace(base.param(target), name=pname) if isinstance(entry, str) else entry)
    missing = base_names - set(to_base_name.values()) - set(fixed)
    if missing:
        raise ValueError(f"{name} leaves {sorted(missing)} of {base.name} without a value")
    from_base_name = {b: v for v, b in to_base_name.items()}

    def to_base(args: dict[str, Any]) -> dict[str, Any]:
        mapped = {to_base_name[k]: v for k, v in args.items() if k in to_base_name}
        mapped.update(fixed)
        return mapped

    def to_kernel(args: dict[str, Any]) -> dict[str, Any]:
        mapped = to_base(args)
        for pname in as_list:
            value = mapped.get(to_base_name[pname])
            if isinstance(value, AclTensor):
                mapped[to_base_name[pname]] = (value,)
            elif isinstance(value, np.ndarray):
                mapped[to_base_name[pname]] = [value]
        for pname, kname in passthrough.items():
            mapped[kname] = args.get(pname)
        return mapped

    def infer(call: Call) -> Infos:
        for pname, extra in added.items():
            if not _is_neutral(call.args.get(pname), extra.neutral):
                raise invalid(f"{name}: {pname} {extra.why}")
        if check is not None:
            check(call)
        # implemented added parameters reach the base's rules under the names its kernels read them by
        base_call = Call(base, {**to_base(call.args), **{k: call.args.get(p) for p, k in passthrough.items()}})
        infos = base.infer(base_call)
        call.plan.update(base_call.plan)
        renamed = {from_base_name[k]: v for k, v in infos.items() if k in from_base_name}
        return renamed if outputs is None else outputs(call, renamed)

    def workspace(call: Call) -> int:
        base_call = Call(base, to_base(call.args), dict(call.plan), call.memo)
        return int(base.workspace(base_call))

    def from_base(args: Mapping[str, Any]) -> dict[str, Any] | None:
        for k, v in fixed.items():  # a base case that sets what the version cannot is not the version's
            if k in args and not (args[k] is v or (isinstance(v, (int, float, str)) and args[k] == v)):
                return None
        renamed = {from_base_name[k]: v for k, v in args.items() if k in from_base_name}
        return adapt(renamed) if adapt is not None else renamed

    def derived(rng: np.random.Generator) -> Iterable[Sample]:
        for s in base.samples(rng) if base.samples else ():
            args = from_base(s.args)
            if args is not None:
                yield replace(s, args=args)

    def derived_errors(rng: np.random.Generator) -> Iterable[ErrorSample]:
        valid: dict[str, Any] | None = None
        for s in base.samples(rng) if base.samples else ():
            valid = from_base(s.args)
            if valid is not None:
                break
        for case in base.error_samples(rng) if base.error_samples else ():
            args = from_base(case.args)
            if args is not None:
                yield replace(case, args=args)
        if valid is not None:
            for pname, extra in added.items():
                if extra.neutral is None:
                    continue
                value = extra.refused if extra.refused is not None else _refusal_value(extra.param)
                yield ErrorSample({**valid, pname: value}, INVALID, f"{pname}: {extra.why}")
        if more_errors is not None:
            yield from more_errors(rng)

    ADDED[name] = added
    PASSTHROUGH[name] = passthrough
    return OpSpec(
        name=name,
        family=base.family,
        params=tuple(params),
        infer=infer,
        workspace=workspace,
        alias_ok=base.alias_ok,
        samples=samples or derived,
        error_samples=error_samples or derived_errors,
        base=base.kernel_name,
        base_args=to_kernel if base.base_args is None else _chain(base.base_args, to_kernel),
        summary=summary or f"{name}: {base.name} with {', '.join(added) or 'renamed parameters'}",
    )


def _chain(
    outer: Callable[[dict[str, Any]], dict[str, Any]], inner: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A version of a version (or of an in-place twin): map onto the base, then onto the base's base."""
    return lambda args: outer(inner(args))


__all__ = ["ADDED", "PASSTHROUGH", "Added", "version_of"]
