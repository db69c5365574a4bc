"""Optional dependencies: which pip extra of acl-core brings a module, and one line saying so when it is missing."""

from __future__ import annotations

import importlib

EXTRA_OF: dict[str, str] = {
    "torch": "torch",
    "transformers": "torch",
    "mpi4py": "mpi",
    "rich": "tools",
    "safetensors": "tools",
    "matplotlib": "tools",
}
"""Top-level module name -> the extra of pyproject.toml that installs it."""


class MissingExtra(Exception):
    """An optional module a command needs is not installed; the message names the extra to install."""

    def __init__(self, module: str, purpose: str) -> None:
        self.module, self.purpose = module, purpose
        self.extra = EXTRA_OF.get(module.split(".")[0], "dev")
        super().__init__(
            f"{purpose} needs {module}, which is not installed here: pip install 'acl-core[{self.extra}]' "
            f"(in a clone: pip install -e '.[{self.extra}]')"
        )


def require(*modules: str, purpose: str) -> None:
    """Import ``modules`` now; raise :class:`MissingExtra` for the first one that is not installed.

    Only a module that is itself absent counts as missing: an installed module that fails to import
    for another reason (a broken shared library) keeps its own error.
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or name.split(".")[0] != exc.name.split(".")[0]:
                raise
            raise MissingExtra(name, purpose) from exc


def missing_extra(exc: BaseException, purpose: str) -> MissingExtra | None:
    """``exc`` as a :class:`MissingExtra` when it is the import of a module some extra installs, else None."""
    if isinstance(exc, MissingExtra):
        return exc
    if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.split(".")[0] in EXTRA_OF:
        return MissingExtra(exc.name.split(".")[0], purpose)
    return None
