"""The layout keeps its promises (docs/architecture.md): no import circles in lib/,
modules of a readable size, ``redis`` imported only when a shared tier is set, and the
object store's client only when an object store is."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import REPO

LIB = REPO / "lib"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """lib modules imported at module level (including ``if TYPE_CHECKING:`` blocks, which
    are dependencies too), resolving ``from package import submodule``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    body = list(tree.body)
    for node in list(body):
        if isinstance(node, ast.If):  # if TYPE_CHECKING:
            body.extend(node.body)
    for node in body:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lib"))
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
                found.add(sub if _is_module(sub) else module)
    found.discard(name)
    return {m for m in found if not name.startswith(m + ".")}  # a package's own __init__ is not a cycle


def test_no_import_circles_in_lib() -> None:
    graph = {_module_name(p): _imports(p) for p in LIB.rglob("*.py")}
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

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == [], "import circles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_redis_is_imported_only_with_a_shared_tier(tmp_path: Path) -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from lib.config import load_config; from lib.service import TTSService; import webui;"
        "svc = TTSService(load_config(env={}, overrides={'engine': 'tone', 'cache.dir': sys.argv[2]}));"
        "app = webui.create_app(svc); svc.close();"
        "print('redis' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO), str(tmp_path / "c")],
        capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_the_object_store_client_is_imported_only_with_an_object_store(tmp_path: Path) -> None:
    code = (
        "import sys, os; sys.path.insert(0, sys.argv[1]);"
        "from lib.config import load_config; from lib.service import TTSService; import webui;"
        "over = {'engine': 'tone', 'cache.dir': sys.argv[2], 'cache.objects_url': sys.argv[3] or None};"
        "svc = TTSService(load_config(env={}, overrides=over));"
        "app = webui.create_app(svc); svc.close();"
        "print(sorted(m for m in sys.modules if m.startswith(('lib.objects.', 'boto3', 'botocore'))))"
    )
    env = {"PATH": "/usr/bin:/bin", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    found = {}
    for label, url in (("without", ""), ("with", "http://127.0.0.1:9/tts-cache/p")):  # port 9: nothing answers
        out = subprocess.run(
            [sys.executable, "-c", code, str(REPO), str(tmp_path / label), url],
            capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path, env=env,
        )  # fmt: skip
        found[label] = out.stdout.strip().splitlines()[-1]
    assert found["without"] == "[]"
    assert "'lib.objects.client'" in found["with"] and "botocore" not in found["with"]  # the check can fail
