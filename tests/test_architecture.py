"""The house's layers (README.md, "Layout"), checked on every module's imports, function-local ones included.

From the bottom: the contract (`hpcc_contract/`: what every side shares, standard library only), then in `infra/`
the facts, the config, the rendering, the Pulumi program, the offline plan and the operator's commands. A module
imports its own layer and those below it, never one above. Beside them: the node package (`hpcc_node/`, what runs
on the nodes) imports only the contract and itself; the policy pack (`policy/`, run by Pulumi's policy engine
beside the program, checking it independently) imports only the contract and itself; the operator's commands may
also import the node package's client code (the ledger, the membership, the certificates' store). No two modules
import each other, directly or around a loop. The contract and the node package run on the nodes' own Python (3.8
and later) with nothing installed: the standard library only, Python 3.8's syntax.

A second check: the names that tie a resource to a cluster (`/hpcc/<cluster>/...`, `hpcc-<cluster>-...`,
`hpcc/<cluster>/...`) and the node groups' format are spelled in the contract alone; everyone else calls it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hpcc_contract", "hpcc_node", "infra", "policy")
# The layers in order, each with the module prefixes it holds (longest prefix wins).
LAYERS = ("contract", "facts", "config", "render", "program", "plan", "ops")
PREFIXES = {
    "hpcc_contract": "contract",
    "infra.facts": "facts",
    "infra.config": "config",
    "infra.render": "render",
    "infra.program": "program",
    "infra.__main__": "program",  # the Pulumi entry point: Pulumi.yaml's `main: infra/`
    "infra.plan": "plan",
    "infra.ops": "ops",
    "hpcc_node": "node",
    "policy": "policy",
}
# What each layer beside the stack may import, and what the stack's top may import besides the stack.
BESIDE = {"node": {"contract", "node"}, "policy": {"contract", "policy"}}
EXTRA = {"ops": {"node"}}
# Outside the standard library: what the contract and the node package may not import, and the policy pack's one
# dependency (the engine's SDK; records.py keeps the rest plain Python).
STDLIB_ONLY = ("contract", "node")
POLICY_THIRD_PARTY = {"pulumi_policy"}
# Programs hpcc runs on the nodes under the image's PyTorch (torchrun), never imported by the node package.
NODE_JOBS, JOBS_THIRD_PARTY = "hpcc_node.jobs", {"torch"}


def _modules() -> dict[str, Path]:
    files = subprocess.run(
        ["git", "ls-files", "--", *PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out = {}
    for f in files:
        if f.endswith(".py") and (ROOT / f).is_file():
            name = f[:-3].replace("/", ".")
            out[name.removesuffix(".__init__")] = ROOT / f
    return out


MODULES = _modules()


def layer(module: str) -> str | None:
    found = [p for p in PREFIXES if module == p or module.startswith(p + ".")]
    return PREFIXES[max(found, key=len)] if found else None


def _resolve(name: str) -> str | None:
    """The project module an imported name is in (a module, or a name inside one), else None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> list[tuple[str, int]]:
    """(imported name, line) of every import in the module, function-local and TYPE_CHECKING ones included."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def edges() -> dict[str, dict[str, int]]:
    """module -> {project module it imports (and each package that import runs first): line}."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for module in MODULES:
        for name, line in imports(module):
            target = _resolve(name)
            while target and target != module:
                out[module].setdefault(target, line)
                target = target.rpartition(".")[0] if target.rpartition(".")[0] in MODULES else None
    return out


def allowed(source: str, target: str) -> bool:
    if source in LAYERS and target in LAYERS:
        return LAYERS.index(target) <= LAYERS.index(source)
    if source in BESIDE:
        return target in BESIDE[source]
    return target in EXTRA.get(source, set())


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if layer(m) is None and m != "infra"]
    assert not unplaced, f"no layer for {unplaced}: add its folder to PREFIXES (and README.md's Layout)"
    assert not imports("infra"), "infra/__init__.py imports nothing: each layer is its own package"


def test_no_module_imports_a_layer_above_its_own():
    wrong = [
        f"{s} ({layer(s)}) imports {t} ({layer(t)}) at {MODULES[s].relative_to(ROOT)}:{line}"
        for s, targets in edges().items()
        for t, line in targets.items()
        if t != "infra" and not allowed(layer(s), layer(t))
    ]
    assert not wrong, "upward or sideways imports:\n" + "\n".join(sorted(wrong))


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(MODULES)))
    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    return found


def test_a_function_local_import_of_the_project_says_why():
    """An import inside a function hides a dependency from a reader of the module's head: only for a heavy load
    kept off the common path (the CLI's per-command imports), and then with a comment saying so."""
    silent = []
    for path in MODULES.values():
        source = path.read_text().splitlines()
        for fn in ast.walk(ast.parse("\n".join(source))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node is not fn:
                    names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    text = " ".join(source[node.lineno - 1 : node.end_lineno])
                    if (any(_resolve(n) for n in names) or getattr(node, "level", 0)) and "#" not in text:
                        silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text.strip()}")
    assert not silent, "import at the module's head, or say why not:\n" + "\n".join(silent)


def test_no_import_cycle():
    graph = edges()
    cycles = _cycles(graph)
    named = [
        "; ".join(f"{a} -> {b} (line {graph[a][b]})" for a in c for b in c if b in graph.get(a, {})) for c in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(named)


def test_the_cycle_check_finds_a_cycle_and_names_its_edges():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    global MODULES
    kept, MODULES = MODULES, dict.fromkeys(graph, ROOT)  # type: ignore[assignment]
    try:
        assert _cycles(graph) == [["a", "b", "c"]]
    finally:
        MODULES = kept
    assert not allowed("render", "program") and allowed("program", "render") and not allowed("node", "infra")
    assert allowed("ops", "node") and not allowed("plan", "node") and not allowed("contract", "facts")
    assert not allowed("policy", "config") and allowed("policy", "contract")


def test_the_contract_and_the_node_package_are_python_3_8_and_the_standard_library_only():
    stdlib = set(sys.stdlib_module_names) | set(PACKAGES)
    own_policy = {p.stem for p in (ROOT / "policy").glob("*.py")}  # the engine runs the pack from its directory
    wrong = []
    for module, path in MODULES.items():
        where = layer(module)
        if where in STDLIB_ONLY:
            text = path.read_text()
            ast.parse(text, feature_version=(3, 8))  # a SyntaxError names the file and the line
            wrong += [f"{module}: str.{m}) is Python 3.9" for m in ("removeprefix(", "removesuffix(") if m in text]
        ok = (
            stdlib
            | (POLICY_THIRD_PARTY | own_policy if where == "policy" else set())
            | (JOBS_THIRD_PARTY if module.startswith(NODE_JOBS + ".") else set())
        )
        if where in STDLIB_ONLY or where == "policy":
            wrong += [
                f"{module}:{line} imports {name}" for name, line in imports(module) if name.split(".")[0] not in ok
            ]
    assert not wrong, "\n".join(wrong)
    importers = [s for s, targets in edges().items() for t in targets if t.startswith(NODE_JOBS) and s != t]
    assert not [s for s in importers if not s.startswith(NODE_JOBS)], f"{NODE_JOBS} is run, not imported: {importers}"


# -- one spelling of each name and format ----------------------------------------------------------------------

# A cluster's resource names, as code would spell them around a variable; and the groups document's format
# number (a literal `format` beside `groups`, or compared with a number).
SPELLINGS = re.compile(r"/hpcc/\{|hpcc-\{|hpcc/\{")
GROUPS_FORMAT = re.compile(
    r"""["']format["']\s*:\s*\d+\s*,\s*["']groups["']|"""
    r"""(?:get\(\s*["']format["']\s*\)|\[\s*["']format["']\s*\])\s*[!=]=\s*\d"""
)
# Where a spelling may stand: the contract itself, and the contract's own tests, which pin each name as running
# clusters carry it. The bootstrap's bash (templates/) repeats a few names and is run against the contract's by
# tests (tests/render/); tests/box/ is left to its own rewrite (its names are the ones the box's nodes use).
SPELLED_IN = ("hpcc_contract/", "tests/contract/", "tests/box/", "tests/test_architecture.py")  # the last: its samples


def _python_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "*.py", "scripts/hpcc"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [f for f in out if (ROOT / f).is_file()]


def _spelled(pattern: re.Pattern) -> list[str]:
    return [
        f"{f}:{n}: {line.strip()}"
        for f in _python_files()
        if not f.startswith(SPELLED_IN)
        for n, line in enumerate((ROOT / f).read_text().splitlines(), 1)
        if pattern.search(line)
    ]


def test_no_cluster_name_is_spelled_outside_the_contract():
    found = _spelled(SPELLINGS)
    assert not found, "call hpcc_contract/names.py instead of spelling these:\n" + "\n".join(found)


def test_the_groups_format_is_spelled_in_the_contract_alone():
    found = _spelled(GROUPS_FORMAT)
    assert not found, "use hpcc_contract/groups.py (dumps, loads, FORMAT):\n" + "\n".join(found)


def test_the_spelling_checks_catch_what_they_look_for():
    for line in ('f"/hpcc/{cluster}/groups"', 'f"hpcc-{c}-ledger"', 'f"secret:hpcc/{c}/ssh-key"'):
        assert SPELLINGS.search(line), line
    for line in ('json.dumps({"format": 1, "groups": []})', 'doc.get("format") != 1', 'value["format"] == 1'):
        assert GROUPS_FORMAT.search(line), line
    assert not SPELLINGS.search('f"{cluster}-{what}"') and not GROUPS_FORMAT.search('{"format": FORMAT, "groups"')
