"""The user's hook scripts (`hooks.onNodeStart`, `hooks.onNodeReady`): checked here, put into the bundle by
infra/render/bundle.py (so their hash is pinned with it) and run by templates/steps/hooks.sh.j2 at that point of the
bootstrap. A path is relative to the stack file's directory: the program's working directory under `pulumi up`,
and infra/config/stackfile.py read_raw makes it absolute for `hpcc plan` and `hpcc up`."""

from __future__ import annotations

import os
import re
from pathlib import Path

from infra.config.validators.findings import ERROR, Finding

# config key -> the ClusterConfig.hooks attribute
POINTS = {"onNodeStart": "on_node_start", "onNodeReady": "on_node_ready"}
MAX_BYTES = 256 * 1024  # a setup script, not a payload: larger files belong on the file system or in the image
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # its file name in the bundle, the log and the status


def listed(cfg) -> dict[str, list[str]]:
    """point -> the paths the config lists there, in order."""
    return {point: list(getattr(cfg.hooks, attr)) for point, attr in POINTS.items()}


def name_of(path: str) -> str:
    return Path(path).name


def _resolve(path: str, base: Path | None) -> Path:
    p = Path(path)
    return p if p.is_absolute() else (base or Path.cwd()) / p


def _file_problem(p: Path) -> str | None:
    if not p.exists():
        return f"{p} does not exist; give the path of a script relative to the stack file's directory"
    if not p.is_file():
        return f"{p} is not a regular file; give the path of a script"
    if not os.access(p, os.R_OK):
        return f"{p} is not readable; chmod a+r it"
    if p.stat().st_size > MAX_BYTES:
        return (
            f"{p} is {p.stat().st_size} bytes, more than {MAX_BYTES}; keep hooks small and put what they "
            "install on the file system or in the image"
        )
    return None


def hook_findings(cfg, base: Path | None = None) -> list[Finding]:
    """One error per hook that cannot go into the bundle, naming its config path and the fix."""
    out: list[Finding] = []
    seen: dict[str, Path] = {}
    for point, paths in listed(cfg.cluster).items():
        for i, path in enumerate(paths):
            field, name, p = f"cluster.hooks.{point}[{i}]", name_of(path), _resolve(path, base)
            if not NAME.fullmatch(name):
                shown = f"{name[:64]!r}..." if len(name) > 64 else repr(name)
                out.append(
                    Finding(
                        ERROR,
                        field,
                        f"the file name {shown} must be 1-64 of A-Z a-z 0-9 . _ - and "
                        "start with a letter or digit; give a script's path, renamed so",
                    )
                )
                continue
            try:
                problem = _file_problem(p)
            except (OSError, ValueError) as e:  # a NUL byte, a name too long
                problem = f"{str(p)[:80]!r} cannot be read ({e}); give the path of a script"
            if problem:
                out.append(Finding(ERROR, field, problem))
                continue
            if name in seen and seen[name].resolve() != p.resolve():
                out.append(
                    Finding(
                        ERROR,
                        field,
                        f"another hook is also named {name!r} ({seen[name]}); hooks are "
                        "named by their file name in the bundle: rename one",
                    )
                )
            seen.setdefault(name, p)
    return out


def hook_files(cluster, base: Path | None = None) -> tuple[dict[str, list[str]], dict[str, bytes]]:
    """(point -> hook names in order, name -> the script's bytes) for the bundle. Call after hook_findings."""
    names = {point: [name_of(p) for p in paths] for point, paths in listed(cluster).items()}
    files = {name_of(p): _resolve(p, base).read_bytes() for paths in listed(cluster).values() for p in paths}
    return names, files


def absolute(config: dict, base: Path) -> dict:
    """The stack file's config map with every relative hook path made absolute from the file's directory."""
    cluster = config.get("hpcc:cluster")
    if not isinstance(cluster, dict):
        return config
    hooks = cluster.get("hooks")
    if not isinstance(hooks, dict):
        return config
    fixed = dict(hooks)
    for point in POINTS:
        if isinstance(hooks.get(point), list):
            fixed[point] = [
                str(base / p) if isinstance(p, str) and p and not Path(p).is_absolute() else p for p in hooks[point]
            ]
    return {**config, "hpcc:cluster": {**cluster, "hooks": fixed}}
