"""The size rules (STYLE.md, "Size"): no module in localspec/ over 450 lines (the command line's,
localspec/cli/, over 500) and no function over 50 lines. Pure: reads the source, imports nothing."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "localspec"
MODULE_LINES = 450
CLI_MODULE_LINES = 500  # localspec/cli/: a command's options and help text are long by nature
FUNCTION_LINES = 50


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def line_limit(path: Path) -> int:
    return CLI_MODULE_LINES if "cli" in path.relative_to(PACKAGE).parts[:-1] else MODULE_LINES


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, lines from its def to its last line) of every function, methods and nested
    functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node.end_lineno - node.lineno + 1
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def test_the_rules_see_every_module():
    names = {p.relative_to(PACKAGE).as_posix() for p in modules()}
    assert {"planner.py", "sampling.py", "cli/__init__.py"} <= names
    assert line_limit(PACKAGE / "cli" / "options.py") == CLI_MODULE_LINES
    assert line_limit(PACKAGE / "planner.py") == MODULE_LINES


def test_functions_are_measured_from_def_to_last_line():
    tree = ast.parse("class A:\n    def f(self):\n        def g():\n            pass\n        return g\n")
    assert dict(functions(tree)) == {"A.f": 4, "A.f.g": 2}


def test_no_module_over_its_line_limit():
    over = []
    for path in modules():
        n, limit = len(path.read_text(encoding="utf-8").splitlines()), line_limit(path)
        if n > limit:
            over.append(f"localspec/{path.relative_to(PACKAGE).as_posix()}: {n} lines (limit {limit})")
    assert not over, "modules over the size rule:\n" + "\n".join(over)


def test_no_function_over_50_lines():
    over = []
    for path in modules():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        over += [f"localspec/{path.relative_to(PACKAGE).as_posix()}: {name} is {n} lines (limit {FUNCTION_LINES})"
                 for name, n in functions(tree) if n > FUNCTION_LINES]
    assert not over, "functions over the size rule:\n" + "\n".join(over)
