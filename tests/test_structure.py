"""The architecture, checked: what the house style asks of the layout.

* no module imports a private name (``_x``) of another module, nor reaches into one through a
  module alias (``F._x``) or a store handle (``store._x``, ``self.store._x``);
* ``mqctl`` uses ``store``'s public API only: it imports ``store``, ``store.errors`` and
  ``store.spark`` and nothing else of ``store`` (every import counts: inside functions and
  under ``TYPE_CHECKING`` too), and no private names;
* the type stubs of the lazily exporting packages (``__init__.pyi``) name what ``_EXPORTS``
  exports, no more, no less;
* no import cycles inside ``store/`` (imports inside functions and under ``TYPE_CHECKING``
  count too: a lazy import that breaks a cycle at run time is still a cycle in the design);
* ``store`` never imports ``mqctl`` (the dependency arrow points one way);
* no module of ``store`` or ``mqctl`` is over 500 lines;
* every binary file format is described at the top of the module that owns it.

Pure ``ast`` reading: nothing is imported or run.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("store", "mqctl")

# Modules that read or write the store's files themselves: the CLI goes through the API.
FILE_LEVEL = {
    "store.fsutil", "store.layout", "store.flock", "store.log.format", "store.log.commitlog",
    "store.log.consumequeue", "store.log.index", "store.log.checkpoint", "store.log.framing",
    "store.log.columns", "store.log.arraycolumns",
}
# What mqctl may import of store: the package (its lazy exports) and these two.
PUBLIC_API = {"store", "store.errors", "store.spark"}
# Private attributes of the standard library that are its public API in all but name.
ALLOWED_ATTRS = {"os._exit", "sys._getframe"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in (ROOT / pkg).rglob("*.py"):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = _modules()


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    if MODULES[mod].name != "__init__.py":
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            ids.update(id(c) for c in ast.walk(n))
    return ids


def _imports(mod: str, tree: ast.AST, *, type_checking: bool = False) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import outside TYPE_CHECKING;
    with ``type_checking``, those under it too."""
    skip = set() if type_checking else _type_checking_nodes(tree)
    out: list[tuple[str, str | None, int]] = []
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.ImportFrom):
            target = _resolve(mod, n)
            for a in n.names:
                full = f"{target}.{a.name}"
                if full in MODULES:
                    out.append((full, None, n.lineno))
                else:
                    out.append((target, a.name, n.lineno))
        elif isinstance(n, ast.Import):
            out += [(a.name, None, n.lineno) for a in n.names]
    return out


def _trees() -> dict[str, ast.AST]:
    return {m: ast.parse(p.read_text(), str(p)) for m, p in MODULES.items()}


TREES = _trees()


def test_no_module_imports_a_private_name_of_another() -> None:
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: {target}.{name}"
           for m, tree in TREES.items() for target, name, line in _imports(m, tree)
           if name and name.startswith("_") and not name.startswith("__")
           and target.split(".")[0] in PACKAGES and target != m]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_no_module_reaches_into_another_ones_private_attributes() -> None:
    bad = []
    for m, tree in TREES.items():
        aliases = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    target = _resolve(m, n) if isinstance(n, ast.ImportFrom) else a.name
                    full = f"{target}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
                    if full in MODULES:
                        aliases.add(a.asname or a.name)
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")):
                continue
            base = ast.unparse(n.value)
            if f"{base}.{n.attr}" in ALLOWED_ATTRS:
                continue
            if base in aliases or base in ("store", "self.store", "s"):
                bad.append(f"{MODULES[m].relative_to(ROOT)}:{n.lineno}: {base}.{n.attr}")
    assert not bad, "private attributes reached across modules:\n" + "\n".join(bad)


def test_mqctl_uses_only_the_public_api_of_store() -> None:
    bad = []
    for m, tree in TREES.items():
        if not m.startswith("mqctl"):
            continue
        for target, name, line in _imports(m, tree, type_checking=True):
            if target.split(".")[0] != "store":
                continue
            where = f"{MODULES[m].relative_to(ROOT)}:{line}"
            if any(part.startswith("_") for part in target.split(".")) or (name or "").startswith("_"):
                bad.append(f"{where}: private {target}.{name}")
            elif target not in PUBLIC_API:
                bad.append(f"{where}: {target} is not store's public API ({', '.join(sorted(PUBLIC_API))}); "
                           f"export what the command line needs from store/__init__.py")
    assert not bad, "\n".join(bad)


def _exports(init: Path) -> set[str]:
    """The names a package's ``__init__.py`` exports through ``_EXPORTS`` (and ``_ERRORS``)."""
    names: set[str] = set()
    for n in ast.parse(init.read_text()).body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
            if n.targets[0].id == "_EXPORTS":
                names |= set(ast.literal_eval(n.value))
            elif n.targets[0].id == "_ERRORS":
                names |= set(ast.literal_eval(n.value))
    return names


def render_stub(pkg: str) -> str:
    """The type stub of a lazily exporting package, made from its ``_EXPORTS`` (type checkers
    see ``__getattr__``'s names as Any): one ``from MODULE import NAME as PUBLIC`` a name."""
    init = ROOT / pkg / "__init__.py"
    dotted = pkg.replace("/", ".")
    exports: dict[str, str] = {}
    for n in ast.parse(init.read_text()).body:
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "_EXPORTS":
            exports.update(ast.literal_eval(n.value))
        elif isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "_ERRORS":
            exports.update({e: "errors" for e in ast.literal_eval(n.value)})
    rows, aliases = [], []
    for public, where in exports.items():
        mod, _, attr = where.partition(":")
        if attr and attr != public:   # exported under another name: an alias a checker exports
            rows.append((f"{dotted}.{mod}", attr, f"_{public}"))
            aliases.append(f"{public} = _{public}")
        else:
            rows.append((f"{dotted}.{mod}", public, public))

    def order(row: tuple[str, str, str]) -> tuple[str, int, str]:   # isort's: CONSTANTS, Classes, functions
        name = row[1]
        return row[0], 0 if name.isupper() else 1 if name[:1].isupper() else 2, name

    lines = [f"from {m} import {a} as {p}" for m, a, p in sorted(rows, key=order)]
    return (f'"""The names ``{dotted}`` exports lazily (``_EXPORTS`` in ``__init__.py``), for type checkers.\n'
            f'Made from ``_EXPORTS`` by ``python -m tests.test_structure``; a test keeps them equal."""\n\n'
            + "\n".join(lines) + "\n" + ("\n" + "\n".join(sorted(aliases)) + "\n" if aliases else ""))


STUBBED = ("store", "store/spark")


def test_type_stubs_match_the_lazy_exports() -> None:
    for pkg in STUBBED:
        stub = ROOT / pkg / "__init__.pyi"
        assert stub.read_text() == render_stub(pkg), (
            f"{stub.relative_to(ROOT)} differs from _EXPORTS: run python -m tests.test_structure")


MAX_MODULE_LINES = 500


def test_modules_are_small() -> None:
    """Modules under ~500 lines, named after their job (a module past it does two jobs)."""
    big = {f"{p.relative_to(ROOT)}: {n}" for p in MODULES.values()
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not big, f"modules over {MAX_MODULE_LINES} lines: {sorted(big)}"


def test_the_library_writes_to_stderr_in_one_place() -> None:
    """The store's default warning and notice lines (``mqctl: warning: …``) are written by
    ``store/errors.py`` alone (``warn``, the default of every ``warn=``, and ``notice``): no
    other module of ``store`` writes to stderr, so there is one default sink to change."""
    bad = [f"{MODULES[m].relative_to(ROOT)}:{node.lineno}" for m, tree in TREES.items()
           if m.startswith("store") and m != "store.errors" for node in ast.walk(tree)
           if isinstance(node, ast.Attribute) and node.attr == "stderr"
           and isinstance(node.value, ast.Name) and node.value.id == "sys"]
    assert not bad, f"modules of store writing to stderr themselves: {bad}"


def test_the_client_package_map_names_its_modules() -> None:
    """``store/client/__init__.py``'s map of the package names every module in it (as
    ``name``), and names no module that is not there (it once named ``txproducer``)."""
    import re
    pkg = ROOT / "store" / "client"
    modules = {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
    first = {m for m in re.findall(r"^``(\w+)``", doc, re.M)}   # a row's own module
    cited = set(re.findall(r"``(\w+)``", doc))
    assert not modules - cited, f"modules the map leaves out: {sorted(modules - cited)}"
    assert not first - modules, f"rows of modules that do not exist: {sorted(first - modules)}"


def test_store_never_imports_mqctl() -> None:
    bad = [f"{MODULES[m].relative_to(ROOT)}:{line}: {target}" for m, tree in TREES.items()
           if m.startswith("store") for target, _name, line in _imports(m, tree) if target.startswith("mqctl")]
    assert not bad, "\n".join(bad)


def test_no_import_cycles_inside_store() -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for m, tree in TREES.items():
        if not m.startswith("store"):
            continue
        for target, name, _line in _imports(m, tree, type_checking=True):
            dep = f"{target}.{name}" if name and f"{target}.{name}" in MODULES else target
            if dep in MODULES and dep.startswith("store") and dep != m:
                # a package's own __init__ is where its public names come from, not a cycle
                if m.startswith(dep + ".") and MODULES[dep].name == "__init__.py":
                    continue
                edges[m].add(dep)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(m for m in MODULES if m.startswith("store")):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_every_binary_format_is_described_by_its_owner() -> None:
    """The modules that own a binary file say its layout in their docstring."""
    owners = {"store.log.format": "TOTALSIZE", "store.log.consumequeue": "20 bytes",
              "store.log.index": "slot", "store.log.checkpoint": "64 bytes"}
    for mod, needle in owners.items():
        doc = ast.get_docstring(TREES[mod]) or ""
        assert needle in doc, f"{mod}'s docstring does not describe its format ({needle!r})"


if __name__ == "__main__":
    for pkg in STUBBED:
        (ROOT / pkg / "__init__.pyi").write_text(render_stub(pkg))
