"""README's stream-capture example runs as printed and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_capture_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    block = next(b for b in blocks if "ri_capture_begin" in b)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md", "exec"), {})
    assert out.getvalue().split("\n")[:2] == ["[0. 1. 4. 9.]", "[ 0.  4. 16. 36.]"]
