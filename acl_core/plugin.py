"""Backend discovery: pluggy hook specs, entry-point loading, availability and selection.

Plugins are modules (or objects) named by entry points in the group ``acl_core.backends``. They are
loaded once, at first use; loading never imports a vendor library unless the plugin module itself
does so at import time, which plugins must not. Per-operator calls never pass through pluggy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pluggy

from acl_core.backend import Backend, BackendRegistration
from acl_core.errors import BackendNotFoundError, BackendUnavailableError

PROJECT = "acl_core"
ENTRY_POINT_GROUP = "acl_core.backends"
ENV_BACKEND = "ACL_BACKEND"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class BackendHooks:
    """The hooks a backend plugin implements."""

    @hookspec
    def acl_core_backends(self) -> Sequence[BackendRegistration]:  # type: ignore[empty-body]
        """Return the backends this plugin offers (usually one)."""


@dataclass(frozen=True)
class BackendStatus:
    """One row of :func:`list_backends`: a backend and whether it can run here."""

    name: str
    available: bool
    reason: str
    priority: int
    summary: str
    source: str


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._loaded = False
        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(BackendHooks)
        self._registrations: dict[str, tuple[BackendRegistration, str]] = {}
        self._broken: dict[str, str] = {}
        self._instances: dict[str, Backend] = {}
        self._probes: dict[str, str | None] = {}
        self.selected: str | None = None
        self._default: Backend | None = None

    def _ensure_loaded(self) -> None:
        with self._lock:
            if self._loaded:
                return
            self._loaded = True
            for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
                source = f"entry point {ep.name} = {ep.value}" + (f" ({ep.dist.name})" if ep.dist else "")
                try:
                    plugin = ep.load()
                except Exception as exc:  # a broken third-party plugin must not break discovery
                    self._broken[ep.name] = f"plugin failed to import: {type(exc).__name__}: {exc}"
                    continue
                self._register(plugin, ep.name, source)

    def _register(self, plugin: object, name: str, source: str) -> None:
        try:
            if self._pm.is_registered(plugin):
                return
            self._pm.register(plugin, name=f"{name}@{id(plugin):x}")
            self._pm.check_pending()
            hook_impls = [impl for impl in self._pm.hook.acl_core_backends.get_hookimpls() if impl.plugin is plugin]
            results: list[Any] = [impl.function() for impl in hook_impls]
        except Exception as exc:
            if self._pm.is_registered(plugin):
                self._pm.unregister(plugin)
            self._broken[name] = f"plugin is malformed: {type(exc).__name__}: {exc}"
            return
        for regs in results:
            for reg in regs or ():
                if not isinstance(reg, BackendRegistration):
                    self._broken[name] = f"acl_core_backends returned {type(reg).__name__}, not BackendRegistration"
                    continue
                self._registrations[reg.name] = (reg, source)
                self._broken.pop(reg.name, None)

    def registration(self, name: str) -> BackendRegistration | None:
        with self._lock:
            self._ensure_loaded()
            found = self._registrations.get(name)
            return found[0] if found is not None else None

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin object directly (tests, notebooks); it wins over entry points of the same name."""
        with self._lock:
            self._ensure_loaded()
            self._default = None
            label = name or str(getattr(plugin, "__name__", type(plugin).__name__))
            self._register(plugin, label, "registered in-process")

    def unregister_backend(self, name: str) -> None:
        """Forget a backend (and its cached instance)."""
        with self._lock:
            self._registrations.pop(name, None)
            self._instances.pop(name, None)
            self._probes.pop(name, None)
            self._default = None

    def _probe(self, reg: BackendRegistration) -> str | None:
        if reg.name not in self._probes:
            try:
                self._probes[reg.name] = reg.probe()
            except Exception as exc:
                self._probes[reg.name] = f"availability check failed: {type(exc).__name__}: {exc}"
        return self._probes[reg.name]

    def statuses(self) -> list[BackendStatus]:
        with self._lock:
            self._ensure_loaded()
            rows = []
            for name, (reg, source) in self._registrations.items():
                reason = self._probe(reg)
                rows.append(BackendStatus(name, reason is None, reason or "", reg.priority, reg.summary, source))
            for name, reason in self._broken.items():
                if name not in self._registrations:
                    rows.append(BackendStatus(name, False, reason, -1, "", "entry point"))
            return sorted(rows, key=lambda r: (-r.priority, r.name))

    def get(self, name: str | None) -> Backend:
        wanted = name if name is not None else self.selected
        if wanted is not None:
            started = self._instances.get(wanted)
            if started is not None:
                return started  # per-call fast path: a backend named or selected and already started
        elif self._default is not None:
            return self._default  # per-call fast path: the default ($ACL_BACKEND or priority) is resolved once
        with self._lock:
            self._ensure_loaded()
            by_default = name is None and self.selected is None
            if name is None:
                name = self.selected or os.environ.get(ENV_BACKEND) or None
            if name is None:
                available = [s for s in self.statuses() if s.available]
                if not available:
                    raise BackendUnavailableError("<default>", "no installed backend is available here")
                name = available[0].name
            backend = self._instances.get(name) or self._create(name)
            if by_default:
                self._default = backend
            return backend

    def select(self, name: str | None) -> Backend | None:
        """Make ``name`` the process default; None goes back to $ACL_BACKEND / priority, read afresh."""
        with self._lock:
            self.selected = name
            self._default = None
        return None if name is None else self.get(name)

    def _create(self, name: str) -> Backend:
        if name not in self._registrations:
            if name in self._broken:
                raise BackendUnavailableError(name, self._broken[name])
            raise BackendNotFoundError(name, sorted(self._registrations))
        reg, _ = self._registrations[name]
        reason = self._probe(reg)
        if reason is not None:
            raise BackendUnavailableError(name, reason)
        try:
            backend = reg.factory()
        except BackendUnavailableError:
            raise
        except Exception as exc:
            raise BackendUnavailableError(name, f"backend failed to start: {type(exc).__name__}: {exc}") from exc
        self._instances[name] = backend
        return backend

    def reset(self) -> None:
        """Forget plugins registered in-process and rediscover entry points on the next call.

        Backends already started from entry points are kept: their runtimes own live device memory
        and handles that the process may still use, and an entry point's backend is the same after
        rediscovery.
        """
        with self._lock:
            self._ensure_loaded()  # a reset right after a reset must still know where backends came from
            started = {
                name: backend
                for name, backend in self._instances.items()
                if self._registrations.get(name, (None, ""))[1].startswith("entry point")
            }
            self.__init__()  # type: ignore[misc]
            self._instances.update(started)


_registry = _Registry()


def list_backends() -> list[BackendStatus]:
    """Every backend the installed plugins offer, available or not (with the reason), best first."""
    return _registry.statuses()


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name``; else the one :func:`use_backend` selected; else the default.

    The default is ``$ACL_BACKEND`` if set, else the highest-priority available backend. It is
    resolved once, on the first call that needs it, and kept (per-operator calls must not read the
    environment); ``use_backend``, ``register_plugin``, ``unregister_backend`` and ``reset_plugins``
    forget it, so a changed ``ACL_BACKEND`` takes effect after one of them. A backend asked for that
    cannot run raises :class:`BackendUnavailableError` with the reason (nothing is kept then);
    nothing falls back to another backend.
    """
    return _registry.get(name)


def get_registration(name: str) -> BackendRegistration | None:
    """The registration that offers backend ``name`` (its conformance files among its fields), or None."""
    return _registry.registration(name)


def use_backend(name: str | None) -> Backend | None:
    """Make ``name`` the process default that the front ends use (None: ``$ACL_BACKEND``/priority, read again)."""
    return _registry.select(name)


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Register a plugin object in-process, as an entry point would (for tests and notebooks)."""
    _registry.register(plugin, name)


def unregister_backend(name: str) -> None:
    """Remove a backend registered in-process."""
    _registry.unregister_backend(name)


def reset_plugins() -> None:
    """Forget plugins registered in-process (and their backends); the next call rediscovers entry points."""
    _registry.reset()
