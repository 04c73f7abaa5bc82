"""The house's layers, read from the source (nothing is imported): no import cycle between
the repository's modules, imports inside functions included; the library below the
workflows; kctx's sub-packages in one direction (docs/development.md, "A map of the
house")."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LIBRARY = "kctx"
WORKFLOWS = ("gan", "segmentation", "classification", "sequence", "language")
PACKAGES = (LIBRARY, *WORKFLOWS, "studies", "tools")

# kctx's parts, lowest first: a module may import its own part and the parts of a lower
# rank, never a higher one (so none of two parts of one rank imports the other).
RANKS = {
    "validation": 0, "arguments": 0, "_keras_fixes": 0, "host_memory": 0,
    "ops": 1, "checkpoints": 1, "export": 1, "distribute": 1,
    "layers": 2, "sf": 2, "data": 2, "testing": 3, "": 3,  # "": kctx/__init__.py (layers, ops)
    "convert": 4,
    "models": 5,
    "metrics": 6, "profile": 6,
    "bench": 7, "training": 7,
}


def _modules(root=ROOT, packages=PACKAGES):
    """{dotted name: path} of every module of ``packages`` below ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _imported(module, path, modules):
    """(the repository module each import statement of ``module`` names, line), imports
    inside functions and classes included; ``from a import b`` names ``a.b`` when that is
    a module, else ``a``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + [base] if base else parts)
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                yield name, node.lineno


def import_graph(root=ROOT, packages=PACKAGES):
    """{module: {imported module: first line}} over the repository's packages."""
    modules = _modules(root, packages)
    graph = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for target, line in _imported(module, path, modules):
            edges.setdefault(target, line)
    return graph


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(start):  # iterative: no recursion limit on deep import chains
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(cycles)


def _part(module):
    return module.split(".")[1] if "." in module else ""


GRAPH = import_graph()


def test_the_graph_sees_imports_inside_functions(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "low.py").write_text("def f():\n    from pkg import high\n")
    (tmp_path / "pkg" / "high.py").write_text("from pkg.low import f\n")
    (tmp_path / "pkg" / "alone.py").write_text("from . import low\nimport json\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.low"] == {"pkg.high": 2}
    assert graph["pkg.alone"] == {"pkg.low": 1}
    assert import_cycles(graph) == [["pkg.high", "pkg.low"]]


def test_no_import_cycle_anywhere():
    assert len(GRAPH) > 150  # the whole repository was read
    assert import_cycles(GRAPH) == []


def test_the_library_imports_no_workflow_study_or_tool():
    upward = [f"{module} imports {target} (line {line})"
              for module, edges in sorted(GRAPH.items()) if module.split(".")[0] == LIBRARY
              for target, line in edges.items() if target.split(".")[0] != LIBRARY]
    assert upward == []


def test_the_library_names_no_workflow_module_in_its_code():
    """Nor by a string (``"segmentation.models:segmenter"`` for a worker to import, a class
    path for a registry): a workflow registers or passes in what is its own."""
    pattern = re.compile(rf"^({'|'.join((*WORKFLOWS, 'studies', 'tools'))})\.[\w.]+(:\w+)?$")
    named = [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
             for path in sorted((ROOT / LIBRARY).rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and pattern.match(node.value)]
    assert named == []


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_a_workflow_imports_no_other_workflow(workflow):
    crossing = [f"{module} imports {target} (line {line})"
                for module, edges in sorted(GRAPH.items()) if module.split(".")[0] == workflow
                for target, line in edges.items()
                if target.split(".")[0] in WORKFLOWS and target.split(".")[0] != workflow]
    assert crossing == []


def test_kctx_parts_import_only_downwards():
    modules = [module for module in GRAPH if module.split(".")[0] == LIBRARY]
    unranked = sorted({_part(module) for module in modules} - set(RANKS))
    assert unranked == [], f"rank the new part(s) of kctx in RANKS: {unranked}"
    upward = [f"{module} ({_part(module) or 'kctx'}) imports {target} (line {line})"
              for module in sorted(modules) for target, line in GRAPH[module].items()
              if target.split(".")[0] == LIBRARY and _part(target) != _part(module)
              and RANKS[_part(target)] >= RANKS[_part(module)]]
    assert upward == []
