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

from infra.config.parse import ConfigError
from infra.config.stackfile import load, read_raw
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


def cluster_in_file(config: Path) -> tuple[str, str | None]:
    """The cluster name and `aws:region` a stack file names, read without validating the rest (a command that only
    reads the running cluster must not need the whole config right)."""
    try:
        raw = read_raw(config)
    except ConfigError as e:
        raise ProjectError("; ".join(f"{path}: {msg}" for path, msg in e.problems)) from None
    cluster, region = raw.get("hpcc:cluster"), raw.get("aws:region")
    name = cluster.get("name") if isinstance(cluster, dict) else None
    if not isinstance(name, str) or not name:
        raise ProjectError(f"{config}: hpcc:cluster has no name; the commands find the cluster by it")
    return name, region if isinstance(region, str) and region else None


def stack_files(directory: Path) -> list[Path]:
    """The Pulumi.<stack>.yaml files of a directory."""
    return sorted(p for p in Path(directory).glob("Pulumi.*.y*ml") if _STACK_FILE.match(p.name))


def target(
    config: Path | None,
    cluster: str | None,
    stack: str | None,
    region: str | None,
    outputs_of=None,
    cwd: Path | None = None,
) -> tuple[str, str | None]:
    """The cluster and region an operator command acts on, the same way for every command: a stack file (its
    cluster's name and aws:region), `--cluster NAME` (its region from a stack file here that names it, when
    --region does not give one) or `--stack NAME` (its Pulumi.<stack>.yaml here, else the stack's outputs through
    `outputs_of`, which needs the Pulumi CLI). --region wins over a file's; None leaves it to AWS_REGION."""
    cwd = Path(cwd or Path.cwd())
    if config is not None:
        name, file_region = cluster_in_file(config)
        if cluster and cluster != name:
            raise ProjectError(f"--cluster {cluster}, but {config} is cluster {name}: give one of them")
        if stack and stack != stack_from_file(config):
            raise ProjectError(f"--stack {stack}, but {config} is another stack's file: give one of them")
        return name, region or file_region
    if cluster and stack:
        raise ProjectError("give one of a stack file, --cluster NAME or --stack NAME")
    if stack:
        project = find_project(cwd)
        for d in [cwd, *([project] if project else [])]:
            own = [p for p in stack_files(d) if stack_from_file(p) == stack]
            if own:
                name, file_region = cluster_in_file(own[0])
                return name, region or file_region
        if outputs_of is None:
            raise ProjectError(f"--stack {stack}: no Pulumi.{stack}.yaml here; give the stack file or --cluster")
        outputs = outputs_of(stack)
        return outputs["clusterName"], region or outputs.get("region")
    if cluster:
        if region:
            return cluster, region
        regions = set()
        for p in stack_files(cwd):
            try:
                name, file_region = cluster_in_file(p)
            except ProjectError:
                continue
            if name == cluster and file_region:
                regions.add(file_region)
        return cluster, regions.pop() if len(regions) == 1 else None
    here = ", ".join(p.name for p in stack_files(cwd))
    raise ProjectError(
        "which cluster? give its stack file (e.g. `hpcc status Pulumi.llm.yaml`), --cluster NAME or "
        "--stack NAME" + (f"; stack files here: {here}" if here else "")
    )


def split_stack_file(args: list[str] | None) -> tuple[Path | None, list[str]]:
    """A command's positional arguments as (stack file, the rest): the stack file is a leading *.yaml or *.yml."""
    args = list(args or [])
    if args and args[0].endswith((".yaml", ".yml")):
        return Path(args[0]), args[1:]
    return None, args


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
hpcc ssh {f}           # a shell on the head (hpcc ssh {f} gpu-000: on a node, through the head)
hpcc status {f}        # every group and node; also events, hostfile, replace, reap: all take {f}
hpcc destroy {f}       # asks first: the file system's data goes too
```

- `Pulumi.yaml` and `hpcc/program/` run the installed hpcc program; `hpcc/policy/` is its mandatory policy pack.
  Plain Pulumi works too: `pulumi up --stack {stack} --policy-pack hpcc/policy` (no preflight, no wait).
- `slurm/` holds the Slurm batch examples (hpcc's README, "Training with Slurm").
- `deployer-policy.json` is the least-privilege IAM policy the identity running `hpcc up` needs.
- `.gitignore` keeps hpcc's output (`plan/`, `hostfile`) out of your repository; commit the rest.
- After upgrading hpcc into another Python environment, run `hpcc init . --refresh` to point these files at it.
"""


IGNORED = ("plan/", "hostfile", "__pycache__/", "*.pyc")


def gitignore(existing: Path) -> str:
    """The project's .gitignore: hpcc's output (`hpcc plan`'s plan/ of about 1 MB, `hpcc up`'s hostfile) and Python's
    caches stay out of the user's repository; an existing file keeps its lines, ours are added after them."""
    text = existing.read_text() if existing.is_file() else ""
    have = {line.strip() for line in text.splitlines()}
    missing = [line for line in IGNORED if line not in have]
    if not missing:
        return text
    head = text if not text or text.endswith("\n") else text + "\n"
    return head + "# hpcc's output (written by `hpcc init`)\n" + "".join(f"{line}\n" for line in missing)


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
        generated[Path(".gitignore")] = gitignore(d / ".gitignore")
    files = []
    for rel, text in generated.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
        files.append(d / rel)
    return Written(d, stack, files)


def _cluster_name(example: str) -> str:
    return load(asset("examples") / f"{example}.yaml").cluster.name
