"""Reference kernels of Nonzero, NonzeroV2 and MaskedSelect (acl_core.spec.ops.select).

NumPy's own selection: ``np.nonzero`` (C order) and boolean indexing of the broadcast operands. The real size
is written back into out's view (:func:`acl_core.runtime.view_writeback.set_view_dims`) before the selected
rows are stored, so nothing past them is written.
"""

from __future__ import annotations

import numpy as np

from acl_core.runtime.view_writeback import set_view_dims
from acl_core.spec.ops.select import TRANSPOSED
from acl_core.tensor import AclTensor
from acl_reference.call import RefCall
from acl_reference.kernels import kernel


def _store(k: RefCall, result: np.ndarray) -> None:
    """Write ``result`` as out's written-back view."""
    out = k.args["out"]
    assert isinstance(out, AclTensor)
    set_view_dims(out, result.shape)
    k.write("out", result)


@kernel(*TRANSPOSED)
def nonzero(k: RefCall) -> None:
    """Coordinates of the non-zero elements of self, one row (NonzeroV2: one column) per element."""
    x = k.read("self")
    coords = np.stack(np.nonzero(x), axis=1) if x.ndim else np.zeros((int(x != 0), 0), np.int64)
    coords = coords.astype(np.int64)
    _store(k, coords.T if TRANSPOSED[k.launch.spec.name] else coords)


@kernel("MaskedSelect")
def masked_select(k: RefCall) -> None:
    """self's elements where mask is non-zero, both broadcast, in C order."""
    shape = k.plan["select_shape"]
    x = np.broadcast_to(k.read("self"), shape)
    mask = np.broadcast_to(k.read("mask"), shape) != 0
    _store(k, x[mask])
