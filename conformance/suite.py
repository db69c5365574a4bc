"""The conformance suite as one object: which cases, which expectations, run them, report.

``pytest --acl-backend NAME`` collects this very file (the plugin turns it into one item per case);
``acl-core conformance NAME`` and :func:`run` drive a :class:`Session` directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TypeAlias

from acl_conformance import expectations as expect
from acl_conformance import tolerances
from acl_conformance.cases import PLACEMENT_DEPENDENT, Case, Catalog
from acl_conformance.report import Report, versions
from acl_conformance.runner import Outcome, Runner, apply_expectation
from acl_core.backend import Backend, BackendRegistration
from acl_core.plugin import get_backend, get_registration
from acl_core.spec.ops import all_specs

REFERENCE = "reference"
MODES = ("quick", "full")
SUITE_FILE = Path(__file__).resolve()
Progress = Callable[[Case, Outcome], None]


class Session:
    """One backend, one mode, one selection of ops: the cases, their expectations and their outcomes."""

    def __init__(
        self,
        backend: str | Backend | None = None,
        *,
        mode: str = "quick",
        ops: str | Sequence[str] | None = None,
        expectations: Path | str | None = None,
        seed: int = 0,
        case: str | None = None,
        shard: tuple[int, int] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if mode == "full":
            try:
                import hypothesis  # noqa: F401
            except ImportError:
                raise RuntimeError("full mode needs Hypothesis: pip install hypothesis") from None
        self.backend = backend if isinstance(backend, Backend) else get_backend(backend)
        self.reference = get_backend(REFERENCE)
        self.mode = mode
        self.seed = seed
        self.case_pattern = case
        if shard is not None and not 1 <= shard[0] <= shard[1]:
            raise ValueError(f"shard must be K/N with 1 <= K <= N, not {shard[0]}/{shard[1]}")
        self.shard = shard
        self.catalog = Catalog(all_specs(), seed=seed, ops=ops)
        registration = get_registration(self.backend.name)
        if expectations is None and registration is not None and registration.expectations is not None:
            expectations = Path(registration.expectations)  # the plugin's own file (--expectations wins)
        self.entries, self.expectations_file = expect.load_for(self.backend.name, expectations)
        self.plugin_overrides = plugin_overrides(self.backend.name, registration)
        self.plugin_allowances = plugin_allowances(self.backend.name, registration)
        self.plugin_accumulation_allowances = plugin_accumulation_allowances(self.backend.name, registration)
        self.backend_overrides = (*tolerances.BACKEND_OVERRIDES, *self.plugin_overrides)
        self.runner = Runner(
            self.backend,
            self.reference,
            self.catalog,
            backend_overrides=self.backend_overrides,
            flag_allowances=self.plugin_allowances,
            accumulation_allowances=self.plugin_accumulation_allowances,
        )
        self.runner.not_run = self._skipped_by_expectation
        self.capabilities = self.runner.caps

    def cases(self) -> list[Case]:
        """The cases this mode runs, in a stable order (by op, then samples, errors, hypothesis).

        With a case pattern (``--case``), only the cases whose id it matches (exactly or as an fnmatch
        pattern), in either mode: a case named in a report reruns even when it is not a quick one.
        """
        if self.case_pattern is None:
            chosen = self.catalog.cases(self.mode)
        else:
            pattern = self.case_pattern
            every = self.catalog.all_cases()
            chosen = [c for c in every if c.case_id == pattern] or [c for c in every if fnmatchcase(c.case_id, pattern)]
        return chosen if self.shard is None else shard_cases(chosen, *self.shard)

    def expectation(self, case: Case) -> expect.Expectation | None:
        """The expectation entry that decides ``case``, if any."""
        return expect.match(self.entries, case.op, case.case_id)

    def _skipped_by_expectation(self, case: Case) -> bool:
        entry = self.expectation(case)
        return entry is not None and entry.status == "skip"

    def run_case(self, case: Case) -> Outcome:
        """Run one case with its expectation applied (a skip entry means it does not run)."""
        entry = self.expectation(case)
        if entry is not None and entry.status == "skip":
            return Outcome(
                case.op,
                case.family,
                case.kind,
                case.case_id,
                "skipped",
                f"expectation: {entry.reason}",
                expectation=entry.reason,
            )
        return apply_expectation(self.runner.run(case), entry)

    def warnings(self) -> list[str]:
        """Expectation entries matching no case, ops without samples, unsound tolerance entries."""
        found = []
        every = self.catalog.all_cases()
        for entry in self.entries:
            if any(entry.matches(c.op, c.case_id) for c in every):
                continue
            if self.catalog.filtered_out(entry.op):
                continue
            found.append(f"expectation matches no case: {entry.describe()}")
        for op in self.catalog.ops_without_samples():
            found.append(f"{op} declares no samples: only its error parity is checked")
        unknown = sorted(set(self.capabilities.ops) - set(self.catalog.all_specs))
        if unknown:
            found.append(f"capabilities claim ops no spec declares: {', '.join(unknown)}")
        stale = sorted(set(PLACEMENT_DEPENDENT) - set(self.catalog.all_specs))
        if stale:
            found.append(f"PLACEMENT_DEPENDENT names ops no spec declares: {', '.join(stale)}")
        found += tolerances.check_table([*tolerances.OP_OVERRIDES, *self.backend_overrides])
        return found

    def report(self, outcomes: list[Outcome], seconds: float = 0.0, *, interrupted: bool = False) -> Report:
        """The report of ``outcomes`` (from :meth:`run` or from pytest items); ``interrupted``: a partial run."""
        caps = self.capabilities
        return Report(
            backend=self.backend.name,
            mode=self.mode,
            capabilities=caps.to_jsonable(),
            versions=versions(caps.backend_version, self.mode),
            outcomes=outcomes,
            declared={n: s.family for n, s in self.catalog.specs.items()},
            claimed_ops=frozenset(caps.ops),
            warnings=[*self.warnings(), *_allowances_used(outcomes)],
            expectations_file=self.expectations_file,
            selection=(*self.catalog.patterns, *([f"shard {self.shard[0]}/{self.shard[1]}"] if self.shard else [])),
            seconds=seconds,
            seed=self.seed,
            interrupted=interrupted,
        )

    def run(self, progress: Progress | None = None, cases: list[Case] | None = None) -> Report:
        """Run every case of the mode (or ``cases``), calling ``progress`` after each; return the report.

        Ctrl-C (KeyboardInterrupt) stops the run: the report of the cases that ran comes back marked
        ``interrupted`` (the CLI writes it and exits 130).
        """
        start = time.perf_counter()
        outcomes: list[Outcome] = []
        try:
            for case in self.cases() if cases is None else cases:
                outcome = self.run_case(case)
                outcomes.append(outcome)
                if progress is not None:
                    progress(case, outcome)
        except KeyboardInterrupt:
            return self.report(outcomes, time.perf_counter() - start, interrupted=True)
        return self.report(outcomes, time.perf_counter() - start)


PluginEntry: TypeAlias = "tolerances.Override | tolerances.FlagAllowance | tolerances.AccumulationAllowance"
_ENTRY_TYPES = (tolerances.Override, tolerances.FlagAllowance, tolerances.AccumulationAllowance)


def plugin_entries(backend: str, registration: BackendRegistration | None) -> tuple[PluginEntry, ...]:
    """What a backend's plugin ships in ``tolerance_overrides`` (a sequence, or a callable returning one).

    A callable lets the plugin import ``acl_conformance`` only when the suite runs. Each entry is
    pinned to ``backend``; anything but an :class:`~acl_conformance.tolerances.Override`, a
    :class:`~acl_conformance.tolerances.FlagAllowance` or an
    :class:`~acl_conformance.tolerances.AccumulationAllowance` is a ValueError.
    """
    if registration is None:
        return ()
    shipped = registration.tolerance_overrides
    found: list[PluginEntry] = []
    for entry in shipped() if callable(shipped) else shipped:
        if not isinstance(entry, _ENTRY_TYPES):
            raise ValueError(
                f"backend {backend}: tolerance_overrides holds {type(entry).__name__}, "
                "not acl_conformance.tolerances.Override, FlagAllowance or AccumulationAllowance"
            )
        found.append(replace(entry, backend=backend))
    return tuple(found)


def plugin_overrides(backend: str, registration: BackendRegistration | None) -> tuple[tolerances.Override, ...]:
    """The tolerance overrides a backend's plugin ships, pinned to that backend (ValueError for a wrong entry)."""
    return tuple(e for e in plugin_entries(backend, registration) if isinstance(e, tolerances.Override))


def plugin_allowances(backend: str, registration: BackendRegistration | None) -> tuple[tolerances.FlagAllowance, ...]:
    """The flag allowances a backend's plugin ships, pinned to that backend (ValueError for an unbounded one)."""
    found = tuple(e for e in plugin_entries(backend, registration) if isinstance(e, tolerances.FlagAllowance))
    problems = tolerances.check_allowances(found)
    if problems:
        raise ValueError(f"backend {backend}: {'; '.join(problems)}")
    return found


def plugin_accumulation_allowances(
    backend: str, registration: BackendRegistration | None
) -> tuple[tolerances.AccumulationAllowance, ...]:
    """The accumulation allowances a backend's plugin ships, pinned to it (ValueError for an unbounded one)."""
    found = tuple(e for e in plugin_entries(backend, registration) if isinstance(e, tolerances.AccumulationAllowance))
    problems = tolerances.check_accumulation_allowances(found)
    if problems:
        raise ValueError(f"backend {backend}: {'; '.join(problems)}")
    return found


def _allowances_used(outcomes: Sequence[Outcome]) -> list[str]:
    """A line for every case that passed only under a plugin's flag or accumulation allowance (never silent)."""
    return [
        f"{o.op}[{o.case}] passed under {'an accumulation' if 'allowance_extra' in o.detail else 'a flag'} "
        f"allowance, at {o.detail['worst_error_over_bound']:.3g}x the bound: {o.detail['allowance']}"
        for o in outcomes
        if o.status == "passed" and "allowance" in o.detail
    ]


def default_report_dir(backend: str) -> Path:
    """``./reports/conformance-<backend>/``."""
    return Path("reports") / f"conformance-{backend}"


def shard_cases(cases: list[Case], k: int, n: int) -> list[Case]:
    """The cases of shard ``k`` of ``n``: whole operators, spread so each shard gets about as many cases.

    Operators go, largest first, to the shard with the fewest cases so far (ties to the lowest
    shard), so the split is the same on every machine and the ``n`` shards together are the run.
    """
    sizes: dict[str, int] = {}
    for case in cases:
        sizes[case.op] = sizes.get(case.op, 0) + 1
    load = [0] * n
    home: dict[str, int] = {}
    for op in sorted(sizes, key=lambda o: (-sizes[o], o)):
        target = min(range(n), key=lambda i: (load[i], i))
        home[op] = target
        load[target] += sizes[op]
    return [c for c in cases if home[c.op] == k - 1]


def run(
    backend: str | Backend | None = None,
    *,
    mode: str = "quick",
    ops: str | Sequence[str] | None = None,
    expectations: Path | str | None = None,
    report_dir: Path | str | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Report:
    """Prove ``backend`` against the reference; write the report to ``report_dir`` when given."""
    session = Session(backend, mode=mode, ops=ops, expectations=expectations, seed=seed)
    report = session.run(progress)
    if report_dir is not None:
        report.write(report_dir)
    return report
