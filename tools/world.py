"""The out-of-band world of a multi-rank job: rank, size, broadcast, all-gather, barrier.

HCCL programs hand the root info to their ranks out of band and tests compare results across ranks;
this is that channel, for two kinds of launch:

* under ``mpiexec`` (the reference engine needs MPI anyway): :class:`MpiWorld` over ``MPI.COMM_WORLD``;
* under :mod:`acl_tools.launch` without MPI (a GPU machine whose engine is NCCL): :class:`FileWorld`,
  a shared directory (``ACL_LAUNCH_DIR``) where each exchange is one pickle per rank, written atomically
  and polled for, so no rank blocks past ``ACL_LAUNCH_TIMEOUT`` seconds.

:func:`current` picks the first that applies, else a world of one rank.
"""

from __future__ import annotations

import os
import pickle
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

RANK_ENV = "ACL_LAUNCH_RANK"
SIZE_ENV = "ACL_LAUNCH_SIZE"
DIR_ENV = "ACL_LAUNCH_DIR"
TIMEOUT_ENV = "ACL_LAUNCH_TIMEOUT"
MPI_SIZE_ENVS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
"""Variables an MPI launcher (MPICH's hydra, Open MPI) sets in every rank's environment."""


class World(ABC):
    """The ranks of one job and a slow, simple channel between them (not the collectives under test)."""

    rank: int
    size: int

    @abstractmethod
    def allgather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""

    def bcast(self, value: Any, root: int = 0) -> Any:
        """``root``'s value on every rank."""
        return self.allgather(value if self.rank == root else None)[root]

    def barrier(self) -> None:
        """Return once every rank has called it."""
        self.allgather(None)

    def max(self, value: float) -> float:
        """The largest ``value`` of any rank."""
        return max(self.allgather(value))

    def sum(self, value: int) -> int:
        """The sum of every rank's ``value``."""
        return sum(self.allgather(value))


class SingleWorld(World):
    """A job of one rank."""

    rank, size = 0, 1

    def allgather(self, value: Any) -> list[Any]:
        """[value]."""
        return [value]


class MpiWorld(World):
    """MPI.COMM_WORLD (mpi4py)."""

    def __init__(self) -> None:
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def allgather(self, value: Any) -> list[Any]:
        """MPI_Allgather of pickled values."""
        return list(self.comm.allgather(value))

    def bcast(self, value: Any, root: int = 0) -> Any:
        """MPI_Bcast of a pickled value."""
        return self.comm.bcast(value, root=root)


class FileWorld(World):
    """Ranks that share a directory: exchange ``k`` is the files ``k.<rank>`` (one per rank)."""

    def __init__(self, directory: Path, rank: int, size: int, timeout_s: float = 300.0) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside a world of {size}")
        self.directory, self.rank, self.size, self.timeout_s = Path(directory), rank, size, timeout_s
        self._round = 0

    def allgather(self, value: Any) -> list[Any]:
        """Write this rank's file, then wait (polling) for every other rank's of the same round."""
        k, self._round = self._round, self._round + 1
        mine = self.directory / f"{k}.{self.rank}"
        scratch = mine.with_name(f".{mine.name}.tmp")
        scratch.write_bytes(pickle.dumps(value))
        os.replace(scratch, mine)  # atomic: a reader sees the whole file or none
        deadline, pause = time.monotonic() + self.timeout_s, 0.0005
        values: list[Any] = []
        for r in range(self.size):
            path = self.directory / f"{k}.{r}"
            while not path.exists():
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rank {r} did not reach exchange {k} within {self.timeout_s:g}s")
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
            values.append(pickle.loads(path.read_bytes()))
        return values


def current() -> World:
    """The world this process was launched into: acl_tools.launch's files, else MPI's, else one rank."""
    if os.environ.get(DIR_ENV) and os.environ.get(SIZE_ENV):
        return FileWorld(
            Path(os.environ[DIR_ENV]),
            int(os.environ[RANK_ENV]),
            int(os.environ[SIZE_ENV]),
            float(os.environ.get(TIMEOUT_ENV, "300")),
        )
    if any(os.environ.get(v) for v in MPI_SIZE_ENVS):
        return MpiWorld()
    return SingleWorld()


__all__ = ["DIR_ENV", "RANK_ENV", "SIZE_ENV", "TIMEOUT_ENV", "FileWorld", "MpiWorld", "SingleWorld", "World", "current"]
