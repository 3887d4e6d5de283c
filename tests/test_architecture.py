"""The import rules of ARCHITECTURE.md: crate_theory and crate_nn stay independent implementations."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "crate_theory": {"torch", "crate_nn", "verify"},
    "crate_nn": {"crate_theory", "verify"},
}


def _imported_top_level_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_independence(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"package {package} has no modules"
    offenders = {
        str(f.relative_to(ROOT)): sorted(_imported_top_level_modules(f) & FORBIDDEN[package]) for f in files
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"{package} imports what it must not: {offenders}"


def test_importing_crate_nn_loads_no_training_or_plotting_dependency():
    """``import crate_nn`` (models, checkpoints, measurements) must not pull kornia, lion-pytorch or matplotlib:
    they belong to training and figures and are imported where used."""
    import subprocess
    import sys

    code = ("import sys, crate_nn, crate_nn.engine, crate_nn.tasks; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'kornia', 'lion_pytorch', 'matplotlib'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_tasks_take_the_run_from_the_engine_not_from_its_loop():
    """A task (a module of crate_nn/tasks that registers one) gets the run's numbers from `Task.start` and its
    position from ``self.clock``: it imports nothing from the training loop, ``crate_nn.engine.loop``."""
    offenders = []
    for path in sorted((ROOT / "crate_nn" / "tasks").glob("*.py")):
        source = path.read_text()
        if "@register_task(" not in source:
            continue
        for node in ast.walk(ast.parse(source, filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.endswith("engine.loop")
                    or node.module.endswith("engine") and any(alias.name == "loop" for alias in node.names)):
                offenders.append(path.name)
    assert not offenders, f"tasks importing the training loop: {offenders}"
