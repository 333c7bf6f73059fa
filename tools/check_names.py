"""One meaning per name in a package (STYLE.md, point 8), checked with ``ast`` alone.

    python tools/check_names.py runlane_sqs

prints one line per finding, ``path:line: RULE message``, and exits 1 when there is any:

- ``same-name``: two modules define the same public top-level name (``def``, ``class``,
  an assignment or a type alias whose name does not start with ``_``), unless the
  allow-list (``tools/names_allowed.txt``) names that name and every module it is in;
  a module's logger (``log = logging.getLogger(...)``) and its type variables
  (``T = TypeVar(...)``, ``P = ParamSpec(...)``) are conventions of each module, not
  definitions;
- ``re-export``: a module imports a name from another module of the package that only
  imports it there, reads it as an attribute of such a module (``keys.agenda_pk`` after
  ``from package.adapters.dynamodb import keys``), or lists in its ``__all__`` a name it
  only imports (import it from the module that defines it); the public namespaces in
  ``NAMESPACES`` may gather names from elsewhere, and the examples in ``EXAMPLES``,
  which read as user code, may import through them, but the other modules do not import
  through them either;
- ``shadowed-module``: a parameter of a function, method or lambda has the name of a
  module imported into its module;
- ``allow-list``: an allow-list entry without a reason, or one that no longer matches
  two definitions (remove it).

Imports are not definitions, so an ``__init__.py`` that gathers exports defines nothing.
"""

from __future__ import annotations

import argparse
import ast
import importlib.machinery
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ALLOWED = Path(__file__).with_name("names_allowed.txt")
"""Deliberate pairs: ``name  path path ...  # reason``, one a line."""

NAMESPACES = frozenset(
    {
        "runlane_sqs/__init__.py",
        "runlane_sqs/aio/__init__.py",
        "runlane_sqs/testing.py",
        "runlane_sqs/local/__init__.py",
        "runlane_sqs/aws_lambda.py",
        # public paths (docs, CHANGELOG): the errors by their module, and the Lambda
        # consumer's preferred path, which runlane_sqs.aws_lambda aliases
        "runlane_sqs/errors.py",
        "runlane_sqs/lambdas/consumer.py",
        # the codecs an app configures (docs/payloads.md, "Codecs")
        "runlane_sqs/codecs.py",
        # the Celery layer's documented path (docs/from-celery.md), one module a concept below
        "runlane_sqs/compat/celery/__init__.py",
    }
)
"""The public namespaces: they gather names defined elsewhere (paths from the root)."""

EXAMPLES = frozenset({"runlane_sqs/local/demo.py"})
"""Modules that read as user code (``make demo``): they import through the public
namespaces, as a user would (paths from the root)."""

CONVENTIONS = frozenset({"getLogger", "TypeVar", "ParamSpec"})
"""Calls whose assigned result is a per-module convention, not a definition: a module's
logger and its type variables (``logging.getLogger(...)`` or ``getLogger(...)``)."""

RULES = ("same-name", "re-export", "shadowed-module", "allow-list")
BLOCKS = (ast.If, ast.Try, ast.With)
"""Statements whose bodies still run at module level (``if TYPE_CHECKING:``, ``try:``)."""


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule} {self.message}"


@dataclass(frozen=True)
class Allowance:
    """An allow-list entry: ``name`` may be defined in each of ``paths``."""

    name: str
    paths: frozenset[str]
    reason: str
    line: int


@dataclass
class Module:
    """One parsed module: its path from the root, dotted name and top-level bindings."""

    path: str
    dotted: str
    tree: ast.Module
    is_package: bool
    public: dict[str, int] = field(default_factory=dict)
    """Public top-level definitions: name -> line."""
    defined: set[str] = field(default_factory=set)
    """Every top-level name bound other than by an import (private ones too)."""


# --- reading the package -------------------------------------------------------------


def load_package(root: Path, package: str) -> dict[str, Module]:
    """Every module under ``root/package``, by dotted name."""
    modules: dict[str, Module] = {}
    for file in sorted((root / package).rglob("*.py")):
        relative = file.relative_to(root)
        parts = list(relative.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(relative))
        module = Module(relative.as_posix(), ".".join(parts), tree, is_package)
        for name, line in top_level_definitions(tree.body):
            module.defined.add(name)
            if not name.startswith("_"):
                module.public.setdefault(name, line)
        module.defined.update(convention_names(tree.body))
        modules[module.dotted] = module
    return modules


def module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at module level, inside ``if``/``try``/``with`` blocks too."""
    for statement in body:
        yield statement
        if isinstance(statement, BLOCKS):
            for block in block_bodies(statement):
                yield from module_statements(block)


def block_bodies(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    for attribute in ("body", "orelse", "finalbody"):
        yield getattr(statement, attribute, [])
    for handler in getattr(statement, "handlers", []):
        yield handler.body


def top_level_definitions(body: list[ast.stmt]) -> Iterator[tuple[str, int]]:
    """``(name, line)`` for each module-level def, class, assignment and type alias, but
    for the assignments of a logger or a type variable (``CONVENTIONS``)."""
    for statement in module_statements(body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name, statement.lineno
        elif is_convention(statement):
            continue
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                yield from ((name, statement.lineno) for name in target_names(target))
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            yield from ((name, statement.lineno) for name in target_names(statement.target))
        elif type(statement).__name__ == "TypeAlias":  # ``type X = ...`` (Python 3.12+)
            yield from ((n, statement.lineno) for n in target_names(statement.name))  # type: ignore[attr-defined]


def convention_names(body: list[ast.stmt]) -> Iterator[str]:
    """The names bound at module level to a logger or a type variable: still bound (a
    module may import them from there), though not definitions."""
    for statement in module_statements(body):
        if isinstance(statement, ast.Assign) and is_convention(statement):
            for target in statement.targets:
                yield from target_names(target)
        elif isinstance(statement, ast.AnnAssign) and is_convention(statement):
            yield from target_names(statement.target)


def is_convention(statement: ast.stmt) -> bool:
    """Whether ``statement`` assigns a module's logger or a type variable (``CONVENTIONS``)."""
    if not isinstance(statement, ast.Assign | ast.AnnAssign):
        return False
    call = statement.value
    if not isinstance(call, ast.Call):
        return False
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr in CONVENTIONS and (
            function.attr != "getLogger"
            or (isinstance(function.value, ast.Name) and function.value.id == "logging")
        )
    return isinstance(function, ast.Name) and function.id in CONVENTIONS


def target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from target_names(element)
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value)


def imported_from(module: Module, node: ast.ImportFrom) -> str:
    """The dotted module a ``from ... import`` names, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = module.dotted.split(".")
    if not module.is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def is_submodule(modules: dict[str, Module], dotted: str) -> bool:
    """Whether ``dotted`` is a module: of the package, or found on ``sys.path``."""
    if dotted in modules:
        return True
    top, *rest = dotted.split(".")
    if top in {m.split(".")[0] for m in modules}:
        return False
    try:
        spec = importlib.machinery.PathFinder.find_spec(top)
    except (ImportError, ValueError):
        return False
    if spec is None or not rest:
        return spec is not None
    return any(
        module_file(Path(location), rest) for location in spec.submodule_search_locations or []
    )


def module_file(location: Path, parts: list[str]) -> bool:
    """Whether ``parts`` name a module or package below the package directory ``location``."""
    *packages, last = parts
    directory = location.joinpath(*packages)
    if (directory / last).is_dir():
        return True
    return any(
        (directory / f"{last}{suffix}").is_file() for suffix in importlib.machinery.all_suffixes()
    )


# --- the rules -----------------------------------------------------------------------


def same_names(modules: dict[str, Module], allowed: Iterable[Allowance]) -> Iterator[Finding]:
    """A public name defined in two modules or more, and not allowed in all of them."""
    places: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module in modules.values():
        for name, line in module.public.items():
            places[name].append((module.path, line))
    allowances: dict[str, frozenset[str]] = defaultdict(frozenset)
    for entry in allowed:
        allowances[entry.name] |= entry.paths
    for name, where in sorted(places.items()):
        paths = allowances.get(name, frozenset())
        if len(where) < 2 or {path for path, _ in where} <= paths:
            continue
        (first, line), *others = sorted(where)
        also = ", ".join(f"{path}:{at}" for path, at in others)
        note = f" (allowed only in {', '.join(sorted(paths))})" if paths else ""
        yield Finding(first, line, "same-name", f"'{name}' is also defined in {also}{note}")


def stale_allowances(
    modules: dict[str, Module], allowed: Iterable[Allowance], file: str
) -> Iterator[Finding]:
    """Entries without a reason, naming a module that no longer defines their name, or
    whose name is left in one module only."""
    by_path = {module.path: module for module in modules.values()}
    for entry in allowed:
        gone = sorted(
            p for p in entry.paths if entry.name not in getattr(by_path.get(p), "public", {})
        )
        holders = sum(entry.name in module.public for module in modules.values())
        if not entry.reason:
            message = f"'{entry.name}' has no reason"
        elif gone:
            message = f"'{entry.name}' is not defined in {', '.join(gone)}: take it off the entry"
        elif holders < 2:
            message = f"'{entry.name}' is defined in one module only: remove the entry"
        else:
            continue
        yield Finding(file, entry.line, "allow-list", message)


def re_exports(
    modules: dict[str, Module],
    namespaces: frozenset[str],
    examples: frozenset[str] = frozenset(),
) -> Iterator[Finding]:
    """``from package.x import y`` where ``x`` does not define ``y`` and ``y`` is no module;
    an example may import through a public namespace."""
    for module in modules.values():
        if module.path in namespaces:
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = imported_from(module, node)
            target = modules.get(source)
            if target is None or target is module:
                continue
            if module.path in examples and target.path in namespaces:
                continue
            for alias in node.names:
                if alias.name == "*" or alias.name in target.defined:
                    continue
                if f"{source}.{alias.name}" in modules:
                    continue
                where = "a public namespace" if target.path in namespaces else "only imported there"
                message = (
                    f"'{alias.name}' imported from {source}, which does not define it ({where})"
                )
                yield Finding(module.path, node.lineno, "re-export", message)


def exported_but_imported(
    modules: dict[str, Module], namespaces: frozenset[str]
) -> Iterator[Finding]:
    """A name in a module's ``__all__`` that the module does not define and that is no
    submodule of it: the module offers a second import path to a name defined elsewhere."""
    for module in modules.values():
        if module.path in namespaces:
            continue
        for name, line in all_names(module.tree.body):
            if name in module.defined or f"{module.dotted}.{name}" in modules:
                continue
            message = f"'{name}' listed in __all__ of {module.dotted}, which does not define it"
            yield Finding(module.path, line, "re-export", message)


def all_names(body: list[ast.stmt]) -> Iterator[tuple[str, int]]:
    """``(name, line)`` for each string a module-level ``__all__`` is given, added or
    extended with (``__all__ = [...]``, ``__all__: list[str] = [...]``, ``__all__ += [...]``)."""
    for statement in module_statements(body):
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
            targets = [statement.target]
        else:
            continue
        if statement.value is None or not any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in targets
        ):
            continue
        for node in ast.walk(statement.value):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node.value, node.lineno


def attribute_re_exports(
    modules: dict[str, Module],
    namespaces: frozenset[str],
    examples: frozenset[str] = frozenset(),
) -> Iterator[Finding]:
    """``m.y`` where ``m`` is bound to a module ``x`` of the package (``import package.x as
    m``, ``from package import x``) that does not define ``y``, and ``y`` is no module."""
    for module in modules.values():
        if module.path in namespaces:
            continue
        bound = package_modules(modules, module)
        seen: set[tuple[int, str, str]] = set()
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            source = bound.get(node.value.id)
            if source is None:
                continue
            target = modules[source]
            if module.path in examples and target.path in namespaces:
                continue
            if node.attr in target.defined or f"{source}.{node.attr}" in modules:
                continue
            read = (node.lineno, node.value.id, node.attr)
            if read in seen:
                continue
            seen.add(read)
            where = "a public namespace" if target.path in namespaces else "only imported there"
            message = (
                f"'{node.attr}' read as {node.value.id}.{node.attr} from {source},"
                f" which does not define it ({where})"
            )
            yield Finding(module.path, node.lineno, "re-export", message)


def package_modules(modules: dict[str, Module], module: Module) -> dict[str, str]:
    """Names bound to another module of the package by an ``import package.x as m`` or a
    ``from package import x`` anywhere in ``module``: name -> dotted module. A name bound
    to two different modules is left out."""
    bound: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname].add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = imported_from(module, node)
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    bound[alias.asname or alias.name].add(f"{source}.{alias.name}")
    return {
        name: dotted
        for name, (dotted, *others) in bound.items()
        if not others and dotted != module.dotted
    }


def module_names(modules: dict[str, Module], module: Module) -> dict[str, str]:
    """Names bound to modules by the module's top-level imports: name -> module."""
    bound: dict[str, str] = {}
    for node in module_statements(module.tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            source = imported_from(module, node)
            for alias in node.names:
                if alias.name != "*" and is_submodule(modules, f"{source}.{alias.name}"):
                    bound[alias.asname or alias.name] = f"{source}.{alias.name}"
    return bound


def shadowed_modules(modules: dict[str, Module]) -> Iterator[Finding]:
    """A parameter named as a module imported into the same module."""
    for module in modules.values():
        bound = module_names(modules, module)
        if not bound:
            continue
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            for argument in parameters(node.args):
                if argument.arg in bound:
                    owner = getattr(node, "name", "lambda")
                    shadowed = bound[argument.arg]
                    message = (
                        f"parameter '{argument.arg}' of {owner}() shadows the module {shadowed}"
                    )
                    yield Finding(module.path, argument.lineno, "shadowed-module", message)


def parameters(arguments: ast.arguments) -> Iterator[ast.arg]:
    yield from arguments.posonlyargs
    yield from arguments.args
    yield from arguments.kwonlyargs
    yield from (a for a in (arguments.vararg, arguments.kwarg) if a is not None)


# --- the allow-list and the command --------------------------------------------------


def read_allowed(text: str) -> list[Allowance]:
    """``name  path path ...  # reason`` per line; blank lines and ``#`` lines skipped."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        spec, _, reason = line.partition("#")
        name, *paths = spec.split()
        entries.append(Allowance(name, frozenset(paths), reason.strip(), number))
    return entries


def check(
    root: Path,
    package: str,
    allowed: list[Allowance] | None = None,
    namespaces: frozenset[str] = NAMESPACES,
    allowed_file: str = "names_allowed.txt",
    examples: frozenset[str] = EXAMPLES,
) -> list[Finding]:
    """Every finding for ``root/package``, by rule, then path and line."""
    modules = load_package(root, package)
    found = [
        *same_names(modules, allowed or []),
        *re_exports(modules, namespaces, examples),
        *attribute_re_exports(modules, namespaces, examples),
        *exported_but_imported(modules, namespaces),
        *shadowed_modules(modules),
        *stale_allowances(modules, allowed or [], allowed_file),
    ]
    return sorted(found, key=lambda f: (RULES.index(f.rule), f.path, f.line, f.message))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", help="the package directory, e.g. runlane_sqs")
    parser.add_argument("--allowed", type=Path, default=ALLOWED, help="the allow-list file")
    options = parser.parse_args(argv)
    package = Path(options.package).resolve()
    allowed = (
        read_allowed(options.allowed.read_text(encoding="utf-8"))
        if options.allowed.exists()
        else []
    )
    shown = os.path.relpath(options.allowed)  # as the lines of the package: from here
    findings = check(package.parent, package.name, allowed, allowed_file=shown)
    for finding in findings:
        print(finding)
    if findings:
        counts = ", ".join(f"{r} {sum(f.rule == r for f in findings)}" for r in RULES)
        print(f"check_names: {len(findings)} findings ({counts})", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
