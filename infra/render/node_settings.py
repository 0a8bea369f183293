"""The cluster settings the nodes read at run time from the SSM parameter `/hpcc/<cluster>/settings`.

Everything that changes over a cluster's life (node count, pacing, timeouts, the compute type's slots and
fabric settings, mpirun options, login user, mount point, master port) lives here and not in the user data,
so resizing or retuning a cluster updates one parameter in place: user data changes would make a new
launch-template version, which either replaces every instance (terraform-provider-aws forces a new
`aws_instance` when `launch_template.version` changes) or, ignored, leaves the running nodes with stale values.

Format: `KEY=VALUE` lines, known keys only, each value matching its pattern below in full; `FABRIC` may repeat
(one `NAME=value` launch variable each, in order), as do `AUTHORIZED_KEY` and `IMDS_USER`; the OPTIONAL keys
(Slurm's) are given with `scheduler: slurm` only, and a missing `SCHEDULER` means `none` (OPTIONAL_DEFAULTS).
The bootstrap (templates/steps/settings.sh.j2) parses it with the same patterns (hpcc_contract/settings.py), and
never evaluates or sources it: the values end up in files that shells source (/etc/hpcc/env), so the character
sets leave out everything a shell would expand or split on. A node refuses a whole text with a key it does not
know and keeps the settings it has: nodes booted before a key was added here follow no settings change that
carries it until they are replaced, so a key a cluster does not use is left out of its text.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcc_contract import formats
from hpcc_contract.names import ledger_table, state_bucket
from hpcc_contract.settings import (
    BOOT_DIAG_LEVEL_DEFAULT,
    MASTER_PORT,
    SETTINGS_LIMIT,
    SettingsError,
    check,
    check_scheduler,
    parse_text,
)
from infra.config.model import ClusterConfig
from infra.facts.fabric import fabric_env, mpirun_options
from infra.facts.slurm import slurm_node
from infra.render.pacing import pacing_for, sync_seconds
from infra.render.roles import resolve_role


@dataclass(frozen=True)
class NodeSettings:
    node_count: int
    slots: int
    timeout_minutes: int
    join_timeout_minutes: int
    api_interval_ms: int
    poll_seconds: int
    api_backoff_seconds: int
    api_attempts: int
    sync_seconds: int
    master_port: int
    login_user: str
    mount_point: str
    mpirun_options: str
    fabric: tuple[tuple[str, str], ...]
    state_bucket: str = ""
    ledger_table: str = ""
    authorized_keys: tuple[str, ...] = ()
    imds_users: tuple[str, ...] = ()
    scheduler: str | None = None  # "slurm", or None: left out (none)
    slurm_node: str | None = None  # with scheduler slurm only
    slurm_gpus: int | None = None  # likewise
    health_diag_level: int | None = None  # left out at its default: nodes from before the key accept the text
    image_cache_gib: int | None = None  # containers on only: the shared image cache's cap, the head evicts to it
    format: int | None = None  # hpcc_contract/formats.py SETTINGS, left out at 1 for the same reason

    def lines(self) -> list[tuple[str, str]]:
        simple = [
            (f.upper(), str(getattr(self, f)))
            for f in self.__dataclass_fields__
            if f not in ("fabric", "authorized_keys", "imds_users") and getattr(self, f) is not None
        ]
        return (
            simple
            + [("FABRIC", f"{name}={value}") for name, value in self.fabric]
            + [("AUTHORIZED_KEY", key) for key in self.authorized_keys]
            + [("IMDS_USER", user) for user in self.imds_users]
        )


def node_settings(cfg: ClusterConfig, region: str, facts, account: str) -> NodeSettings:
    """The settings of a cluster config (`facts`: infra/render/roles.py; `account` names the state bucket). The launch
    environment is the first group's on every role."""
    compute = resolve_role(cfg, region, "compute", facts)
    pacing = pacing_for(cfg.node_count + 1)
    efa = compute.efa_devices > 0
    slurm = slurm_node(compute.itype) if cfg.scheduler == "slurm" else None
    return NodeSettings(
        node_count=cfg.node_count,
        slots=compute.itype.slots,
        timeout_minutes=cfg.bootstrap.timeout_minutes,
        join_timeout_minutes=cfg.bootstrap.join_timeout_minutes,
        api_interval_ms=pacing.api_interval_ms,
        poll_seconds=pacing.poll_seconds,
        api_backoff_seconds=pacing.api_backoff_seconds,
        api_attempts=pacing.api_attempts,
        sync_seconds=sync_seconds(pacing),
        master_port=MASTER_PORT,
        login_user=cfg.image.user,
        mount_point=cfg.fsx.mount_point,
        mpirun_options=mpirun_options(efa),
        fabric=fabric_env(compute.itype, efa),
        state_bucket=state_bucket(cfg.name, account),
        ledger_table=ledger_table(cfg.name),
        authorized_keys=tuple(cfg.ssh.authorized_keys),
        imds_users=tuple(cfg.security.imds_for_users),
        scheduler="slurm" if slurm else None,
        slurm_node=slurm.attributes() if slurm else None,
        slurm_gpus=slurm.gpus if slurm else None,
        health_diag_level=None if cfg.health.boot_diag_level == BOOT_DIAG_LEVEL_DEFAULT else cfg.health.boot_diag_level,
        image_cache_gib=cfg.image_cache_gib if cfg.containers_on else None,
        format=None if formats.SETTINGS == 1 else formats.SETTINGS,
    )


def render(settings: NodeSettings) -> str:
    """The parameter's value; refuses any value the nodes would refuse."""
    for key, value in settings.lines():
        check(key, value)
    check_scheduler({key for key, _ in settings.lines()}, settings.scheduler)
    text = "".join(f"{key}={value}\n" for key, value in settings.lines())
    if len(text.encode()) > SETTINGS_LIMIT:
        raise SettingsError(
            f"the settings are {len(text.encode())} bytes; the parameter holds {SETTINGS_LIMIT}: "
            "give fewer or shorter cluster.ssh.authorizedKeys"
        )
    return text


def settings_value(cfg: ClusterConfig, region: str, facts, account: str) -> str:
    """The one function that renders `/hpcc/<cluster>/settings`: for compute.py and the box."""
    return render(node_settings(cfg, region, facts, account))


def parse(text: str) -> NodeSettings:
    """The inverse of render, with the nodes' rules (hpcc_contract/settings.py parse_text; for tests and tools)."""
    found = parse_text(text)
    fields = NodeSettings.__dataclass_fields__
    values = {
        f: (int(found[f.upper()][0]) if fields[f].type.startswith("int") else found[f.upper()][0])
        for f in fields
        if f not in ("fabric", "authorized_keys", "imds_users") and f.upper() in found
    }
    fabric = tuple(tuple(v.split("=", 1)) for v in found.get("FABRIC", []))
    return NodeSettings(
        **values,
        fabric=fabric,
        authorized_keys=tuple(found.get("AUTHORIZED_KEY", [])),
        imds_users=tuple(found.get("IMDS_USER", [])),
    )
