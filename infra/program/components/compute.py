"""The nodes: a cluster placement group, one launch template for the head and one per node group (EFA layout,
IMDSv2, encrypted root volume, the loader as user data), the head instance, one resource per group whose deletion
terminates the group's instances (infra/program/components/groups.py), and the parameters the nodes and the controller
read: settings and groups. Compute instances are launched by the controller on the head (EC2 Fleet, from the
group's launch template), never one by one by Pulumi."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import (
    HEAD,
    NO_ROTATION,
    TAG_INTERFACES,
    Paths,
    group_resource,
    launch_template_name,
    launch_template_resource,
    placement_group_name,
    tags,
)
from infra.config.model import ClusterConfig
from infra.config.nodes import NodeGroup
from infra.facts.efa import InterfaceSpec
from infra.facts.instance_types import InstanceType
from infra.program.components.groups import GroupInstances
from infra.program.lookups import ImageInfo
from infra.render.groups_param import group_entry, groups_value
from infra.render.node_settings import settings_value
from infra.render.roles import RoleSpec, bootstrap_context, resolve_role
from infra.render.userdata import user_data


@dataclass
class ComputeArgs:
    config: ClusterConfig
    region: str
    facts: object  # `.get(name, field)` -> InstanceType (infra/facts/instance_types.py)
    availability_zone: pulumi.Input[str]
    image: pulumi.Output[ImageInfo]
    private_subnet_id: pulumi.Input[str]
    public_subnet_id: pulumi.Input[str]
    # The subnets' AZ as their outputs: a node reads it, so replacing a subnet replaces the nodes in it first.
    subnet_azs: dict[bool, pulumi.Input[str]]  # public? -> AZ
    nodes_sg_id: pulumi.Input[str]
    head_ssh_sg_id: pulumi.Input[str] | None
    instance_profile_arns: dict[
        str, pulumi.Input[str]
    ]  # role -> instance profile ARN (infra/program/components/identity.py)
    account: pulumi.Input[str]  # names the state bucket in the settings
    extra_tags: dict[str, str] = field(default_factory=dict)
    boot_after: list[pulumi.Resource] = field(default_factory=list)  # the bundle pointer the loader reads


@dataclass
class Node:
    name: str
    role: str
    instance: aws.ec2.Instance
    itype: InstanceType


@dataclass
class GroupNodes:
    """A node group as Pulumi made it: its launch template and the resource whose deletion terminates it."""

    config: NodeGroup
    spec: RoleSpec
    launch_template: aws.ec2.LaunchTemplate
    instances: GroupInstances

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def itype(self) -> InstanceType:
        return self.spec.itype


def interfaces_tag(layout: tuple[InterfaceSpec, ...], public: bool) -> str:
    """The node's interfaces in a few words, e.g. `1 efa` or `1 interface + 32 efa-only, public`. Interfaces are
    fixed at launch (EFA cannot be attached to a running instance), so a change of this tag replaces the node."""
    counts: dict[str, int] = {}
    for spec in layout:
        counts[spec.interface_type] = counts.get(spec.interface_type, 0) + 1
    return " + ".join(f"{n} {kind}" for kind, n in counts.items()) + (", public" if public else "")


def imds_hop_limit(cfg: ClusterConfig) -> int:
    """1: an IMDSv2 token's PUT response dies one hop out, so bridge-networked containers get none; 2 only when
    `security.imdsForContainers` asks for it (EC2 User Guide, "Configure the Instance Metadata Service options":
    in a container environment a hop limit of 1 "can cause issues")."""
    return 2 if cfg.security.imds_for_containers else 1


def metadata_options(cfg: ClusterConfig) -> dict:
    """The nodes' IMDS options, on the launch template (new nodes) and on each instance (running nodes: an instance
    ignores new template versions, while its own `metadata_options` "can be applied/modified to the EC2 Instance at
    any time", terraform-provider-aws docs/r/instance, "Metadata Options"). IMDSv2 only. The IPv6 endpoint
    (fd00:ec2::254) stays off: AWS's default, and only Nitro instances in IPv6 subnets have it (same EC2 page);
    the VPC has none, and the bootstrap's root-only rule covers 169.254.169.254 only."""
    return dict(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=imds_hop_limit(cfg),
        # A node reads its own hpcc:node tag here, with no API call (EC2 User Guide, "View tags for your
        # EC2 instances using instance metadata"); infra/config/model.py keeps tag keys within its rules.
        instance_metadata_tags="enabled",
    )


def compute_placement_group(group: NodeGroup, own_group: pulumi.Input[str]) -> pulumi.Input[str] | None:
    """A group launched into a reservation (ODCR or Capacity Block) goes into the placement group it was made in
    (its placementGroup) or none: in an unrelated group EC2 can refuse for capacity although the reservation has
    room (aws-parallelcluster, ec2_validators.py PlacementGroupCapacityReservationValidator; EC2 User Guide
    "Capacity Reservations in cluster placement groups"). Preflight checks the reservation's group."""
    if group.capacity_reservation_id:
        return group.placement_group
    return group.placement_group or own_group


class Compute(pulumi.ComponentResource):
    head: Node
    groups: list[GroupNodes]
    head_is_public: bool

    def __init__(self, name: str, args: ComputeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Compute", name, None, opts)
        cfg, t = args.config, args.extra_tags
        c = cfg.name
        child = pulumi.ResourceOptions(parent=self)
        paths = Paths(c)

        own_group = aws.ec2.PlacementGroup(
            f"{c}-placement", name=placement_group_name(c), strategy="cluster", tags=tags(c, "placement", t), opts=child
        ).name
        self.head_is_public = bool(cfg.ssh.allowed_cidrs)

        head = resolve_role(cfg, args.region, "head", args.facts)
        head_lt = self._launch_template(args, own_group, head, public=self.head_is_public)
        self.groups = []
        for group in cfg.node_groups:
            spec = resolve_role(cfg, args.region, "compute", args.facts, group.name)
            lt = self._launch_template(
                args, compute_placement_group(group, own_group), spec, public=False, group=group.name
            )
            # Its inputs name the template, subnet and security group, so destroy deletes it (terminating the
            # group's instances) before them.
            instances = GroupInstances(
                group_resource(c, group.name),
                c,
                group.name,
                args.region,
                lt.id,
                args.private_subnet_id,
                args.nodes_sg_id,
                opts=child,
            )
            self.groups.append(GroupNodes(group, spec, lt, instances))

        # The head runs the controller: it depends on the groups' resources, so destroy removes it first and no
        # controller relaunches what the groups' deletion terminates.
        self.head = self._node(
            args, HEAD, head_lt, head, public=self.head_is_public, after=[g.instances for g in self.groups]
        )

        # What changes over the cluster's life (count, pacing, timeouts, launch settings): read by the nodes at
        # run time and updated in place; in the user data, a resize would replace nodes or leave them stale.
        aws.ssm.Parameter(
            f"{c}-settings-param",
            name=paths.settings,
            type="String",
            tier="Intelligent-Tiering",
            description="cluster settings the nodes read at run time (KEY=VALUE lines, infra/render/node_settings.py)",
            value=pulumi.Output.from_input(args.account).apply(
                lambda account: settings_value(cfg, args.region, args.facts, account)
            ),
            tags=tags(c, "settings-param", t),
            opts=child,
        )

        # The groups the controller keeps: a count change updates this value in place, and nothing else.
        entries = [
            pulumi.Output.all(
                g.launch_template.name,
                args.private_subnet_id,
                args.subnet_azs[False],
                compute_placement_group(g.config, own_group),
                g.launch_template.latest_version,  # the version the controller launches and rolls to
                args.image.apply(lambda im: im.ami_id),
            ).apply(
                lambda a, i=i, g=g: group_entry(
                    cfg, i, g.config, g.itype, a[0], a[1], a[2], a[3], int(a[4] or 0), a[5], imds_hop_limit(cfg)
                )
            )
            for i, g in enumerate(self.groups)
        ]
        aws.ssm.Parameter(
            f"{c}-groups-param",
            name=paths.groups,
            type="String",
            tier="Intelligent-Tiering",
            description="the node groups the controller launches and keeps (JSON, infra/render/groups_param.py)",
            value=pulumi.Output.all(*entries).apply(lambda es: groups_value(list(es))),
            tags=tags(c, "groups-param", t),
            opts=child,
        )
        # The host-key rotation the head follows (hpcc_node/certstore.py), set by `hpcc rotate-keys`: Pulumi's, so
        # `pulumi destroy` removes it; the command's values are kept (ignore_changes).
        aws.ssm.Parameter(
            f"{c}-rotation-param",
            name=paths.rotation,
            type="String",
            value=NO_ROTATION,
            description="the host-CA rotation the head applies (hpcc rotate-keys)",
            tags=tags(c, "rotation-param", t),
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["value"]),
        )
        self.register_outputs({})

    def _launch_template(
        self,
        args: ComputeArgs,
        placement: pulumi.Input[str] | None,
        spec: RoleSpec,
        public: bool,
        group: str | None = None,
    ) -> aws.ec2.LaunchTemplate:
        """The head's (Pulumi launches the head from it, into its subnet) or a group's: a group's interfaces carry
        no subnet, which EC2 Fleet's override supplies (a template naming a subnet and an override naming another
        is refused)."""
        cfg, t = args.config, args.extra_tags
        c, role, itype = cfg.name, spec.role, spec.itype
        subnet = None if group else args.public_subnet_id if public else args.private_subnet_id
        groups = [args.nodes_sg_id] + ([args.head_ssh_sg_id] if public and args.head_ssh_sg_id else [])
        interfaces = [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=nic.network_card_index,
                device_index=nic.device_index,
                interface_type=nic.interface_type,
                subnet_id=subnet,
                security_groups=groups,
                delete_on_termination="true",
                associate_public_ip_address=("true" if public else "false") if nic.is_primary else None,
            )
            for nic in spec.layout
        ]
        packed = user_data(bootstrap_context(cfg, args.region, role, args.facts, group))
        market = None
        if spec.market == "spot":
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
                market_type="spot",
                spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                    spot_instance_type="one-time", instance_interruption_behavior="terminate"
                ),
            )
        elif spec.market == "capacity-block":  # EC2 User Guide, "Use Capacity Blocks": market type + reservation target
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
        reservation = None
        if spec.capacity_reservation_id:
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=spec.capacity_reservation_id
                )
            )
        what = group or role  # the `compute` group keeps the compute role's template names: updated in place
        launch_tags = tags(c, role, t, role=role, **({"group": group} if group else {}))
        return aws.ec2.LaunchTemplate(
            launch_template_resource(c, what),
            name=launch_template_name(c, what),
            instance_type=itype.name,
            image_id=args.image.apply(lambda i: i.ami_id),
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=args.instance_profile_arns[role]),
            network_interfaces=interfaces,
            placement=aws.ec2.LaunchTemplatePlacementArgs(
                group_name=placement, availability_zone=args.availability_zone
            ),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(**metadata_options(cfg)),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=args.image.apply(lambda i: i.root_device_name),
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=spec.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            instance_market_options=market,
            capacity_reservation_specification=reservation,
            user_data=base64.b64encode(packed).decode(),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=rt, tags=launch_tags)
                for rt in ("instance", "volume", "network-interface")
            ],
            tags=tags(c, f"{what}-lt", t),
            update_default_version=True,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _node(
        self,
        args: ComputeArgs,
        node: str,
        lt: aws.ec2.LaunchTemplate,
        spec: RoleSpec,
        public: bool,
        after: list[pulumi.Resource],
    ) -> Node:
        """One node. It is replaced only for what a running instance cannot take: another image (`ami` forces a
        new instance), another subnet's AZ (`availability_zone`), another instance type or interface layout
        (`replace_on_changes`). A new launch-template
        version (user data, tags, root volume, market) reaches nodes created afterwards: existing nodes ignore it
        (terraform-provider-aws forces a new instance when `launch_template.version` changes). The IMDS options
        are set here too, so a change reaches the running nodes in place."""
        c, role = args.config.name, spec.role
        instance = aws.ec2.Instance(
            f"{c}-{node}",
            ami=args.image.apply(lambda i: i.ami_id),
            instance_type=spec.itype.name,
            # ForceNew, and read from the node's subnet: an AZ move replaces the node before its subnet goes.
            availability_zone=args.subnet_azs[public],
            launch_template=aws.ec2.InstanceLaunchTemplateArgs(id=lt.id, version=lt.latest_version.apply(str)),
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(**metadata_options(args.config)),
            tags=tags(c, node, args.extra_tags, role=role, node=node, interfaces=interfaces_tag(spec.layout, public)),
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["launchTemplate.version"],
                depends_on=[*args.boot_after, *after],
                replace_on_changes=["instanceType", f'tags["{TAG_INTERFACES}"]'],
            ),
        )
        return Node(node, role, instance, spec.itype)
