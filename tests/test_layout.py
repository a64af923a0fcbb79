"""The house's rules, read off the source: small modules, no import circles, one
boundary for the workarounds of TF, TFP and Keras (`tfp_maf._platform`), and
`keras_models` on `tfp_maf`'s public names (docs/contributing.md draws the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tfp_maf", "keras_models", "tfp_maf_cli")
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """Every module ``name`` imports, at its top or inside a function, with the
    packages an import runs on the way (``a.b.c`` runs ``a`` and ``a.b`` too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            out |= {".".join(parts[:k]) for k in range(1, len(parts) + 1)}
    # A module's own packages are running already when it is imported.
    return {m for m in out if m in MODULES and m != name and not name.startswith(m + ".")}


def test_no_product_module_is_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_import_circles():
    graph = {name: _imports(name) for name in MODULES}
    circles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert not circles, circles


def test_the_layers_never_import_the_sampling_engine():
    layers = [name for name in MODULES if name.startswith("tfp_maf.layers")]
    assert not [(name, m) for name in layers for m in _imports(name) if m.startswith("tfp_maf.sampling")]


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("keras_models")))
def test_keras_models_reads_tfp_maf_through_public_names_and_the_platform(name):
    """No private module of `tfp_maf` but `tfp_maf._platform`, no private name."""
    wrong = []
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfp_maf"):
            module = node.module.removeprefix("tfp_maf._platform")
            if _private(module) or any(_private(a.name) for a in node.names):
                wrong.append(ast.unparse(node))
        elif isinstance(node, ast.Import):
            wrong += [a.name for a in node.names if a.name.startswith("tfp_maf") and _private(a.name)]
    assert not wrong, wrong


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_calls_another_objects_private_names(package):
    """``x._name`` only on ``self``, ``cls``, ``type(self)`` or ``super()``; the workarounds
    (`tfp_maf._platform`) are where TF's, TFP's and Keras' private names are read."""
    wrong = []
    for name, path in MODULES.items():
        if not name.startswith(package) or name.startswith("tfp_maf._platform"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls", "type(self)", "super()"):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert not wrong, wrong
