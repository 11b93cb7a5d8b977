"""Which product modules reach another module's private names (issue 14).

A name with one leading underscore is its module's own business. This finds the places where one
module uses another's: ``from x import _y``, ``x._y`` on an imported module, and ``obj._y`` on an
object when ``_y`` is defined in some other product module but not in the module that uses it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["PRODUCT_PACKAGES", "Reach", "find_reaches"]

ROOT: Final = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES: Final = ("protocol", "relay", "conformance", "rawp")


@dataclass(frozen=True, order=True)
class Reach:
    """``user`` (a file) uses ``name``, private to ``owner`` (another file)."""

    user: str
    owner: str
    name: str


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _product_files() -> list[Path]:
    return sorted(p for pkg in PRODUCT_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _file_of(module: str) -> str | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return str(candidate.relative_to(ROOT))
    return None


def _defined_private_names(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, assignments, ``self._x = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
    return {n for n in names if _is_private(n)}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def find_reaches(sources: dict[Path, str] | None = None) -> set[Reach]:
    """Every reach into another product module's private names.

    ``sources`` (paths under the repository root to their text) stands in for the product
    files, so a test can show the checker a reach the product no longer has.
    """
    if sources is None:
        sources = {p: p.read_text(encoding="utf-8") for p in _product_files()}
    trees = {p: ast.parse(text) for p, text in sources.items()}
    defined = {p: _defined_private_names(t) for p, t in trees.items()}
    owners: dict[str, set[str]] = defaultdict(set)
    for path, names in defined.items():
        for name in names:
            owners[name].add(str(path.relative_to(ROOT)))
    reaches: set[Reach] = set()
    for path, tree in trees.items():
        user = str(path.relative_to(ROOT))
        module = _module_of(path)
        modules_imported: dict[str, str] = {}  # local name -> module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(module, path.name == "__init__.py", node)
                for alias in node.names:
                    owner = _file_of(source) if source.split(".")[0] in PRODUCT_PACKAGES else None
                    if owner is None:
                        continue
                    if _is_private(alias.name) and owner != user:
                        reaches.add(Reach(user, owner, alias.name))
                    sub = _file_of(f"{source}.{alias.name}")
                    if sub is not None:
                        modules_imported[alias.asname or alias.name] = f"{source}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PRODUCT_PACKAGES:
                        modules_imported[alias.asname or alias.name] = alias.name
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            target = node.value
            if isinstance(target, ast.Name) and target.id in modules_imported:
                owner = _file_of(modules_imported[target.id])
                if owner is not None and owner != user:
                    reaches.add(Reach(user, owner, node.attr))
                continue
            if isinstance(target, ast.Name) and target.id in {"self", "cls"}:
                continue
            if node.attr in defined[path]:
                continue  # the module's own private name, on another instance of its class
            for owner in sorted(owners.get(node.attr, ())):
                reaches.add(Reach(user, owner, node.attr))
    return reaches
