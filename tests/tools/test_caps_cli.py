"""``acl-core caps reference`` says what is true of the reference: configured figures are marked nominal, per field."""

from __future__ import annotations

import os
import sys

import pydantic
import pytest

from acl_core.cli import main
from acl_reference.backend import ReferenceBackend
from acl_reference.collectives import MpiEngine


def test_virtual_devices_and_their_memory_cap_are_marked_nominal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACL_REFERENCE_DEVICES", "3")
    monkeypatch.setenv("ACL_REFERENCE_MEMORY", str(1 << 30))
    caps = ReferenceBackend().capabilities()
    assert caps.device_count == 3 and caps.memory_bytes == 1 << 30  # what the driver hands out
    assert set(caps.nominal) == {"device_count", "memory_bytes"}
    assert "virtual" in caps.nominal["device_count"] and "ACL_REFERENCE_DEVICES" in caps.nominal["device_count"]
    host_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    assert f"the host's {host_gib:.1f} GiB of RAM" in caps.nominal["memory_bytes"]
    assert caps.compute_units == len(os.sched_getaffinity(0))


def test_caps_table_says_nominal_on_those_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one line per row
    assert main(["caps", "reference"]) == 0
    lines = capsys.readouterr().out.splitlines()
    nominal = [line for line in lines if "(nominal:" in line]
    assert len(nominal) == 2
    assert any("device_count" in line for line in nominal) and any("memory_bytes" in line for line in nominal)
    assert not any("collective_max_ranks" in line and "nominal" in line for line in lines)
    assert any("note: collectives" in line for line in lines)


def test_collective_ranks_are_the_mpi_world_only_where_mpi4py_can_serve_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MpiEngine, "max_ranks", lambda self: 4)
    assert ReferenceBackend().capabilities().collective_max_ranks == 4
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    caps = ReferenceBackend().capabilities()
    assert caps.collective_max_ranks == 1
    assert "pip install 'acl-core[mpi]'" in caps.notes["collectives"]


def test_nominal_must_name_a_capability_field() -> None:
    data = ReferenceBackend().capabilities().model_dump()
    data["nominal"] = {"memory": "a typo of memory_bytes"}
    with pytest.raises(pydantic.ValidationError, match="nominal names no capability field: memory"):
        type(ReferenceBackend().capabilities())(**data)
