"""docs/KERNELS.md is what the specs declare now (issue 14: per operator, what a kernel receives)."""

from __future__ import annotations

from tools import kernels_doc


def test_kernels_doc_is_current() -> None:
    text = kernels_doc.render()
    assert kernels_doc.DOC.read_text() == text, f"docs/KERNELS.md is stale: regenerate it with `{kernels_doc.COMMAND}`"


def test_the_doc_names_each_operator_its_kernel_arguments_and_plan_keys() -> None:
    text = kernels_doc.render()
    mm = text[text.index("### Mm\n") :].split("\n### ")[0]
    assert "| `cubeMathType` | `int8_t` | `int` |" in mm and "`precision`" in mm
    add = text[text.index("### Add\n") :].split("\n### ")[0]
    assert "| `alpha` | `const aclScalar*` | `Scalar` |" in add and "`compute`" in add
    assert "| `precision` |" in text and "'hf32'" in text  # the precision values and their rounding


def test_check_mode_reports_a_stale_doc(tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    stale = tmp_path / "KERNELS.md"
    stale.write_text("# old\n")
    monkeypatch.setattr(kernels_doc, "DOC", stale)
    assert kernels_doc.main(["--check"]) == 1
    assert kernels_doc.COMMAND in capsys.readouterr().err
    assert kernels_doc.main([]) == 0 and kernels_doc.main(["--check"]) == 0
