"""The CUDA images' Python requirements, made from the project's own pyproject.toml (docker/base-cuda.Dockerfile).

pyproject.toml pins the CPU builds: ``torch==X`` (the CPU images take it from PyTorch's CPU index) and
``xgboost-cpu==Y``. A CUDA image needs the same versions built for CUDA: ``torch==X+<tag>`` from PyTorch's CUDA
index (tag e.g. cu126) and plain ``xgboost==Y`` (PyPI's CUDA build), never both xgboost packages. Pip constraints
cannot drop a dependency, so this prints the dependency list with those two substituted; the image installs it and
then the project itself with ``--no-deps``. ``--check`` verifies the installed environment afterwards.

    python docker/cuda-requirements.py pyproject.toml --torch-local cu126 > requirements-cuda.txt
    python docker/cuda-requirements.py pyproject.toml --torch-local cu126 --check

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?P<extras>\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?P<marker>;.*)?$"
)
_EXACT = re.compile(r"^==\s*(?P<version>[0-9][0-9A-Za-z.!+-]*)$")


def normalize(name: str) -> str:
    """PEP 503 name: lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(requirement: str) -> tuple[str, str, str, str]:
    """(normalized name, extras, specifier, marker) of one PEP 508 requirement without a URL."""
    match = _REQUIREMENT.match(requirement)
    if not match:
        raise SystemExit(f"cuda-requirements: cannot read the requirement {requirement!r}")
    return (
        normalize(match["name"]),
        match["extras"] or "",
        match["spec"].replace(" ", ""),
        match["marker"] or "",
    )


def exact_pin(spec: str, name: str) -> str:
    """The version of an ``==X`` specifier; anything else is an error (the substitution needs one version)."""
    match = _EXACT.match(spec)
    if not match:
        raise SystemExit(f"cuda-requirements: pyproject.toml must pin {name} exactly (==X), not {spec!r}")
    return match["version"]


def cuda_requirements(pyproject: Path, torch_local: str) -> tuple[list[str], dict[str, str]]:
    """The requirement lines for the CUDA image and the exact versions they pin (normalized name -> version)."""
    dependencies = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    lines: list[str] = []
    pins: dict[str, str] = {}
    seen: set[str] = set()
    for requirement in dependencies:
        name, extras, spec, marker = parse(requirement)
        seen.add(name)
        if name == "torch":
            version = exact_pin(spec, name)
            pins["torch"] = f"{version}+{torch_local}"
            lines.append(f"torch=={pins['torch']}{marker}")
        elif name == "xgboost-cpu":
            pins["xgboost"] = exact_pin(spec, name)
            lines.append(f"xgboost{extras}=={pins['xgboost']}{marker}")
        elif name == "xgboost":
            raise SystemExit("cuda-requirements: pyproject.toml lists plain xgboost; expected xgboost-cpu (CPU images)")
        else:
            if spec.startswith("=="):
                pins[name] = exact_pin(spec, name)
            lines.append(requirement.strip())
    for needed in ("torch", "xgboost-cpu", "pyspark"):
        if needed not in seen:
            raise SystemExit(f"cuda-requirements: pyproject.toml has no {needed} dependency")
    return lines, pins


def check(pins: dict[str, str]) -> list[str]:
    """Problems with the installed environment: a pinned version that differs, or xgboost-cpu next to xgboost."""
    problems: list[str] = []
    for name, wanted in sorted(pins.items()):
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} is not installed (wanted {wanted})")
            continue
        if installed != wanted:
            problems.append(f"{name} {installed} is installed, wanted {wanted}")
    with contextlib.suppress(metadata.PackageNotFoundError):
        cpu_build = metadata.version("xgboost-cpu")
        problems.append(f"xgboost-cpu {cpu_build} is installed: a CUDA image has plain xgboost only")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--torch-local", required=True, help="PyTorch's local version tag, e.g. cu126")
    parser.add_argument("--check", action="store_true", help="verify the installed packages instead of printing")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"cu[0-9]+", args.torch_local):
        parser.error(f"--torch-local must look like cu126, not {args.torch_local!r}")
    lines, pins = cuda_requirements(args.pyproject, args.torch_local)
    if not args.check:
        print("\n".join(lines))
        return 0
    problems = check(pins)
    for problem in problems:
        print(f"cuda-requirements: {problem}", file=sys.stderr)
    if not problems:
        print("cuda-requirements: " + ", ".join(f"{k} {v}" for k, v in sorted(pins.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
