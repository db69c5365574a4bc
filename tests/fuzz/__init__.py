"""A seeded, bounded fuzzer of the acl / aclnn / eager front ends on the reference backend.

``cases`` generates corrupted calls (every declared operator, one argument corrupted at a time, and
runtime misuse), ``harness`` runs each under a deadline with canary-guarded memory and leak
accounting, ``verdict`` classifies what happened, ``__main__`` is the command line
(``python -m tests.fuzz --seed 0 --calls 2000``), and ``test_fuzz`` runs it in CI. docs/FUZZ.md
says how to read a failure and how to run longer.
"""
