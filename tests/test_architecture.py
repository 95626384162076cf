"""The layout the README's architecture section states is the one the imports make: each
package imports exactly the packages its row lists, the packages form no cycle, and no two
modules import each other, at load time or inside a function."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `(\w+)/`.*\| (?P<imports>[^|]*) \|\s*$")


def packages() -> list[str]:
    """The project's packages, as pyproject.toml lists them."""
    text = (ROOT / "pyproject.toml").read_text()
    listed = re.search(r"^include = \[(?P<names>[^\]]*)\]", text, re.M)
    assert listed, "pyproject.toml lists no packages under [tool.setuptools.packages.find]"
    return sorted({name.strip(' "*.') for name in listed.group("names").split(",")} - {"benchmarks", ""})


def readme_imports() -> dict[str, set[str]]:
    """package -> the packages its README row says it imports (the table's last column)."""
    section = (ROOT / "README.md").read_text().split("## Architecture", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = set(re.findall(r"`(\w+)/`", match.group("imports")))
    return rows


def modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "tests" not in p.parts)


def imported(path: Path, known: list[str]) -> set[str]:
    """The dotted names of the project modules `path` imports, at load time or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from pkg import module` imports the module; `from module import name` the module.
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in names if name.split(".")[0] in known}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_each_package_imports_exactly_what_the_readme_says() -> None:
    known = packages()
    stated = readme_imports()
    assert set(stated) == set(known), "the README's architecture table must have a row per package"
    for package in known:
        found = {name.split(".")[0] for path in modules(package) for name in imported(path, known)}
        found.discard(package)
        assert found == stated[package], (
            f"{package}/ imports {sorted(found)}; its README row says {sorted(stated[package])}")


def test_the_packages_form_no_cycle() -> None:
    stated = readme_imports()
    order: list[str] = []
    remaining = dict(stated)
    while remaining:  # Kahn: take a package whose imports are all taken
        ready = sorted(p for p, deps in remaining.items() if deps <= set(order))
        assert ready, f"the packages {sorted(remaining)} import each other in a cycle"
        order += ready
        for package in ready:
            del remaining[package]


def test_no_two_modules_import_each_other() -> None:
    """Imports inside functions count: a cycle hidden in one still ties the modules together."""
    known = packages()
    paths = {module_name(p): p for package in known for p in modules(package)}
    # A module's own packages load before it whatever it imports: an edge to them is no cycle.
    graph = {name: {m for m in imported(path, known)
                    if m in paths and m != name and not name.startswith(f"{m}.")}
             for name, path in paths.items()}
    # Tarjan's strongly connected components: a component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    assert not cycles, f"modules importing each other: {cycles}"
