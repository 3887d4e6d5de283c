"""The import rules of ARCHITECTURE.md: crate_theory and crate_nn stay independent implementations."""
import ast
import pathlib
import re

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


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(path: pathlib.Path) -> set[str]:
    """Every module of this repository that ``path`` imports, anywhere in it (inside functions too), relative
    imports resolved; ``from package import name`` counts ``package.name`` when that is a module."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names if _is_module(f"{module}.{alias.name}"))
    return {name for name in found if _is_module(name)}


DATA = ROOT / "crate_nn" / "data"


def test_data_modules_reach_each_other_directly_and_without_a_cycle():
    """The ``--dataset`` switch is a registry (`crate_nn.data.registry`) that each data module registers into: the
    registry imports no data module, no data module but the package imports the switch's lookups (`build_dataset`,
    `DATASETS`), the data modules import each other without a cycle, and every module that registers a layout is
    imported by the package (else its layouts would be missing from ``DATASETS``)."""
    modules = {_module_name(p): p for p in sorted(DATA.glob("*.py")) if p.name != "__init__.py"}
    graph = {name: _imported_modules(path) & set(modules) - {name} for name, path in modules.items()}
    assert graph["crate_nn.data.registry"] == set(), graph["crate_nn.data.registry"]
    lookups = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and {"build_dataset", "DATASETS"} & {a.name for a in node.names}:
                lookups.setdefault(name, []).append(node.module)
    assert set(lookups) <= {"crate_nn.data.registry"}, f"data modules using the dataset switch: {lookups}"
    visiting, done = [], set()

    def visit(name):
        assert name not in visiting, f"import cycle among data modules: {' → '.join([*visiting, name])}"
        if name in done:
            return
        visiting.append(name)
        for other in sorted(graph[name]):
            visit(other)
        visiting.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)
    registering = {name for name, path in modules.items() if "@register_dataset(" in path.read_text()}
    missing = registering - _imported_modules(DATA / "__init__.py")
    assert not missing, f"modules registering datasets that crate_nn.data does not import: {sorted(missing)}"
    import crate_nn.data

    assert crate_nn.data.DATASETS == crate_nn.data.dataset_names()


def test_data_imports_nothing_from_analysis():
    """Data come before what measures models: no module of crate_nn/data imports crate_nn.analysis."""
    offenders = {p.name: sorted(m for m in _imported_modules(p) if m.startswith("crate_nn.analysis"))
                 for p in sorted(DATA.glob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}, offenders


def _command_modules() -> dict[str, str]:
    """pyproject.toml's [project.scripts] of crate_nn: command → module (read without tomllib, absent on 3.10)."""
    text = (ROOT / "pyproject.toml").read_text().split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+)\s*=\s*"(crate_nn[\w.]*):\w+"', text, flags=re.MULTILINE))


def test_command_lines_share_modules_not_each_other():
    """A command-line module imports no other command's module: what two commands share (the checkpoint loader,
    `crate_nn.loading`) lives in a module of its own."""
    commands = _command_modules()
    assert {"crate-eval", "crate-segment", "crate-prepare-text"} <= set(commands), commands
    offenders = {}
    for command, module in commands.items():
        path = ROOT.joinpath(*module.split(".")).with_suffix(".py")
        others = sorted(_imported_modules(path) & (set(commands.values()) - {module}))
        if others:
            offenders[command] = others
    assert not offenders, f"commands importing other commands: {offenders}"


PACKAGES = ("crate_nn", "crate_theory", "verify", "benchmarks")


def test_every_module_opens_with_a_docstring():
    """Each module of crate_nn, crate_theory, verify and benchmarks says what it holds in its docstring (the
    module-by-module description lives there, not in a tree in ARCHITECTURE.md)."""
    missing = [str(path.relative_to(ROOT)) for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
               if not (ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or "").strip()]
    assert not missing, f"modules without a docstring: {missing}"


def test_architecture_names_only_paths_that_exist():
    """Every repository path ARCHITECTURE.md names in backquotes (``crate_nn/weights/``, ``verify/record.py``, …)
    exists; a pattern (``tasks/<system>.py``, ``crate_nn/*.py``) is not a path."""
    named = re.findall(r"`((?:crate_nn|crate_theory|verify|benchmarks|tests|docs|results|notebooks)/[^`\s(]*)",
                       (ROOT / "ARCHITECTURE.md").read_text())
    assert len(named) > 20, named
    missing = sorted({path for path in named if not {"<", "*"} & set(path) and not (ROOT / path).exists()})
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_crate_nn_imports_without_a_circle():
    """No module of crate_nn imports, directly or through others, a module that imports it back — an import inside
    a function counts (it runs as soon as the function is called): loading was 11 modules importing each other
    through function-level imports (`benchmarks.imports` measures the graph)."""
    from benchmarks.imports import circles, read_graph

    graph, _ = read_graph()
    assert "crate_nn.weights.reading" in graph and graph["crate_nn.weights.reading"]
    assert circles(graph) == []
    assert circles({**graph, "crate_nn.models.registry": graph["crate_nn.models.registry"] | {"crate_nn.weights"}})


def test_only_the_weights_package_tells_a_files_format():
    """Whether a file is of our format is decided in `crate_nn.weights` alone (`ours.is_ours`, used by
    `read_state`): no ``format == FORMAT`` written by hand elsewhere in crate_nn."""
    from benchmarks.imports import FORMAT_TEST, format_decisions

    assert format_decisions() == []
    assert FORMAT_TEST.search('ours = payload.get("format") == checkpoint.FORMAT')


def _crate_nn_classes() -> dict[str, list[str]]:
    """Every class crate_nn defines, by name, with the names of its bases (``a.B`` read as ``B``)."""
    classes: dict[str, list[str]] = {}
    for path in sorted((ROOT / "crate_nn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
    return classes


def test_no_config_inherits_a_section():
    """A config holds its sections as fields (``config.crops.local_crops``, `crate_nn.engine.config.section`) and
    inherits none: no class of crate_nn extends both `TrainConfig` and a `Section` (read from the source, so a
    config no task registers counts too), and no registered config has a section in its method resolution order."""
    import crate_nn.tasks  # noqa: F401 - registers every task
    from crate_nn.engine.config import Section
    from crate_nn.engine.task import TASKS

    classes = _crate_nn_classes()

    def ancestors(name: str) -> set[str]:
        found, todo = set(), [name]
        while todo:
            for base in classes.get(todo.pop(), []):
                if base not in found:
                    found.add(base)
                    todo.append(base)
        return found

    configs = [name for name in classes if "TrainConfig" in ancestors(name) or name == "TrainConfig"]
    assert {"TrainConfig", "ClassificationConfig", "DINOTrainConfig", "LanguageModelConfig"} <= set(configs)
    assert [name for name in configs if "Section" in ancestors(name)] == []
    assert [c.__name__ for c in TASKS if any(issubclass(base, Section) for base in c.__mro__)] == []
