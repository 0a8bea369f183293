"""Render a node's bootstrap script (the bundle's roles/head.sh, or roles/<group>.sh for each node group) and its
user data, the loader, from the Jinja templates in templates/.

The user data is only the loader (templates/loader.sh.j2): it fetches the cluster's bundle (infra/render/bundle.py),
checks its hash and runs its own group's script from it (or the head's). The script holds only what needs a new
bundle when it changes: the role, its instance type and that type's facts, the cluster's names, the hooks. Whatever
changes over a cluster's life reaches the nodes at run time through the settings parameter
(infra/render/node_settings.py), so a resize or a new timeout leaves the bundle, and every node, as they are.
"""

from __future__ import annotations

import dataclasses
import gzip
from dataclasses import dataclass
from functools import lru_cache

import jinja2

from hpcc_contract import container_mounts, dcgm, enroot_credentials, formats, metrics
from hpcc_contract import containers as contract_containers
from hpcc_contract import hosts as hosts_schema
from hpcc_contract import settings as settings_schema
from hpcc_contract.names import HEAD, boot_script
from infra.facts import containers as containers_facts
from infra.facts import grafana as grafana_facts
from infra.facts import slurm
from infra.render import containers as containers_render
from infra.render import grafana, prometheus
from infra.render.assets import asset
from infra.render.steps import STATUS_EVERY_SECONDS, STEPS

TEMPLATES = asset("templates")
# EC2: "limited to 16 KB, in raw form, before it is base64-encoded" (here: the gzip bytes):
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-add-user-data.html
USER_DATA_LIMIT = 16 * 1024
LOADER_LIMIT = 4 * 1024  # hpcc's own bound on the loader (gzip bytes): what grows goes into the bundle
AGENT_PATH = "/usr/local/sbin/hpcc-node"  # the role script installs itself here (to run the bootstrap again)


@dataclass(frozen=True)
class BootstrapContext:
    """Every value the user data holds; nothing secret and nothing a resize or retune changes."""

    cluster: str
    region: str
    role: str  # head | compute
    instance_type: str
    gpus: int
    efa_enabled: bool
    efa_devices: int  # EFA devices launched on this role (efa + efa-only interfaces)
    gpudirect_rdma: bool
    fsx_parameter: str
    hosts_parameter: str
    settings_parameter: str
    nodes_parameter: str
    ssh_secret_id: str
    munge_secret_id: str  # always named; the secret exists with scheduler: slurm (the settings say which)
    # Until the settings are read (infra/render/pacing.py first_call_pacing): the largest cluster's pacing.
    first_interval_ms: int
    first_poll_seconds: int
    api_backoff_seconds: int
    api_attempts: int
    max_timeout_minutes: int
    vpc_cidr: str  # the cluster key is accepted only from here (infra/facts/subnets.py VPC_CIDR)
    bundle_parameter: str  # the pointer the loader follows (infra/render/bundle.py)
    hooks_start: tuple[str, ...] = ()  # hooks.onNodeStart's names in the bundle (infra/config/hooks.py)
    hooks_ready: tuple[str, ...] = ()  # hooks.onNodeReady's
    hook_timeout_minutes: int = 10
    # Observability (templates/steps/metrics.sh.j2): the exporters on every node, Prometheus on the head (its
    # configuration, rules and flags come in the bundle's metrics/, so a change to them is no boot-step drift)
    metrics: bool = False
    group: str = ""  # a compute script's node group ("" for the head's): whose script the loader runs
    # Containers (templates/steps/containers.sh.j2): enroot on the compute nodes, pyxis on every node, from the
    # bundle's containers/ files (which store and hooks: decided on the node)
    containers: bool = False
    # enroot's .debs -> "sha256:<hex>", the stack's containers.releaseDigests (a compute script's; the step checks them)
    enroot_digests: tuple[tuple[str, str], ...] = ()
    log_path: str = "/var/log/hpcc-bootstrap.log"
    agent_path: str = AGENT_PATH

    @property
    def key(self) -> str:
        """Whose script this is (hpcc_contract/names.py boot_key): the head's or its group's."""
        return HEAD if self.role == HEAD else self.group

    def as_vars(self) -> dict:
        """The templates' values: the fields, and `script`, the bundle's path of this script (the loader runs it)."""
        return {**dataclasses.asdict(self), "script": boot_script(self.key)}


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        comment_start_string="{##",  # bash's ${#array[@]} would open a Jinja comment
        comment_end_string="##}",
    )
    # The settings parser's rules: the same patterns the program renders the parameter with.
    assert all("'" not in p for p in [*settings_schema.PATTERNS.values(), *settings_schema.DENIED.values()])  # in '...'
    env.globals.update(
        settings_patterns=settings_schema.PATTERNS,
        settings_repeated=sorted(settings_schema.REPEATED),
        settings_optional=settings_schema.OPTIONAL_DEFAULTS,
        settings_format=formats.SETTINGS,
        status_format=formats.STATUS,
        bootstrap_steps=STEPS,
        status_every_seconds=STATUS_EVERY_SECONDS,
        schema=settings_schema,
        hosts=hosts_schema,
        by_value=_by_value,
        slurmd_timeout=slurm.SLURMD_TIMEOUT_SECONDS,
        metrics_textfile_dir=metrics.TEXTFILE_DIR,
        metrics_targets_dir=metrics.TARGETS_DIR,
        node_exporter_port=metrics.NODE_EXPORTER_PORT,
        prometheus_port=metrics.PROMETHEUS_PORT,
        prometheus_data_dir=prometheus.DATA_PATH,
        prometheus_config_dir=prometheus.CONFIG_DIR,
        node_exporter_flags=metrics.NODE_EXPORTER_FLAGS,
        dcgm=dcgm,
        dcgm_exporter_port=metrics.DCGM_EXPORTER_PORT,
        grafana=grafana,
        grafana_facts=grafana_facts,
        cfacts=containers_facts,
        crender=containers_render,
        ccontract=contract_containers,
        cmounts=container_mounts,
        ec=enroot_credentials,
    )
    return env


def _by_value(mapping: dict) -> list[tuple[str, str]]:
    """("KEY1|KEY2", value) for the keys sharing each value, in first-key order: one bash `case` branch each."""
    keys: dict[str, list[str]] = {}
    for key, value in mapping.items():
        keys.setdefault(value, []).append(key)
    return [("|".join(names), value) for value, names in keys.items()]


def without_comments(script: str) -> str:
    """The script minus its comment-only lines after the header: EC2 takes 16 KB of user data, even gzipped
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html), and the templates explain themselves
    at length. Kept: the header (what the node's `hpcc-node` says it is), each step's `# ---` title, `#!` lines (also
    those of the scripts it writes) and shellcheck directives."""
    lines = script.splitlines(keepends=True)
    header = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[:header] + [line for line in lines[header:] if not _comment_only(line)])


def _comment_only(line: str) -> bool:
    text = line.lstrip()
    return text.startswith("#") and not text.startswith(("#!", "# shellcheck", "# ---"))


def render(ctx: BootstrapContext) -> str:
    """The script the node runs: the templates rendered, comment-only lines left out."""
    return without_comments(environment().get_template("bootstrap.sh.j2").render(**ctx.as_vars()))


def render_loader(ctx: BootstrapContext) -> str:
    """The loader: what the user data runs."""
    return without_comments(environment().get_template("loader.sh.j2").render(**ctx.as_vars()))


def within_limit(packed: bytes) -> bool:
    """Whether EC2 takes these raw user-data bytes (the plan's AWS checks the same on its own side)."""
    return len(packed) <= USER_DATA_LIMIT


def user_data(ctx: BootstrapContext) -> bytes:
    """What EC2 gets: the loader gzip-compressed (cloud-init unpacks it), within hpcc's 4 KB (EC2 takes 16 KB)."""
    packed = gzip.compress(render_loader(ctx).encode(), mtime=0)
    if len(packed) > LOADER_LIMIT or not within_limit(packed):
        raise ValueError(
            f"user data for {ctx.key} is {len(packed)} bytes gzip-compressed; the loader's bound is {LOADER_LIMIT}"
        )
    return packed
