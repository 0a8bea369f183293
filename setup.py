"""Package data without moving anything: templates/, policy/ and examples/ stay at the checkout's root and are
installed as infra/templates, infra/policy and infra/examples (infra/render/assets.py finds them either way)."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
TREES = ("templates", "policy", "examples")  # infra.render.assets.SHIPPED


def tree_packages(tree: str) -> dict[str, str]:
    """Every directory of a shipped tree as a package of infra, mapped onto the checkout's directory."""
    out = {}
    for d in [HERE / tree, *sorted(p for p in (HERE / tree).rglob("*") if p.is_dir())]:
        if "__pycache__" in d.parts:
            continue
        rel = d.relative_to(HERE)
        out["infra." + ".".join(rel.parts)] = rel.as_posix()
    return out


mapped = {k: v for tree in TREES for k, v in tree_packages(tree).items()}
setup(
    packages=find_packages(include=["infra", "infra.*", "hpcc_contract", "hpcc_node", "hpcc_node.*"]) + sorted(mapped),
    package_dir=mapped,
    package_data={name: ["*"] for name in mapped},
    exclude_package_data={name: ["*.pyc"] for name in mapped},
)
