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


def data_files(package: str) -> list[str]:
    """A code package's files other than Python source (hpcc_node/health/xid_catalog.json): setuptools ships only
    .py files of a package unless told, and a node without its catalog fails its boot check."""
    d = HERE / package.replace(".", "/")
    return sorted(p.name for p in d.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc"))


code = find_packages(include=["infra", "infra.*", "hpcc_contract", "hpcc_node", "hpcc_node.*"])
mapped = {k: v for tree in TREES for k, v in tree_packages(tree).items()}
setup(
    packages=code + sorted(mapped),
    package_dir=mapped,
    package_data={**{name: data_files(name) for name in code if data_files(name)}, **{name: ["*"] for name in mapped}},
    exclude_package_data={name: ["*.pyc"] for name in mapped},
)
