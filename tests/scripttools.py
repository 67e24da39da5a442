"""Loading a benchmark script of scripts/ as a module, for the tests of its pieces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name: str, register: bool = False):
    """scripts/<name>.py as a new module. scripts/ goes on sys.path, where the scripts find bench.py
    (kept there: a module already imported from it stays the one they get); register: the module is
    put in sys.modules under its name before it runs (a dataclass looks its module up as it is made)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
