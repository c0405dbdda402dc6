"""The documentation keeps its promises: README.md and the pages in docs/ link only to files
and headings that exist, README.md lists every page, docs/architecture.md names every module
under lib/, and no page names a lib/ module that does not exist.

Pure text checks (no app, no network): they run in well under a second.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
ARCHITECTURE = DOCS / "architecture.md"
LIB = REPO / "lib"

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target) and ![alt](target), with an optional "title"; nested brackets in the text
# (a link inside an image's alt) are not used in these pages.
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _pages() -> list[Path]:
    """The pages whose links are checked: README.md and every page in docs/."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks (a ``# comment`` there is no heading, a
    ``[x](y)`` no link)."""
    return _FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, every
    character that is not a letter, mark, digit, '_', '-' or space dropped, spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.strip().lower()
    kept = []
    for char in text:
        category = unicodedata.category(char)
        if char in " -_" or category[0] in "LMN":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give, with GitHub's -1, -2 for repeated headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in _HEADING.finditer(_prose(page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The targets of a page's links and images, outside code."""
    text = _CODE_SPAN.sub("", _prose(page.read_text(encoding="utf-8")))
    return [match.group(1) for match in _LINK.finditer(text)]


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file or #anchor does not exist, with why."""
    problems = []
    for target in links(page):
        if _SCHEME.match(target):
            continue  # http(s):, mailto: -- not checked offline
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{target}: no file {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading with the anchor #{anchor} in {dest.name}")
    return problems


def lib_modules() -> list[Path]:
    """Every module under lib/ except the packages' __init__.py."""
    return sorted(p for p in LIB.rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts)


def is_named(module: Path, text: str) -> bool:
    """True when ``text`` names ``module`` by its path (``lib/cache/keys.py``) or its dotted
    name (``lib.cache.keys``, also as the start of ``lib.cache.keys.KeyFields``)."""
    rel = module.relative_to(REPO).as_posix()
    dotted = rel.removesuffix(".py").replace("/", ".")
    by_path = re.search(rf"(?<![\w/.]){re.escape(rel)}(?!\w)", text)
    by_name = re.search(rf"(?<![\w/.]){re.escape(dotted)}(?!\w)", text)
    return bool(by_path or by_name)


def named_lib_paths(text: str) -> set[str]:
    """lib/ files, folders and dotted modules a page names (``lib/x.py``, ``lib/x/``, ``lib.x``)."""
    names = set(re.findall(r"(?<![\w/.])(lib/[\w/]*?\w\.py|lib/(?:\w+/)+)", text))
    names |= set(re.findall(r"(?<![\w/.])(lib(?:\.\w+)+)", text))
    return names


def exists_in_lib(name: str) -> bool:
    if "/" in name:
        return (REPO / name).exists()
    # lib.a.b.Attr: the longest prefix that is a module or package must exist, and the
    # first part after lib must be one (lib.sizes is not; lib.request.access.Caller is).
    parts = name.split(".")
    for end in range(len(parts), 1, -1):
        rel = Path(*parts[:end])
        if (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file():
            return True
    return False


# -- the checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    assert broken_links(page) == [], f"{page.relative_to(REPO)} has broken links"


def test_readme_links_every_docs_page() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if not _SCHEME.match(t)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert missing == [], f"README.md should link each page of docs/ (add a line to its Documentation table): {missing}"


def test_every_lib_module_is_named_in_architecture() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    missing = [m.relative_to(REPO).as_posix() for m in lib_modules() if not is_named(m, text)]
    assert missing == [], f"docs/architecture.md should name these modules, with their role: {missing}"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_pages_name_only_lib_modules_that_exist(page: Path) -> None:
    named = named_lib_paths(page.read_text(encoding="utf-8"))
    assert sorted(n for n in named if not exists_in_lib(n)) == [], f"{page.relative_to(REPO)} names missing modules"


# -- the checkers themselves: each would let a broken page through if it were wrong ------


def test_slug_follows_githubs_rules() -> None:
    assert slug("Streaming (`stream=true`)") == "streaming-streamtrue"
    assert slug("预加载 Preload") == "预加载-preload"
    assert slug("Hot phrases and `preload_cache.py`") == "hot-phrases-and-preload_cachepy"
    assert slug("Deployment: several replicas, one Redis") == "deployment-several-replicas-one-redis"


def test_checkers_catch_a_broken_page(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Part one\n\n## Part one\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#part-one-1) [ok](#page) [gone](missing.md) [bad](other.md#part-two)\n"
        "`[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n# not a heading\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        f"missing.md: no file {tmp_path / 'missing.md'}",
        "other.md#part-two: no heading with the anchor #part-two in other.md",
    ]
    assert anchors(page) == {"page"}


def test_module_names_are_matched_whole() -> None:
    store = LIB / "cache" / "store.py"
    assert is_named(store, "`lib/cache/store.py` is the disk tier")
    assert is_named(store, "see lib.cache.store.AudioStore")
    assert not is_named(store, "`lib/cache/stores.py` and lib.cache.stores")
    assert not exists_in_lib("lib.sizes") and not exists_in_lib("lib/sizes.py")
    assert exists_in_lib("lib.request.access.Caller") and exists_in_lib("lib/engines/builtin/")


def test_readme_configuration_table_lists_every_section_and_key() -> None:
    """README's configuration table names every section of config.yaml and every key of
    each (a key added to lib/config/app.py and not to the table fails here)."""
    import dataclasses

    from lib.config import AppConfig

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+) \|$", readme, flags=re.M))
    missing: list[str] = []
    for field in dataclasses.fields(AppConfig):
        if field.default_factory is dataclasses.MISSING:  # a top-level scalar (engine)
            if field.name not in rows:
                missing.append(field.name)
            continue
        section = field.default_factory()
        listed = set(re.findall(r"`([a-z_0-9]+)`", rows.get(field.name, "")))
        missing += [f"{field.name}.{key.name}" for key in dataclasses.fields(section) if key.name not in listed]
    assert missing == [], f"README.md's configuration table does not list: {missing}"
