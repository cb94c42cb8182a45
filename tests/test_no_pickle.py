"""No code of the service or the executors can unpickle bytes (issue: "no pickle or torch.load of untrusted bytes
anywhere; safetensors and JSON only"). Checked on the syntax tree of every module under app/ and workers/, so a
new ``torch.load`` or ``pickle.loads`` fails CI wherever it is added. Spark's own cloudpickle of task closures is
Spark's business and is not in these modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODULES = sorted(p for top in ("app", "workers") for p in (REPO / top).rglob("*.py"))
BANNED_IMPORTS = {"pickle", "cPickle", "dill", "joblib", "shelve", "marshal", "_pickle"}
BANNED_CALLS = {("torch", "load"), ("pickle", "load"), ("pickle", "loads"), ("cloudpickle", "loads"),
                ("cloudpickle", "load"), ("pd", "read_pickle"), ("pandas", "read_pickle")}  # fmt: skip


def _dotted(node: ast.expr) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def findings(source: str, name: str) -> list[str]:
    """What in ``source`` could unpickle: a banned import, a banned call, ``np.load`` without
    ``allow_pickle=False``, ``yaml.load`` (not ``safe_load``)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"{name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in BANNED_IMPORTS]
        if isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            if dotted[-2:] in BANNED_CALLS:
                found.append(f"{name}:{node.lineno} calls {'.'.join(dotted)}")
            if dotted[-2:] in (("np", "load"), ("numpy", "load")):
                safe = any(k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
                           for k in node.keywords)  # fmt: skip
                if not safe:
                    found.append(f"{name}:{node.lineno} calls np.load without allow_pickle=False")
            if dotted[-2:] == ("yaml", "load"):
                found.append(f"{name}:{node.lineno} calls yaml.load (use yaml.safe_load)")
    return found


def test_no_module_can_unpickle() -> None:
    assert MODULES, "no modules found"
    problems = [f for path in MODULES for f in findings(path.read_text(), str(path.relative_to(REPO)))]
    assert problems == []


@pytest.mark.parametrize(
    "code",
    [
        "import pickle",
        "from pickle import loads",
        "import torch\ntorch.load('w.pt')",
        "import numpy as np\nnp.load('x.npy')",
        "import numpy as np\nnp.load('x.npy', allow_pickle=True)",
        "import pandas as pd\npd.read_pickle('f')",
        "import yaml\nyaml.load(open('f'))",
        "from pyspark import cloudpickle\ncloudpickle.loads(b'')",
    ],
)
def test_the_check_catches(code: str) -> None:
    assert findings(code, "example.py"), code


def test_the_check_passes_safe_loading() -> None:
    safe = "import numpy as np\nnp.load('x.npz', allow_pickle=False)\nimport json\njson.loads('1')"
    assert findings(safe, "ok.py") == []
