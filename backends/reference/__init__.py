"""acl-core's NumPy reference backend: the oracle every other backend is checked against.

The backend object lives in :mod:`acl_reference.backend`; importing this package stays cheap so
that listing backends costs nothing.
"""
