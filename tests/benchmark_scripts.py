"""The scripts in benchmarks/ imported as modules (the folder is not a package), for their tests."""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str):
    """benchmarks/<name>.py as a fresh module."""
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass in it resolves its annotations through the module
    spec.loader.exec_module(module)
    return module
