"""Render a node role's bootstrap script (the user data) from the Jinja templates in templates/."""

from __future__ import annotations

import dataclasses
import gzip
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
USER_DATA_LIMIT = 16 * 1024  # EC2's limit on raw user data


@dataclass(frozen=True)
class BootstrapContext:
    """Every value the bootstrap steps need; nothing secret ever goes in here."""

    cluster: str
    region: str
    role: str  # head | compute
    node_count: int  # compute nodes in the cluster
    instance_type: str
    slots: int  # ranks per compute node: GPUs, or physical cores on CPU types
    gpus: int
    efa_enabled: bool
    efa_devices: int  # EFA devices launched on this role (efa + efa-only interfaces)
    gpudirect_rdma: bool
    login_user: str
    mount_point: str
    fsx_parameter: str
    hosts_parameter: str
    nodes_parameter: str
    ssh_secret_id: str
    timeout_minutes: int
    join_timeout_minutes: int
    # The launch environment is the compute nodes' (the ranks run there), on the head node too.
    fabric_env: tuple[tuple[str, str], ...]  # from infra.fabric, for the compute type
    mpirun_options: str
    api_interval_ms: int  # from infra.bootstrap_pacing
    poll_seconds: int
    api_backoff_seconds: int
    api_attempts: int
    master_port: int = 29500
    log_path: str = "/var/log/hpcc-bootstrap.log"

    def as_vars(self) -> dict:
        return dataclasses.asdict(self)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        comment_start_string="{##",  # bash's ${#array[@]} would open a Jinja comment
        comment_end_string="##}",
    )


def render(ctx: BootstrapContext) -> str:
    """The readable script."""
    return environment().get_template("bootstrap.sh.j2").render(**ctx.as_vars())


def user_data(ctx: BootstrapContext) -> bytes:
    """What EC2 gets: the script gzip-compressed (cloud-init unpacks it), within EC2's 16 KB limit."""
    packed = gzip.compress(render(ctx).encode(), mtime=0)
    if len(packed) > USER_DATA_LIMIT:
        raise ValueError(f"user data for {ctx.role} is {len(packed)} bytes gzip-compressed; EC2 allows {USER_DATA_LIMIT}")
    return packed
