"""The architecture holds: layers (import-linter, counting imports inside functions), no cycles
between packages or modules, small modules, one chooser, declared target capabilities, imports
at the top of their module (but for lazy loads of heavy frameworks and the CLI's flows)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

from edge.core.capabilities import Capabilities
from targets import REGISTRY, get_target
from tests.support.inner_imports import AGENT_RUNTIMES, InnerImport, Rules, inner_imports, rules

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("edge", "targets", "devices", "partition")
#: Replaced by the serving-engine issue; its size is left alone until then.
SIZE_EXEMPT: set[str] = set()  # none since the serving engine replaced the hand-written server
MAX_LINES = 600


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def _cycles(edges: set[tuple[str, str]]) -> list[set[str]]:
    graph = nx.DiGraph()
    graph.add_edges_from((a, b) for a, b in edges if a != b)
    return [c for c in nx.strongly_connected_components(graph) if len(c) > 1]


def test_the_layer_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_grimp_counts_imports_inside_functions() -> None:
    """A function-level import is an edge (edge.core.model imports onnx only inside)."""
    graph = grimp.build_graph("edge", include_external_packages=True, cache_dir=None)
    assert "onnx" in graph.find_modules_directly_imported_by("edge.core.model")


def test_no_import_cycles_between_modules_or_packages() -> None:
    graph = _graph()
    modules = {(m, d) for m in graph.modules for d in graph.find_modules_directly_imported_by(m)}
    assert _cycles(modules) == []
    packages = {m for m in graph.modules if graph.find_children(m)}

    def package(module: str) -> str:
        return module if module in packages else module.rpartition(".")[0]

    assert _cycles({(package(a), package(b)) for a, b in modules}) == []


def _sources() -> list[Path]:
    dirs = [*PACKAGES, "bench", "tools"]
    return sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))


def test_no_module_over_600_lines_outside_tests() -> None:
    big = {str(p.relative_to(ROOT)): n for p in _sources()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(big) <= SIZE_EXEMPT, big


def test_one_chooser() -> None:
    """The tie band, the precision order and a pick of the fastest decide only in
    edge.core.select and its settling (partition's solver chooses cuts, not candidates: it
    stays its own)."""
    pattern = re.compile(r"\(1 \+ (tie|TIE)\)|PRECISION_RANK\[|\bTIE\b\s*="
                         r"|\bmin\(.*(p50|\.bench\b|score|ms\b)")
    allowed = {"edge/core/select.py", "edge/core/settle.py", "edge/core/plan.py",
               "partition/solve.py"}
    found = [f"{p.relative_to(ROOT)}:{n}" for d in PACKAGES for p in (ROOT / d).rglob("*.py")
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line) and str(p.relative_to(ROOT)) not in allowed]
    assert found == []


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_target_declares_its_capabilities(name: str) -> None:
    target = get_target(name)
    assert isinstance(target.caps, Capabilities)
    assert target.caps.runtime and target.caps.precisions and target.caps.suffix.startswith(".")


def test_no_capability_is_probed_with_getattr() -> None:
    probes = [f"{p.relative_to(ROOT)}:{n}" for p in _sources()
              for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if re.search(r"(getattr|hasattr)\((target|get_target\(|type\(target)", line)]
    assert probes == []


#: What the agent may import on a device besides the standard library and itself.
AGENT_MAY_IMPORT = AGENT_RUNTIMES


def test_the_agent_imports_only_the_standard_library_and_device_runtimes() -> None:
    graph = grimp.build_graph("devices", include_external_packages=True, cache_dir=None)
    agent = {m for m in graph.modules if m == "devices.agent" or m.startswith("devices.agent.")}
    outside = {(m, d) for m in agent for d in graph.find_modules_directly_imported_by(m)
               if d not in agent and d.split(".")[0] not in sys.stdlib_module_names
               and d.split(".")[0] not in AGENT_MAY_IMPORT}
    assert outside == set()


def test_the_agent_contract_forbids_every_other_devices_module() -> None:
    """import-linter's forbidden list names every devices module but the agent's own."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (agent,) = [c for c in config["contracts"] if c.get("source_modules") == ["devices.agent"]]
    modules = {f"devices.{p.stem}" for p in (ROOT / "devices").glob("*.py")
               if p.stem != "__init__"}
    assert modules <= set(agent["forbidden_modules"]), modules - set(agent["forbidden_modules"])


#: Issue 26: imports inside functions beyond the allowed lazy loads (397 in all when filed).
MAX_INNER_IMPORTS = 40


@pytest.fixture(scope="module")
def import_rules() -> Rules:
    return rules(ROOT, PACKAGES)


def test_imports_sit_at_the_top_of_their_module(import_rules: Rules) -> None:
    """Inside a function only a heavy framework loaded lazily, a device runtime in the agent,
    or what keeps `edge --help` light (a CLI command's flow); the rest at the top."""
    others = [found for found in inner_imports(ROOT, PACKAGES) if not import_rules.allowed(found)]
    assert len(others) <= MAX_INNER_IMPORTS, (
        f"{len(others)} imports inside functions (at most {MAX_INNER_IMPORTS}); move these to "
        "the top of their module:\n" + "\n".join(map(str, others)))


@pytest.mark.parametrize(("path", "module", "allowed"), [
    ("edge/flows/prune.py", "torch", True),                  # a heavy framework, lazily
    ("edge/core/data.py", "PIL", True),                      # pillow: the images extra
    ("edge/flows/prune.py", "edge.core.torch_graph", True),  # a module built on torch
    ("edge/core/intake/tf.py", "tf_keras", True),            # tf-keras: the tflite extra
    ("edge/cli/optimize.py", "edge.flows.optimize", True),   # a command's flow
    ("edge/cli/profiles.py", "yaml", True),                  # --help loads no yaml
    ("devices/agent/runtimes.py", "numpy", True),            # optional on a device
    ("edge/core/model.py", "numpy", False),                  # a base dependency
    ("edge/core/values.py", "hashlib", False),               # the standard library
    ("edge/cli/common.py", "edge.core.errors", False),       # --help loads it anyway
    ("edge/cli/profiles.py", "edge.core.tables", False),     # the standard library only
    ("edge/flows/optimize.py", "edge.flows.recover", False),  # a flow is not the CLI
])
def test_the_import_rules_tell_lazy_loads_from_hidden_imports(
        import_rules: Rules, path: str, module: str, allowed: bool) -> None:
    found = InnerImport(path=path, line=1, function="f", modules=(module,))
    assert import_rules.allowed(found) is allowed


COLLECTION = ROOT / "devices" / "ansible" / "plugins"
#: The edge.fleet collection's controller plugins are a client of edge, at the top beside
#: edge.cli (Ansible loads them as ansible_collections.edge.fleet; no package imports them):
#: they reach edge through these doors only (never targets: the runtimes' wheels come from their
#: declarations, found as the agent finds them); its module runs on the device, stdlib only.
CONTROLLER_DOORS = ("edge.core.", "devices.")
#: The one agent module the controller uses: how runtimes are found on edge's host.
AGENT_DOOR = "devices.agent.runtimes"


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


def test_the_collection_is_a_client_of_edge_through_its_doors() -> None:
    controller = [*COLLECTION.glob("action/*.py"), *COLLECTION.glob("plugin_utils/*.py")]
    edge_side = {(p.name, m) for p in controller for m in _imported(p)
                 if m.split(".")[0] in PACKAGES}
    assert edge_side, "the controller plugins read bundles with edge"
    assert {(f, m) for f, m in edge_side
            if not m.startswith(CONTROLLER_DOORS)
            or ((m + ".").startswith("devices.agent.") and m != AGENT_DOOR)} == set()
    device_side = {m for p in COLLECTION.glob("modules/*.py") for m in _imported(p)
                   if m.split(".")[0] not in sys.stdlib_module_names | {"__future__"}}
    assert {m for m in device_side if not m.startswith("ansible.module_utils")} == set()


def test_no_package_of_edge_imports_the_collection() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)
    assert "ansible_collections" not in graph.modules
    assert not any(m.startswith("devices.ansible") for m in graph.modules)
