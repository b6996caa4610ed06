"""The package's import structure: layers that import one way (``[tool.importlinter]`` in pyproject.toml),
no import cycle between modules, and no private name imported from another package.

Imports inside functions count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ragen_torchrl"


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("ragen_torchrl", cache_dir=None)


def test_the_import_linter_contracts_are_kept():
    # in a child process: import-linter configures logging with dictConfig, which disables every
    # logger that already exists in the process (and so hides later tests' records from caplog)
    code = (
        "from importlinter.cli import lint_imports; raise SystemExit(lint_imports(config_filename=%r, no_cache=True))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code % str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_import_cycle_between_modules(graph):
    cycles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                cycles.append(" -> ".join((importer, *back)))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def subpackage(module: str) -> str:
    """``ragen_torchrl.<first part>``: the unit across which private names may not travel."""
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> tuple[str, bool]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(path: Path) -> list[str]:
    """``from <another ragen_torchrl package> import _name`` statements of one file."""
    module, is_package = module_name(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = imported_from(node, module, is_package)
        if not source.startswith("ragen_torchrl") or subpackage(source) == subpackage(module):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
    return found


def private_getattrs(path: Path) -> list[str]:
    """``getattr(m, "_name")`` where ``m`` is a module of another ragen_torchrl package bound by an import
    in the same file (``from .. import envs``, ``import ragen_torchrl.envs as e``): a private import spelled
    another way."""
    module, is_package = module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: dict[str, str] = {}  # local name -> module it binds
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = imported_from(node, module, is_package)
            for alias in node.names:
                modules[alias.asname or alias.name] = f"{source}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
            continue
        if len(node.args) < 2 or not isinstance(node.args[0], ast.Name) or not isinstance(node.args[1], ast.Constant):
            continue
        name, target = node.args[1].value, modules.get(node.args[0].id, "")
        if not (isinstance(name, str) and name.startswith("_") and not name.startswith("__")):
            continue
        if target.startswith("ragen_torchrl") and subpackage(target) != subpackage(module):
            found.append(f"{module}:{node.lineno} reads {name} of {target}")
    return found


def test_private_getattr_check_by_hand(tmp_path):
    root = tmp_path / "pkg"
    fake = PACKAGE / "trainer" / "example_private_getattr.py"
    try:
        fake.write_text('from .. import envs\nx = getattr(envs, "_REGISTRY", {})\ny = getattr(envs, "__doc__")\n')
        assert private_getattrs(fake) == [
            "ragen_torchrl.trainer.example_private_getattr:2 reads _REGISTRY of ragen_torchrl.envs"
        ]
        fake.write_text('from . import config\nx = getattr(config, "_get")\n')  # same package: allowed
        assert private_getattrs(fake) == []
    finally:
        fake.unlink(missing_ok=True)
    assert not root.exists()


def test_no_private_name_is_read_with_getattr_across_packages():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in private_getattrs(path)]
    assert not found, "\n".join(found)


def test_private_import_check_by_hand(tmp_path):
    # the check itself, on hand-written imports: relative and absolute, same and other package
    fake = PACKAGE / "models" / "example.py"
    assert imported_from(
        ast.parse("from ..diagnostics.x import _f").body[0], "ragen_torchrl.models.example", False
    ) == ("ragen_torchrl.diagnostics.x")
    assert (
        imported_from(ast.parse("from .x import _f").body[0], "ragen_torchrl.models", True) == "ragen_torchrl.models.x"
    )
    assert module_name(fake) == ("ragen_torchrl.models.example", False)
    assert subpackage("ragen_torchrl.models.kv_cache") == "ragen_torchrl.models"


def test_no_private_name_is_imported_across_packages():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in private_imports(path)]
    assert not found, "\n".join(found)


def test_every_package_init_has_explicit_exports():
    # one style: explicit imports and a literal __all__; no module-level __getattr__ (lazy exports)
    for init in sorted(PACKAGE.rglob("__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        names = {
            getattr(t, "id", None)
            for node in tree.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        }
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        rel = init.relative_to(ROOT)
        assert "__all__" in names, f"{rel} has no __all__"
        assert "__getattr__" not in functions | names, f"{rel} exports lazily"
        stars = [n for n in tree.body if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)]
        assert not stars, f"{rel} star-imports"


def test_the_config_schema_imports_without_torch():
    # --help, --describe and every config error go through the schema: none may pay torch's import
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import ragen_torchrl.trainer.config_schema"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.splitlines() if "|" in line}
    assert "ragen_torchrl.trainer.config_schema" in imported
    assert not imported & {"torch", "tensordict", "torchrl", "transformers"}


def torchrl_private_imports(path: Path) -> list[str]:
    """``from torchrl... import _name`` (or ``import torchrl._x``) statements of one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torchrl":
            private = [a.name for a in node.names if a.name.startswith("_")]
            if private or any(part.startswith("_") for part in (node.module or "").split(".")):
                hits.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.module} {private}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torchrl" and any(p.startswith("_") for p in a.name.split(".")):
                    hits.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {a.name}")
    return hits


def test_torchrl_private_names_are_imported_in_the_compat_module_only():
    """The next torchrl release that moves a private name breaks ``torchrl_compat.py`` and its test only."""
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "torchrl_compat.py"
        for hit in torchrl_private_imports(path)
    ]
    assert found == []
    assert torchrl_private_imports(PACKAGE / "torchrl_compat.py")  # it does import them (the check sees them)


def test_no_module_is_over_700_lines():
    """A module that holds one concept stays readable in one sitting: split along its seams past 700 lines."""
    sizes = {
        str(p.relative_to(PACKAGE.parent)): len(p.read_text(encoding="utf-8").splitlines())
        for p in sorted(PACKAGE.rglob("*.py"))
    }
    assert {name: n for name, n in sizes.items() if n > 700} == {}
