"""The torch install the harness's children run, read from its files: the harness process itself
never imports torch (2-3 s of CPU, most of a `harness` command's start on a CPU; its children do)."""
from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path
from typing import Optional


@functools.lru_cache(maxsize=1)
def torch_dir() -> Path:
    """The folder of the torch package that `import torch` would load."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise ModuleNotFoundError("No module named 'torch': install it first (README's first line)")
    return Path(spec.origin).parent


@functools.lru_cache(maxsize=1)
def _version_file() -> dict:
    """torch/version.py's literal assignments (`__version__ = '2.13.0+cpu'`, `cuda = None`, ...)."""
    found = {}
    for node in ast.parse((torch_dir() / "version.py").read_text()).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                try:
                    found[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return found


def torch_version() -> str:
    """torch.__version__, as a string."""
    return str(_version_file()["__version__"])


def torch_cuda() -> Optional[str]:
    """torch.version.cuda: the CUDA torch was built with, None for a CPU build."""
    return _version_file().get("cuda")
