"""Loading a benchmark script of scripts/ as a module, for the tests of its pieces."""

from __future__ import annotations

import importlib.util
import itertools
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


def segmentations(n: int):
    """Every way to cut n positions into steps (each a width of 1 or more): what the bound scripts'
    dynamic programs are checked against, one way at a time."""
    for cuts in itertools.product([False, True], repeat=n - 1):
        widths, w = [], 1
        for cut in cuts:
            if cut:
                widths.append(w)
                w = 1
            else:
                w += 1
        yield widths + [w]
