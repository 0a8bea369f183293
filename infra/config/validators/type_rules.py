"""Rules that need the instance types' facts (infra/facts/instance_types.py): they run where facts exist — the program
(`pulumi up` asks the account's EC2, `hpcc plan` the embedded AWS), preflight (live EC2) and tests. Each takes
(cfg, types) where `types` maps a config field to its InstanceType; `type_findings` builds that map from any
`facts` with `.get(name, field)` and reports a type EC2 does not list as an error naming the field.

What EC2's own data says, checked before anything launches (DescribeInstanceTypes, API reference
InstanceTypeInfo): `SupportedUsageClasses` (the markets a type is sold in: some HPC types are on-demand only),
`PlacementGroupInfo.SupportedStrategies` (whether it can join a cluster placement group), `ProcessorInfo`.
"""

from __future__ import annotations

from infra.config.validators.findings import ERROR, WARNING, Finding
from infra.facts.efa import efa_device_count, interface_layout
from infra.facts.images import image_name_pattern
from infra.facts.instance_types import HEAD_FIELD, InstanceType, UnknownInstanceType
from infra.facts.prometheus_sizing import HEAD_SERIES, HEAD_SHARE, head_series, prometheus_bytes
from infra.facts.slurm import SlurmFactsError, slurm_node

IMAGE_FIELD = "cluster.image"
# The architectures a node can run: one image serves the whole cluster, so head and compute share one.
SUPPORTED_ARCHITECTURES = ("x86_64", "arm64")


def roles(cfg) -> list[tuple[str, str]]:
    """(field, type name) of the head and of every group, fields as the user wrote them."""
    c = cfg.cluster
    return [
        (HEAD_FIELD, c.head_node.instance_type),
        *((c.group_field(i, "instanceType"), g.instance_type) for i, g in enumerate(c.node_groups)),
    ]


def group_types(cfg, types: dict[str, InstanceType]):
    """(index, group, its type's facts) for each group whose type EC2 lists."""
    c = cfg.cluster
    for i, group in enumerate(c.node_groups):
        itype = types.get(c.group_field(i, "instanceType"))
        if itype is not None:
            yield i, group, itype


def _archs(itype: InstanceType) -> set[str]:
    return set(itype.architectures or (itype.arch,)) & set(SUPPORTED_ARCHITECTURES)


def cluster_architecture(types: dict[str, InstanceType]) -> str | None:
    """The one architecture every node type runs (x86_64 first), or None."""
    common = set(SUPPORTED_ARCHITECTURES)
    for itype in types.values():
        common &= _archs(itype)
    return next((a for a in SUPPORTED_ARCHITECTURES if a in common), None)


def architecture(cfg, types: dict[str, InstanceType]):
    """One image (infra/program/components/pins.py) serves head and compute: they run one architecture, one the image
    source has a build for."""
    for field, itype in types.items():
        if not _archs(itype):
            yield Finding(
                ERROR,
                field,
                f"{itype.name} runs {'/'.join(itype.architectures or (itype.arch,))}; hpcc "
                f"builds {' and '.join(SUPPORTED_ARCHITECTURES)} clusters",
            )
            return
    head = types.get(HEAD_FIELD)
    nodes = [(field, t) for field, t in types.items() if field != HEAD_FIELD]
    if head is None or not nodes:
        return
    arch = cluster_architecture(types)
    if arch is None:
        field, odd = next(((f, t) for f, t in nodes if not _archs(t) & _archs(head)), nodes[0])
        yield Finding(
            ERROR,
            HEAD_FIELD,
            f"{head.name} runs {'/'.join(sorted(_archs(head)))} but {field} "
            f"{odd.name} runs {'/'.join(sorted(_archs(odd)))}: one image serves "
            "every node, so pick types of one architecture (e.g. c7g.2xlarge "
            "for arm64, m6i.2xlarge for x86_64)",
        )
        return
    family = cfg.cluster.image.resolved_family
    if family and image_name_pattern(family, arch) is None:
        yield Finding(
            ERROR,
            f"{IMAGE_FIELD}.family",
            f"AWS builds no {arch} image of {family}, and "
            f"{nodes[0][1].name} runs {arch}: use an {arch} family "
            "(base-oss-nvidia-driver-gpu-ubuntu-22.04 or -24.04), or pin "
            "cluster.image.amiId",
        )


def efa_matches_type(cfg, types: dict[str, InstanceType]):
    for i, group, itype in group_types(cfg, types):
        field = cfg.cluster.group_field(i, "efa")
        if group.efa is True and not itype.efa_supported:
            yield Finding(
                ERROR,
                field,
                f"{itype.name} has no EFA (DescribeInstanceTypes: EfaSupported false); remove `efa: true` to "
                "run over TCP, or pick a type that `aws ec2 describe-instance-types --filters "
                "Name=network-info.efa-supported,Values=true` lists",
            )
        elif group.efa is False and itype.efa_supported:
            yield Finding(WARNING, field, efa_off(itype.name))


def efa_off(type_name: str) -> str:
    """The warning for `efa: false` on an EFA type: the plan's and preflight's (which asks the region) alike."""
    return (
        f"{type_name} supports EFA but it is turned off: collectives will run over TCP, typically several "
        "times slower; remove `efa: false` to use it"
    )


def market_supported(cfg, types: dict[str, InstanceType]):
    """A market the type is not sold in fails at launch."""
    for i, group, itype in group_types(cfg, types):
        if itype.usage_classes and group.market not in itype.usage_classes:
            yield Finding(
                ERROR,
                cfg.cluster.group_field(i, "market"),
                f"{itype.name} is not sold as {group.market} (EC2 lists it for "
                f"{', '.join(itype.usage_classes)} only); set market to one of those, or pick another type",
            )


def cluster_placement(cfg, types: dict[str, InstanceType]):
    """Every node launches into one cluster placement group (infra/program/components/compute.py)."""
    for field, itype in types.items():
        if itype.placement_strategies and not itype.cluster_placement_supported:
            yield Finding(
                ERROR,
                field,
                f"{itype.name} cannot join a cluster placement group (EC2 lists only "
                f"{', '.join(itype.placement_strategies)}), and every hpcc node launches into "
                "one for EFA; pick a type that supports the `cluster` strategy",
            )


def head_public_needs_single_interface(cfg, types: dict[str, InstanceType]):
    head = types.get(HEAD_FIELD)
    if cfg.cluster.ssh.allowed_cidrs and head is not None and head.network_cards > 1 and head.efa_supported:
        yield Finding(
            ERROR,
            HEAD_FIELD,
            f"SSH from the internet needs a public IP, which {head.name} (several network cards) cannot "
            "get; use a single-card head type such as c5n.18xlarge, or drop cluster.ssh.allowedCidrs and use SSM",
        )


def slurm_node_defined(cfg, types: dict[str, InstanceType]):
    """With Slurm, each group's type's facts must make a node definition (infra/facts/slurm.py)."""
    if cfg.cluster.scheduler != "slurm":
        return
    for i, _group, itype in group_types(cfg, types):
        try:
            slurm_node(itype, cfg.cluster.group_field(i, "instanceType"))
        except SlurmFactsError as e:
            yield Finding(ERROR, e.field, str(e).removeprefix(f"{e.field}: "))


def head_holds_the_metrics(cfg, types: dict[str, InstanceType]):
    """With metrics on, the head's Prometheus holds every node's series (infra/facts/prometheus_sizing.py): a head
    whose memory it would take more than half of is warned about, with the size to give."""
    c, head = cfg.cluster, types.get(HEAD_FIELD)
    if not c.metrics_on or head is None:
        return
    series, nodes = HEAD_SERIES, 0
    for _i, group, itype in group_types(cfg, types):
        efa = efa_device_count(interface_layout(itype, itype.efa_supported if group.efa is None else group.efa))
        series += group.count * head_series(itype.gpus, efa)
        nodes += group.count
    need = prometheus_bytes(series) / 1024**3
    if need > head.memory_gib * HEAD_SHARE:
        yield Finding(
            WARNING,
            HEAD_FIELD,
            f"the head's Prometheus holds {nodes:,} nodes' metrics ({series:,} series): about {need:.0f} GiB "
            f"resident (scripts/bench_prometheus.py), over half of {head.name}'s {head.memory_gib:g} GiB, which "
            f"slurmctld and the controller share; give a head type with at least {need / HEAD_SHARE:.0f} GiB "
            "(e.g. an r6i or r7i size), or set observability.enabled: false",
        )


TYPE_RULES = [
    architecture,
    efa_matches_type,
    market_supported,
    cluster_placement,
    head_public_needs_single_interface,
    slurm_node_defined,
    head_holds_the_metrics,
]


def resolve_types(cfg, facts) -> tuple[dict[str, InstanceType], list[Finding]]:
    """field -> the type's facts, for the types EC2 lists; an error Finding for each it does not."""
    types, problems = {}, []
    for field, name in roles(cfg):
        try:
            types[field] = facts.get(name, field)
        except UnknownInstanceType as e:
            problems.append(Finding(ERROR, field, str(e).removeprefix(f"{field}: ")))
    return types, problems


def type_findings(cfg, facts) -> list[Finding]:
    types, findings = resolve_types(cfg, facts)
    for rule in TYPE_RULES:
        findings.extend(rule(cfg, types))
    return findings
