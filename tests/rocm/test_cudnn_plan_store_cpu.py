"""cuDNN SDPA execution plans persist: a later CudnnSdpa deserialises the stored plan instead of building one."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from acl_core.dtypes import DataType as D
from acl_core.formats import Format
from acl_core.tensor import AclTensor, contiguous_strides
from acl_rocm.ops.attention_cudnn import PLAN_KIND, CudnnSdpa, SdpaKey, _Built
from acl_rocm.plan_cache import PlanCache
from acl_rocm.providers.base import DeviceProperties
from tests.rocm.fake_cudnn_frontend import FakeFrontend
from tests.rocm.fake_provider import FakeProvider

UIDS = {"q": 1, "k": 2, "v": 3, "max": 4, "sum": 5, "o": 9}


@dataclass
class NamedFake(FakeProvider):
    """The fake provider under another device name."""

    device_name: str = "NVIDIA H200"

    def device_properties(self, index: int) -> DeviceProperties:
        return dataclasses.replace(super().device_properties(index), name=self.device_name)


class FakeTensor:
    """A frontend tensor: only its uid matters here."""

    def __init__(self, uid: int) -> None:
        self.uid = uid


class FakeGraph:
    """Serialises to ``plan:<workspace>``; a deserialised one remembers the blob; executions are recorded."""

    def __init__(self, module: FakeCudnn, workspace: int = 0) -> None:
        self.module = module
        self.workspace = workspace
        self.blob: bytes | None = None

    def serialize(self, *, as_bytes: bool = False) -> Any:
        if self.module.unserialisable:
            raise RuntimeError("cudnnGraphNotSupportedError: this engine cannot be serialised")
        blob = f"plan:{self.workspace}".encode()
        return blob if as_bytes else list(blob)

    def deserialize(self, handle: Any, data: Any) -> None:
        self.module.deserialised += 1
        blob = bytes(data)
        if blob.startswith(b"bad"):
            raise RuntimeError("CUDNN_STATUS_BAD_PARAM: not a plan of this cuDNN")
        self.blob = blob
        self.workspace = int(blob.split(b":")[1])

    def get_workspace_size(self) -> int:
        return self.workspace

    def execute(self, pack: dict[Any, int], workspace: int, handle: Any = None) -> None:
        if self.blob is not None and self.module.restored_fails:
            raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")
        self.module.executed.append((self, dict(pack), workspace))


class FakeCudnn(FakeFrontend):
    """The frontend module surface CudnnSdpa's persistence uses."""

    def __init__(self) -> None:
        super().__init__()
        self.deserialised = 0
        self.executed: list[tuple[FakeGraph, dict[Any, int], int]] = []
        self.unserialisable = False
        self.restored_fails = False

    def pygraph(self, handle: Any = None) -> FakeGraph:
        return FakeGraph(self)


def _key(**kw: Any) -> SdpaKey:
    base: dict[str, Any] = dict(
        device=0, dtype=D.ACL_BF16, b=1, nq=2, nkv=2, sq=4, skv=4, d=8, q=(64, 32, 8, 1),
        k=(64, 32, 8, 1), v=(64, 32, 8, 1), o=(64, 32, 8, 1), mask="bottom_right", scale=0.125,
    )  # fmt: skip
    base.update(kw)
    return SdpaKey(**base)


def _sdpa(
    directory: Path | None, module: FakeCudnn, device: str = "NVIDIA H200", persist: bool = True
) -> tuple[CudnnSdpa, list[SdpaKey]]:
    provider = NamedFake(device_name=device)
    environ = {"ACL_PLAN_CACHE_CUDNN": "1"} if persist else {}
    backend = SimpleNamespace(provider=provider, plans=PlanCache(directory), environ=environ)
    sdpa = CudnnSdpa(backend, loader=lambda: module)  # type: ignore[arg-type]
    assert sdpa.refusal() is None
    built: list[SdpaKey] = []

    def build(key: SdpaKey) -> _Built:
        built.append(key)
        return _Built(FakeGraph(module, workspace=256), {n: FakeTensor(u) for n, u in UIDS.items()}, 256)

    sdpa._build = build  # type: ignore[method-assign]
    sdpa._spread = lambda address, stats, stream: None  # type: ignore[method-assign]
    return sdpa, built


KEEP: list[np.ndarray] = []


def _tensors(key: SdpaKey) -> dict[str, AclTensor]:
    """Host buffers standing in for q/k/v/out and the two statistics (addresses only are used)."""
    out: dict[str, AclTensor] = {}
    for name in ("q", "k", "v", "o", "smax", "ssum"):
        shape = (key.b, key.nq, key.sq, 8 if name.startswith("s") else key.d)
        data = np.zeros(shape, np.float32)
        KEEP.append(data)  # alive for the session: the fakes read nothing, but the addresses must stay valid
        out[name] = AclTensor(
            shape, D.ACL_FLOAT, contiguous_strides(shape), 0, Format.ACL_FORMAT_ND, shape, data.ctypes.data
        )
    return out


def test_a_later_backend_deserialises_the_stored_plan_and_runs_it_by_uid(tmp_path: Path) -> None:
    module = FakeCudnn()
    first, built = _sdpa(tmp_path, module)
    made = first.graph(_key())
    assert isinstance(made, _Built) and not made.restored and len(built) == 1
    assert first.backend.plans.stats.made == {PLAN_KIND: 1} and first.backend.plans.stats.stored == {PLAN_KIND: 1}

    second, built_again = _sdpa(tmp_path, module)
    restored = second.graph(_key())
    assert isinstance(restored, _Built) and restored.restored and built_again == []
    assert restored.tensors == UIDS and restored.workspace == 256 and module.deserialised == 1
    assert second.graph(_key()) is restored  # the in-process memo as before
    tensors = _tensors(_key())
    second.run(restored, _key(), tensors, 0)
    graph, pack, workspace = module.executed[-1]
    assert graph is restored.graph and workspace != 0
    assert pack[UIDS["q"]] == tensors["q"].data and pack[UIDS["o"]] == tensors["o"].data
    assert set(pack) == set(UIDS.values())
    stats = second.backend.plans.stats
    assert stats.loaded == {PLAN_KIND: 1} and not stats.made and not stats.refused


@pytest.mark.parametrize("change", [{"scale": 0.25}, {"mask": "none"}, {"o": (64, 8, 16, 1)}, {"dtype": D.ACL_FLOAT16}])
def test_another_graph_signature_is_built(tmp_path: Path, change: dict[str, Any]) -> None:
    module = FakeCudnn()
    _sdpa(tmp_path, module)[0].graph(_key())
    second, built = _sdpa(tmp_path, module)
    assert not second.graph(_key(**change)).restored  # type: ignore[union-attr]
    assert built == [_key(**change)]


def test_another_device_name_is_built_but_another_index_of_the_same_device_is_not(tmp_path: Path) -> None:
    module = FakeCudnn()
    _sdpa(tmp_path, module)[0].graph(_key())
    other, built = _sdpa(tmp_path, module, device="NVIDIA H100 80GB HBM3")
    other.graph(_key())
    assert len(built) == 1
    same, built = _sdpa(tmp_path, module)
    same.backend.provider.devices = 2
    assert same.graph(_key(device=1)).restored and built == []  # type: ignore[union-attr]


def test_a_plan_that_fails_to_deserialise_is_built_afresh_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    module = FakeCudnn()
    first, _ = _sdpa(tmp_path, module)
    first.graph(_key())
    fields = first._plan_fields(_key())
    first.backend.plans.store(PLAN_KIND, fields, b"bad plan", {"uids": UIDS, "workspace": 0})
    second, built = _sdpa(tmp_path, module)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.plan_cache"):
        again = second.graph(_key())
    assert isinstance(again, _Built) and not again.restored and len(built) == 1
    assert second.backend.plans.stats.refused == {PLAN_KIND: 1} and "CUDNN_STATUS_BAD_PARAM" in caplog.text
    third, built = _sdpa(tmp_path, module)
    assert third.graph(_key()).restored and built == []  # type: ignore[union-attr]


def test_a_restored_plan_whose_execution_raises_is_rebuilt_once(tmp_path: Path) -> None:
    module = FakeCudnn()
    _sdpa(tmp_path, module)[0].graph(_key())
    second, built = _sdpa(tmp_path, module)
    restored = second.graph(_key())
    assert isinstance(restored, _Built) and restored.restored
    module.restored_fails = True
    second.run(restored, _key(), _tensors(_key()), 0)
    assert len(built) == 1 and len(module.executed) == 1
    replacement = second.graph(_key())
    assert isinstance(replacement, _Built) and not replacement.restored
    assert module.executed[0][0] is replacement.graph
    assert second.backend.plans.stats.refused == {PLAN_KIND: 1} and second.backend.plans.stats.made == {PLAN_KIND: 1}


def test_a_built_graph_that_executes_badly_still_raises(tmp_path: Path) -> None:
    module = FakeCudnn()
    sdpa, _ = _sdpa(tmp_path, module)
    built = sdpa.graph(_key())
    assert isinstance(built, _Built)

    def fail(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("CUDNN_STATUS_EXECUTION_FAILED")

    built.graph.execute = fail
    with pytest.raises(RuntimeError, match="EXECUTION_FAILED"):
        sdpa.run(built, _key(), _tensors(_key()), 0)


def test_an_unserialisable_plan_is_kept_in_memory_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    module = FakeCudnn()
    module.unserialisable = True
    sdpa, _ = _sdpa(tmp_path, module)
    with caplog.at_level(logging.DEBUG, logger="acl_rocm.plan_cache"):
        assert isinstance(sdpa.graph(_key()), _Built)
    assert "not stored" in caplog.text and not list(tmp_path.rglob("*.plan"))
    assert sdpa.backend.plans.stats.made == {PLAN_KIND: 1} and not sdpa.backend.plans.stats.stored


def test_with_the_cache_off_nothing_is_read_or_written(tmp_path: Path) -> None:
    module = FakeCudnn()
    sdpa, built = _sdpa(None, module)
    sdpa.graph(_key())
    again, built_again = _sdpa(None, module)
    again.graph(_key())
    assert len(built) == len(built_again) == 1 and module.deserialised == 0
    assert again.backend.plans.stats.made == {PLAN_KIND: 1}


def test_plans_stay_in_memory_unless_persistence_is_asked_for(tmp_path: Path) -> None:
    """Off by default: on the H100 (2026-12-06) workers crashed running deserialised SDPA plans."""
    module = FakeCudnn()
    key = _key()
    sdpa, built = _sdpa(tmp_path, module, persist=False)
    sdpa.run(sdpa.graph(key), key, _tensors(key), 0)
    assert built == [key] and not list(tmp_path.rglob("*.plan"))
    again, built_again = _sdpa(tmp_path, module, persist=False)
    again.run(again.graph(key), key, _tensors(key), 0)
    assert built_again == [key]  # built afresh: nothing was stored to load
