"""A user's own Pulumi project for hpcc (`hpcc init DIR`), and how the commands find the project and the stack.

hpcc is installed as a tool (pip, pipx); the user's cluster configs live in their own directory. `hpcc init`
writes there a Pulumi.yaml whose program is a two-line shim running the installed program (`infra/__main__.py`),
a policy-pack shim running the installed pack, a stack file from an example, and a README. Both shims name
the Python environment hpcc is installed in (Pulumi's `virtualenv` runtime option), so `pulumi up` and
`hpcc up` run the same installed code: https://www.pulumi.com/docs/iac/concepts/projects/project-file/
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from infra.config.stackfile import load
from infra.render.assets import asset, example_names, installed

PROJECT_NAME = "hpcc"  # as the checkout's Pulumi.yaml and the offline plan (infra/plan/runner.py)
DEFAULT_EXAMPLE = "p5-llm"
PROGRAM_DIR = Path("hpcc") / "program"
POLICY_DIR = Path("hpcc") / "policy"
_STACK_FILE = re.compile(r"^Pulumi\.(?P<stack>[A-Za-z0-9_.-]+)\.ya?ml$")


class ProjectError(Exception):
    """A usage problem (exit 2): the message says what to do."""


def stack_from_file(config: Path) -> str | None:
    """The stack a `Pulumi.<stack>.yaml` file belongs to; None for any other name."""
    m = _STACK_FILE.match(Path(config).name)
    return m.group("stack") if m else None


def stack_name(config: Path, given: str | None) -> str:
    """--stack, else the config file's own stack. Never a default: a wrong stack would be created, and Pulumi
    would rewrite the config's structured values into that stack's file."""
    own = stack_from_file(config)
    if given:
        return given
    if own:
        return own
    raise ProjectError(
        f"{config}: cannot tell the stack from this file name; name the file Pulumi.<stack>.yaml "
        "(as `hpcc init` does) or give --stack NAME"
    )


def find_project(start: Path) -> Path | None:
    """The nearest directory at or above `start` holding a Pulumi.yaml (as Pulumi finds its project)."""
    here = Path(start).resolve()
    for d in [here, *here.parents]:
        if (d / "Pulumi.yaml").is_file():
            return d
    return None


def project_for(config: Path) -> Path:
    """The Pulumi project a stack config belongs to: the one around the file."""
    found = find_project(Path(config).resolve().parent)
    if found is None:
        raise ProjectError(
            f"{config}: no Pulumi.yaml in its directory or above; run `hpcc init DIR` and keep the stack file there"
        )
    return found


def policy_pack(project: Path) -> Path:
    """The policy pack `hpcc up` passes: the project's shim (written by `hpcc init`), else the checkout's pack.
    Mandatory (docs/security.md): no pack is an error, never a silent skip."""
    shim = Path(project) / POLICY_DIR
    if (shim / "PulumiPolicy.yaml").is_file():
        return shim
    if not installed():
        return asset("policy")
    raise ProjectError(
        f"{project}: no {POLICY_DIR}/PulumiPolicy.yaml (hpcc's mandatory policy pack); run "
        f"`hpcc init {project}` to write it"
    )


def stale_environment(project: Path, venv: str | None = None) -> str | None:
    """A project `hpcc init` wrote for another Python environment than the one running now: its program and pack
    would be another hpcc's than the one previewing and guarding the update. None when it matches (or the
    project is not one `hpcc init` wrote)."""
    text = (Path(project) / "Pulumi.yaml").read_text() if (Path(project) / "Pulumi.yaml").is_file() else ""
    if not text.startswith(INIT_MARK):
        return None
    venv = venv if venv is not None else environment()
    want = f"    virtualenv: {venv}\n" if venv else None
    has = next((line + "\n" for line in text.splitlines() if line.strip().startswith("virtualenv:")), None)
    if has == want:
        return None
    return (
        f"{project}/Pulumi.yaml runs the hpcc in {has.split(':', 1)[1].strip() if has else 'the python3 on PATH'}, "
        f"not this one ({venv or 'the python3 on PATH'}): run `hpcc init {project} --refresh`"
    )


def environment(prefix: str | None = None) -> str | None:
    """The Python environment hpcc runs in, for Pulumi's `virtualenv` option; None outside a virtualenv."""
    prefix = prefix or sys.prefix
    return None if prefix == sys.base_prefix else prefix


def _runtime(venv: str | None) -> str:
    opts = f"    toolchain: pip\n    virtualenv: {venv}\n" if venv else "    toolchain: pip\n"
    return f"runtime:\n  name: python\n  options:\n{opts}"


INIT_MARK = "# Written by `hpcc init`"


def pulumi_yaml(venv: str | None) -> str:
    where = f"the Python environment {venv}" if venv else "the python3 on PATH"
    return (
        f"{INIT_MARK}: your own Pulumi project. Its program runs the hpcc installed in {where}.\n"
        f"name: {PROJECT_NAME}\n"
        "description: Multi-node ML training clusters on AWS (hpcc)\n"
        f"{_runtime(venv)}main: {PROGRAM_DIR.as_posix()}/\n"
    )


PROGRAM_SHIM = (
    '"""The hpcc Pulumi program installed with hpcc (written by `hpcc init`)."""\n'
    "import runpy\n\n"
    'runpy.run_module("infra.__main__", run_name="__main__")\n'
)

POLICY_SHIM = (
    '"""hpcc\'s mandatory policy pack, run from the installed hpcc (written by `hpcc init`)."""\n'
    "import runpy\n\n"
    "from infra.render.assets import asset\n\n"
    'runpy.run_path(str(asset("policy") / "__main__.py"), run_name="__main__")\n'
)


def policy_yaml(venv: str | None) -> str:
    return f"{_runtime(venv)}description: hpcc's mandatory security rules (the installed pack; docs/security.md)\n"


def stack_text(example: str, stack: str) -> str:
    """The example, its usage line replaced by how to use it in this project."""
    body = (asset("examples") / f"{example}.yaml").read_text()
    body = "".join(line for line in body.splitlines(keepends=True) if not line.startswith("# Use:"))
    return (
        f"# Stack `{stack}`, from hpcc's example {example}. Every key: hpcc's README, \"Config reference\".\n"
        f"# Edit region, sizes and tags, then: hpcc plan Pulumi.{stack}.yaml; hpcc preflight Pulumi.{stack}.yaml;\n"
        f"# hpcc up Pulumi.{stack}.yaml. Changes after the first up: README \"Changing a running cluster\".\n" + body
    )


def readme(stack: str) -> str:
    f = f"Pulumi.{stack}.yaml"
    return f"""# hpcc cluster project

Written by `hpcc init`. `{f}` is the cluster; the rest runs the hpcc you installed.

```sh
hpcc plan {f}          # offline: what would be created, the cost per hour, warnings
hpcc preflight {f}     # against your AWS account: quotas, capacity, AZ, image
hpcc up {f}            # preview (stops on replacements), pulumi up with hpcc's policy pack, wait for the nodes
hpcc status --stack {stack}
hpcc destroy {f}
```

- `Pulumi.yaml` and `hpcc/program/` run the installed hpcc program; `hpcc/policy/` is its mandatory policy pack.
  Plain Pulumi works too: `pulumi up --stack {stack} --policy-pack hpcc/policy` (no preflight, no wait).
- `slurm/` holds the Slurm batch examples (hpcc's README, "Training with Slurm").
- `deployer-policy.json` is the least-privilege IAM policy the identity running `hpcc up` needs.
- After upgrading hpcc into another Python environment, run `hpcc init . --refresh` to point these files at it.
"""


@dataclass(frozen=True)
class Written:
    project: Path
    stack: str
    files: list[Path]


def init_project(
    directory: Path,
    example: str = DEFAULT_EXAMPLE,
    stack: str | None = None,
    *,
    refresh: bool = False,
    venv: str | None = None,
) -> Written:
    """Write a user project (or, with refresh, only the files that name the environment). Never overwrites
    a stack file or an existing project unless refreshing."""
    if example not in example_names():
        raise ProjectError(f"--example {example!r}: not one of {', '.join(example_names())}")
    d = Path(directory)
    venv = venv if venv is not None else environment()
    stack = stack or _cluster_name(example)
    generated = {
        Path("Pulumi.yaml"): pulumi_yaml(venv),
        PROGRAM_DIR / "__main__.py": PROGRAM_SHIM,
        POLICY_DIR / "PulumiPolicy.yaml": policy_yaml(venv),
        POLICY_DIR / "__main__.py": POLICY_SHIM,
    }
    if not refresh:
        if (d / "Pulumi.yaml").exists():
            raise ProjectError(
                f"{d}/Pulumi.yaml exists: pick a new directory, or `hpcc init {d} --refresh` to "
                "point its program and policy pack at this hpcc"
            )
        generated[Path(f"Pulumi.{stack}.yaml")] = stack_text(example, stack)
        generated[Path("README.md")] = readme(stack)
        generated[Path("deployer-policy.json")] = (asset("policy") / "deployer-policy.json").read_text()
        for sbatch in sorted((asset("examples") / "slurm").glob("*.sbatch")):
            generated[Path("slurm") / sbatch.name] = sbatch.read_text()
    files = []
    for rel, text in generated.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
        files.append(d / rel)
    return Written(d, stack, files)


def _cluster_name(example: str) -> str:
    return load(asset("examples") / f"{example}.yaml").cluster.name
