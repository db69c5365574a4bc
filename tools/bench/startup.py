"""How long ``import acl_core`` plus ``list_backends()`` takes in a fresh interpreter, and what it imports."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

_PROBE = """
import json, sys, time
t = time.perf_counter()
import acl_core
acl_core.list_backends()
elapsed = time.perf_counter() - t
vendor = sorted({m.split('.')[0] for m in sys.modules} & {'hip', 'cuda', 'cupy', 'torch', 'nvmath', 'nccl', 'mpi4py'})
print(json.dumps({"seconds": elapsed, "vendor": vendor}))
"""


def measure_startup(runs: int = 5) -> dict[str, Any]:
    """Median over ``runs`` fresh interpreters of import + listing time, and the vendor modules they loaded."""
    listing: list[float] = []
    vendor: set[str] = set()
    for _ in range(runs):
        out = json.loads(
            subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True).stdout
        )
        listing.append(out["seconds"])
        vendor.update(out["vendor"])
    return {
        "import_and_list_ms": statistics.median(listing) * 1e3,
        "runs": runs,
        "vendor_modules": sorted(vendor),
    }
