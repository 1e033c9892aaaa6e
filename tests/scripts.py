"""The repository's scripts (scripts/NAME.py) as modules, for the tests that call their functions."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
LOADED: dict[str, ModuleType] = {}


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as a module, loaded once a process (every test that asks shares it). It is
    in sys.modules only while it runs (dataclasses look their class's module up there), so that
    cloudpickle sends its functions to joblib's workers by value, as a script's own run would: a
    worker could not import it by name."""
    if name not in LOADED:
        key = f"_script_{name}"
        spec = importlib.util.spec_from_file_location(key, SCRIPTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[key]
        LOADED[name] = module
    return LOADED[name]
