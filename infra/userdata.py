"""Render a node role's bootstrap script (the user data) from the Jinja templates in templates/."""

from __future__ import annotations

import dataclasses
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
    master_port: int = 29500

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
    )


def render(ctx: BootstrapContext) -> str:
    script = environment().get_template("bootstrap.sh.j2").render(**ctx.as_vars())
    if len(script.encode()) > USER_DATA_LIMIT:
        raise ValueError(f"rendered user data for {ctx.role} is {len(script.encode())} bytes; EC2 allows {USER_DATA_LIMIT}")
    return script
