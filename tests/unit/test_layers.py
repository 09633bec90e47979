"""The layers' arrows, read from the import graph of every installed module (ast, not grep).

Rules (docs/DESIGN.md, "Inside"):

- ``_core`` imports only ``_core``, the standard library, numpy, attrs and cattrs; no trio,
  httpx, anyio, asyncio, threads, sockets or subprocesses; no file system (no pathlib,
  shutil, tempfile, builtin ``open``, ``os`` file calls), except ``_core/files.py``, the one
  module that reads a file the caller named;
- ``_stores``, ``_decisions``, ``_routing`` and ``_judge`` import only ``_core``
  (``_routing`` may also import ``_decisions``);
- ``toolroute.providers`` imports only ``_core`` (and itself);
- ``_runtime`` and the public modules import anything but ``_cli`` (``__main__`` runs it);
- exactly one module imports httpx (``providers/_http/transport.py``);
- the providers' pure parts (the retry rules and core, the codec protocols and helpers)
  import neither trio nor httpx nor the modules that do, and read no clock of their own;
- vendor codecs reach the network only through the decision loop: no vendor module imports
  the HTTP module;
- nothing installed imports the test tree or edits ``sys.path``;
- no import cycles between modules, counting imports made only for type checkers;
- layer folders have an ``__init__.py`` that imports nothing.

Every test reports every violation it finds as ``file:line: what``.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs

import toolroute
import toolroute.providers

ROOTS = {
    "toolroute": Path(toolroute.__file__).parent,
    "toolroute.providers": Path(toolroute.providers.__file__).parent,
}
TESTS = Path(__file__).resolve().parents[1]

#: Layers that may import only the core (and, for routing, the decisions layer).
CORE_ONLY = {"_stores": set(), "_decisions": set(), "_judge": set(), "_routing": {"_decisions"}}
#: Layers that may import anything (the command line and what only it runs).
ANYTHING = {"_cli", "_bench"}
#: Third-party packages the pure core may use.
CORE_THIRD_PARTY = {"numpy", "attrs", "cattrs"}
#: Standard-library modules the pure core must not import: I/O, threads, event loops.
CORE_FORBIDDEN = {
    "trio",
    "httpx",
    "anyio",
    "asyncio",
    "threading",
    "socket",
    "subprocess",
    "pathlib",
    "shutil",
    "tempfile",
    "glob",
    "io",
    "mmap",
    "multiprocessing",
    "concurrent",
    "selectors",
    "sqlite3",
}
#: ``os`` functions that touch the file system.
OS_FILE_CALLS = {
    "access",
    "chdir",
    "chmod",
    "chown",
    "fdopen",
    "fstat",
    "getcwd",
    "link",
    "listdir",
    "lstat",
    "makedirs",
    "mkdir",
    "mkfifo",
    "open",
    "read",
    "readlink",
    "remove",
    "removedirs",
    "rename",
    "renames",
    "replace",
    "rmdir",
    "scandir",
    "stat",
    "statvfs",
    "symlink",
    "truncate",
    "unlink",
    "utime",
    "walk",
    "write",
}
OS_PATH_FILE_CALLS = {
    "exists",
    "getatime",
    "getctime",
    "getmtime",
    "getsize",
    "isdir",
    "isfile",
    "islink",
    "ismount",
    "lexists",
    "realpath",
    "samefile",
}
#: The one core module that reads files (those the caller named).
CORE_FILES = "toolroute._core.files"
HTTPX_IMPORTER = "toolroute.providers._http.transport"
#: Provider modules that decide without I/O: the drivers (sync and async) carry them out.
PROVIDERS_PURE = {
    "toolroute.providers._http.rules",
    "toolroute.providers._http.retry",
    "toolroute.providers._http.plain_errors",
    "toolroute.providers._deciders.codec",
    "toolroute.providers._deciders.wire",
}
#: What the pure provider modules must not import.
PROVIDERS_IO = {
    "trio",
    "httpx",
    "time",
    "toolroute.providers._http.transport",
    "toolroute.providers._http.async_driver",
}
VENDORS = "toolroute.providers._deciders.vendors"


@attrs.frozen
class Import:
    source: str  # importing module
    target: str  # imported module (a toolroute module, or an external top-level name)
    line: int
    internal: bool


@attrs.frozen
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool

    def where(self, line: int) -> str:
        return f"{self.path}:{line}"


@functools.cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for prefix, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if prefix == "toolroute" and parts[0] == "providers":
                continue  # its own root (identical in a regular install)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([prefix, *parts])
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            found[name] = Module(name, path, tree, is_package)
    return found


def _resolve(module: Module, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    base = package.split(".")
    if node.level > 1:
        base = base[: -(node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def imports() -> list[Import]:
    known = modules()
    found: list[Import] = []
    for module in known.values():
        for node in ast.walk(module.tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                if base.split(".")[0] != "toolroute":
                    targets = [base]
                else:
                    targets = [
                        f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                        for alias in node.names
                    ]
            for target in targets:
                internal = target.split(".")[0] == "toolroute"
                if internal and target not in known:
                    # ``import toolroute.x.y`` names a module; anything else is its package.
                    while target not in known and "." in target:
                        target = target.rpartition(".")[0]
                found.append(Import(module.name, target, node.lineno, internal))
    return found


def layer(name: str) -> str:
    """``_core``, ``_runtime`` …, ``providers`` or ``public``."""
    parts = name.split(".")
    if parts[:2] == ["toolroute", "providers"]:
        return "providers"
    if len(parts) > 1 and parts[1].startswith("_") and parts[1] != "__main__":
        return parts[1]
    return "public"


def where(imp: Import) -> str:
    return modules()[imp.source].where(imp.line)


def report(violations: list[str]) -> str:
    unique = sorted(set(violations))
    return f"{len(unique)} violation(s):\n" + "\n".join(unique)


# -- the pure core ---------------------------------------------------------------------------


def core_import_violations() -> Iterator[str]:
    stdlib = set(sys.stdlib_module_names)
    for imp in imports():
        if layer(imp.source) != "_core":
            continue
        if imp.internal:
            if layer(imp.target) != "_core":
                yield f"{where(imp)}: the core imports {imp.target}"
            continue
        top = imp.target.split(".")[0]
        if top in CORE_FORBIDDEN:
            yield f"{where(imp)}: the core imports {imp.target} (no I/O, threads or event loops)"
        elif top not in stdlib and top not in CORE_THIRD_PARTY:
            yield f"{where(imp)}: the core imports the third-party {imp.target}"


def core_file_system_violations() -> Iterator[str]:
    for module in modules().values():
        if layer(module.name) != "_core" or module.name == CORE_FILES:
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Name) and func.id == "open":
                    yield f"{module.where(node.lineno)}: open() outside _core/files.py"
                elif isinstance(func, ast.Attribute) and _is_os_file_call(func):
                    yield f"{module.where(node.lineno)}: os file call {ast.unparse(func)}()"
            elif isinstance(node, ast.ImportFrom) and node.module in ("os", "os.path"):
                calls = OS_FILE_CALLS if node.module == "os" else OS_PATH_FILE_CALLS
                for alias in node.names:
                    if alias.name in calls:
                        yield f"{module.where(node.lineno)}: imports {node.module}.{alias.name}"


def _is_os_file_call(func: ast.Attribute) -> bool:
    owner = ast.unparse(func.value)
    return (owner == "os" and func.attr in OS_FILE_CALLS) or (
        owner == "os.path" and func.attr in OS_PATH_FILE_CALLS
    )


def test_the_core_imports_only_the_core_stdlib_numpy_attrs_cattrs() -> None:
    violations = list(core_import_violations())
    assert not violations, report(violations)


def test_the_core_touches_no_file_outside_files_py() -> None:
    violations = list(core_file_system_violations())
    assert not violations, report(violations)


# -- arrows between layers -------------------------------------------------------------------


def arrow_violations() -> Iterator[str]:
    for imp in imports():
        if not imp.internal:
            continue
        source, target = layer(imp.source), layer(imp.target)
        if source == target or source in ANYTHING:
            continue
        if source in CORE_ONLY and target not in {"_core"} | CORE_ONLY[source]:
            allowed = " and ".join(["_core", *sorted(CORE_ONLY[source])])
            yield f"{where(imp)}: {source} imports {imp.target} (it may import {allowed} only)"
        elif source == "providers" and target != "_core":
            yield f"{where(imp)}: providers import {imp.target} (they may import _core only)"
        elif target in ANYTHING and imp.source != "toolroute.__main__":
            yield f"{where(imp)}: {imp.source} imports the command line ({imp.target})"


def test_layers_import_only_what_their_arrows_allow() -> None:
    violations = list(arrow_violations())
    assert not violations, report(violations)


def test_exactly_one_module_imports_httpx() -> None:
    importers = {imp.source for imp in imports() if imp.target.split(".")[0] == "httpx"}
    violations = [
        f"{where(imp)}: imports httpx (only {HTTPX_IMPORTER} may)"
        for imp in imports()
        if imp.target.split(".")[0] == "httpx" and imp.source != HTTPX_IMPORTER
    ]
    assert not violations, report(violations)
    assert importers == {HTTPX_IMPORTER}


def provider_purity_violations(found: list[Import] | None = None) -> Iterator[str]:
    for imp in imports() if found is None else found:
        if imp.source in PROVIDERS_PURE and (
            imp.target in PROVIDERS_IO or imp.target.split(".")[0] in PROVIDERS_IO
        ):
            yield f"{where(imp)}: {imp.source} imports {imp.target} (it decides, it does no I/O)"
        if imp.source.startswith(VENDORS + ".") and imp.target == HTTPX_IMPORTER:
            yield f"{where(imp)}: a vendor codec imports {imp.target} (only the loop sends)"


def test_the_providers_pure_parts_do_no_io_and_vendors_do_not_send() -> None:
    assert set(modules()) >= PROVIDERS_PURE, sorted(PROVIDERS_PURE - set(modules()))
    violations = list(provider_purity_violations())
    assert not violations, report(violations)


def test_nothing_installed_imports_the_tests_or_edits_sys_path() -> None:
    test_names = {"tests", "conftest"} | {
        path.stem if path.name != "__init__.py" else path.parent.name
        for path in TESTS.rglob("*.py")
        if "node_modules" not in path.parts
    }
    violations = [
        f"{where(imp)}: imports {imp.target} from the test tree"
        for imp in imports()
        if not imp.internal and imp.target.split(".")[0] in test_names
    ]
    violations.extend(
        f"{module.where(node.lineno)}: touches sys.path"
        for module in modules().values()
        for node in ast.walk(module.tree)
        if isinstance(node, ast.Attribute) and ast.unparse(node) == "sys.path"
    )
    assert not violations, report(violations)


# -- cycles and layer packages ---------------------------------------------------------------


def cycles() -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan), each a cycle of imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for imp in imports():
        if imp.internal and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_no_import_cycles_even_for_type_checking() -> None:
    violations = [
        f"{where(imp)}: {imp.source} -> {imp.target} (a cycle)"
        for group in cycles()
        for imp in imports()
        if imp.source in group and imp.target in group and imp.target != imp.source
    ]
    assert not violations, report(violations)


def test_layer_folders_have_an_init_that_imports_nothing() -> None:
    root = ROOTS["toolroute"]
    violations = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("_")):
        if folder.name == "__pycache__" or not any(folder.glob("*.py")):
            continue
        init = folder / "__init__.py"
        if not init.is_file():
            violations.append(f"{folder}: a layer folder without __init__.py")
            continue
        tree = ast.parse(init.read_text(encoding="utf-8"))
        violations.extend(
            f"{init}:{node.lineno}: a layer's __init__.py imports"
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
        )
    assert not violations, report(violations)


def test_the_config_module_needs_no_runtime() -> None:
    # Importing the package runs toolroute/__init__ (the whole engine); what is held here is
    # that the config classes themselves pull in no trio or httpx through their own imports.
    edges: dict[str, set[str]] = {}
    for imp in imports():
        edges.setdefault(imp.source, set()).add(imp.target)
    seen: set[str] = set()
    todo = ["toolroute.config"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(
            t for t in edges.get(name, ()) if t.startswith("toolroute.") or t in ("trio", "httpx")
        )
    assert not seen & {"trio", "httpx"}, sorted(seen)
    assert all(layer(name) in {"_core", "public"} for name in seen - {"trio", "httpx"}), sorted(
        seen
    )


def test_the_graph_reader_sees_every_layer() -> None:
    # Guards the test itself: a walker that found nothing would pass every rule above.
    layers = {layer(name) for name in modules()}
    assert {"_core", "_runtime", "_routing", "_decisions", "providers", "public"} <= layers
    assert any(imp.target == "httpx" for imp in imports())
    assert any(
        imp.source == "toolroute._core.catalog.catalog"
        and imp.target == "toolroute._core.catalog.readers"
        for imp in imports()
    )


def test_the_checks_catch_what_they_look_for() -> None:
    # The rules above pass on clean code; these show each detector fires on a violation.
    calls = [
        node.func
        for node in ast.walk(
            ast.parse("os.stat(p); os.path.isfile(p); os.fspath(p); os.path.join(a, b)")
        )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    ]
    assert [_is_os_file_call(call) for call in calls] == [True, True, False, False]
    core = modules()["toolroute._core.config"]
    relative = ast.parse("from ..providers import Embedder\nfrom . import files").body
    assert [_resolve(core, node) for node in relative if isinstance(node, ast.ImportFrom)] == [
        "toolroute.providers",
        "toolroute._core",
    ]
    assert layer("toolroute._core.catalog.catalog") == "_core"
    assert layer("toolroute.providers._http.transport") == "providers"
    # The purity rule fires on a pure module importing trio or the HTTP module.
    fake = [
        Import("toolroute.providers._http.retry", "trio", 1, False),
        Import("toolroute.providers._deciders.vendors.xor", HTTPX_IMPORTER, 1, True),
    ]
    assert len(list(provider_purity_violations(fake))) == len(fake)
    assert layer("toolroute.__main__") == "public"
