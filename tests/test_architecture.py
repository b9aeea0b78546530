"""The house's rules, read from the code itself (docs/architecture.md):

- imports run one way: reference <- backends <- judge <- the application wing <- the suite
  <- the command line, never from a lower layer to a higher one;
- no import circle, between modules or between the rooms (sub-packages) of one layer;
- the golden vectors, what hardware teams install, import only the reference, the judging
  library and the file writers (no torch, no command line);
- nothing shipped imports the maintainer scripts of tools/;
- no file of the application wing is over 500 lines, and hscale/ holds only the package face,
  the dispatcher's entry and sub-packages.

Every import counts, those inside functions too: a lazy import is a dependency all the same.
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from helpers.paths import REPO_ROOT, TEST_ROOMS, TESTS


#: Each room of the installed package, and its layer: a module may import from its own layer
#: and below. The rooms of one layer may import each other, but never in a circle.
LAYERS = {
    "hscale": 0,  # the package face: the version and spec version, nothing else
    "hscale.docs": 0,  # the normative text, shipped as data
    "hscale.reference": 0,
    "hscale.backends": 1,
    "hscale.judge": 2, "hscale.files": 2,
    "hscale.models": 3, "hscale.calibration": 3, "hscale.checkpoints": 3,
    "hscale.pipelines": 3, "hscale.evaluation": 3, "hscale.demo": 3, "hscale.bench": 3,
    "hscale.vectors": 3, "hscale.quantize": 3, "hscale.check": 3, "hscale.report": 3,
    "hscale.conformance": 4,
    "hscale.interop": 4,  # runs the real libraries through the installed suite
    "hscale.cli": 5, "hscale.__main__": 5,
}
#: What the golden vectors may import (hardware teams install them without torch).
VECTORS_MAY_IMPORT = {"hscale", "hscale.reference", "hscale.judge", "hscale.files",
                      "hscale.vectors"}
LONGEST_FILE = 500
#: The judging core is not the application wing; its two statements of the spec
#: (diagnose, independent) are long on purpose and are not held to the wing's limit.
NOT_THE_WING = ("hscale.judge",)


def package_files() -> dict[str, Path]:
    """module name -> file, for every module the wheel ships (pyproject's package-dir)."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    package_dir = config["tool"]["setuptools"]["package-dir"]
    modules = {}
    for package, folder in package_dir.items():
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT / folder).with_suffix("")
            parts = relative.parts
            inner = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules.setdefault(f"{package}.{inner}" if inner else package, path)
    return modules


def imports_of(name: str, path: Path) -> set[str]:
    """The hscale modules ``name`` imports (absolute and relative, at any depth)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "hscale" or m.startswith("hscale.")}


@pytest.fixture(scope="module")
def graph():
    modules = package_files()
    edges = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports_of(name, path):
            # "from hscale.x import y": y may be a module or a name in x; keep the module
            while imported not in modules and "." in imported:
                imported = imported.rpartition(".")[0]
            if imported in modules and imported != name:
                targets.add(imported)
        edges[name] = targets
    return modules, edges


def room(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_every_room_has_a_layer(graph):
    modules, _ = graph
    rooms = {room(m) for m in modules}
    assert rooms - set(LAYERS) == set(), "a room without a layer in LAYERS (and in " \
                                         "docs/architecture.md)"


def test_imports_run_one_way(graph):
    _, edges = graph
    upward = [f"{a} -> {b} (layer {LAYERS[room(a)]} -> {LAYERS[room(b)]})"
              for a, targets in edges.items() for b in targets
              if LAYERS[room(b)] > LAYERS[room(a)]]
    assert upward == [], "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return out


def package_init_edge(a: str, b: str) -> bool:
    """A package's __init__ importing its own modules, and they importing a sibling through
    the package: the ordinary face of a package, not a circle of dependencies."""
    return b == a.rpartition(".")[0] or a == b.rpartition(".")[0]


def test_no_import_circle_between_modules(graph):
    _, edges = graph
    pruned = {a: {b for b in targets if not package_init_edge(a, b)}
              for a, targets in edges.items()}
    assert _cycles(pruned) == []


def test_no_import_circle_between_rooms(graph):
    _, edges = graph
    rooms = defaultdict(set)
    for a, targets in edges.items():
        rooms[room(a)].update(room(b) for b in targets if room(b) != room(a))
    assert _cycles(rooms) == []


def test_the_vectors_stay_light(graph):
    _, edges = graph
    heavy = [f"{a} -> {b}" for a, targets in edges.items() if room(a) == "hscale.vectors"
             for b in targets if room(b) not in VECTORS_MAY_IMPORT]
    assert heavy == []


def test_nothing_shipped_imports_the_maintainer_scripts(graph):
    modules, _ = graph
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n == "tools" or n.startswith("tools.") for n in names), name


def test_no_long_file_in_the_application_wing(graph):
    modules, _ = graph
    long = {name: n for name, path in modules.items()
            if name.startswith("hscale.") and room(name) not in NOT_THE_WING + (
                "hscale.reference", "hscale.backends", "hscale.conformance", "hscale.vectors")
            and (n := len(path.read_text().splitlines())) > LONGEST_FILE}
    assert long == {}


def test_the_package_top_level_holds_only_its_face_and_rooms():
    top = REPO_ROOT / "hscale"
    files = sorted(p.name for p in top.iterdir() if p.is_file())
    assert files == ["__init__.py", "__main__.py"]
    for folder in (p for p in top.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (folder / "__init__.py").is_file(), f"hscale/{folder.name} is not a package"


# ------------------------------------------------------------------------------------------
# The tests' own house: tests/<room>/test_*.py, helpers in tests/helpers
# ------------------------------------------------------------------------------------------

def _test_modules():
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_module_lives_in_a_room():
    misplaced = [str(p.relative_to(TESTS)) for p in _test_modules()
                 if p.parent == TESTS and p.name != "test_architecture.py"
                 or p.parent != TESTS and p.relative_to(TESTS).parts[0] not in TEST_ROOMS]
    assert misplaced == [], f"test modules outside the rooms {sorted(TEST_ROOMS)}: {misplaced}"
    assert {p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__"} \
        == TEST_ROOMS | {"helpers"}


def test_no_test_module_imports_another():
    """Shared test code lives in tests/helpers; a test module importing another would run the
    other's module-level code and tie two rooms together."""
    names = {p.stem for p in _test_modules()}
    offending = []
    for path in _test_modules() + sorted((TESTS / "helpers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported = [node.module or ""]
            else:
                continue
            offending += [f"{path.relative_to(TESTS)} imports {m}" for m in imported
                          if m.split(".")[0] in names or m.split(".")[0].startswith("test_")]
    assert offending == []
