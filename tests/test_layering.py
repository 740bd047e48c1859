"""STYLE practice 2: every import points down the floors of DESIGN.md, and the pure floors do
no I/O, read no clock and use no randomness.

The floors, bottom first: ``statefuse.registry`` (the repository's ``registry/``),
``statefuse.core``, ``statefuse.reading``, ``statefuse.retrieval``, ``statefuse.storage``,
``statefuse.sync`` (the repository's ``sync/``) and ``statefuse.entry``. A folder's name says its
floor (`floor_of`); ``statefuse/registry`` and ``statefuse/sync`` are links to the top-level
folders, and an import through them (``statefuse.sync.replica``) counts like any other.

The checks read the source with `ast` (every import statement, also inside functions and
``if TYPE_CHECKING:`` blocks, and every call), so nothing is imported to check it. The purity check
follows imports through our own modules: a core module that imports a helper of ours which
imports ``os`` is reported with the chain that leads there.

What counts as an import of our module: the module an ``import`` or ``from ... import`` names (and
``from pkg import sub`` when ``sub`` is a submodule). Parent packages that Python runs implicitly
(``statefuse/__init__.py`` when importing ``statefuse.core.op``) are not followed: they are
re-export surfaces that may reach the edges (``statefuse`` re-exports `Writer`, which reads the
clock).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Repository folder -> the package it installs as.
PACKAGES = {"registry": "statefuse.registry", "statefuse": "statefuse", "sync": "statefuse.sync"}
#: The floors, bottom first (DESIGN.md, "Layout and layering").
FLOORS = ("registry", "core", "reading", "retrieval", "storage", "sync", "entry")
#: The floors whose modules must stay pure (SEMANTICS §6-§7: materialize and project are
#: functions), and the pure modules of the registry (which also reads files and runs checks).
PURE_FLOORS = ("core", "reading")
PURE_REGISTRY = (
    "statefuse.registry.value",
    "statefuse.registry.contract",
    "statefuse.registry.normalizer",
    "statefuse.registry.registry",
    "statefuse.registry.error",
)
#: Modules at the package's root: the package itself is the re-export surface (its imports are
#: not arrows: see the module doc), and three public paths of entry-floor modules.
ROOT_MODULES = {
    "statefuse": None,
    "statefuse.__main__": "entry",
    "statefuse.cli": "entry",
    "statefuse.mcp": "entry",
    "statefuse.langgraph": "entry",
}


def floor_of(module: str) -> str | None:
    """``statefuse.sync.replica`` -> ``sync``, ``statefuse.core.op`` -> ``core``,
    ``statefuse`` -> None (the surface), ``os`` -> ``os``."""
    if module in ROOT_MODULES:
        return ROOT_MODULES[module]
    parts = module.split(".")
    if parts[0] == "statefuse" and len(parts) > 1:
        return parts[1]
    return parts[0]


def layer_of(module: str) -> str:
    """The repository folder a module lives in: ``statefuse.sync.replica`` -> ``sync``,
    ``statefuse.core.op`` -> ``statefuse``, ``os`` -> ``os``."""
    parts = module.split(".")
    if parts[0] == "statefuse" and len(parts) > 1 and parts[1] in ("registry", "sync"):
        return parts[1]
    return parts[0]


#: Standard modules that do I/O, read clocks or the environment, use randomness or threads, or
#: import code by name. ``datetime`` is not here: parsing dates is pure; its clock-reading
#: constructors are caught by IMPURE_METHODS instead.
FORBIDDEN_MODULES = frozenset(
    {
        "os",
        "sys",
        "io",
        "time",
        "random",
        "secrets",
        "subprocess",
        "socket",
        "sqlite3",
        "pathlib",
        "shutil",
        "tempfile",
        "threading",
        "asyncio",
        "uuid",
        "urllib",
        "http",
        "logging",
        "multiprocessing",
        "concurrent",
        "signal",
        "select",
        "selectors",
        "ssl",
        "importlib",
        "glob",
        "fileinput",
        "mmap",
        "ctypes",
        "platform",
        "getpass",
        "locale",
        "zoneinfo",
        "webbrowser",
    }
)
#: Pure-core modules allowed some forbidden imports, each with why (a seam, kept small).
SEAMS: dict[str, frozenset[str]] = {
    # On its first count, loads bpe-openai's native extension by path (importlib) and registers
    # it (sys.modules) instead of importing the package, whose __init__ takes 0.7 s; counting
    # itself stays pure.
    "statefuse.reading.tokenizer": frozenset({"importlib", "sys"}),
    # Reads reference counts (sys.getrefcount): an index whose State nobody holds any more is
    # written in place instead of copied; no I/O, clock or randomness.
    "statefuse.core.index": frozenset({"sys"}),
    # Runs the user's judge in a thread it can stop waiting for, so that a hung judge abstains
    # after its timeout; what it selects is the judge's answer, checked as any resolver's.
    "statefuse.reading.judge": frozenset({"threading"}),
}
#: Method names whose calls read a clock, the local time zone, randomness or files.
IMPURE_METHODS = frozenset(
    {
        "now",
        "today",
        "utcnow",
        "fromtimestamp",
        "time",
        "time_ns",
        "perf_counter",
        "perf_counter_ns",
        "monotonic",
        "monotonic_ns",
        "process_time",
        "localtime",
        "random",
        "urandom",
        "getrandbits",
        "randbytes",
        "randint",
        "randrange",
        "choice",
        "shuffle",
        "sample",
        "open",
        "getenv",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "import_module",
    }
)
#: Builtins that do I/O or import code by name.
IMPURE_BUILTINS = frozenset({"open", "input", "print", "breakpoint", "__import__", "exec", "eval"})


@dataclass(frozen=True)
class Found:
    name: str
    line: int


@dataclass(frozen=True)
class ModuleScan:
    imports: tuple[Found, ...]
    calls: tuple[Found, ...]


def _resolve(module: str | None, level: int, package: str) -> str:
    if level == 0:
        return module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{module}" if module else base


def scan_source(source: str, module: str, *, is_package: bool = False) -> ModuleScan:
    """Every module ``source`` imports (anywhere in the file) and every impure call it makes."""
    package = module if is_package else module.rpartition(".")[0]
    imports: list[Found] = []
    calls: list[Found] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imports += [Found(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, package)
            imports.append(Found(base, node.lineno))
            imports += [
                Found(f"{base}.{alias.name}", node.lineno)
                for alias in node.names
                if alias.name != "*"
            ]
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in IMPURE_METHODS:
                calls.append(Found(ast.unparse(func) + "()", node.lineno))
            elif isinstance(func, ast.Name) and func.id in IMPURE_BUILTINS:
                calls.append(Found(func.id + "()", node.lineno))
    return ModuleScan(tuple(imports), tuple(calls))


def scan_tree(sources: dict[str, tuple[str, bool]]) -> dict[str, ModuleScan]:
    """``{module: (source, is_package)}`` -> ``{module: scan}``."""
    return {name: scan_source(src, name, is_package=pkg) for name, (src, pkg) in sources.items()}


def read_packages(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    sources = {}
    for folder, package in PACKAGES.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = (*package.split("."), *path.relative_to(root / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            sources[name] = (path.read_text(encoding="utf-8"), is_package)
    return sources


def _ours(scans: dict[str, ModuleScan], module: str) -> list[str]:
    return sorted({f.name for f in scans[module].imports if f.name in scans and f.name != module})


def impurities(scans: dict[str, ModuleScan], start: str) -> list[str]:
    """Why ``start`` is not pure: forbidden imports and impure calls in it or in any of our
    modules it reaches by imports, each with the chain of imports that leads there."""
    via: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        module = queue.pop(0)
        for dep in _ours(scans, module):
            if dep not in via:
                via[dep] = module
                queue.append(dep)
    problems = []
    for module in sorted(via):
        chain, step = [module], via[module]
        while step is not None:
            chain.append(step)
            step = via[step]
        where = " -> ".join(reversed(chain))
        seen = set()
        for found in scans[module].imports:
            top = found.name.split(".")[0]
            allowed = SEAMS.get(module, frozenset())
            if top in FORBIDDEN_MODULES - allowed and (top, found.line) not in seen:
                seen.add((top, found.line))
                problems.append(f"{module} line {found.line} imports {top!r} (via {where})")
        problems += [
            f"{module} line {found.line} calls {found.name} (via {where})"
            for found in scans[module].calls
        ]
    return problems


def climbing_arrows(scans: dict[str, ModuleScan]) -> list[str]:
    """Every import that points up the floors: from a module to one on a floor above its own.

    The package surface ``statefuse`` counts as the top floor when imported (it re-exports every
    floor and the replica). An import of a ``statefuse.<name>`` that is on no floor (a path of
    the flat layout, resolved only by the compatibility finder) is reported too: code of ours
    imports modules where they live."""
    rank = {f: i for i, f in enumerate(FLOORS)}
    problems = []
    for module, scan in sorted(scans.items()):
        here = floor_of(module)
        if here is None:
            continue
        seen = set()
        for found in scan.imports:
            if found.name.split(".")[0] != "statefuse" or found.line in seen:
                continue
            there = floor_of(found.name) or FLOORS[-1]
            if there not in rank and found.name.rpartition(".")[0] in scans:
                continue  # a name imported from a module (``from statefuse import __version__``)
            if there not in rank:
                seen.add(found.line)
                problems.append(f"{module} line {found.line} imports {found.name!r}, on no floor")
            elif rank[there] > rank[here]:
                seen.add(found.line)
                problems.append(
                    f"{module} ({here}) line {found.line} imports {found.name!r} ({there})"
                )
    return problems


SCANS = scan_tree(read_packages())
#: Every module of the pure floors.
PURE = sorted(m for m in SCANS if floor_of(m) in PURE_FLOORS) + list(PURE_REGISTRY)


# --- the project ----------------------------------------------------------------------------------


def test_every_module_lives_on_a_floor_and_every_floor_has_modules():
    assert {floor_of(m) for m in SCANS} == {*FLOORS, None}
    # beside the floors, the package's root holds only its surface and the public paths
    at_root = sorted(m for m in SCANS if m.count(".") == 1 and m.split(".")[1] not in FLOORS)
    assert at_root == sorted(set(ROOT_MODULES) - {"statefuse"})
    # the pure check cannot silently lose the heart of the semantics to a rename
    assert {"statefuse.core.materializer", "statefuse.reading.projection"} <= set(PURE)
    assert {"statefuse.reading.context", "statefuse.registry.registry"} <= set(PURE)


def test_the_links_inside_statefuse_are_the_folders_the_scan_reads():
    # ``statefuse/sync`` and ``statefuse/registry`` link to the top-level folders, which the scan
    # reads as ``statefuse.sync`` and ``statefuse.registry``: an arrow through a link is an arrow
    for folder in ("registry", "sync"):
        assert (ROOT / "statefuse" / folder).resolve() == (ROOT / folder).resolve()


def test_no_import_climbs_a_floor():
    problems = climbing_arrows(SCANS)
    assert not problems, "imports point down the floors:\n" + "\n".join(problems)


def test_statefuse_reaches_sync_only_through_the_lazy_names_of_its_package():
    # ``statefuse.Replica`` and friends resolve on first use (module ``__getattr__``), so that
    # importing statefuse never imports sync; the names must exist there.
    import importlib

    import statefuse

    for name, module in statefuse._FROM_SYNC.items():
        assert floor_of(module) == "sync"
        assert getattr(importlib.import_module(module), name) is getattr(statefuse, name)
    sources = read_packages()
    dynamic = [
        m
        for m, (src, _) in sources.items()
        if layer_of(m) != "registry" and "import_module(" in src
    ]
    # package surfaces resolve lazy names (and the paths of the flat layout), and the CLI imports
    # the modules ``--normalizers`` names (an entry point's job); no other module imports by name
    assert "statefuse" in dynamic and set(dynamic) <= {
        "statefuse",
        "statefuse.sync",
        "statefuse.entry.cli",
    }, dynamic


def test_every_path_of_the_flat_layout_is_the_module_of_its_floor():
    import importlib
    import pickle

    import statefuse

    assert statefuse._MOVED, "the compatibility table is empty"
    for old, floor in statefuse._MOVED.items():
        module = importlib.import_module(f"statefuse.{old}")
        assert module is importlib.import_module(f"statefuse.{floor}.{old}"), old
        assert module.__spec__.name == f"statefuse.{floor}.{old}", old
        # as an attribute of the package, the module, unless the package exports that name
        # (``statefuse.timeline`` is the function, as it was before the floors)
        exported = old in statefuse.__all__
        assert (getattr(statefuse, old) is module) is not exported, old
    for face in ("cli", "mcp", "langgraph"):
        assert importlib.import_module(f"statefuse.{face}") is importlib.import_module(
            f"statefuse.entry.{face}"
        )
    # a value pickled under a class path of the flat layout loads as the class of its floor
    from statefuse.reading.lens import Lens

    old = pickle.dumps(Lens(task="t"), protocol=0).replace(
        b"statefuse.reading.lens", b"statefuse.lens"
    )
    assert b"statefuse.lens" in old and pickle.loads(old) == Lens(task="t")
    assert callable(statefuse.timeline) and "timeline" in statefuse.__all__
    assert not (set(statefuse._MOVED) & {f.name for f in (ROOT / "statefuse").iterdir()})


def test_the_entry_point_of_the_package_metadata_is_the_command_line():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["scripts"]["statefuse"] == "statefuse.entry.cli:main"
    assert {f"statefuse.{f}" for f in FLOORS[1:5]} | {"statefuse.entry"} <= set(
        meta["tool"]["setuptools"]["packages"]
    )


@pytest.mark.parametrize("module", PURE)
def test_pure_floor_module_does_no_io_reads_no_clock_and_uses_no_randomness(module):
    problems = impurities(SCANS, module)
    assert not problems, f"{module} is not pure:\n" + "\n".join(problems)


# --- the checker itself ---------------------------------------------------------------------------


def _scans(**modules: str) -> dict[str, ModuleScan]:
    return scan_tree({name.replace("__", "."): (src, False) for name, src in modules.items()})


@pytest.mark.parametrize(
    "source",
    [
        "import os\n",
        "import os.path as p\n",
        "from os import path\n",
        "def f():\n    import socket\n",
        "class C:\n    def m(self):\n        from urllib.request import urlopen\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sqlite3\n",
        "try:\n    import asyncio\nexcept ImportError:\n    pass\n",
    ],
    ids=["import", "submodule", "from", "in-function", "in-method", "type-checking", "in-try"],
)
def test_checker_finds_forbidden_imports_wherever_they_are(source):
    problems = impurities(_scans(pkg__core=source), "pkg.core")
    assert len(problems) == 1 and problems[0].startswith("pkg.core line "), problems
    assert "imports '" in problems[0]


@pytest.mark.parametrize(
    ("source", "line", "call"),
    [
        (
            "from datetime import datetime\ndef f():\n    return datetime.now()\n",
            3,
            "datetime.now()",
        ),
        ("import datetime as dt\nx = dt.date.today()\n", 2, "dt.date.today()"),
        ("def f(d):\n    return d.utcnow()\n", 2, "d.utcnow()"),
        ("def f(rng, xs):\n    rng.shuffle(xs)\n", 2, "rng.shuffle()"),
        ("def f(p):\n    return p.read_text()\n", 2, "p.read_text()"),
        ("def f(name):\n    return open(name)\n", 2, "open()"),
        ("def f():\n    print('x')\n", 2, "print()"),
        ("m = __import__('o' + 's')\n", 1, "__import__()"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith(")") else None,
)
def test_checker_finds_calls_that_read_the_clock_randomness_or_files(source, line, call):
    problems = impurities(_scans(pkg__core=source), "pkg.core")
    assert problems == [f"pkg.core line {line} calls {call} (via pkg.core)"]


def test_checker_allows_pure_date_parsing():
    source = (
        "from datetime import date, datetime, timedelta\n"
        "def f(s):\n    return date.fromisoformat(s) + timedelta(days=1), datetime(2020, 1, 1)\n"
    )
    assert impurities(_scans(pkg__core=source), "pkg.core") == []


def test_checker_follows_imports_through_our_modules_and_names_the_chain():
    scans = scan_tree(
        {
            "pkg": ("from pkg.helper import h\n", True),
            "pkg.core": ("from pkg import h\n", False),
            "pkg.helper": ("from . import util\n", False),
            "pkg.util": ("def u():\n    import time\n    return time.time()\n", False),
            "pkg.unrelated": ("import os\n", False),
        }
    )
    problems = impurities(scans, "pkg.core")
    assert problems == [
        "pkg.util line 2 imports 'time' (via pkg.core -> pkg -> pkg.helper -> pkg.util)",
        "pkg.util line 3 calls time.time() (via pkg.core -> pkg -> pkg.helper -> pkg.util)",
    ]


def test_checker_does_not_follow_implicit_parent_packages():
    scans = scan_tree(
        {
            "pkg": ("import os\n", True),
            "pkg.core": ("from pkg.leaf import x\n", False),
            "pkg.leaf": ("x = 1\n", False),
        }
    )
    assert impurities(scans, "pkg.core") == []


def test_checker_terminates_on_import_cycles():
    scans = _scans(pkg__a="import pkg.b\n", pkg__b="import pkg.a\nimport random\n")
    assert impurities(scans, "pkg.a") == ["pkg.b line 2 imports 'random' (via pkg.a -> pkg.b)"]


@pytest.mark.parametrize(
    ("module", "source", "is_package", "expected"),
    [
        ("registry.normalizer", "from . import value\n", False, "registry.value"),
        ("registry.normalizer", "from .value import x\n", False, "registry.value"),
        ("registry", "from .value import x\n", True, "registry.value"),
        ("statefuse.sub.mod", "from ..op import x\n", False, "statefuse.op"),
    ],
)
def test_checker_resolves_relative_imports(module, source, is_package, expected):
    names = {f.name for f in scan_source(source, module, is_package=is_package).imports}
    assert expected in names


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("statefuse.registry.mod", "from statefuse.core.op import ClaimAdded\n"),
        ("statefuse.registry.mod", "import statefuse\n"),
        ("statefuse.core.mod", "def f():\n    from statefuse.reading import view\n"),
        ("statefuse.core.mod", "from statefuse.sync import Peer\n"),
        ("statefuse.reading.mod", "import statefuse.sync.replica\n"),
        ("statefuse.storage.mod", "from statefuse.entry.cli import main\n"),
        ("statefuse.sync.mod", "from statefuse import cli\n"),
        ("statefuse.storage.mod", "from statefuse.op import ClaimAdded\n"),
    ],
    ids=["registry-core", "surface", "in-function", "link", "dotted", "entry", "face", "flat"],
)
def test_checker_finds_imports_that_climb(module, source):
    scans = scan_tree({module: (source, False), "statefuse.core.ok": ("import msgpack\n", False)})
    problems = climbing_arrows(scans)
    assert len(problems) == 1 and problems[0].startswith(f"{module} "), problems


def test_checker_lets_imports_point_down_and_across_a_floor():
    sources = {
        "statefuse.entry.a": ("import statefuse\nfrom statefuse.sync import replica\n", False),
        "statefuse.sync.b": ("from statefuse.storage.store import Store\n", False),
        "statefuse.reading.c": ("from statefuse.reading import view\nimport os\n", False),
        "statefuse.cli": ("from statefuse.entry import cli\n", False),
    }
    assert climbing_arrows(scan_tree(sources)) == []


def test_the_error_tree_in_statefuse_error_names_every_error_class():
    import importlib
    import pkgutil

    import statefuse.core.error
    from statefuse.registry.error import StateFuseError

    missing = []
    seen = 0
    for package in PACKAGES.values():
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, f"{package}."):
            linked = package == "statefuse" and info.name.startswith(
                ("statefuse.sync.", "statefuse.registry.")
            )
            if info.name.endswith("__main__") or linked:
                continue  # the linked folders are walked as their own packages
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    isinstance(obj, type)
                    and issubclass(obj, StateFuseError)
                    and obj.__module__ == module.__name__
                    and name not in (statefuse.core.error.__doc__ or "")
                ):
                    missing.append(f"{module.__name__}.{name}")
            seen += 1
    assert seen > 60, "the walk missed the floors"
    assert not missing, f"not in the error tree of statefuse/core/error.py: {missing}"


def test_no_file_imports_the_bare_folder_names_registry_or_sync():
    # the folders install as statefuse.registry and statefuse.sync; a bare ``import sync`` would
    # import a second copy of the module from the repository root (or a user's own sync.py)
    problems = []
    for folder in ("registry", "statefuse", "sync", "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            scan = scan_source(path.read_text(encoding="utf-8"), "x.y")
            problems += [
                f"{path.relative_to(ROOT)} line {f.line} imports {f.name!r}"
                for f in scan.imports
                if f.name.split(".")[0] in ("registry", "sync")
            ]
    assert not problems, "\n".join(problems)


# --- import circles -------------------------------------------------------------------------------

#: Import circles still in the tree (any import counts: at the top, in a function, or for type
#: checking only), each to be broken as the sub-packages by layer are laid out. The test below
#: fails on a circle not listed here and on a listed one that is gone, so the list only shrinks.
#: (The command line and the MCP server, and the scrub and the View, no longer import each
#: other: their shared parts moved below both, to `statefuse.entry.argument`,
#: `statefuse.entry.clitable`
#: and `statefuse.registry.value`.)
KNOWN_CIRCLES = (
    ("statefuse.core.lifecycle", "statefuse.core.materializer", "statefuse.core.state"),
    ("statefuse.sync.change", "statefuse.sync.verify"),
    (
        "statefuse.sync.client",
        "statefuse.sync.follower",
        "statefuse.sync.jetstream",
        "statefuse.sync.replica",
    ),
)
#: The packages' ``__init__`` modules re-export names; an import of a package is not followed
#: (as Python runs them implicitly, see the module docstring).
PACKAGE_MODULES = frozenset(PACKAGES.values())


def import_circles(scans: dict[str, ModuleScan]) -> list[tuple[str, ...]]:
    """The strongly connected groups of two or more of our modules (each sorted, the list
    sorted): modules that import each other, directly or through others."""
    graph = {
        m: sorted({f.name for f in s.imports if f.name in scans and f.name != m} - PACKAGE_MODULES)
        for m, s in scans.items()
    }
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    for root in sorted(graph):
        if root in order:
            continue
        # Tarjan's algorithm, iteratively: (module, index of the next neighbour to visit)
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                order[v] = low[v] = len(order)
                stack.append(v)
                on_stack.add(v)
            if i < len(graph[v]):
                work.append((v, i + 1))
                w = graph[v][i]
                if w not in order:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], order[w])
                continue
            if low[v] == order[v]:
                group = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    found.append(tuple(sorted(group)))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(found)


def test_the_checker_finds_a_circle_through_a_third_module():
    sources = {
        "statefuse.a": ("import statefuse.b\n", False),
        "statefuse.b": ("def f():\n    from statefuse import c\n", False),
        "statefuse.c": ("from statefuse.a import x\n", False),
        "statefuse.d": ("import statefuse.a\n", False),
    }
    assert import_circles(scan_tree(sources)) == [("statefuse.a", "statefuse.b", "statefuse.c")]


def test_no_import_circle_but_the_known_ones():
    assert import_circles(SCANS) == sorted(KNOWN_CIRCLES)
