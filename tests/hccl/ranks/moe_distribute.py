"""One rank of the expert-parallel MC2 run: MoeDistributeDispatch(V2-V4) and MoeDistributeCombine(V2-V4).

Launched as ``mpiexec -n K python moe_distribute.py REPORT_DIR`` by tests/hccl/test_moe_distribute.py.
Every rank rebuilds every rank's tokens and routing from seeds, so it predicts its own dispatch
output independently (the received copies ordered by local expert, source rank, token, found with
``np.lexsort``), then runs a stand-in expert (each expert scales its rows by a power of two, exact)
and checks that combine returns, on every token, the directly computed mixture ``Σ_k w·f_e(x)``
rounded once. Dynamic int8 dispatch is checked against the float32 formula. The rank writes a report
and exits non-zero when a check failed.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np
from common import RANK, SIZE, check, expect, finish, make_comm, run_section, start

from acl_core import eager, hccl
from acl_core.errors import AclnnError

BS, H, K = 5, 24, 3
LOCAL = 2 if SIZE > 1 else 4  # experts per rank (one rank holds K or more)
EXPERTS = LOCAL * SIZE
A = BS * SIZE * min(LOCAL, K)


def tokens(r: int, dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank r's (x, expertIds, expertScales): reproducible on every rank."""
    rng = np.random.default_rng([r, 17])
    x = (rng.integers(-8, 9, (BS, H)) / 4).astype(dtype)
    ids = np.stack([rng.choice(EXPERTS, K, replace=False) for _ in range(BS)]).astype(np.int32)
    weights = (rng.integers(1, 9, (BS, K)) / 8).astype(np.float32)
    return x, ids, weights


def expert_fn(expert: int, rows: np.ndarray) -> np.ndarray:
    """The stand-in expert: rows × 2^-(expert % 3) (exact in any float dtype)."""
    return (rows.astype(np.float64) * 2.0 ** -(expert % 3)).astype(rows.dtype)


def attrs(name: str) -> dict[str, object]:
    """The EP attributes every dispatch / combine call of this run shares."""
    base: dict[str, object] = {"groupEp": name, "epWorldSize": SIZE, "epRankId": RANK, "moeExpertNum": EXPERTS}
    base |= {"groupTp": "", "tpWorldSize": 0, "tpRankId": 0, "expertShardType": 0, "sharedExpertNum": 0}
    return {**base, "sharedExpertRankNum": 0, "globalBs": 0}


def expected_rows(active: list[np.ndarray]) -> list[tuple[int, int, int, int]]:
    """(expert, source rank, token, slot) of the copies this rank receives, in (local expert, rank, token) order."""
    found = []
    for s in range(SIZE):
        _, ids, _ = tokens(s, np.float32)
        for i in range(BS):
            for j in range(K):
                if active[s][i, j] and ids[i, j] // LOCAL == RANK:
                    found.append((int(ids[i, j]), s, i, j))
    if not found:
        return []
    table = np.array(found)
    order = np.lexsort((table[:, 2], table[:, 1], table[:, 0]))  # expert, then rank, then token
    return [tuple(int(v) for v in table[p]) for p in order]  # type: ignore[misc]


def masks(kind: str) -> list[np.ndarray]:
    """Each rank's active copies for a mask kind (none, the first tokens, or single copies)."""
    out = []
    for s in range(SIZE):
        if kind == "none":
            out.append(np.ones((BS, K), bool))
        elif kind == "1d":
            out.append(np.repeat((np.arange(BS) < BS - 1 - s % 2)[:, None], K, axis=1))
        else:
            out.append(np.random.default_rng([s, 5]).random((BS, K)) < 0.6)
    return out


def round_trip(name: str, dtype: type, version: str, mask_kind: str) -> None:
    """Dispatch, the stand-in experts, combine: layout, counts and the final mixture, on this rank."""
    x, ids, weights = tokens(RANK, dtype)
    active = masks(mask_kind)
    mask = None if mask_kind == "none" else (active[RANK][:, 0] if mask_kind == "1d" else active[RANK])
    v1 = version == ""
    suffix = {} if v1 else {"commAlg": None}
    extra_d: dict[str, object] = {}
    extra_c: dict[str, object] = {}
    if version in ("V3", "V4"):
        extra_d = {"elasticInfoOptional": None, "zeroExpertNum": 0, "copyExpertNum": 0, "constExpertNum": 0}
        extra_c = {**extra_d, "oriXOptional": None, "constExpertAlpha1Optional": None}
        extra_c |= {"constExpertAlpha2Optional": None, "constExpertVOptional": None}
    if version == "V4":
        extra_d["performanceInfoOptional"] = None
        extra_c["performanceInfoOptional"] = None
    opt, out = ("", "") if v1 else ("Optional", "Out")
    d = eager.run(
        f"MoeDistributeDispatch{version}",
        x=x,
        expertIds=ids,
        **{f"scales{opt}": None, f"xActiveMask{opt}": mask, f"expertScales{opt}": weights},
        **attrs(name),
        quantMode=0,
        expertTokenNumsType=0,
        **suffix,
        **extra_d,
    )
    what = f"{version or 'V1'} {np.dtype(dtype).name} mask {mask_kind}"
    want = expected_rows(active)
    n = len(want)
    xs = [tokens(s, dtype)[0] for s in range(SIZE)]
    expand = d[f"expandX{out}"]
    check(expand.shape == (A, H), f"{what}: expandX shape {expand.shape}")
    picked = np.stack([xs[s][i] for _, s, i, _ in want]) if n else np.zeros((0, H), dtype)
    check(expand[:n].tobytes() == picked.tobytes(), f"{what}: expandX rows")
    check(not np.any(expand[n:].astype(np.float64)), f"{what}: rows past the received ones are not zero")
    per = np.zeros((LOCAL, SIZE), np.int64)
    for e, s, _, _ in want:
        per[e - RANK * LOCAL, s] += 1
    check(np.array_equal(d[f"epRecvCounts{out}"], np.cumsum(per.reshape(-1))), f"{what}: epRecvCounts")
    check(np.array_equal(d[f"expertTokenNums{out}"], np.cumsum(per.sum(axis=1))), f"{what}: expertTokenNums")
    carried = d[f"expandScales{out}"]
    w_all = [tokens(s, dtype)[2] for s in range(SIZE)]
    check(np.array_equal(carried[:n], [w_all[s][i, j] for _, s, i, j in want]), f"{what}: expandScales")
    # the stand-in experts, then combine
    y = expand.copy()
    for p, (e, _, _, _) in enumerate(want):
        y[p] = expert_fn(e, expand[p : p + 1])[0]
    assist = d["expandIdx"] if v1 else d["assistInfoForCombineOut"]
    c_names = {"tpSendCounts": None, "xActiveMask": mask, "activationScale": None, "weightScale": None}
    c_names |= {"groupList": None, "expandScales": None}
    c_args = {f"{k}{opt}": v for k, v in c_names.items()}
    if not v1:
        c_args["sharedExpertXOptional"] = None
    combined = eager.run(
        f"MoeDistributeCombine{version}",
        expandX=y,
        expertIds=ids,
        **{"expandIdx" if v1 else "assistInfoForCombine": assist},
        epSendCounts=d[f"epRecvCounts{out}"],
        expertScales=weights,
        **c_args,
        **attrs(name),
        outDtype=0,
        commQuantMode=0,
        groupListType=0,
        **suffix,
        **extra_c,
    )["x" if v1 else "xOut"]
    direct = np.zeros((BS, H))
    for i in range(BS):
        for j in range(K):
            if active[RANK][i, j]:
                direct[i] += float(weights[i, j]) * expert_fn(int(ids[i, j]), x[i : i + 1])[0].astype(np.float64)
    check(combined.tobytes() == direct.astype(dtype).tobytes(), f"{what}: combine != Σ_k w·expert(x)")


def dynamic_int8(name: str) -> None:
    """quantMode 2 with per-expert smooth scales: codes and scales as the float32 formula gives them."""
    x, ids, _ = tokens(RANK, ml_dtypes.bfloat16)
    smooth = np.random.default_rng(9).uniform(0.5, 2, (EXPERTS, H)).astype(np.float32)
    d = eager.run(
        "MoeDistributeDispatchV2",
        x=x,
        expertIds=ids,
        scalesOptional=smooth,
        xActiveMaskOptional=None,
        expertScalesOptional=None,
        **attrs(name),
        quantMode=2,
        expertTokenNumsType=1,
        commAlg="",
    )
    want = expected_rows(masks("none"))
    xs = [tokens(s, ml_dtypes.bfloat16)[0] for s in range(SIZE)]
    v = np.stack([xs[s][i].astype(np.float32) * smooth[e] for e, s, i, _ in want])
    scale = (np.abs(v).max(axis=1) / np.float32(127)).astype(np.float32)
    codes = np.clip(np.rint(v / scale[:, None]), -128, 127).astype(np.int8)
    n = len(want)
    check(d["expandXOut"].dtype == np.int8 and d["expandXOut"][:n].tobytes() == codes.tobytes(), "int8 codes")
    check(d["dynamicScalesOut"][:n].tobytes() == scale.tobytes(), "int8 scales")
    per = np.bincount([e - RANK * LOCAL for e, _, _, _ in want], minlength=LOCAL)
    check(np.array_equal(d["expertTokenNumsOut"], per), "expertTokenNums as counts")


def refusals(name: str) -> None:
    """A wrong epWorldSize or epRankId is 161002 on every rank; an expert id past moeExpertNum on one rank too."""
    x, ids, _ = tokens(RANK, np.float16)
    base = {"x": x, "expertIds": ids, "scalesOptional": None, "xActiveMaskOptional": None}
    base |= {"expertScalesOptional": None, **attrs(name), "quantMode": 0, "expertTokenNumsType": 0, "commAlg": None}
    for bad in ({"epRankId": (RANK + 1) % SIZE}, {"epWorldSize": SIZE + 1, "moeExpertNum": LOCAL * (SIZE + 1)}):
        if SIZE == 1 and "epRankId" in bad:
            continue
        try:
            eager.run("MoeDistributeDispatchV2", **{**base, **bad})
            check(False, f"dispatch accepted {bad}")
        except AclnnError as exc:
            check(exc.code == 161002, f"dispatch with {bad} raised {exc.code}")
    broken = ids.copy()
    if RANK == SIZE - 1:
        broken[0, 0] = EXPERTS  # one rank's bad id: every rank sees it after the exchange and refuses alike
    try:
        eager.run("MoeDistributeDispatchV2", **{**base, "expertIds": broken})
        check(False, "dispatch accepted an expert id of moeExpertNum")
    except AclnnError as exc:
        check(exc.code == 161002 and f"rank {SIZE - 1}" in str(exc), f"bad expert id raised {exc}")


def main() -> None:
    report = sys.argv[1]
    start()
    comm = make_comm()
    name, ret = hccl.HcclGetCommName(comm)
    expect(ret, 0, "HcclGetCommName")
    for version in ("", "V2", "V3", "V4"):
        for dtype in (np.float16, ml_dtypes.bfloat16):
            for mask_kind in ("none", "1d", "2d"):
                label = f"{version or 'V1'} {np.dtype(dtype).name} {mask_kind}"
                run_section(label, lambda v=version, dt=dtype, m=mask_kind: round_trip(str(name), dt, v, m))
    run_section("dynamic int8", lambda: dynamic_int8(str(name)))
    run_section("refusals", lambda: refusals(str(name)))
    expect(hccl.HcclCommDestroy(comm), 0, "HcclCommDestroy")
    finish(report)


if __name__ == "__main__":
    main()
