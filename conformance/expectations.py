"""Per-backend expectation files: known failures (xfail) and cases not to run (skip), each with a reason.

A backend's file is ``expectations/<backend>.toml`` in this package, or any file given with
``--expectations``. It holds an array of tables::

    [[expect]]
    op = "Exp*"              # fnmatch pattern on the operator name (required)
    case = "*float16*"       # fnmatch pattern on the case id (default "*": every case of the op)
    status = "xfail"         # "xfail" (run, a failure is expected) or "skip" (do not run)
    reason = "fp16 exp goes through the fp32 unit and rounds twice"   # required, non-empty

The first entry that matches a case decides it. An entry without a reason, with an unknown key or
status is an error; an entry that matches no case of the run is reported as a warning.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

EXPECTATIONS_DIR = Path(__file__).resolve().parent / "expectations"
STATUSES = ("xfail", "skip")
_KEYS = {"op", "case", "status", "reason"}


class ExpectationError(ValueError):
    """An expectation file is malformed (missing reason, unknown status or key, bad TOML)."""


@dataclass(frozen=True)
class Expectation:
    """One entry of an expectation file."""

    op: str
    case: str
    status: str
    reason: str
    source: str

    def matches(self, op: str, case_id: str) -> bool:
        """True when this entry applies to ``case_id`` of ``op``."""
        return fnmatchcase(op, self.op) and fnmatchcase(case_id, self.case)

    def describe(self) -> str:
        """``op / case → status`` for warnings."""
        return f"{self.op} / {self.case} → {self.status} ({self.source})"


def default_path(backend: str) -> Path:
    """Where the suite looks for ``backend``'s expectations when no file is given."""
    return EXPECTATIONS_DIR / f"{backend}.toml"


def parse(text: str, source: str = "<string>") -> list[Expectation]:
    """Entries from TOML text; :class:`ExpectationError` names the first problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(f"{source}: not valid TOML: {exc}") from None
    unknown = set(data) - {"expect"}
    if unknown:
        raise ExpectationError(f"{source}: unknown top-level key(s) {sorted(unknown)}; use [[expect]] tables")
    entries = data.get("expect", [])
    if not isinstance(entries, list):
        raise ExpectationError(f"{source}: 'expect' must be an array of tables ([[expect]])")
    found: list[Expectation] = []
    for i, entry in enumerate(entries, 1):
        where = f"{source}: entry {i}"
        if not isinstance(entry, dict):
            raise ExpectationError(f"{where} is not a table")
        extra = set(entry) - _KEYS
        if extra:
            raise ExpectationError(f"{where} has unknown key(s) {sorted(extra)}; allowed: {sorted(_KEYS)}")
        op = entry.get("op")
        if not isinstance(op, str) or not op:
            raise ExpectationError(f"{where} needs 'op', an operator name or pattern")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ExpectationError(f"{where} ({op}) has no reason; every expectation must say why")
        status = entry.get("status")
        if status not in STATUSES:
            raise ExpectationError(f"{where} ({op}) has status {status!r}; expected one of {list(STATUSES)}")
        case = entry.get("case", "*")
        if not isinstance(case, str) or not case:
            raise ExpectationError(f"{where} ({op}) has an empty or non-string 'case' pattern")
        found.append(Expectation(op, case, status, reason.strip(), f"{source}#{i}"))
    return found


def load(path: Path | str) -> list[Expectation]:
    """Entries of the file at ``path`` (:class:`ExpectationError` when it is malformed or missing)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExpectationError(f"cannot read expectation file {p}: {exc.strerror}") from None
    return parse(text, p.name)


def load_for(backend: str, path: Path | str | None = None) -> tuple[list[Expectation], str | None]:
    """(entries, file) for ``backend``: ``path`` when given, else the packaged file if there is one."""
    if path is not None:
        return load(path), str(path)
    default = default_path(backend)
    if default.is_file():
        return load(default), str(default)
    return [], None


def match(entries: Iterable[Expectation], op: str, case_id: str) -> Expectation | None:
    """The first entry that applies to this case, or None."""
    for entry in entries:
        if entry.matches(op, case_id):
            return entry
    return None
