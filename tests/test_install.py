"""hpcc as users install it: the wheel built from the checkout, installed in a fresh venv outside the checkout,
`hpcc init` and `hpcc plan` run there, and what they read comes from the installed package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from infra.render.assets import SHIPPED

ROOT = Path(__file__).resolve().parent.parent
# What the build reads: the packages, the mapped trees, the build files (copied, so no build/ dir is reused).
BUILD_INPUTS = ("infra", "hpcc_contract", "hpcc_node", *SHIPPED, "setup.py", "pyproject.toml", "requirements.txt")
MARKER = "true  # hpcc-installed-copy"


def _run(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    run = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{args}: {run.stdout}\n{run.stderr}"
    return run


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    for name in BUILD_INPUTS:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(
            ROOT / name,
            src / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}),
        )
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        "-w",
        out,
        src,
        cwd=src,
    )
    return next(out.glob("hpcc-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    return _install(wheel, tmp_path_factory.mktemp("venv") / "v")


@pytest.fixture(scope="module")
def pristine(wheel, tmp_path_factory) -> Path:
    """Another venv with the wheel, whose installed files no test changes (the one above gets marked templates)."""
    return _install(wheel, tmp_path_factory.mktemp("pristine") / "v")


def _install(wheel: Path, env: Path) -> Path:
    """A fresh venv with only the wheel installed; the dependencies are this venv's, through a .pth line
    (added after the venv's own site-packages, so `infra` can only come from the wheel)."""
    _run(sys.executable, "-m", "venv", "--without-pip", env, cwd=env.parent)
    py = env / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        py,
        "install",
        "--quiet",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=env.parent,
    )
    site = Path(
        _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=env.parent).stdout.strip()
    )
    (site / "hpcc-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env


def _files(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


def test_the_installed_tool_plans_the_same_bundle_as_the_checkout(pristine, tmp_path):
    """Same stack, same hpcc: the same bundle bytes, whether planned from the wheel or from the checkout. A file the
    wheel leaves out (issue 32: hpcc_node/health/xid_catalog.json) changes the hash and fails every node's boot."""
    from tests.ops.support import two_groups

    stack = two_groups(tmp_path)
    env = _clean_env()
    _run(pristine / "bin" / "hpcc", "plan", stack, "--out", tmp_path / "installed", cwd=tmp_path, env=env)
    _run(
        sys.executable,
        "-m",
        "infra.ops.cli",
        "plan",
        stack,
        "--out",
        tmp_path / "checkout",
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
    )
    installed, checkout = _files(tmp_path / "installed" / "bundle"), _files(tmp_path / "checkout" / "bundle")
    assert sorted(installed) == sorted(checkout), set(installed) ^ set(checkout)
    assert "hpcc_node/health/xid_catalog.json" in checkout
    assert [k for k in checkout if installed[k] != checkout[k]] == []
    sha = [(tmp_path / d / "bundle.sha256").read_text() for d in ("installed", "checkout")]
    assert sha[0] == sha[1]


def test_every_file_of_the_packages_is_in_the_wheel(wheel):
    """Data beside the code (JSON catalogs, templates) ships: every file under the packages, not only the .py."""
    names = set(zipfile.ZipFile(wheel).namelist())
    files = [
        p.relative_to(ROOT).as_posix()
        for top in ("infra", "hpcc_contract", "hpcc_node")
        for p in (ROOT / top).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert "hpcc_node/health/xid_catalog.json" in files and [f for f in files if f not in names] == []


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def test_the_wheel_holds_the_program_templates_policy_pack_examples_and_node_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "infra/__main__.py",
        "hpcc_contract/settings.py",
        "hpcc_node/__init__.py",
        "infra/templates/bootstrap.sh.j2",
        "infra/policy/PulumiPolicy.yaml",
        "infra/policy/__main__.py",
        "infra/examples/p5-llm.yaml",
        "infra/examples/slurm/torchrun.sbatch",
    ):
        assert required in names, f"{required} is not in {wheel.name}"
    steps = {p.name for p in (ROOT / "templates" / "steps").glob("*.j2")}
    assert steps <= {Path(n).name for n in names if n.startswith("infra/templates/steps/")}


def test_installed_hpcc_inits_a_project_and_plans_from_the_installed_package(venv, tmp_path):
    py, hpcc = venv / "bin" / "python", venv / "bin" / "hpcc"
    env = _clean_env()
    where = _run(
        py,
        "-c",
        "from infra.render.assets import asset, installed; print(asset('templates')); "
        "print(asset('policy')); print(installed())",
        cwd=tmp_path,
        env=env,
    ).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in where[:2]) and where[2] == "True", where
    # A line only the installed copies have: the plan's user data (the loader) and the bundle's role scripts
    # (the bootstrap) must carry it.
    for name in ("loader.sh.j2", "bootstrap.sh.j2"):
        installed_template = Path(where[0]) / name
        installed_template.write_text(installed_template.read_text() + MARKER + "\n")

    _run(hpcc, "init", "proj", "--example", "c6i-oneccl", cwd=tmp_path, env=env)
    proj = tmp_path / "proj"
    assert f"virtualenv: {venv}" in (proj / "Pulumi.yaml").read_text()
    assert f"virtualenv: {venv}" in (proj / "hpcc" / "policy" / "PulumiPolicy.yaml").read_text()
    _run(hpcc, "plan", "Pulumi.cpu-oneccl.yaml", "--out", "plan", cwd=proj, env=env)
    user_data = list((proj / "plan" / "user-data").iterdir())
    assert user_data and all(MARKER in p.read_text() for p in user_data)
    roles = list((proj / "plan" / "bundle" / "roles").iterdir())
    assert len(roles) == 2 and all(MARKER in p.read_text() for p in roles)

    # The project's policy pack runs the installed pack: the shim's path, and the pack's policies load from it.
    pack = _run(
        py,
        "-c",
        "import runpy, sys; from infra.ops.project import policy_pack; from pathlib import Path; "
        "shim = policy_pack(Path('.')); print(shim.resolve()); from infra.render.assets import asset; "
        "sys.path.insert(0, str(asset('policy'))); import pack; print(pack.__file__); print(len(pack.policies()))",
        cwd=proj,
        env=env,
    ).stdout.split()
    assert Path(pack[0]) == (proj / "hpcc" / "policy").resolve()
    assert Path(pack[1]).is_relative_to(venv)
    sys.path.insert(0, str(ROOT / "policy"))
    try:
        from pack import policies
    finally:
        sys.path.remove(str(ROOT / "policy"))
    assert int(pack[2]) == len(policies())


def test_make_plan_installs_only_the_runtime():
    """The plan needs requirements.txt alone; torch and awscli (the box's, 1.6 GB) are the tests' only."""
    makefile = (ROOT / "Makefile").read_text()
    plan_prereqs = re.search(r"^plan: (.*)$", makefile, re.M).group(1).split()
    runtime_recipe = re.search(r"^\$\(VENV\)/\.runtime:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert plan_prereqs == ["$(VENV)/.runtime"] and "-r requirements.txt" in runtime_recipe
    assert "requirements-dev" not in runtime_recipe
    runtime = (ROOT / "requirements.txt").read_text().lower()
    assert not re.search(r"^(torch|awscli)\b", runtime, re.M) and "pulumi-policy==" in runtime
    moto = re.search(r"^moto(\[[^\]]*\])?==", runtime, re.M)
    assert moto and "server" not in (moto.group(1) or ""), "moto's server extra is the tests' (requirements-dev.txt)"


# What moto's server extra and the test packages bring (flask, docker, cfn-lint, sympy, ...), as imported modules.
TEST_ONLY = (
    "flask",
    "flask_cors",
    "docker",
    "cfnlint",
    "sympy",
    "py_partiql_parser",
    "aws_xray_sdk",
    "graphql",
    "openapi_spec_validator",
    "joserfc",
    "jsonpath_ng",
    "antlr4",
    "pyparsing",
    "torch",
    "awscli",
    "pytest",
    "hypothesis",
    "xdist",
)
BLOCK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ImportError(f"{{name}} is not in the runtime (requirements.txt)")
sys.meta_path.insert(0, Block())
from infra.ops.cli import main
sys.argv = ["hpcc", "plan", {stack!r}, "--out", {out!r}]
main()
"""


def test_the_plan_runs_without_the_test_packages(tmp_path):
    """The runtime is what `hpcc plan` needs: with every test-only module refused on import, a two-group plan (the
    embedded AWS, the program, the bundle) still runs."""
    from tests.ops.support import two_groups

    stack = two_groups(tmp_path)
    code = BLOCK.format(blocked=TEST_ONLY, stack=str(stack), out=str(tmp_path / "plan"))
    _run(sys.executable, "-c", code, cwd=ROOT, env={**_clean_env(), "PYTHONPATH": str(ROOT)})
    assert (tmp_path / "plan" / "bundle.sha256").is_file()
