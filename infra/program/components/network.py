"""VPC with a public subnet (NAT, and the head node when SSH is opened) and a private subnet for the
nodes and the file system, all in one AZ because EFA traffic does not cross subnets or AZs."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from hpcc_contract.names import tags
from infra.facts.subnets import PRIVATE_CIDRS, PUBLIC_CIDR, VPC_CIDR


@dataclass
class NetworkArgs:
    cluster: str
    region: str
    availability_zone: pulumi.Input[str]
    extra_tags: dict[str, str] = field(default_factory=dict)
    private_cidr: str = PRIVATE_CIDRS[0]  # sized for the count: infra/facts/subnets.py


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    public_subnet_id: pulumi.Output[str]
    private_subnet_id: pulumi.Output[str]
    public_subnet_az: pulumi.Output[str]
    private_subnet_az: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("hpcc:cluster:Network", name, None, opts)
        c, t = args.cluster, args.extra_tags
        child = pulumi.ResourceOptions(parent=self)

        vpc = aws.ec2.Vpc(
            f"{c}-vpc",
            cidr_block=VPC_CIDR,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=tags(c, "vpc", t),
            opts=child,
        )
        # An AZ move replaces the subnets with the same CIDRs in the same VPC, which AWS refuses while the old
        # ones exist: delete first. Pulumi then first deletes what would be replaced with them (the nodes, the NAT
        # gateway, the file system: pulumi/pulumi step_generator.go calculateDependentReplacements).
        in_az = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
        public = aws.ec2.Subnet(
            f"{c}-public",
            vpc_id=vpc.id,
            cidr_block=PUBLIC_CIDR,
            availability_zone=args.availability_zone,
            map_public_ip_on_launch=False,
            tags=tags(c, "public", t),
            opts=in_az,
        )
        private = aws.ec2.Subnet(
            f"{c}-private",
            vpc_id=vpc.id,
            cidr_block=args.private_cidr,
            availability_zone=args.availability_zone,
            tags=tags(c, "private", t),
            opts=in_az,
        )
        igw = aws.ec2.InternetGateway(f"{c}-igw", vpc_id=vpc.id, tags=tags(c, "igw", t), opts=child)
        eip = aws.ec2.Eip(
            f"{c}-nat-eip",
            domain="vpc",
            tags=tags(c, "nat-eip", t),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        nat = aws.ec2.NatGateway(
            f"{c}-nat",
            allocation_id=eip.id,
            subnet_id=public.id,
            tags=tags(c, "nat", t),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )

        public_rt = aws.ec2.RouteTable(f"{c}-public-rt", vpc_id=vpc.id, tags=tags(c, "public-rt", t), opts=child)
        aws.ec2.Route(
            f"{c}-public-default",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(f"{c}-public-rta", subnet_id=public.id, route_table_id=public_rt.id, opts=child)

        private_rt = aws.ec2.RouteTable(f"{c}-private-rt", vpc_id=vpc.id, tags=tags(c, "private-rt", t), opts=child)
        aws.ec2.Route(
            f"{c}-private-default",
            route_table_id=private_rt.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.id,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{c}-private-rta", subnet_id=private.id, route_table_id=private_rt.id, opts=child
        )

        # S3 traffic (datasets, checkpoints, package mirrors) skips the NAT gateway and its per-GB charge.
        aws.ec2.VpcEndpoint(
            f"{c}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_rt.id, public_rt.id],
            tags=tags(c, "s3-endpoint", t),
            opts=child,
        )

        self.vpc_id = vpc.id
        self.public_subnet_id = public.id
        self.private_subnet_id = private.id
        self.public_subnet_az = public.availability_zone
        self.private_subnet_az = private.availability_zone
        self.register_outputs({"vpcId": vpc.id, "publicSubnetId": public.id, "privateSubnetId": private.id})
