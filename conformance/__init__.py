"""acl-core's conformance suite: proves any backend against the NumPy reference."""
