"""What one fuzzed case did, and which of those outcomes are defects."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from enum import Enum

from acl_core.errors import AclErrorCode, AclnnStatus, RtErrorCode

INTERNAL_CODES = frozenset(
    {
        int(AclErrorCode.ACL_ERROR_INTERNAL_ERROR),
        int(RtErrorCode.ACL_ERROR_RT_INTERNAL_ERROR),
        int(AclnnStatus.ACLNN_ERR_INNER),
    }
)
"""Codes that say "the implementation broke", never "the caller erred" (500000, 507000, 561000)."""

ACLNN_PARAM_CODES = frozenset(
    {
        int(AclnnStatus.ACLNN_ERR_PARAM_NULLPTR),
        int(AclnnStatus.ACLNN_ERR_PARAM_INVALID),
        int(AclnnStatus.ACLNN_ERR_INNER_TILING_ERROR),  # CANN's documented code for some shape errors
        int(AclnnStatus.ACLNN_ERR_RUNTIME_ERROR),  # an MC2 op without its communicator
        int(AclnnStatus.ACLNN_ERR_INNER_NULLPTR),  # a null executor where CANN documents it
    }
)
"""The codes an aclnn call may refuse a corrupted argument with."""


class Verdict(str, Enum):
    """The class of one case's outcome."""

    OK = "ok"  # the call succeeded and nothing broke
    REFUSED = "refused"  # a parameter error with a code of the expected class
    ACCEPTED = "accepted"  # a misuse that must be refused returned success
    WRONG_CODE = "wrong-code"  # refused, but with a code outside the class the case expects
    INTERNAL = "internal"  # 500000 / 507000 / 561000 or an "internal error" message for a parameter fault
    ESCAPED = "escaped"  # a Python exception escaped a front end that must return or raise typed errors
    HANG = "hang"  # the call ran past its deadline
    CORRUPTION = "corruption"  # bytes changed outside an output (canaries, inputs, other allocations)
    LEAK = "leak"  # allocations or handles left behind after the case freed what it made

    @property
    def failed(self) -> bool:
        """True for the classes that are defects."""
        return self not in (Verdict.OK, Verdict.REFUSED)


@dataclass(frozen=True)
class Expect:
    """What a case may legitimately end in: ``codes`` (empty: any non-internal code) and whether success is allowed."""

    codes: frozenset[int] = frozenset()
    may_succeed: bool = True

    @classmethod
    def refusal(cls, codes: Collection[int] = ()) -> Expect:
        """A misuse that must be refused (with one of ``codes`` when given)."""
        return cls(frozenset(int(c) for c in codes), may_succeed=False)


ANYTHING = Expect()
"""Success or any parameter error."""


def classify_code(code: int, message: str, expect: Expect) -> Verdict:
    """The verdict for a call that returned ``code`` (0 for success) with ``message``."""
    if code == 0:
        return Verdict.OK if expect.may_succeed else Verdict.ACCEPTED
    if code in INTERNAL_CODES or "internal error" in message.lower():
        return Verdict.INTERNAL
    if expect.codes and code not in expect.codes:
        return Verdict.WRONG_CODE
    return Verdict.REFUSED


@dataclass
class Outcome:
    """One case: where it ran, how to reproduce it, and what happened."""

    index: int
    area: str  # "aclnn", "eager" or "runtime"
    subject: str  # the operator or runtime misuse kind
    mutation: str
    repro: str = ""
    verdict: Verdict = Verdict.OK
    code: int = 0
    step: str = ""  # which call of the case decided the verdict
    message: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def worse(self, verdict: Verdict, step: str, code: int = 0, message: str = "") -> None:
        """Record ``verdict`` unless a failure is already recorded (the first defect of a case is kept)."""
        if self.verdict.failed:
            return
        if verdict.failed or verdict is Verdict.REFUSED or self.verdict is Verdict.OK:
            self.verdict, self.step, self.code, self.message = verdict, step, code, message

    def line(self, seed: int) -> str:
        """The one-line report of a failed case: class, seed, reproduction and what was seen."""
        where = f" in {self.step}" if self.step else ""
        code = f" code {self.code}" if self.code else ""
        return (
            f"[{self.verdict.value}] seed={seed} case={self.index} {self.area}:{self.subject} ({self.mutation}){where}"
            f"{code}: {self.message[:300]}\n    repro: {self.repro}\n"
            f"    replay: python -m tests.fuzz --seed {seed} --case {self.index}"
        )
