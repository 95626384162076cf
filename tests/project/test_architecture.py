"""The layout the README's architecture section states is the one the imports make: each
package imports exactly the packages its row lists, the packages form no cycle, and no two
modules import each other, at load time or inside a function. The vocabulary (`vocabulary/`)
lies below them all: any package may import it, and it imports the standard library alone. And the
store's entries, the tuner's trials and tuning results reach Python only as their records: no
module makes a table of them into dict rows. The tests mirror the packages (tests/<package>/, the
repository's own under tests/project/), and share what they share through tests/support/ alone: no
test module imports another, nor does a benchmark."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from tests.support import ROOT

GROUND = "vocabulary"  # the ground floor: every package may import it, the table leaves it out
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
        found -= {package, GROUND}
        assert found == stated[package], (
            f"{package}/ imports {sorted(found)}; its README row says {sorted(stated[package])}")


def test_the_vocabulary_imports_the_standard_library_alone() -> None:
    """The vocabulary is the ground floor: its modules import the standard library and each
    other only, at load time or inside a function: never another package of the project
    (whichever pyproject.toml lists), so that every stage can import it, nor a third-party
    package (pyarrow, pydantic, ...), so that it holds the closed sets and pure-Python rules
    alone; their Arrow filters and SQL live beside the tables (`ingest.ran_tuned`)."""
    found: dict[str, set[str]] = {}
    for path in modules(GROUND):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {"." * node.level + (node.module or "")}
            else:
                continue
            top = {name.split(".")[0] for name in names}
            foreign = {name for name in top if name != GROUND and not _standard_library(name)}
            if foreign:
                found.setdefault(str(path.relative_to(ROOT)), set()).update(foreign)
    assert modules(GROUND), f"{GROUND}/ has no modules"
    assert not found, f"{GROUND}/ imports more than the standard library (or itself, relatively): {found}"


def _standard_library(name: str) -> bool:
    """Whether the top-level module `name` is the standard library's (no module at the
    repository's root shadows one: the packages, tests/, benchmarks/)."""
    at_root = (ROOT / name).exists() or (ROOT / f"{name}.py").exists()
    return (name in sys.stdlib_module_names or name == "__future__") and not at_root


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


# A room a newcomer reads in one sitting, and a function one screen long.
MODULE_LINES = 500
FUNCTION_LINES = 60


def test_no_production_module_is_over_500_lines_nor_a_function_over_60() -> None:
    too_long = []
    for package in packages():
        for path in modules(package):
            text = path.read_text()
            if text.count("\n") > MODULE_LINES:
                too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > FUNCTION_LINES:
                        too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, "split these:\n" + "\n".join(too_long)


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


# --- The tests mirror the packages and share through tests/support/ alone ----------------------

TESTS = ROOT / "tests"
SUPPORT = "tests.support"  # the one package of tests/ that a module may import
OWN_TESTS = "project"  # the directory of the repository's own tests (architecture, packaging, ...)
# A string naming a module of tests/ (`preload="tests.support.url_home"`, `import_module(...)`).
_TESTS_MODULE = re.compile(r"tests(\.\w+)+")


def test_each_test_file_lies_under_the_package_it_tests() -> None:
    """tests/<package>/test_*.py for each package pyproject.toml lists, tests/project/ for the
    repository's own tests; helpers and job scripts under tests/support/ (no test file there);
    beside them one conftest.py."""
    known = set(packages()) | {OWN_TESTS}
    misplaced = []
    for path in sorted(TESTS.rglob("*.py")):
        parts = path.relative_to(TESTS).parts
        if parts[0] == "support":
            fits = not path.name.startswith("test_")
        elif len(parts) == 1:
            fits = path.name == "conftest.py"
        else:
            fits = len(parts) == 2 and parts[0] in known and path.name.startswith("test_")
        if not fits:
            misplaced.append(str(path.relative_to(ROOT)))
    assert not misplaced, (f"{misplaced}: a test file goes under tests/<package>/ (or tests/{OWN_TESTS}/), "
                           "a helper or job script under tests/support/")


def imports_of_tests(source: str, name: str = "<module>") -> set[str]:
    """The modules of tests/ that `source` imports, at load time or inside a function, or names
    in a string as a whole module name (a module a process it starts imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _TESTS_MODULE.fullmatch(node.value):
            names.add(node.value)
    return {n for n in names if n == "tests" or n.startswith("tests.")}


def foreign_test_imports(source: str, name: str = "<module>") -> list[str]:
    """What `source` imports of tests/ beyond tests.support: a test module, conftest, tests/
    itself. `from tests.support import JOBS` imports the package, and a name of it."""
    return sorted(n for n in imports_of_tests(source, name)
                  if n != SUPPORT and not n.startswith(f"{SUPPORT}.") and n != "tests")


def test_the_test_import_check_finds_imports_of_test_modules_and_names_nothing_else() -> None:
    found = foreign_test_imports(
        "from tests.hlo.test_family import fp\n"
        "import tests.pipelines.test_nightly\n"
        "from tests.delivery import test_hook\n"
        "def late():\n    from tests.conftest import browser\n"
        "serve(preload='tests.tuner.test_plan')\n")
    # Named by their tails: a whole module name in a string of this file would count as an import.
    assert found == [f"tests.{tail}" for tail in ("conftest", "conftest.browser", "delivery", "delivery.test_hook",
                                                  "hlo.test_family", "hlo.test_family.fp", "pipelines.test_nightly",
                                                  "tuner.test_plan")]
    assert foreign_test_imports(
        "from tests.support import JOBS, worker_tasks\n"
        "from tests.support.serving import fdo\n"
        "import tests.support.url_home\n"
        "serve(preload='tests.support.url_home')\n"
        "print('tests. are run by pytest')\n") == []


def test_no_test_module_imports_another_and_benchmarks_import_only_the_support() -> None:
    """A test module imports no other test module (nor conftest): what tests share lives in
    tests/support/, as optuna/testing holds Optuna's. A benchmark imports from tests/ only
    tests/support/'s fixtures (a running server, the numerics check's programs)."""
    found = {str(path.relative_to(ROOT)): foreign
             for directory in ("tests", "benchmarks") for path in sorted((ROOT / directory).rglob("*.py"))
             if (foreign := foreign_test_imports(path.read_text(), str(path)))}
    assert not found, f"imports of tests/ beyond {SUPPORT}: {found}"


# --- A store entry is read through its record (storage.store_schema.StoreEntry), never as a dict ------

# Arrow's ways of handing a table's rows to Python as dicts (or a frame of them).
_AS_ROWS = frozenset({"to_pylist", "to_pydict", "to_pandas"})
# Arrow's methods whose result holds rows of the table they are called on: entries still.
_VIEWS = frozenset({"filter", "select", "sort_by", "slice", "take", "cast", "combine_chunks", "drop",
                    "drop_columns", "rename_columns", "append_column", "add_column", "set_column",
                    "remove_column", "join", "replace_schema_metadata"})
# The store's schemas (storage.store_schema): a table made with one of them holds entries.
_ENTRY_SCHEMAS = frozenset({"ENTRIES", "STORE_ENTRY_COLUMNS"})
_RECORD_MODULE = "storage/store_schema.py"  # where entries_of turns rows into records
# The tuner's tables (tuner.tables), read with their names: a table read with one holds its rows.
_TUNER_TABLES = frozenset({"TRIALS", "TUNING_RESULTS"})
_TUNER_RECORD_MODULE = "tuner/tables.py"  # where trials_of and results_of turn rows into records
_ENTRIES = "<entries>"  # in a flow: a table of store entries, beside the parameter names it comes from
_Scope = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef


class EntryFlows:
    """Which expressions of a set of modules are tables of store entries, and where one is made
    into Python rows.

    A table of entries is: one made with the store's schemas (`.cast(ENTRIES)`,
    `pa.Table.from_pylist(rows, ENTRIES)`, `STORE_ENTRY_COLUMNS.empty_table()`); what a function
    returns that returns one, whatever its name (`Store.entries`, `live_entries`, any helper
    around them: functions' returns are followed to a fixed point); a name bound to one; a view of one
    (`filter`, `select`, `sort_by`, ...); `pa.concat_tables` of one; what a function returns of
    its parameter when given one (`scope.select(store.entries())`); and a function's parameter
    that some call hands one. What it cannot follow: a table handed on through a container, an
    attribute, a closure or a callback (`Store.update`'s `change(live)`).

    Given other `schemas` (names), it follows the tables made or read with those instead, as
    the store's entries (`warehouse.read(TRIALS)`, `sql.read(home, scope, TUNING_RESULTS)`)."""

    def __init__(self, trees: dict[str, ast.Module], schemas: frozenset[str] = _ENTRY_SCHEMAS) -> None:
        """Follow the tables of `schemas` through `trees`, modules by path."""
        self.schemas = schemas
        self.scopes: dict[str, list[_Scope]] = {
            path: [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
            for path, tree in trees.items()}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self._held: dict[int, list[ast.AST]] = {}  # each scope's nodes, not those of the functions in it
        self._params: dict[int, list[str]] = {}  # each function's parameters
        for scopes in self.scopes.values():
            for scope in scopes:
                self._held[id(scope)] = _held(scope)
                if not isinstance(scope, ast.Module):
                    self.functions.setdefault(scope.name, []).append(scope)
                    self._params[id(scope)] = _params(scope)
        self.returns: dict[str, frozenset[str]] = {name: frozenset() for name in self.functions}
        self.given: dict[str, set[str]] = {name: set() for name in self.functions}  # parameters handed entries
        while True:
            before = (dict(self.returns), {name: set(params) for name, params in self.given.items()})
            for name, defs in self.functions.items():
                self.returns[name] = frozenset().union(*(self._returned(d) for d in defs))
            for scope in (s for scopes in self.scopes.values() for s in scopes):
                env = self._env(scope)
                for call in self._nodes(scope, ast.Call):
                    for callee, params in self._arguments(call):
                        self.given[callee] |= {p for p, arg in params.items() if _ENTRIES in self.flows(arg, env)}
            if (self.returns, self.given) == before:
                break

    def rows_made(self, skip: str = _RECORD_MODULE) -> list[str]:
        """`path:line: call` of each call that makes a table of entries into rows, outside `skip`."""
        found = []
        for path, scopes in self.scopes.items():
            if path == skip:
                continue
            for scope in scopes:
                env = self._env(scope)
                for call in self._nodes(scope, ast.Call):
                    if (isinstance(call.func, ast.Attribute) and call.func.attr in _AS_ROWS
                            and _ENTRIES in self.flows(call.func.value, env)):
                        found.append(f"{path}:{call.lineno}: {ast.unparse(call)[:100]}")
        return found

    def flows(self, node: ast.AST, env: dict[str, frozenset[str]]) -> frozenset[str]:
        """What `node`'s value is a table of (see the class), in a scope whose names hold `env`:
        _ENTRIES, and the parameters of the scope it is a view of."""
        if isinstance(node, ast.Name):
            return env.get(node.id, frozenset())
        if isinstance(node, ast.IfExp):
            return self.flows(node.body, env) | self.flows(node.orelse, env)
        if isinstance(node, ast.NamedExpr):
            return self.flows(node.value, env)
        if not isinstance(node, ast.Call):
            return frozenset()
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
        if any(isinstance(a, ast.Name) and a.id in self.schemas for a in arguments) or (
                name == "empty_table" and isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name) and func.value.id in self.schemas):
            return frozenset({_ENTRIES})
        found: set[str] = set()
        if isinstance(func, ast.Attribute) and name in _VIEWS:
            found |= self.flows(func.value, env)
        if name == "concat_tables" and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
            for element in node.args[0].elts:
                found |= self.flows(element, env)
        for callee, params in self._arguments(node):
            for source in self.returns[callee]:
                if source == _ENTRIES:
                    found.add(_ENTRIES)
                elif source in params:
                    found |= self.flows(params[source], env)
        return frozenset(found)

    def _returned(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> frozenset[str]:
        env = self._env(function, symbolic=True)
        return frozenset().union(*(self.flows(r.value, env) for r in self._nodes(function, ast.Return)
                                   if r.value is not None))

    def _env(self, scope: _Scope, symbolic: bool = False) -> dict[str, frozenset[str]]:
        """What the names of `scope` hold: its parameters themselves (and _ENTRIES where some call
        hands them entries, unless `symbolic`), then what its assignments bind."""
        env: dict[str, frozenset[str]] = {}
        if not isinstance(scope, ast.Module):
            for param in self._params[id(scope)]:
                given = not symbolic and param in self.given[scope.name]
                env[param] = frozenset({param, _ENTRIES} if given else {param})
        assignments = [(target.id, node.value) for node in self._nodes(scope, (ast.Assign, ast.AnnAssign))
                       for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                       if isinstance(target, ast.Name) and node.value is not None]
        changed = bool(assignments)
        while changed:  # a name bound from one bound further down (in a loop)
            changed = False
            for name, value in assignments:
                flows = env.get(name, frozenset()) | self.flows(value, env)
                changed |= flows != env.get(name)
                env[name] = flows
        return env

    def _arguments(self, call: ast.Call) -> list[tuple[str, dict[str, ast.expr]]]:
        """For each project function `call` may call (by its name): the arguments by parameter."""
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        found = []
        for function in self.functions.get(name or "", ()):
            params = self._params[id(function)]
            bound = params[1:] if isinstance(func, ast.Attribute) and params[:1] in (["self"], ["cls"]) else params
            arguments = dict(zip(bound, call.args))
            arguments.update({k.arg: k.value for k in call.keywords if k.arg in params})
            found.append((function.name, arguments))
        return found

    def _nodes(self, scope: _Scope, kind: type | tuple[type, ...]) -> list:
        return [node for node in self._held[id(scope)] if isinstance(node, kind)]


def _held(scope: _Scope) -> list[ast.AST]:
    """The calls, assignments and returns in `scope`, not in the functions defined inside it
    (scopes of their own)."""
    found, pending = [], list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, (ast.Call, ast.Assign, ast.AnnAssign, ast.Return)):
            found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _params(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]


def _flows_of(**sources: str) -> EntryFlows:
    return EntryFlows({path: ast.parse(source) for path, source in sources.items()})


def test_the_entry_check_finds_entries_made_rows_however_they_travel_and_names_nothing_else():
    """The check below, on code written here: each way a table of entries reaches `to_pylist`
    is found, in any name; rows of other tables, a column's values and the record are not."""
    store = ("ENTRIES = schema()\n"
             "class Store:\n"
             "    def entries(self, version=None):\n"
             "        return conform(read(version)).cast(ENTRIES)\n"
             "def live_entries(home):\n"
             "    table = Store(home).entries()\n"
             "    return table.filter(alive(table))\n"
             "def entries_of(table):\n"
             "    return [StoreEntry.from_row(row) for row in table.to_pylist()]\n")
    caught = {
        "direct": "rows = Store(home).entries().to_pylist()",
        "renamed, a view": "snapshot = live_entries(home)\nsnapshot = snapshot.select(['key'])\n"
                           "keys = [r['key'] for r in snapshot.to_pylist()]",
        "a helper of any name": "def newest(home):\n    return Store(home).entries().sort_by('measured_at')\n"
                                "def show(home):\n    return newest(home).slice(0, 3).to_pydict()",
        "through a pass-through": "class Scope:\n    def narrow(self, table):\n        return table.filter(m)\n"
                                  "def rows(scope, home):\n    return scope.narrow(Store(home).entries()).to_pylist()",
        "a parameter handed entries": "def apply(decisions, live):\n"
                                      "    return {r['key']: r for r in live.to_pylist()}\n"
                                      "def run(home):\n    return apply([], Store(home).entries())",
        "built on the schema": "table = pa.Table.from_pylist(rows, ENTRIES)\nfirst = table.to_pylist()[0]",
        "concatenated": "both = pa.concat_tables([Store(h).entries(1), Store(h).entries(2)])\nboth.to_pandas()",
    }
    for what, source in caught.items():
        found = _flows_of(**{"storage/store_schema.py": store, "user.py": source}).rows_made()
        assert len(found) == 1 and found[0].startswith("user.py:"), (what, found)
    fine = ("records = entries_of(Store(home).entries())\n"
            "keys = Store(home).entries().column('key').to_pylist()\n"
            "results = warehouse.read(TUNING_RESULTS).to_pylist()\n"
            "def rows(table):\n    return table.to_pylist()\n"
            "def runs(home):\n    return rows(warehouse.read(GRAPH_RUNS))\n")
    assert _flows_of(**{"storage/store_schema.py": store, "user.py": fine}).rows_made() == []


def test_no_module_reads_a_store_entry_as_a_dict():
    """Outside storage/store_schema.py, no production module makes a table of store entries into dict
    rows (EntryFlows says what it follows): an entry reaches Python as a `StoreEntry`, through
    `entries_of`/`StoreEntry.from_row`, and the record has no dict interface, so `entry["key"]`
    or `entry.get("key")` on one fails at once."""
    from storage.store_schema import StoreEntry

    trees = {str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
             for package in packages() for path in modules(package)}
    assert EntryFlows(trees).rows_made() == []
    assert not any(hasattr(StoreEntry, name) for name in ("__getitem__", "get", "keys", "items"))


def test_the_tuner_table_check_finds_their_rows_made_dicts_and_names_nothing_else():
    """The check below, on code written here: a read of the tuner's tables made rows, however it
    travels, is found; their records, a column's values and other tables' rows are not."""
    tables = ("def trials_of(table):\n    return [TrialRow.from_row(row) for row in table.to_pylist()]\n")
    caught = {
        "direct": "rows = warehouse.read(TUNING_RESULTS).to_pylist()",
        "filtered, then rows": "t = warehouse.read(TRIALS, ['kind'])\nt = t.filter(m)\nrows = t.to_pylist()",
        "a parameter handed one": "def best(results):\n    return [r['config'] for r in results.to_pylist()]\n"
                                  "def run(home):\n    return best(Warehouse(home).read(TUNING_RESULTS))",
    }
    for what, source in caught.items():
        found = _flows_of_tuner(**{"tuner/tables.py": tables, "user.py": source}).rows_made(_TUNER_RECORD_MODULE)
        assert len(found) == 1 and found[0].startswith("user.py:"), (what, found)
    fine = ("records = trials_of(warehouse.read(TRIALS))\n"
            "tasks = warehouse.read(TUNING_RESULTS).column('task_id').to_pylist()\n"
            "runs = warehouse.read(GRAPH_RUNS).to_pylist()\n")
    assert _flows_of_tuner(**{"tuner/tables.py": tables, "user.py": fine}).rows_made(_TUNER_RECORD_MODULE) == []


def test_no_module_reads_a_trial_or_a_tuning_result_as_a_dict():
    """Outside tuner/tables.py, no production module makes a read of the `trials` or
    `tuning_results` table into dict rows: a row reaches Python as a `TrialRow` or a
    `ResultRow`, through `trials_of`/`results_of` (their `from_row`), which have no dict
    interface. Vectorized code may read their columns (`column(name)`, filters, group-bys,
    Beam), which makes no rows."""
    from tuner.tables import ResultRow, TrialRow

    trees = {str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
             for package in packages() for path in modules(package)}
    assert EntryFlows(trees, _TUNER_TABLES).rows_made(_TUNER_RECORD_MODULE) == []
    assert not any(hasattr(record, name) for record in (TrialRow, ResultRow)
                   for name in ("__getitem__", "get", "keys", "items"))


def _flows_of_tuner(**sources: str) -> EntryFlows:
    return EntryFlows({path: ast.parse(source) for path, source in sources.items()}, _TUNER_TABLES)


# --- A closed set's value is written as its enum, never as a bare string -------------------------

# The modules that declare the warehouse's and the store's schemas: their comments and column
# declarations name the values their columns hold.
_SCHEMA_MODULES = re.compile(r"(^|/)tables\.py$|^storage/store_schema\.py$")
# Arrow's functions whose positional arguments are values compared with or filled into a column.
_ARROW_VALUES = frozenset({"equal", "not_equal", "is_in", "index_in", "fill_null", "scalar", "repeat"})
# A value quoted as SQL (or script) text spells it inside a string: `where kind = 'graph'`.
_QUOTED = re.compile(r"'([a-z0-9][a-z0-9 _-]*)'")
# Literals equal to a vocabulary value that stand for something else, each with its reason.
VALUE_LITERALS_ALLOWED: dict[tuple[str, str], str] = {
    ("ingest/ran_tuned.py", "holdout"): "the name of graph_runs' column, not a hit's outcome",
    ("pipelines/cli/store.py", "import"): "an action of `fdo store`, not a provenance",
    ("pipelines/cli/validate.py", "add"): "an action of `fdo toolchain`, not a store change",
    ("pipelines/cli/validate.py", "remove"): "an action of `fdo toolchain`, not a store change",
    ("pipelines/cli/evaluate.py", "no significant gain"): "`fdo evaluate`'s measurement in words, "
                                                          "beside \"significant gain\": no task's verdict",
    ("pipelines/dashboard/page.py", "graph"): "the name of the dashboards' graph filter (a fingerprint)",
    ("pipelines/dashboard/scope.py", "graph"): "the name of the dashboards' graph filter (a fingerprint)",
    ("pipelines/dashboard/page.py", "tuner"): "the dashboards' tuner page",
    ("pipelines/dashboard/page.py", "error"): "a chart's state on the page (and in its script)",
    ("pipelines/dashboard/grids.py", "defaults"): "how a grid shows an empty config, in words",
    ("delivery/fingerprint_memo.py", "defaults"): "the memo key's text for a compile with the job's options",
    ("tuner/analyze.py", "failed"): "a column's heading in `fdo analyze flags`' table",
    ("tuner/result.py", "accepted"): "a key of result.json as earlier versions wrote it",
    ("validator/run.py", "validator"): "a directory of the home (validator/runs/)",
    ("workloads/simulator/catalog.py", "graph"): "the unit of a progress bar",
    ("delivery/store_writer.py", "none"): "a version's reason in words: no relaxed-numerics teams",
    ("pipelines/cli/store.py", "none"): "the policy told in words: no relaxed-numerics teams",
}


def vocabulary_values() -> dict[str, str]:
    """Every value of the vocabulary's enums -> a member that has it (`Kind.GRAPH`)."""
    import importlib
    import pkgutil
    from enum import Enum

    import vocabulary

    values: dict[str, str] = {}
    for info in pkgutil.iter_modules(vocabulary.__path__):
        module = importlib.import_module(f"{GROUND}.{info.name}")
        for enum in vars(module).values():
            if isinstance(enum, type) and issubclass(enum, Enum) and enum.__module__ == module.__name__:
                values.update({member.value: f"{enum.__name__}.{member.name}" for member in enum
                               if member.value not in values})
    return values


def value_literals(trees: dict[str, ast.Module], values: dict[str, str]) -> list[str]:
    """Where a module of `trees` (by path) writes a vocabulary value as a string literal,
    `path:line: 'value' (Enum.MEMBER)`, but for the schema modules and VALUE_LITERALS_ALLOWED.

    The rule: a str constant (never a docstring) equal to a value, as spelled now or as earlier
    versions spelled it (underscores or hyphens for its spaces: "build_option", which no longer
    equals its member), counts where it stands for a value, not for a name. It stands for a
    value where it is compared (`==`, `!=`, `in`, `not in`, a `match` case), iterated over
    (`for kind in (...)`), passed as a keyword argument, a parameter's default or the default
    of `.get(key, default)`, held as a dict's value (not its key), assigned, returned,
    formatted into an f-string, one of a `Literal[...]`'s values, or passed to Arrow's
    comparisons and fills (`pc.equal`, `pc.fill_null`, `pa.scalar`, ...); through a
    conditional expression's branches, and the elements of a tuple, list or set that is a set
    of values (every element a value, as a literal or a member: one that holds another literal,
    a name or a starred list is a record or a list of names, columns and keys, whose literals
    are names). A dict's key, a subscript (`row["holdout"]`) or another positional argument
    (`column(...)`, `add_argument(...)`, a label) is a name. And a string's text (f-strings'
    parts too: SQL, a page's script) quotes no value (`'graph'`): SQL builds it from the enum
    (`f"'{Kind.GRAPH}'"`). A member of a package's own enum (declared in its class body)
    spells its own value: where it equals a vocabulary value it means the same thing (a stage
    done or failed, a plan's search, re-keyed autotune results)."""
    found = []
    for path, tree in trees.items():
        if _SCHEMA_MODULES.search(path):
            continue
        skipped = _docstrings_and_enum_members(tree)
        positions = _value_positions(tree, values)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in skipped:
                continue
            quoted = [_as_value(text, values) for text in _QUOTED.findall(node.value)]
            spelled = [value for value in (_as_value(node.value, values) if id(node) in positions else None, *quoted)
                       if value is not None]
            found += [f"{path}:{node.lineno}: {value!r} ({values[value]})" for value in spelled
                      if (path, value) not in VALUE_LITERALS_ALLOWED]
    return found


def _as_value(text: str, values: dict[str, str]) -> str | None:
    """The value of `values` that `text` spells, now or as earlier versions did (underscores or
    hyphens for its spaces, as `vocabulary.closed_set.ClosedSet` reads them); None if none."""
    spaced = " ".join(text.replace("_", " ").replace("-", " ").split())
    return text if text in values else spaced if spaced != text and spaced in values else None


def _docstrings_and_enum_members(tree: ast.Module) -> set[int]:
    """The ids of the docstrings' constants and of the values of enum members declared here."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skipped.add(id(first.value))
        if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).endswith(("Enum", "ClosedSet")) for base in node.bases):
            skipped |= {id(statement.value) for statement in node.body if isinstance(statement, ast.Assign)}
    return skipped


def _value_positions(tree: ast.Module, values: dict[str, str]) -> set[int]:
    """The ids of the expressions of `tree` that stand for values (see `value_literals`)."""
    positions: set[int] = set()

    def value(node: ast.expr | None) -> None:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            if all(isinstance(e, ast.Attribute) or (isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                    and _as_value(e.value, values)) for e in node.elts):
                positions.update(id(e) for e in node.elts)
                for element in node.elts:
                    value(element)
        elif isinstance(node, ast.IfExp):
            value(node.body)
            value(node.orelse)
        elif isinstance(node, ast.BoolOp):
            for operand in node.values:
                value(operand)
        elif node is not None:
            positions.add(id(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                value(operand)
        elif isinstance(node, (ast.For, ast.comprehension)):
            value(node.iter)
        elif isinstance(node, ast.keyword):
            value(node.value)
        elif isinstance(node, ast.arguments):
            for default in (*node.defaults, *node.kw_defaults):
                value(default)
        elif isinstance(node, ast.Dict):
            for held in node.values:
                value(held)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)):
            value(node.value)
        elif isinstance(node, (ast.MatchValue, ast.FormattedValue)):
            value(node.value)
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1] == "Literal":
            value(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _ARROW_VALUES:
                for argument in node.args:
                    value(argument)
            elif node.func.attr == "get" and len(node.args) == 2:
                value(node.args[1])
    return positions


def _literals_of(**sources: str) -> list[str]:
    values = {"graph": "Kind.GRAPH", "op": "Kind.OP", "holdout": "HitOutcome.HOLDOUT", "search": "Origin.SEARCH",
              "option": "Channel.OPTION", "build option": "Channel.BUILD_OPTION"}
    return value_literals({path: ast.parse(source) for path, source in sources.items()}, values)


def test_the_value_check_finds_values_written_as_strings_and_names_nothing_else():
    """The check below, on code written here: each way a value is written as a string is
    found; names, records, docstrings, schemas and the enums' own declarations are not."""
    caught = {
        "compared": "if row['kind'] == 'graph':\n    pass",
        "in a set of values": "graphs = [e for e in entries if e.kind in ('graph', 'op')]",
        "iterated over": "for kind in ('graph', 'op'):\n    draw(kind)",
        "a keyword argument": "Realized(kind='graph')",
        "a default": "def top(rows, kind='graph'):\n    pass",
        "the default of get": "kind = row.get('kind', 'graph')",
        "a dict's value": "KIND_OF = {GRAPH_RUNS.name: 'graph'}",
        "assigned": "kind = 'op'",
        "returned": "def kind():\n    return 'graph'",
        "Arrow's comparison": "graphs = pc.equal(live.column('kind'), 'graph')",
        "Arrow's fill": "kind = pc.fill_null(column, 'graph')",
        "formatted": "print(f\"no {'graph' if whole else kind} candidates\")",
        "a match case": "match kind:\n    case 'op':\n        pass",
        "quoted in SQL": "sql = f\"select '{x}' as team, 'graph' as kind from graph_runs\"",
        "mixed with a member": "kinds = (Kind.GRAPH, 'op')",
        "a Literal's value": "kind: Literal['graph', 'op']",
        "as spelled before": "if spec.channel in ('option', 'build_option'):\n    pass",
    }
    for what, source in caught.items():
        assert _literals_of(**{"user.py": source}), what
    fine = ('"""A docstring: \'graph\' runs, holdout arm."""\n'
            "holdout = row['holdout']\n"  # a subscript: a column's name
            "COLUMNS = ['dt', 'job_id', 'holdout']\n"  # a list of names
            "more = [*COLUMNS, 'holdout']\n"
            "read(table, [column, 'holdout'])\n"
            "table.column('holdout')\n"  # a positional argument: a name
            "TEAMS = ('ads', 'search', 'maps')\n"
            "COLORS = {Kind.GRAPH: 'blue'}\n"
            "sql = f\"select '{Kind.GRAPH}' as kind\"\n"
            "class Path(StrEnum):\n    SEARCH = 'search'\n"
            "parser.add_argument('graph', metavar='GRAPH')\n"
            "if 'holdout' in table.column_names:\n    pass\n")
    assert _literals_of(**{"user.py": fine}) == ["user.py:13: 'holdout' (HitOutcome.HOLDOUT)"]
    assert _literals_of(**{"ranking/tables.py": "KINDS = ('graph', 'op')"}) == []  # a schema module
    assert _literals_of(**{"ingest/ran_tuned.py": "if 'holdout' in runs.column_names:\n    pass"}) == []


def test_no_module_writes_a_vocabulary_value_as_a_string():
    """Outside the vocabulary and the schema modules, no production module writes a value of
    the vocabulary's closed sets as a string where it stands for the value (`value_literals`
    says where that is): it writes the member (`Kind.GRAPH`), and SQL builds the value's text
    from it. A literal that equals a value but stands for something else (a command's action,
    a page's name) is one of VALUE_LITERALS_ALLOWED, with its reason."""
    trees = {str(path.relative_to(ROOT)): ast.parse(path.read_text(), str(path))
             for package in packages() if package != GROUND for path in modules(package)}
    assert value_literals(trees, vocabulary_values()) == []
    used = {(path, value) for path, tree in trees.items() for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            for value in {node.value, *_QUOTED.findall(node.value)}} & set(VALUE_LITERALS_ALLOWED)
    assert used == set(VALUE_LITERALS_ALLOWED), f"allowed, never written: {set(VALUE_LITERALS_ALLOWED) - used}"
