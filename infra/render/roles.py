"""One resolver from a node role to everything the program and the tests derive from it: the instance type's
facts, the interface layout (infra/facts/efa.py), the EFA device count, the market and reservation, and the
bootstrap context its user data is rendered from (the compute role's per node group: each group's nodes run their
own group's script). Pure given `facts` (anything with `.get(name, field)`: infra.facts.instance_types.InstanceFacts
under `pulumi up` and `hpcc plan`, DescribedFacts in tests): compute.py, tests/render/bootstrap_cases.py and the box
all call it instead of repeating the derivation."""

from __future__ import annotations

from dataclasses import dataclass

from hpcc_contract.names import Paths
from infra.config.hooks import name_of
from infra.config.model import ClusterConfig
from infra.config.nodes import NodeGroup
from infra.config.validators.metrics import canonical, default_retention_size
from infra.facts.efa import InterfaceSpec, efa_device_count, interface_layout
from infra.facts.instance_types import HEAD_FIELD, InstanceType
from infra.facts.subnets import VPC_CIDR
from infra.render.pacing import MAX_TIMEOUT_MINUTES, first_call_pacing
from infra.render.prometheus import prometheus_flags
from infra.render.userdata import BootstrapContext

ROLES = ("head", "compute")


@dataclass(frozen=True)
class RoleSpec:
    role: str  # head | compute
    itype: InstanceType
    efa_wanted: bool  # the head always asks for EFA where its type has it; compute unless `compute.efa: false`
    layout: tuple[InterfaceSpec, ...]
    efa_devices: int
    market: str  # on-demand | spot | capacity-block
    capacity_reservation_id: str | None
    root_volume_gib: int

    @property
    def efa_enabled(self) -> bool:
        return self.efa_devices > 0


def resolve_role(cfg: ClusterConfig, region: str, role: str, facts, group: str | None = None) -> RoleSpec:
    """`facts` answers for `region` (an unknown type raises UnknownInstanceType naming the field). `group`: which
    node group a compute role is (default the first)."""
    del region
    if role == "head":
        itype, efa, market, reservation = (facts.get(cfg.head_node.instance_type, HEAD_FIELD), True, "on-demand", None)
        root = cfg.head_node.root_volume_gib
    elif role == "compute":
        index, g = group_index(cfg, group)
        itype = facts.get(g.instance_type, cfg.group_field(index, "instanceType"))
        efa, market, reservation = g.efa is not False, g.market, g.capacity_reservation_id
        root = g.root_volume_gib
    else:
        raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    layout = tuple(interface_layout(itype, efa))
    return RoleSpec(role, itype, efa, layout, efa_device_count(list(layout)), market, reservation, root)


def group_index(cfg: ClusterConfig, group: str | None) -> tuple[int, NodeGroup]:
    """(index, group) of the group named `group`, or of the first group."""
    for i, g in enumerate(cfg.node_groups):
        if group is None or g.name == group:
            return i, g
    raise ValueError(f"no node group named {group!r}; the groups are {', '.join(g.name for g in cfg.node_groups)}")


def bootstrap_context(cfg: ClusterConfig, region: str, role: str, facts, group: str | None = None) -> BootstrapContext:
    """The user data's values for a role, the compute role's for node group `group` (default the first; the loader
    of each group's launch template runs that group's script): nothing that a resize or a retune changes (those are
    in the settings parameter, infra/render/node_settings.py)."""
    spec = resolve_role(cfg, region, role, facts, group)
    paths, first = Paths(cfg.name), first_call_pacing()
    return BootstrapContext(
        cluster=cfg.name,
        region=region,
        role=role,
        instance_type=spec.itype.name,
        gpus=spec.itype.gpus,
        efa_enabled=spec.efa_enabled,
        efa_devices=spec.efa_devices,
        gpudirect_rdma=spec.itype.gpudirect_rdma and spec.efa_enabled,
        fsx_parameter=paths.fsx,
        hosts_parameter=paths.hosts,
        settings_parameter=paths.settings,
        nodes_parameter=paths.nodes,
        ssh_secret_id=paths.ssh_secret,
        munge_secret_id=paths.munge_secret,
        first_interval_ms=first.api_interval_ms,
        first_poll_seconds=first.poll_seconds,
        api_backoff_seconds=first.api_backoff_seconds,
        api_attempts=first.api_attempts,
        max_timeout_minutes=MAX_TIMEOUT_MINUTES,
        vpc_cidr=VPC_CIDR,
        bundle_parameter=paths.bundle,
        hooks_start=tuple(name_of(p) for p in cfg.hooks.on_node_start),
        hooks_ready=tuple(name_of(p) for p in cfg.hooks.on_node_ready),
        hook_timeout_minutes=cfg.hooks.timeout_minutes,
        metrics=cfg.metrics_on,
        group=group_index(cfg, group)[1].name if role == "compute" else "",
        containers=cfg.containers_on,
        enroot_digests=tuple(sorted(cfg.containers.release_digests.items())) if role == "compute" else (),
    )


def head_prometheus_flags(cfg: ClusterConfig) -> tuple[str, ...]:
    """The head's Prometheus command line but its address (the running head's: templates/steps/metrics.sh.j2)."""
    if not cfg.metrics_on:
        return ()
    o = cfg.observability
    size = o.retention_size or default_retention_size(cfg.head_node.root_volume_gib)
    return tuple(prometheus_flags(canonical(o.retention), size))


def role_contexts(cfg: ClusterConfig, region: str, facts) -> dict[str, BootstrapContext]:
    """Whose script (hpcc_contract/names.py boot_key: `head`, then each node group's name, in the config's order) ->
    its BootstrapContext: each group's nodes run a script of their own group's instance type, GPUs and EFA devices."""
    contexts = [bootstrap_context(cfg, region, "head", facts)]
    contexts += [bootstrap_context(cfg, region, "compute", facts, g.name) for g in cfg.node_groups]
    return {ctx.key: ctx for ctx in contexts}
