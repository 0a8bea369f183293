"""Security groups: the nodes' EFA group, the file system's Lustre group, and the head's SSH group.

EFA needs all traffic allowed in *and* out to the group itself (egress to 0.0.0.0/0 does not
cover it). Rules are separate resources so the file system can wait for the Lustre rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import tags

LUSTRE_PORTS = ((988, 988), (1018, 1023))


@dataclass
class SecurityArgs:
    cluster: str
    vpc_id: pulumi.Input[str]
    ssh_cidrs: list[str]
    extra_tags: dict[str, str] = field(default_factory=dict)


class Security(pulumi.ComponentResource):
    nodes_sg_id: pulumi.Output[str]
    lustre_sg_id: pulumi.Output[str]
    head_ssh_sg_id: pulumi.Output[str] | None
    lustre_rules: list[pulumi.Resource]

    def __init__(self, name: str, args: SecurityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Security", name, None, opts)
        c, t = args.cluster, args.extra_tags
        child = pulumi.ResourceOptions(parent=self)

        nodes = aws.ec2.SecurityGroup(
            f"{c}-nodes-sg",
            vpc_id=args.vpc_id,
            description=f"hpcc {c}: cluster nodes and EFA",
            tags=tags(c, "nodes-sg", t),
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{c}-efa-in",
            security_group_id=nodes.id,
            ip_protocol="-1",
            referenced_security_group_id=nodes.id,
            description="EFA and MPI: all traffic from the cluster's nodes",
            tags=tags(c, "efa-in", t),
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{c}-efa-out",
            security_group_id=nodes.id,
            ip_protocol="-1",
            referenced_security_group_id=nodes.id,
            description="EFA: all traffic to the cluster's nodes",
            tags=tags(c, "efa-out", t),
            opts=child,
        )
        aws.vpc.SecurityGroupEgressRule(
            f"{c}-internet-out",
            security_group_id=nodes.id,
            ip_protocol="-1",
            cidr_ipv4="0.0.0.0/0",
            description="packages and AWS APIs through the NAT gateway",
            tags=tags(c, "internet-out", t),
            opts=child,
        )

        lustre = aws.ec2.SecurityGroup(
            f"{c}-lustre-sg",
            vpc_id=args.vpc_id,
            description=f"hpcc {c}: FSx for Lustre",
            tags=tags(c, "lustre-sg", t),
            opts=child,
        )
        rules: list[pulumi.Resource] = []
        for low, high in LUSTRE_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            for peer_name, peer in (("nodes", nodes), ("self", lustre)):
                rules.append(
                    aws.vpc.SecurityGroupIngressRule(
                        f"{c}-lustre-in-{peer_name}-{ports}",
                        security_group_id=lustre.id,
                        ip_protocol="tcp",
                        from_port=low,
                        to_port=high,
                        referenced_security_group_id=peer.id,
                        description=f"Lustre LNET {ports} from {peer_name}",
                        tags=tags(c, f"lustre-in-{peer_name}-{ports}", t),
                        opts=child,
                    )
                )
                rules.append(
                    aws.vpc.SecurityGroupEgressRule(
                        f"{c}-lustre-out-{peer_name}-{ports}",
                        security_group_id=lustre.id,
                        ip_protocol="tcp",
                        from_port=low,
                        to_port=high,
                        referenced_security_group_id=peer.id,
                        description=f"Lustre LNET {ports} to {peer_name}",
                        tags=tags(c, f"lustre-out-{peer_name}-{ports}", t),
                        opts=child,
                    )
                )
            rules.append(
                aws.vpc.SecurityGroupIngressRule(
                    f"{c}-nodes-in-lustre-{ports}",
                    security_group_id=nodes.id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    referenced_security_group_id=lustre.id,
                    description=f"Lustre LNET {ports} from the file system",
                    tags=tags(c, f"nodes-in-lustre-{ports}", t),
                    opts=child,
                )
            )

        self.head_ssh_sg_id = None
        if args.ssh_cidrs:
            head = aws.ec2.SecurityGroup(
                f"{c}-head-ssh-sg",
                vpc_id=args.vpc_id,
                description=f"hpcc {c}: SSH to the head node",
                tags=tags(c, "head-ssh-sg", t),
                opts=child,
            )
            for i, cidr in enumerate(args.ssh_cidrs):
                v6 = ":" in cidr
                aws.vpc.SecurityGroupIngressRule(
                    f"{c}-head-ssh-in-{i}",
                    security_group_id=head.id,
                    ip_protocol="tcp",
                    from_port=22,
                    to_port=22,
                    cidr_ipv6=cidr if v6 else None,
                    cidr_ipv4=None if v6 else cidr,
                    description=f"SSH from {cidr}",
                    tags=tags(c, f"head-ssh-in-{i}", t),
                    opts=child,
                )
            self.head_ssh_sg_id = head.id

        self.nodes_sg_id = nodes.id
        self.lustre_sg_id = lustre.id
        self.lustre_rules = rules
        self.register_outputs({"nodesSecurityGroupId": nodes.id, "lustreSecurityGroupId": lustre.id})
