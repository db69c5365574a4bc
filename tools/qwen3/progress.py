"""Progress for long runs: a rich progress bar on stderr when rich is installed, nothing otherwise."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Report = Callable[[int, int], None]


@contextmanager
def bar(description: str, enabled: bool = True) -> Iterator[Report | None]:
    """A ``report(done, total)`` callback drawing a transient bar, or None when disabled or rich is absent."""
    if not enabled:
        yield None
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield report
