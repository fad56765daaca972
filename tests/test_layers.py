"""The library's layers point down (docs/architecture.md, "Layers"): a module imports only from its own layer or the
layers below it, counting imports inside functions and for type checking too, since each is still a dependency."""

import ast
from pathlib import Path

import pytest

import maskwise

pytestmark = pytest.mark.unit

# Bottom to top, as docs/architecture.md writes them; the package's own __init__ (its lazy public API) is outside.
LAYERS = (
    ("errors", "config", "runtime", "masks", "families", "padding"),
    ("model", "kernels", "objectives", "reference"),
    ("data", "train", "runs"),
    ("tasks",),
    ("interop", "recipes"),
    ("experiments",),
    ("cli", "__main__"),
)


def layer_of(module: str) -> int | None:
    """The layer of ``maskwise.X...`` (None: not a module of a layer)."""
    parts = module.split(".")
    return next((i for i, names in enumerate(LAYERS) if len(parts) > 1 and parts[1] in names), None)


def imports_against_the_layers(root: Path) -> list[str]:
    """Every ``module -> imported`` under ``root`` whose imported module sits in a higher layer."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(("maskwise", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        here = layer_of(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [f"maskwise.{a.name}" if node.module == "maskwise" else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [
                f"{module} -> {name}"
                for name in names
                if here is not None and (there := layer_of(name)) is not None and there > here
            ]
    return found


def test_no_module_imports_a_layer_above_its_own():
    assert imports_against_the_layers(Path(maskwise.__file__).parent) == []


def test_every_top_level_module_has_a_layer():
    root = Path(maskwise.__file__).parent
    tops = {p.stem for p in root.glob("*.py")} | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert {top for top in tops - {"__init__"} if layer_of(f"maskwise.{top}") is None} == set()


def test_a_planted_upward_import_is_found(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "toy.py").write_text("def f():\n    from maskwise.cli import main\n")
    assert imports_against_the_layers(tmp_path) == ["maskwise.tasks.toy -> maskwise.cli"]
