"""Start one process per rank and wait for them all: ``python -m acl_tools.launch -n N -- COMMAND...``.

Without ``--mpiexec`` the ranks are plain subprocesses (no MPI needed, as on a GPU machine whose engine
is NCCL): each gets ``ACL_LAUNCH_RANK`` / ``ACL_LAUNCH_SIZE`` / ``ACL_LAUNCH_DIR`` (the shared
directory :class:`acl_tools.world.FileWorld` exchanges through, the root info included) and
torch.distributed's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT``.
Every rank sees every device and sets device ``LOCAL_RANK`` itself (one rank per GPU; NCCL refuses
two ranks on one GPU). With ``--mpiexec`` the job is ``mpiexec -n N COMMAND`` (the reference engine
moves data over MPI) and only ``ACL_LAUNCH_DIR`` is added.

Each rank's output comes back prefixed ``[r]``. The launcher exits with the first non-zero status of
a rank, or 124 when the job ran past ``--timeout`` (every rank's process group is then killed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from acl_tools.world import DIR_ENV, RANK_ENV, SIZE_ENV

TIMED_OUT = 124


def free_port() -> int:
    """A TCP port nobody listens on now (for torch.distributed's env:// rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_env(rank: int, size: int, directory: Path, port: int) -> dict[str, str]:
    """The variables rank ``rank`` of a spawned job gets on top of the launcher's environment."""
    return {
        RANK_ENV: str(rank),
        SIZE_ENV: str(size),
        DIR_ENV: str(directory),
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_WORLD_SIZE": str(size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _relay(prefix: str, stream: IO[str]) -> None:
    for line in stream:
        sys.stdout.write(f"{prefix}{line}")
        sys.stdout.flush()


def _wait_all(processes: list[subprocess.Popen[str]], timeout_s: float) -> int:
    """The first non-zero exit status (or 0), or TIMED_OUT after killing every rank's process group."""
    deadline = time.monotonic() + timeout_s
    status = 0
    pending = list(processes)
    while pending:
        for p in list(pending):
            code = p.poll()
            if code is not None:
                pending.remove(p)
                status = status or code
        if pending and time.monotonic() > deadline:
            for p in pending:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
            return TIMED_OUT
        time.sleep(0.05)
    return status


def launch(
    command: Sequence[str],
    n: int,
    *,
    mpiexec: str | None = None,
    timeout_s: float = 600.0,
    directory: Path | None = None,
) -> int:
    """Run ``command`` as ``n`` ranks (spawned, or under ``mpiexec`` when it is given); the job's status."""
    if n < 1:
        raise ValueError(f"a job needs at least one rank, not {n}")
    owned = directory is None
    work = Path(tempfile.mkdtemp(prefix="acl-launch-")) if directory is None else directory
    work.mkdir(parents=True, exist_ok=True)
    try:
        if mpiexec:
            jobs = [([mpiexec, "-n", str(n), *command], {DIR_ENV: str(work)}, "")]
        else:
            port = free_port()
            jobs = [(list(command), rank_env(r, n, work, port), f"[{r}] ") for r in range(n)]
        processes, relays = [], []
        for args, extra, prefix in jobs:
            p = subprocess.Popen(
                args,
                env={**os.environ, **extra},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # so a timeout can kill the rank and whatever it started
            )
            assert p.stdout is not None
            relay = threading.Thread(target=_relay, args=(prefix, p.stdout), daemon=True)
            relay.start()
            processes.append(p)
            relays.append(relay)
        status = _wait_all(processes, timeout_s)
        for relay in relays:
            relay.join(timeout=5)
        if status == TIMED_OUT:
            print(f"acl_tools.launch: the job ran past {timeout_s:g}s; every rank was killed", flush=True)
        return status
    finally:
        if owned:
            shutil.rmtree(work, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m acl_tools.launch``."""
    p = argparse.ArgumentParser(
        prog="python -m acl_tools.launch",
        description="Start one process per rank and wait for them all: python -m acl_tools.launch -n N -- COMMAND...",
    )
    p.add_argument("-n", "--ranks", type=int, required=True, help="number of ranks (processes) to start")
    p.add_argument("--mpiexec", action="store_true", help="launch with mpiexec instead of spawning the ranks")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before every rank is killed (status 124)")
    p.add_argument(
        "--dir", type=Path, default=None, help="the ranks' shared directory (default: a fresh temporary one)"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command every rank runs, after --")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``-n N [--mpiexec] [--timeout S] -- COMMAND...`` and run the job."""
    p = build_parser()
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command to run")
    mpiexec = None
    if args.mpiexec:
        mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
        if mpiexec is None:
            p.error("--mpiexec: no mpiexec found (pip install 'acl-core[mpi]')")
    return launch(command, args.ranks, mpiexec=mpiexec, timeout_s=args.timeout, directory=args.dir)


if __name__ == "__main__":
    sys.exit(main())
