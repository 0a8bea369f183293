"""Where hpcc's non-Python files are: the bootstrap templates, the policy pack, the examples.

In a checkout they sit beside `infra/` (templates/, policy/, examples/); a wheel installs the same trees inside
the `infra` package (setup.py maps them there, nothing moves in the checkout). `asset` is the one place that
tells the two apart, so the program, `hpcc plan`, `hpcc up` and `hpcc init` read the same files either way.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent  # infra/: the package the wheel installs the trees in
# The trees setup.py ships as package data (infra/<name> in the wheel), and the name of each in the checkout.
SHIPPED = ("templates", "policy", "examples")


def asset(name: str, package: Path = PACKAGE) -> Path:
    """The directory `name` (one of SHIPPED): installed inside the package, else the checkout's."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not one of hpcc's shipped trees {SHIPPED}")
    installed = package / name
    return installed if installed.is_dir() else package.parent / name


def installed(package: Path = PACKAGE) -> bool:
    """Is this hpcc an installed wheel (its trees inside the package), not a checkout?"""
    return (package / "templates").is_dir()


def example_names(package: Path = PACKAGE) -> list[str]:
    """The shipped examples, by name (`p5-llm` for examples/p5-llm.yaml)."""
    return sorted(p.stem for p in asset("examples", package).glob("*.yaml"))
