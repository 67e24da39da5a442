"""The size rules (STYLE.md, "Size"): no module in localspec/ over 450 lines (the command line's,
localspec/cli/, over 500) and no function over 50 lines; and the floors (STYLE.md, "The shape"): no
import cycle between the package's modules, counting the imports made inside functions, and no
import of a higher floor than the README's Layout gives the importer. Pure: reads the source and
the README, imports nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "localspec"
MODULE_LINES = 450
CLI_MODULE_LINES = 500  # localspec/cli/: a command's options and help text are long by nature
FUNCTION_LINES = 50
TYPE_ONLY = ("TYPE_CHECKING", "typing.TYPE_CHECKING")  # `if TYPE_CHECKING:` imports never run


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


def module_name(path: Path) -> str:
    """'models', 'cli.options', 'cli' (cli/__init__.py); '' for the package's own __init__.py."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_nodes(node: ast.AST):
    """Every node under node, in functions too, but not in the body of an `if TYPE_CHECKING:`."""
    for child in ast.iter_child_nodes(node):
        kept = child.orelse if isinstance(child, ast.If) and ast.unparse(child.test) in TYPE_ONLY else [child]
        for n in kept:
            yield n
            yield from runtime_nodes(n)


def imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The package's modules (named as module_name names them) that module's code imports, at its
    top or inside a function; `from . import x` names module x where known holds it, else the package."""
    out = set()
    for node in runtime_nodes(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.partition(".")[2] for a in node.names if a.name.split(".")[0] == "localspec"}
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "localspec"):
            if node.level:
                parts = module.split(".")[: None if is_package else -1] if module else []
                parts = parts[: len(parts) - node.level + 1] + ([node.module] if node.module else [])
            else:
                parts = node.module.split(".")[1:]
            base = ".".join(parts)
            for alias in node.names:
                sub = f"{base}.{alias.name}".lstrip(".")
                out.add(sub if sub in known else base)
    return out


def floor_graph() -> dict[str, set[str]]:
    """Which parts of the package import which: a module of localspec/ is a part, and a subpackage
    (cli/, server/, tune/, planning/) is one part, as the README's layout lists them."""
    def part(module: str) -> str:
        return module.split(".")[0] or "__init__"

    known = {module_name(p) for p in modules()}
    graph: dict[str, set[str]] = {}
    for path in modules():
        module = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        uses = {part(m) for m in imported(tree, module, path.name == "__init__.py", known)}
        graph.setdefault(part(module), set()).update(uses - {part(module)})
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of graph as [a, b, ..., a], or [] where there is none (a depth-first search)."""
    done: set[str] = set()

    def visit(path: list[str]) -> list[str]:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt in path:
                return path[path.index(nxt):] + [nxt]
            if nxt not in done:
                cycle = visit(path + [nxt])
                if cycle:
                    return cycle
        done.add(path[-1])
        return []

    for start in sorted(graph):
        cycle = [] if start in done else visit([start])
        if cycle:
            return cycle
    return []


def test_imports_are_read_in_functions_but_not_for_type_checking():
    source = ("from typing import TYPE_CHECKING\nfrom .. import models\nfrom . import cli\n"
              "if TYPE_CHECKING:\n    from ..tracker import CostTracker\n"
              "def f():\n    from ..naming import lookup\n    import localspec.llama\n")
    known = {"models", "naming", "tracker", "llama", "cli", "cli.flags"}
    assert imported(ast.parse(source), "cli.flags", False, known) == {"models", "cli", "naming", "llama"}


def test_a_cycle_through_a_function_import_is_found():
    # the cycle this package had: models imported naming inside resolve_model, naming imported models
    graph = {"models": {"config", "naming"}, "naming": {"discovery", "models"}, "discovery": {"models"}}
    assert find_cycle(graph) == ["discovery", "models", "naming", "discovery"]  # from the first name in order
    assert find_cycle({"naming": {"discovery", "models"}, "discovery": {"models"}, "models": {"config"}}) == []


def test_no_import_cycle():
    graph = floor_graph()
    assert {"models", "naming", "discovery", "cli", "server"} <= set(graph) and "models" in graph["naming"]
    cycle = find_cycle(graph)
    assert not cycle, "an import cycle (a module imported inside a function counts): " + " -> ".join(cycle)


README = PACKAGE.parent / "README.md"


def readme_floors(text: str) -> dict[str, int]:
    """The README's Layout section as part -> floor: each `floor N` line and the lines under it name
    localspec/ modules and subpackages (a subpackage's files are its one part)."""
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    floors, floor = {}, None
    for line in block.splitlines():
        found = re.match(r"(?:floor (\d+))?\s+localspec/(\w+)", line)
        if found:
            floor = int(found[1]) if found[1] else floor
            floors.setdefault(found[2], floor)
    return floors


def test_the_readme_floors_are_read_as_written():
    text = ("## Layout\n\n```\nfloor 1  localspec/llama.py  x\n         localspec/config.py  y\n"
            "                                  localspec/ in prose is no entry\n"
            "floor 2  localspec/planning/  parts\n         localspec/planning/plans.py  z\n```\n")
    assert readme_floors(text) == {"llama": 1, "config": 1, "planning": 2}


def test_every_import_goes_to_its_own_floor_or_below():
    floors = readme_floors(README.read_text(encoding="utf-8"))
    graph = floor_graph()
    unlisted = sorted(set(graph) - set(floors) - {"__init__", "__main__"})
    assert not unlisted, f"modules the README's Layout does not list: {unlisted}"
    upward = sorted(f"{a} (floor {floors[a]}) imports {b} (floor {floors[b]})"
                    for a, uses in graph.items() if a in floors for b in uses if floors.get(b, 0) > floors[a])
    assert not upward, "imports from a higher floor than the README gives the importer:\n" + "\n".join(upward)
