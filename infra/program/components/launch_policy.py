"""What the head's controller may launch (issue 33, finding 5): only from the cluster's launch templates, as the
templates say. EC2 User Guide, "Control launching instances" ("Require the use of a launch template", "Require
IMDSv2"), "Example IAM policies for EC2 Fleet" and "EC2 Fleet prerequisites" (an instant fleet launches with its
caller's RunInstances permissions, no service-linked role); the Service Authorization Reference, Amazon EC2, for
the condition keys `ec2:LaunchTemplate`, `ec2:IsLaunchTemplateResource`, `ec2:InstanceType`,
`ec2:MetadataHttpTokens`. The policy pack checks the same (policy/iam_rules.py launch_problems)."""

from __future__ import annotations

from dataclasses import dataclass

from hpcc_contract.names import TAG_CLUSTER, placement_group_name

LAUNCH = ["ec2:CreateFleet", "ec2:RunInstances"]


@dataclass(frozen=True)
class LaunchLimits:
    """What the controller may launch, from the config: its groups' instance types, the capacity reservations
    (ODCRs, Capacity Blocks) and placement groups they name, and the cluster's own placement group."""

    instance_types: tuple[str, ...] = ()
    capacity_reservations: tuple[str, ...] = ()
    placement_groups: tuple[str, ...] = ()


NO_LAUNCHES = LaunchLimits()  # no instance type, reservation or placement group: the controller launches nothing


def launch_limits(cluster) -> LaunchLimits:
    """The limits of a ClusterConfig (infra/config/model.py): every group's, sorted (the same config writes the
    same policy)."""
    groups = cluster.node_groups
    return LaunchLimits(
        tuple(sorted({g.instance_type for g in groups})),
        tuple(sorted({g.capacity_reservation_id for g in groups if g.capacity_reservation_id})),
        tuple(sorted({placement_group_name(cluster.name)} | {g.placement_group for g in groups if g.placement_group})),
    )


def launch_statements(region: str, account: str, cluster: str, limits: LaunchLimits) -> list[dict]:
    """A launch only from a launch template tagged with the cluster (the cluster's own: the deployer creates them,
    and hpcc:* tags are the deployer's alone, docs/security.md), and every other resource of the launch only when
    the request names a launch template (`ec2:LaunchTemplate`); the image and the security groups only as the
    template gives them (`ec2:IsLaunchTemplateResource`), so a request cannot swap in another image. The instance:
    tagged with the cluster at creation, of one of the groups' instance types, with IMDSv2 required. Subnets: the
    cluster's (EC2 Fleet's override gives it: the template's interfaces carry none). Placement groups and capacity
    reservations: the cluster's own and the ones its groups name, by ARN, no other of the account's."""
    ec2 = f"arn:aws:ec2:{region}:{account}"
    own = {f"aws:ResourceTag/{TAG_CLUSTER}": cluster}
    requested = {f"aws:RequestTag/{TAG_CLUSTER}": cluster}
    from_template = {"ec2:LaunchTemplate": f"{ec2}:launch-template/*"}
    template_given = {"ec2:IsLaunchTemplateResource": "true"}
    created = [f"{ec2}:volume/*", f"{ec2}:network-interface/*"]
    reservations = [f"{ec2}:capacity-reservation/{r}" for r in limits.capacity_reservations]
    return [
        # The cluster's launch templates carry hpcc:cluster (hpcc_contract/names.py tags).
        {
            "Sid": "LaunchFromClusterTemplates",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": [f"{ec2}:launch-template/*"],
            "Condition": {"StringEquals": own},
        },
        {
            "Sid": "LaunchClusterInstances",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": [f"{ec2}:instance/*"],
            "Condition": {
                "StringEquals": {
                    **requested,
                    "ec2:InstanceType": list(limits.instance_types),
                    "ec2:MetadataHttpTokens": "required",
                },
                "ArnLike": from_template,
            },
        },
        {
            "Sid": "LaunchTemplateImageAndGroups",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": [f"arn:aws:ec2:{region}::image/*", f"{ec2}:security-group/*"],
            "Condition": {"ArnLike": from_template, "Bool": template_given},
        },
        {
            "Sid": "LaunchIntoClusterSubnets",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": [f"{ec2}:subnet/*"],
            "Condition": {"StringEquals": own, "ArnLike": from_template},
        },
        {
            "Sid": "LaunchTaggedWithCluster",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": created,
            "Condition": {"StringEquals": requested, "ArnLike": from_template},
        },
        # The fleet resource of an instant fleet itself: what it launches is held by the statements above.
        {
            "Sid": "InstantFleet",
            "Effect": "Allow",
            "Action": ["ec2:CreateFleet"],
            "Resource": [f"{ec2}:fleet/*"],
            "Condition": {"StringEquals": requested},
        },
        {
            "Sid": "LaunchIntoClusterPlacementGroups",
            "Effect": "Allow",
            "Action": LAUNCH,
            "Resource": [f"{ec2}:placement-group/{g}" for g in limits.placement_groups],
            "Condition": {"ArnLike": from_template},
        },
        *(
            [
                {
                    "Sid": "LaunchIntoGroupReservations",
                    "Effect": "Allow",
                    "Action": LAUNCH,
                    "Resource": reservations,
                    "Condition": {"ArnLike": from_template},
                }
            ]
            if reservations
            else []
        ),
    ]
