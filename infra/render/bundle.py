"""The cluster's bundle: everything a node runs that its image does not have, in one deterministic tar.gz.

Layout (docs/bootstrap-contract.md, "The bundle"): `manifest.json`; `roles/head.sh`, the head's bootstrap, and
`roles/<group>.sh`, each node group's, rendered for its own instance type, GPUs and EFA devices
(infra/render/userdata.py render, what the user data held before the loader; `compute:` is the group compute:
roles/compute.sh); the node package `hpcc_node/` and the contract it imports (`hpcc_contract/`, standard library
only); `hooks/<name>`, the user's hook scripts; `metrics/`, the head's Prometheus configuration and rules, its
Grafana's configuration and dashboards, where observability is on; `containers/`, enroot's and pyxis' files
(containers_files), where containers are on. Same inputs, same bytes, same sha256: entries sorted, mtime 0, owner
0:0, modes 0644 or 0755 only, gzip header without name or time.
Nothing here is secret: the scripts read secrets at run time.

The program stores the archive at `bundles/<sha256>.tar.gz` in the cluster's bucket (infra/program/components/bundle.py)
and points `/hpcc/<cluster>/bundle` at it; the loader (templates/loader.sh.j2) checks the hash before it runs
anything. `hpcc plan --out DIR` writes the files unpacked under DIR/bundle/ and the hash to DIR/bundle.sha256.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from hpcc_contract import formats
from hpcc_contract.names import boot_script, bundle_key
from hpcc_contract.version import AGENT_VERSION
from infra.config.hooks import hook_files
from infra.config.validators.metrics import canonical, workspace
from infra.render.assets import asset
from infra.render.containers import bundle_files as containers_bundle_files
from infra.render.grafana import grafana_files
from infra.render.prometheus import alert_rules, prometheus_config
from infra.render.roles import head_prometheus_flags, role_contexts
from infra.render.userdata import render

FORMAT = formats.BUNDLE_MANIFEST
ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages): hpcc_node/ and hpcc_contract/ are there
# The packages a node runs, whole: the node package and the contract it imports (both standard library only).
NODE_PACKAGES = ("hpcc_node", "hpcc_contract")
NODE_SUFFIXES = (".py", ".json")  # code and data files (hpcc_node/health/xid_catalog.json)
EXECUTABLE = ("roles/", "hooks/")  # mode 0755; everything else 0644


@dataclass(frozen=True)
class Bundle:
    files: dict[str, bytes]  # path inside the archive -> content
    archive: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.archive).hexdigest()

    @property
    def key(self) -> str:
        return bundle_key(self.sha256)

    def manifest(self) -> dict:
        return json.loads(self.files["manifest.json"])


def hpcc_version() -> str:
    """The program's version: pyproject.toml's where the repository is at hand, else the installed package's."""
    pyproject = ROOT / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'(?m)^version\s*=\s*"([^"]+)"', pyproject.read_text())
        if found:
            return found.group(1)
    from importlib.metadata import version

    return version("hpcc")


def agent_version() -> str:
    return AGENT_VERSION


def example_files() -> dict[str, bytes]:
    """The Slurm job examples (examples/slurm/), so every node has them at /opt/hpcc/current/examples/slurm/ and
    they follow hpcc's upgrades; the README runs them from there."""
    return {f"examples/slurm/{p.name}": p.read_bytes() for p in sorted((asset("examples") / "slurm").glob("*.sbatch"))}


def node_files(root: Path = ROOT) -> dict[str, bytes]:
    """The node package's and the contract's Python files and data (the health checks' Xid catalog), by path
    inside the bundle."""
    paths = sorted(
        p
        for package in NODE_PACKAGES
        for p in (root / package).rglob("*")
        if p.suffix in NODE_SUFFIXES and "__pycache__" not in p.parts
    )
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}


def manifest(cluster: str, scripts: dict[str, str], hooks: dict[str, list[str]], hpcc: str, agent: str) -> bytes:
    """`scripts`: whose script (hpcc_contract/names.py boot_key: `head` or a node group's name) -> its text; the
    manifest's `roles` names each one's path and digest under the same key (format 2; hpcc_node/upgrade.py reads it)."""
    roles = {
        key: {"script": boot_script(key), "bootDigest": hashlib.sha256(script.encode()).hexdigest()}
        for key, script in sorted(scripts.items())
    }
    return (
        json.dumps(
            {
                "format": FORMAT,
                "cluster": cluster,
                "hpccVersion": hpcc,
                "agentVersion": agent,
                "roles": roles,
                "hooks": hooks,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )


def bundle_files(
    cluster: str,
    scripts: dict[str, str],
    hook_names: dict[str, list[str]],
    hook_bytes: dict[str, bytes],
    node: dict[str, bytes],
    hpcc: str,
    agent: str,
) -> dict[str, bytes]:
    files = {"manifest.json": manifest(cluster, scripts, hook_names, hpcc, agent)}
    files.update({boot_script(key): script.encode() for key, script in scripts.items()})
    files.update(node)
    files.update({f"hooks/{name}": content for name, content in hook_bytes.items()})
    return files


def mode_of(path: str) -> int:
    return 0o755 if path.startswith(EXECUTABLE) else 0o644


def pack(files: dict[str, bytes]) -> bytes:
    """The deterministic tar.gz of `files` (regular files only; tar makes the directories)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), mode_of(path), 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(files[path]))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def unpack(archive: bytes) -> dict[str, bytes]:
    """The files of an archive `pack` made; refuses anything else (links, devices, paths leaving the root)."""
    out = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for info in tar.getmembers():
            path = PurePosixPath(info.name)
            if not info.isfile() or path.is_absolute() or ".." in path.parts:
                raise ValueError(f"bundle entry {info.name!r} is not a plain relative file")
            out[info.name] = tar.extractfile(info).read()
    return out


def build(cfg, region: str, facts, base: Path | None = None) -> Bundle:
    """The bundle of a cluster config (ClusterConfig): the rendered scripts (the head's and each node group's), the
    node package, the hooks. Only what the scripts hold and the hooks change it: a resize (the settings) leaves it as
    it is."""
    scripts = {key: render(ctx) for key, ctx in role_contexts(cfg, region, facts).items()}
    names, hooks = hook_files(cfg, base)
    files = bundle_files(
        cfg.name,
        scripts,
        names,
        hooks,
        {**node_files(), **example_files(), **metrics_files(cfg), **containers_files(cfg)},
        hpcc_version(),
        agent_version(),
    )
    return Bundle(files, pack(files))


def metrics_files(cfg) -> dict[str, bytes]:
    """The head's Prometheus configuration, alert rules and command line (infra/render/prometheus.py; one flag a
    line, its address added by the running head) and its Grafana's configuration and dashboards
    (infra/render/grafana.py), where observability is on. The head's metrics step (templates/steps/metrics.sh.j2)
    installs them from the bundle at boot, and its agent again when a bundle brings other ones
    (hpcc_node/agent_metrics.py): a changed retention, rule or dashboard reaches the running head, not a new one."""
    if not cfg.metrics_on:
        return {}
    found = workspace(cfg.metrics_workspace_arn) if cfg.metrics_workspace_arn else None
    config = prometheus_config(
        scrape_interval=canonical(cfg.observability.scrape_interval),
        remote_write_url=found.remote_write_url if found else None,
        region=found.region if found else None,
        cluster=cfg.name,
    )
    flags = "".join(f"{flag}\n" for flag in head_prometheus_flags(cfg))
    files = {
        "metrics/prometheus.yml": config.encode(),
        "metrics/rules.yml": alert_rules().encode(),
        "metrics/prometheus.args": flags.encode(),
    }
    return {**files, **grafana_files(canonical(cfg.observability.scrape_interval))}


def containers_files(cfg) -> dict[str, bytes]:
    """enroot's configuration per store, its hooks per node kind, pyxis' plugstack.conf and importer entry
    (infra/render/containers.py bundle_files), where containers are on; the containers step
    (templates/steps/containers.sh.j2) installs them."""
    return containers_bundle_files(cfg.containers) if cfg.containers_on else {}


def role_script(files: dict[str, bytes], key: str) -> str:
    """The bootstrap the nodes of `key` run (hpcc_contract/names.py boot_key: `head`, or a node group's name, such
    as `compute` for `compute:`), read from a bundle's files: the plan, the goldens and the box all read it here."""
    return files[boot_script(key)].decode()


def write_unpacked(bundle_files_: dict[str, bytes], sha256: str, out: Path) -> None:
    """`hpcc plan --out`: the bundle's files under out/bundle/ (with their modes) and its hash in out/bundle.sha256."""
    import shutil

    target = Path(out) / "bundle"
    shutil.rmtree(target, ignore_errors=True)
    for path, content in sorted(bundle_files_.items()):
        dest = target / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
        dest.chmod(mode_of(path))
    (Path(out) / "bundle.sha256").write_text(f"{sha256}  {bundle_key(sha256)}\n")
