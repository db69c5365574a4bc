"""``python -m acl_core``: the acl-core command line."""

from acl_core.cli import main

raise SystemExit(main())
