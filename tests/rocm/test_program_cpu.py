"""run_program's packed launches (``acl_rocm.ops.program``): each run's temporaries, flag and scratch addresses reach
the launches packed once, steps added later are packed again, programmatic steps keep their attribute."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path

from acl_rocm.backend import RocmBackend
from acl_rocm.launch import LaunchConfig
from acl_rocm.ops.program import FLAG, Enqueue, Program, Scratch, Step, Temp, run_program
from tests.rocm.fake_provider import FakeProvider

SOURCE = 'extern "C" __global__ void k(const long long n, int* t, int* flag, int* s) { ACL_PDL_WAIT(); }'


class _MovingPool(FakeProvider):
    """A fake provider whose stream-ordered temporaries come from fresh blocks, never the last one freed."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.held: list[int] = []

    def free_async(self, address: int, stream: int) -> None:
        self.held.append(address)  # kept: the next malloc_async cannot hand this address back


def _backend(tmp_path: Path) -> RocmBackend:
    backend = RocmBackend(_MovingPool(), {"ACL_KERNEL_CACHE": str(tmp_path)})
    backend.runtime.ensure_device(0)
    return backend


def _args(provider: FakeProvider, i: int) -> tuple[int, int, int, int]:
    n, t, flag, s = provider.launches[i].args
    return struct.unpack("q", n)[0], *(struct.unpack("Q", v)[0] for v in (t, flag, s))


def test_each_run_launches_its_own_temporaries_and_flag(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    provider = backend.provider
    assert isinstance(provider, _MovingPool)
    stream = backend.runtime.create_stream()
    function = ("k", SOURCE)
    seen: list[int] = []
    prog = Program(report="test: flag set", scratch=8, scratch_region="test.program")
    t = prog.temp(64)
    config = LaunchConfig((1, 1, 1), (32, 1, 1))
    prog.steps.append(Step(function, config, (ctypes.c_longlong(7), Temp(0, 16), FLAG, Scratch(4))))
    prog.steps.append(Step(Enqueue(lambda resolve, _s: seen.append(resolve(t).value)), config, ()))
    temps = []
    for _ in range(3):
        run_program(backend, prog, stream)
        temps.append(provider.held[-1])  # the run's temporary (its flag is freed at synchronisation)
    scratch = backend.driver.stream_scratch(stream, 8, "test.program")
    assert len(set(temps)) == 3 and seen == temps  # three blocks; the Enqueue step resolved each run's
    for i, base in enumerate(temps):
        n, t_arg, flag_arg, s_arg = _args(provider, i)
        assert (n, t_arg, s_arg) == (7, base + 16, scratch + 4)
        assert flag_arg != 0
    assert len({_args(provider, i)[2] for i in range(3)}) == 3  # a fresh flag per run
    backend.runtime.synchronize_stream(stream)
    # a step added after runs is packed too, and a programmatic one goes through launch_programmatic
    prog.steps.append(Step(function, config, (ctypes.c_longlong(9), Temp(0), FLAG, Scratch(0)), programmatic=True))
    run_program(backend, prog, stream)
    assert [_args(provider, i)[0] for i in range(3, 5)] == [7, 9]
    assert _args(provider, 4)[1] + 16 == _args(provider, 3)[1]
    assert provider.programmatic_launches == ["k"]
    backend.runtime.synchronize_stream(stream)
