"""The code keeps a shape a person reads in one sitting: no module of the service, the worker,
the job contracts, the client or the benchmarks over 400 lines, and no function over 60 lines
unless the comment just above it says why (`# long: <reason>`)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("service", "worker", "jobs", "client", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "# long:"


def long_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of each function over MAX_FUNCTION_LINES, counted from its
    first decorator to its last line, whose comment block just above holds no `# long:`
    with a reason."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = (node.end_lineno or node.lineno) - first + 1
        if length > MAX_FUNCTION_LINES and not _has_reason(lines, first):
            found.append((node.name, first, length))
    return found


def _has_reason(lines: list[str], first: int) -> bool:
    """Whether the comment lines right above line `first` (1-based) give a reason."""
    index = first - 2
    while index >= 0 and lines[index].strip().startswith("#"):
        comment = lines[index].strip()
        if comment.startswith(REASON) and comment[len(REASON) :].strip():
            return True
        index -= 1
    return False


def _modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_no_module_is_over_400_lines() -> None:
    modules = _modules()
    assert len(modules) > 50
    too_long = {
        str(path.relative_to(ROOT)): count
        for path in modules
        if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, "split these by concern"


def test_no_function_is_over_60_lines_without_a_reason() -> None:
    too_long = {
        f"{path.relative_to(ROOT)}:{line} {name}": length
        for path in _modules()
        for name, line, length in long_functions(path.read_text())
    }
    assert too_long == {}, "split these, or write `# long: <why>` just above the def"


def _function(lines: int, above: str = "", decorated: bool = False) -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    decorator = "@decorator\n" if decorated else ""
    return f"import os\n{above}{decorator}def f():\n{body}"


def test_the_check_counts_decorators_and_wants_a_reason() -> None:
    assert long_functions(_function(60)) == []
    assert long_functions(_function(61)) == [("f", 2, 61)]
    assert long_functions(_function(60, decorated=True)) == [("f", 2, 61)]
    assert long_functions(_function(61, "# long: one table of cases, read top to bottom\n")) == []
    assert long_functions(_function(61, "# long:\n")) == [("f", 3, 61)]
    assert long_functions(_function(61, "# long: a reason\nx = 1\n")) == [("f", 4, 61)]
    nested = "def outer():\n" + "".join(
        "    " + line + "\n" for line in _function(61).splitlines()[1:]
    )
    assert long_functions(nested) == [("outer", 1, 62), ("f", 2, 61)]
