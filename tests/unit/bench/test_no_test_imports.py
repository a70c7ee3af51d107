"""`bench/` (and `devstack/`, which it uses) must run without the test suite: no import of
`tests` anywhere in them, checked from the source so no module needs importing."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", ["bench", "devstack"])
def test_the_package_imports_nothing_from_tests(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    offending = {
        str(path.relative_to(ROOT)): sorted(
            m for m in imported_modules(path) if m == "tests" or m.startswith("tests.")
        )
        for path in files
    }
    assert {path: mods for path, mods in offending.items() if mods} == {}


def test_an_import_of_tests_is_caught(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import tests.support\nfrom tests.support.stack import Stack\n")
    assert imported_modules(sample) == {"tests.support", "tests.support.stack"}
