"""The layout's rules, read from the source: an AST walk of every import, module-level,
inside functions and under ``TYPE_CHECKING`` alike (a late or type-only import is still a
dependency a reader has to follow).

* ``raptor_engine`` is a plain library: it imports nothing of ``bot``, ``adapters``,
  ``bench`` or ``tests``;
* adapters translate between a platform and ``bot``'s public surface (``BOT_SURFACE``): they
  never import ``raptor_engine``, and one platform's adapter never imports another's;
* ``bot`` imports the engine only through its public API (``from raptor_engine import ...``);
* ``bot`` imports adapters only in its composition root, which no adapter imports (the
  root hands each adapter a started bot);
* ``testkit`` (the loopback stand-ins of Slack, Discord and an OpenAI-compatible server)
  serves the tests and the benchmarks only: the running bot (``raptor_engine``, ``bot``,
  ``adapters``) never imports it;
* shipped code (``raptor_engine``, ``bot``, ``adapters``, ``bench``, ``testkit``) never
  imports ``tests``;
* no two modules import each other, directly or round a longer cycle;
* no module of ``raptor_engine``, ``bot`` or ``adapters`` imports another module's private
  (underscore-prefixed) name: what modules share is public, with a docstring saying so;
* product code (``raptor_engine``, ``bot``, ``adapters``) reaches no module through
  ``sys.modules`` (an import the graph above cannot see), and no private name of the
  standard library (``threading._x``, ``from multiprocessing.util import _x``, or
  ``getattr(obj, "_x")`` on an object it did not make): either can break on a Python upgrade.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("raptor_engine", "bot", "adapters", "bench", "testkit")
# The one module of ``bot`` that knows the adapters: it builds everything and runs the adapters.
COMPOSITION_ROOTS = frozenset({"bot.composition"})
# What code outside the engine imports of it: the package's exported names (raptor_engine/__init__.py)
# and its table of defaults and bounds.
ENGINE_API = frozenset({"raptor_engine", "raptor_engine.defaults"})
# What adapters may import of bot: its public surface (README, "A new platform").
BOT_SURFACE = frozenset({"bot", "bot.neutral", "bot.runtime", "bot.replies", "bot.commands", "bot.config",
                         "bot.errors", "bot.samples"})
# The code the running bot is made of: its modules share only public names, among themselves and
# with each other, and reach no private internals (the private-reach rules below).
PRODUCT = frozenset({"raptor_engine", "bot", "adapters"})
# Standard-library names that start with an underscore yet are documented in the library reference,
# with the reason each is needed.
DOCUMENTED_PRIVATE = {
    "os._exit": "ending a process without Python's clean-up (bot.process_exit, child processes)",
    "sys._current_frames": "the only way to read another thread's stack (adapters.loop_watchdog logs where the "
                           "event loop is stuck)",
}
# getattr(obj, "_x") on another library's object, each with the reason no public API does it.
ALLOWED_PRIVATE_GETATTR = {
    ("raptor_engine.numba_cache", "_cache"): "numba's dispatchers tell whether on-disk caching is on by no other "
                                             "means, and switching it on twice would compile twice",
    ("raptor_engine.store.deadline", "_server"): "chromadb 1.5 makes its HTTP session without a timeout and has no "
                                                 "setting for one; its session is the one place to put the store's "
                                                 "deadline (a chromadb that moved it fails at open)",
    ("raptor_engine.store.deadline", "_session"): "the same: httpx's public Client.timeout, on chromadb's session",
}


def module_name(path: Path) -> str:
    """``bot/neutral.py`` -> ``bot.neutral``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of the shipped packages, by dotted name."""
    found = {}
    for package in SHIPPED:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imported_names(path: Path, name: str) -> Iterator[str]:
    """The dotted names ``path`` imports (``from a.b import c`` gives ``a.b.c`` and ``a.b``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = import_base(node, path, name)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_base(node: ast.ImportFrom, path: Path, name: str) -> str:
    """The module a ``from ... import`` in module ``name`` (at ``path``) imports from, relative ones resolved."""
    base = node.module or ""
    if not node.level:
        return base
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    anchor = package.split(".")
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, base] if base else anchor)


def private_imports(path: Path, name: str) -> list[str]:
    """Each private (underscore-prefixed, not dunder) name that module ``name`` imports from a
    module of the packages in ``PRODUCT``, as ``module -> origin.name``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = import_base(node, path, name)
            if top(base) in PRODUCT:
                found += [f"{name} -> {base}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The project module an imported name lands in (its longest known prefix), or None."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def import_graph(known: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Each project module -> the project modules it imports (tests included as targets)."""
    known = known if known is not None else modules()
    targets = {**known, **{module_name(p): p for p in (ROOT / "tests").rglob("*.py")}}
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges = {resolve(t, targets) for t in imported_names(path, name)}
        graph[name] = {e for e in edges if e is not None and e != name and not name.startswith(e + ".")}
    return graph


def top(name: str) -> str:
    return name.split(".")[0]


def platform_of(name: str) -> str | None:
    """``adapters.slack.app`` -> ``slack``; None for the shared ``adapters`` modules."""
    parts = name.split(".")
    return parts[1] if parts[0] == "adapters" and len(parts) > 2 else None


def back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks one of the module docstring's rules, as ``a -> b: why``."""
    broken = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            why = _rule_broken(source, target)
            if why:
                broken.append(f"{source} -> {target}: {why}")
    return broken


def _rule_broken(source: str, target: str) -> str | None:
    if top(target) == "tests":
        return "shipped code imports tests"
    if top(target) == "testkit" and top(source) not in ("testkit", "bench"):
        return "the running bot imports the test kit"
    if top(source) == "raptor_engine" and top(target) != "raptor_engine":
        return "the engine imports the application"
    if top(source) == "adapters" and top(target) == "raptor_engine":
        return "an adapter reaches into the engine (use bot's public surface)"
    if top(source) == "adapters" and top(target) == "adapters":
        mine, theirs = platform_of(source), platform_of(target)
        if mine and theirs and mine != theirs:
            return "one platform's adapter imports another's"
    if top(source) == "bot" and top(target) == "adapters" and source not in COMPOSITION_ROOTS:
        return "bot imports an adapter outside the composition root"
    if top(source) == "bot" and top(target) == "raptor_engine" and target not in ENGINE_API:
        return "bot imports the engine by a module path (use raptor_engine's public API)"
    if top(source) == "adapters" and target in COMPOSITION_ROOTS:
        return "an adapter imports the composition root (it receives a started bot instead)"
    if top(source) == "adapters" and top(target) == "bot" and target not in BOT_SURFACE:
        return "an adapter imports bot beyond its public surface"
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph.get(node, ()):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_breaks_the_layering() -> None:
    assert back_edges(import_graph()) == []


def test_no_modules_import_each_other() -> None:
    assert cycles(import_graph()) == []


# The checks themselves, on made-up graphs: each rule must catch what it names.
@pytest.mark.parametrize(("source", "target"), [
    ("adapters.slack.app", "raptor_engine.types"),
    ("adapters.slack.app", "adapters.discord_bot.render"),
    ("raptor_engine.store", "bot.config"),
    ("bench.soak", "tests.conftest"),
    ("adapters.slack.app", "testkit.slack_api"),
    ("bot.handler", "adapters.console.app"),
    ("bot.cli", "adapters.registry"),
    ("adapters.console.app", "bot.composition"),
    ("bot.handler", "raptor_engine.engine"),
    ("adapters.slack.app", "bot.handler"),
])
def test_each_rule_catches_its_back_edge(source: str, target: str) -> None:
    assert back_edges({source: {target}}) != []


def test_allowed_edges_pass() -> None:
    graph = {"adapters.slack.app": {"bot.neutral", "adapters.slack.blocks", "adapters"},
             "bot.composition": {"adapters.registry"}, "adapters.registry": {"adapters.slack.app"},
             "bot.neutral": {"raptor_engine"}, "bot.config": {"raptor_engine.defaults"},
             "bench.slack_chat": {"testkit.slack_api", "adapters.slack.app"}}
    assert back_edges(graph) == []


def test_no_module_imports_another_modules_private_name() -> None:
    found = [hit for name, path in modules().items() if top(name) in PRODUCT
             for hit in private_imports(path, name)]
    assert found == []


def test_private_imports_are_found_absolute_and_relative(tmp_path: Path) -> None:
    path = tmp_path / "channel.py"
    path.write_text("from raptor_engine.store.common import _translated, TEXT_KEY\n"
                    "from .sources import _LISTED\nfrom . import __version__\n"
                    "from collections import _private_stdlib\n"
                    "def later():\n    from bot.config import _section\n", encoding="utf-8")
    assert private_imports(path, "raptor_engine.store.channel") == [
        "raptor_engine.store.channel -> raptor_engine.store.common._translated",
        "raptor_engine.store.channel -> raptor_engine.store.sources._LISTED",
        "raptor_engine.store.channel -> bot.config._section",
    ]


def test_a_cycle_round_three_modules_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_relative_and_late_imports_are_read(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("from .blocks import render\nfrom .. import chat\n"
                    "def later():\n    import raptor_engine.store\n", encoding="utf-8")
    names = set(imported_names(path, "adapters.slack.app"))
    assert {"adapters.slack.blocks.render", "adapters.chat", "raptor_engine.store"} <= names


def test_only_engine_calls_hands_engine_work_to_a_thread() -> None:
    """The thread boundary sits in one place (``bot/engine_calls.py``): no other module of ``bot``
    passes engine work (anything naming the engine) to ``asyncio.to_thread``. The composition root
    builds the engine in a thread (loading the model), which is not a call on it."""
    found = []
    for name, path in modules().items():
        if top(name) != "bot" or name in ("bot.engine_calls", *COMPOSITION_ROOTS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to_thread"
                    and node.args and "engine" in ast.unparse(node.args[0])):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_only_the_composition_root_wraps_the_engine_for_coroutines() -> None:
    """One ``AsyncEngine`` per process, built in the composition root and handed to the bot, its
    rebuild service, its handler and its probes: no other shipped module of ``bot`` or ``adapters``
    builds one (each used to build its own)."""
    found = []
    for name, path in modules().items():
        if top(name) not in ("bot", "adapters") or name in COMPOSITION_ROOTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("AsyncEngine"):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []

# -- private reaches -----------------------------------------------------------------------


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _stdlib_names(tree: ast.AST) -> dict[str, str]:
    """The names a module binds to the standard library, each with the dotted name it stands for
    (``import multiprocessing.util as mp_util`` binds ``mp_util`` to ``multiprocessing.util``)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.partition(".")[0] in sys.stdlib_module_names:
                    name = alias.name if alias.asname else alias.name.partition(".")[0]
                    bound[alias.asname or name] = name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.partition(".")[0] in sys.stdlib_module_names:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """``a.b.c`` spelled with the names ``bound`` resolves, None unless it starts at one of them."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound)
        return None if base is None else f"{base}.{node.attr}"
    return None


def sys_modules_reaches(source: str) -> list[str]:
    """Every use of ``sys.modules`` in ``source`` but asking whether a module is loaded
    (``"x" in sys.modules``, which reaches no module), as ``line: code``."""
    tree = ast.parse(source)
    bound = _stdlib_names(tree)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if _dotted(node, bound) != "sys.modules":
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Compare) and node in parent.comparators \
                and all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops):
            continue
        found.append(f"{getattr(node, 'lineno', '?')}: {ast.unparse(parent or node)}")
    return found


def private_reaches(source: str, module: str = "") -> list[str]:
    """Every private name of the standard library ``source`` uses (see ``DOCUMENTED_PRIVATE``),
    and every ``getattr``/``hasattr``/``setattr`` of a private attribute (the object's type
    is unknown here; ``ALLOWED_PRIVATE_GETATTR`` lists the justified ones), as ``line: code``."""
    tree = ast.parse(source)
    bound = _stdlib_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.partition(".")[0] in sys.stdlib_module_names:
            names = [f"{node.module}.{alias.name}" for alias in node.names if _is_private(alias.name)]
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = _dotted(node.value, bound)
            names = [] if base is None else [f"{base}.{node.attr}"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
                and _is_private(node.args[1].value) and ast.unparse(node.args[0]) not in ("self", "cls") \
                and (module, node.args[1].value) not in ALLOWED_PRIVATE_GETATTR:
            names = [ast.unparse(node)]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if name not in DOCUMENTED_PRIVATE]
    return found


def test_no_product_code_reaches_a_module_through_sys_modules() -> None:
    found = [f"{name}:{where}" for name, path in modules().items() if top(name) in PRODUCT
             for where in sys_modules_reaches(path.read_text(encoding="utf-8"))]
    assert found == []


def test_no_product_code_uses_a_private_name_of_the_standard_library() -> None:
    found = [f"{name}:{where}" for name, path in modules().items() if top(name) in PRODUCT
             for where in private_reaches(path.read_text(encoding="utf-8"), name)]
    assert found == []


@pytest.mark.parametrize("source", [
    "import sys\nworker = sys.modules.get('raptor_engine.cluster_worker')\n",
    "import sys\nmodule = sys.modules['umap.umap_']\n",
    "import sys as system\nfor name, module in system.modules.items():\n    pass\n",
    "from sys import modules\nmodules.pop('x')\n",
])
def test_a_reach_through_sys_modules_is_caught(source: str) -> None:
    assert sys_modules_reaches(source) != []


def test_asking_whether_a_module_is_loaded_is_no_reach() -> None:
    assert sys_modules_reaches("import sys\nif 'numba' in sys.modules or 'x' not in sys.modules:\n    pass\n") == []


@pytest.mark.parametrize("source", [
    "import threading\nthreading._register_atexit(print)\n",
    "import multiprocessing.util\nmultiprocessing.util._run_finalizers(0)\n",
    "import multiprocessing.util as mp_util\nmp_util._run_finalizers(0)\n",
    "from multiprocessing.util import _run_finalizers\n",
    "from concurrent.futures import process\nprocess._python_exit()\n",
    "processes = getattr(pool, '_processes', None)\n",
    "import os\nenviron: os._Environ[str]\n",
])
def test_a_private_name_of_the_standard_library_is_caught(source: str) -> None:
    assert private_reaches(source) != []


def test_own_privates_dunders_and_documented_names_pass() -> None:
    source = ("import os, sys\nfrom raptor_engine import _helper\nclass A:\n    def f(self):\n"
              "        self._x = getattr(self, '_y', None)\n        return other._z, os.__name__, "
              "getattr(os, '__file__')\nos._exit(0)\nsys._current_frames()\n")
    assert private_reaches(source) == []
