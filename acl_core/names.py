"""Names picked on a command line (``--ops``): fnmatch patterns over known names, any case, with a did-you-mean."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from fnmatch import fnmatchcase


class UnknownName(ValueError):
    """A pattern matched none of the known names; the message suggests the closest ones."""


def split(text: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [part.strip() for part in text.split(",") if part.strip()]


def resolve(patterns: Iterable[str], names: Iterable[str], *, what: str = "op") -> list[str]:
    """The known ``names`` that ``patterns`` match, ignoring case, in the order of ``names``.

    Raises :class:`UnknownName` for the first pattern that matches nothing, naming up to three close
    names ("did you mean") or, when none is close, every known name.
    """
    known = list(dict.fromkeys(names))
    by_lower = {n.lower(): n for n in known}
    chosen: set[str] = set()
    for pattern in patterns:
        wanted = pattern.lower()
        hits = [n for n in known if fnmatchcase(n.lower(), wanted)]
        if not hits:
            raise UnknownName(f"no {what} is called {pattern!r}{_hint(wanted, by_lower)}")
        chosen.update(hits)
    return [n for n in known if n in chosen]


def _hint(wanted: str, by_lower: dict[str, str]) -> str:
    close = difflib.get_close_matches(wanted, list(by_lower), n=3, cutoff=0.6)
    if close:
        names = [by_lower[c] for c in close]
        return "; did you mean " + (f"{', '.join(names[:-1])} or " if len(names) > 1 else "") + names[-1] + "?"
    shown = sorted(by_lower.values())
    listed = ", ".join(shown[:40]) + (f" and {len(shown) - 40} more" if len(shown) > 40 else "")
    return f"; known: {listed}"
