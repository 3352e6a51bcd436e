"""No import cycle between the project's modules.

Every module of the ``hlgt`` package is parsed (not imported) and each import of an ``hlgt``
module counts, at module level or inside a function: a function-level import only hides a cycle
until the function runs. ``from hlgt.x import y`` points at ``hlgt.x.y`` when ``y`` is a
submodule, else at ``hlgt.x``; relative imports are resolved against the importing module.

The one exception is a module's ``if __name__ == "__main__":`` stanza: it runs only when the
module is the program (``python -m hlgt.train.compare``), where it hands over to the module's
command in ``hlgt.commands``; nothing that imports the module ever runs it.
"""
import ast
import pkgutil
from pathlib import Path

import hlgt

PACKAGE = "hlgt"


def project_modules() -> dict[str, Path]:
    """Every module of the package by dotted name, packages as their ``__init__.py``."""
    root = Path(hlgt.__file__).parent
    modules = {PACKAGE: root / "__init__.py"}
    for info in pkgutil.walk_packages([str(root)], prefix=PACKAGE + "."):
        relative = Path(*info.name.split(".")[1:])
        modules[info.name] = root / relative / "__init__.py" if info.ispkg else (root / relative).with_suffix(".py")
    return modules


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` reads from (``from ..a import b`` -> ``<parent>.a``)."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_main_stanza(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` at module level."""
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that ``module`` imports anywhere in its source but its ``__main__``
    stanza."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    tree.body = [node for node in tree.body if not _is_main_stanza(node)]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, is_package, node)
            for alias in node.names:
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source)
    return {m for m in found if m in modules and m != module}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a closed path of modules) per strongly connected component larger than one
    module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_through(graph, component) for component in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A closed path inside ``component`` from its first module back to it (breadth first)."""
    start = min(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if w not in parent:
                    parent[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{sorted(component)} is not strongly connected")


def test_cycle_finder_resolves_relative_and_submodule_imports(tmp_path):
    graph = {"p": set(), "p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c", "p.a"]]
    (tmp_path / "m.py").write_text("def f():\n    from . import sub\n    from .sub import x\n    from .. import top\n")
    modules = {"q": tmp_path, "q.pkg": tmp_path, "q.pkg.m": tmp_path / "m.py", "q.pkg.sub": tmp_path, "q.top": tmp_path}
    assert imports_of("q.pkg.m", tmp_path / "m.py", modules) == {"q.pkg.sub", "q.top"}


def test_a_main_stanza_is_no_import_of_the_module(tmp_path):
    (tmp_path / "m.py").write_text(
        "from . import sub\n\nif __name__ == '__main__':\n    from .cmd import run\n    run()\n"
        "if __name__ == 'other':\n    from . import top\n"
    )
    modules = {"q": tmp_path, "q.sub": tmp_path, "q.cmd": tmp_path, "q.top": tmp_path, "q.m": tmp_path / "m.py"}
    assert imports_of("q.m", tmp_path / "m.py", modules) == {"q.sub", "q.top"}


def test_no_import_cycle_between_project_modules():
    graph = import_graph()
    assert "hlgt.solve" in graph and "hlgt.train.evaluate" in graph  # the walk saw the package
    found = cycles(graph)
    assert not found, "import cycles between project modules:\n" + "\n".join(" -> ".join(c) for c in found)


# The allowed direction: a module imports only from its own layer or the layers before it.
# Layer 0 holds what every stage shares (expressions, config, metric names, storage, tensors).
LAYERS = (
    ("hlgt", "hlgt.expr", "hlgt.config", "hlgt.metrics", "hlgt.storage", "hlgt.tensors", "hlgt.ray_session",
     "hlgt.progress"),
    ("hlgt.data",),
    ("hlgt.model",),
    ("hlgt.inference", "hlgt.solve", "hlgt.explain", "hlgt.draw", "hlgt.pages"),
    ("hlgt.train",),
    ("hlgt.sweep",),
    ("hlgt.commands",),
)


def layer_of(module: str) -> int | None:
    """The layer of ``module``: that of the longest prefix named in ``LAYERS``."""
    best, found = -1, None
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best and (
                    prefix != "hlgt" or module == "hlgt"):
                best, found = len(prefix), number
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if layer_of(m) is None)
    assert not unplaced, f"modules in no layer of LAYERS (place them): {unplaced}"


def test_imports_point_down_the_layers():
    """expr/config < data < model < inference < train < sweep < commands."""
    upward = [f"{m} (layer {layer_of(m)}) imports {d} (layer {layer_of(d)})"
              for m, deps in sorted(import_graph().items())
              for d in sorted(deps) if (layer_of(d) or 0) > (layer_of(m) or 0)]
    assert not upward, "imports against the layers' order:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import():
    assert layer_of("hlgt.data.build") == 1 and layer_of("hlgt.commands.cli") == 6 and layer_of("hlgt.other") is None
    assert layer_of("hlgt.solve") == 3 and layer_of("hlgt.train.__main__") == 4
