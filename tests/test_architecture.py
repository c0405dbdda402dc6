"""The layout keeps its promises (docs/architecture.md): lib/ grouped by role in packages
with few loose modules; every import of lib/ (at module level, inside functions and under
``TYPE_CHECKING``) allowed by the table of packages in docs/architecture.md, which has no
circle; no import circle between modules either; ``redis`` imported only when a shared
tier is set, and the object store's client only when an object store is."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

LIB = REPO / "lib"
ARCHITECTURE = REPO / "docs" / "architecture.md"
#: lib/'s loose modules: the lazy public surface, the errors, the shared flags (python -m lib.cli).
LOOSE = {"__init__", "cli", "errors"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file()


def _imports(path: Path, *, everywhere: bool, name: str | None = None) -> dict[str, int]:
    """lib modules ``path`` imports, with the line of the first import of each, resolving
    ``from package import submodule``: at module level and under ``if TYPE_CHECKING:``, or
    (``everywhere``) every import in the file, inside functions and classes too, and
    ``importlib.import_module("lib....")`` with a literal name. ``name``: the module's
    dotted name when it is not under lib/ (the checks' own test)."""
    name = name or _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: dict[str, int] = {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if everywhere:
        nodes: list[ast.AST] = list(ast.walk(tree))
    else:
        nodes = list(tree.body)
        for node in list(nodes):
            if isinstance(node, ast.If):  # if TYPE_CHECKING:
                nodes.extend(node.body)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("lib."):
                    found.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if not module.startswith("lib"):
                continue
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.setdefault(sub if _is_module(sub) else module, node.lineno)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("lib.")
        ):
            found.setdefault(str(node.args[0].value), node.lineno)
    found.pop(name, None)
    return {m: line for m, line in found.items() if not name.startswith(m + ".")}  # a package's own __init__


def _modules() -> list[Path]:
    return sorted(p for p in LIB.rglob("*.py") if "__pycache__" not in p.parts)


def _unit(module: str) -> str:
    """The top-level unit of lib/ a module belongs to: its package, or itself when loose."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "lib"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def allowed_imports(text: str | None = None) -> dict[str, set[str]]:
    """docs/architecture.md's table of packages: each unit of lib/ and the units it may import."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    table = text.split("<!-- allowed-imports", 1)[1].split("<!-- end allowed-imports -->", 1)[0]
    allowed: dict[str, set[str]] = {}
    for path, may in re.findall(r"^\| `lib/([a-z_]+)(?:/|\.py)` \|.*\| ([^|]+) \|$", table, flags=re.M):
        allowed[path] = set() if may.strip() == "-" else {u.strip() for u in may.split(",")}
    return allowed


def unit_imports(extra: dict[str, Path] | None = None) -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> where, for every import of lib/ that crosses
    units; ``extra``: more modules by dotted name (the checks' own test)."""
    found: dict[tuple[str, str], list[str]] = {}
    modules = {_module_name(p): p for p in _modules()} | (extra or {})
    for name, path in modules.items():
        for dep, line in _imports(path, everywhere=True, name=name).items():
            if name == "lib" or dep == "lib" or _unit(name) == _unit(dep):
                continue  # lib/__init__.py is the lazy public surface: it may name anything
            found.setdefault((_unit(name), _unit(dep)), []).append(f"{name}:{line} {dep}")
    return found


def test_lib_is_grouped_in_packages_with_few_loose_modules() -> None:
    loose = {p.stem for p in LIB.glob("*.py")}
    assert loose == LOOSE, f"lib/ should keep its modules in packages by role: loose {sorted(loose - LOOSE)}"
    packages = {p.parent.name for p in LIB.glob("*/__init__.py")}
    allowed = allowed_imports()
    assert set(allowed) == packages | (LOOSE - {"__init__"}), "docs/architecture.md's table should list every package"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert sorted(p for p in packages if f"`lib/{p}/`" not in layout) == [], "README's Layout should list every package"


def test_every_import_between_packages_is_allowed_by_the_table() -> None:
    allowed = allowed_imports()
    wrong = [
        f"{a} -> {b}: {where[0]}" for (a, b), where in sorted(unit_imports().items()) if b not in allowed.get(a, set())
    ]
    assert wrong == [], "imports the table in docs/architecture.md does not allow:\n" + "\n".join(wrong)


def test_the_table_of_packages_has_no_circle() -> None:
    allowed = allowed_imports()
    assert _cycles(allowed) == []
    assert all(deps <= set(allowed) for deps in allowed.values()), "the table names a package that is not in it"


def test_no_import_circle_between_packages_counting_every_import() -> None:
    graph: dict[str, set[str]] = {}
    for a, b in unit_imports():
        graph.setdefault(a, set()).add(b)
    assert _cycles(graph) == []


def test_no_import_circles_in_lib() -> None:
    """Module by module, counting every import: no circle, within a package either."""
    graph = {_module_name(p): set(_imports(p, everywhere=True)) for p in _modules()}
    graph.pop("lib", None)  # the lazy public surface
    cycles = _cycles(graph)
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


#: Results outside the HTTP layer still given as ``dict[str, Any]``, on purpose: the entry's
#: free-form metadata (the producer), CosyVoice's own model inputs (upstream's dicts of
#: tensors) and Gradio's update dictionaries. Every other result is typed.
MOST_UNTYPED_RESULTS = 10


def untyped_results() -> list[str]:
    """Functions outside lib/api/ whose return annotation holds ``dict[str, Any]``."""
    found = []
    for path in _modules():
        if path.relative_to(LIB).parts[0] == "api":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            typed = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None
            if typed and "dict[str, Any]" in ast.unparse(node.returns):  # type: ignore[union-attr]
                found.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")  # type: ignore[union-attr]
    return found


def test_results_are_typed_outside_the_http_layer() -> None:
    found = untyped_results()
    assert len(found) <= MOST_UNTYPED_RESULTS, "give these results a TypedDict or a dataclass:\n" + "\n".join(found)


def test_the_checks_catch_what_they_guard(tmp_path: Path) -> None:
    """An import inside a function is found, a cycle is found, and a table that allows a
    circle or an import it should not is refused: each check can fail."""
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from lib.pipeline.service import TTSService\n", encoding="utf-8")
    assert "lib.pipeline.service" not in _imports(mod, everywhere=False, name="lib.core.m")
    assert "lib.pipeline.service" in _imports(mod, everywhere=True, name="lib.core.m")
    assert ("core", "pipeline") in unit_imports({"lib.core.m": mod})
    assert ("core", "pipeline") not in unit_imports()
    assert _cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    table = "<!-- allowed-imports -->\n| `lib/a/` | x | y | b |\n| `lib/b/` | x | y | a |\n<!-- end allowed-imports -->"
    assert _cycles(allowed_imports(table)) != []


_OPTIONAL_CLIENTS = """
import sys
sys.path.insert(0, sys.argv[1])
from lib.config import load_config
from lib.pipeline.service import TTSService
import webui
for i, url in enumerate((None, sys.argv[3])):
    over = {"engine": "tone", "cache.dir": sys.argv[2] + str(i), "cache.objects_url": url}
    svc = TTSService(load_config(env={}, overrides=over))
    app = webui.create_app(svc)
    svc.close()
    print(sorted(m for m in sys.modules if m == "redis" or m.startswith(("lib.objects.", "boto3", "botocore"))))
"""


@pytest.fixture(scope="module")
def optional_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The modules of optional clients loaded by one fresh process that built the app and
    its service first with neither a shared tier nor an object store, then with an object
    store (one process for both: each costs an import of gradio)."""
    tmp = tmp_path_factory.mktemp("clients")
    env = {"PATH": "/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    url = "http://127.0.0.1:9/tts-cache/p"  # port 9: nothing answers
    out = subprocess.run(
        [sys.executable, "-c", _OPTIONAL_CLIENTS, str(REPO), str(tmp / "c"), url],
        capture_output=True, text=True, timeout=120, check=True, cwd=tmp, env=env,
    )  # fmt: skip
    without, with_objects = out.stdout.strip().splitlines()[-2:]
    return {"without": without, "with": with_objects}


@pytest.mark.slow
def test_redis_is_imported_only_with_a_shared_tier(optional_clients: dict[str, str]) -> None:
    assert "'redis'" not in optional_clients["without"]


@pytest.mark.slow
def test_the_object_store_client_is_imported_only_with_an_object_store(optional_clients: dict[str, str]) -> None:
    assert optional_clients["without"] == "[]"
    found = optional_clients["with"]
    assert "'lib.objects.client'" in found and "botocore" not in found  # the check can fail
