"""The plan's network: the VPC, its subnets, gateways and routes, the endpoints, the security groups and the placement
group, created in moto's EC2 as the program asks (a mixin of infra/plan/mocks.py MotoMocks, which holds the clients
and the state these read)."""

from __future__ import annotations

import hashlib

from infra.plan import aws_rules
from infra.plan.aws_rules import AwsRejected


def short_id(*parts: str) -> str:
    """A stable id suffix for what moto does not make itself (placement groups, endpoints, file systems)."""
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:17]


def tag_list(inputs: dict) -> list[dict[str, str]]:
    """A resource's `tags` input as EC2's TagSpecifications list them."""
    return [{"Key": k, "Value": v} for k, v in sorted((inputs.get("tags") or {}).items())]


class NetworkMocks:
    """Mixed into MotoMocks: needs its `ec2` client, `region`, `account` and subnet bookkeeping."""

    def _tag(self, rid: str, inputs: dict) -> None:
        if inputs.get("tags"):
            self.ec2.create_tags(Resources=[rid], Tags=tag_list(inputs))

    def _vpc(self, name, i):
        vpc = self.ec2.create_vpc(CidrBlock=i["cidrBlock"])["Vpc"]
        for attr in ("enableDnsSupport", "enableDnsHostnames"):
            if i.get(attr):
                self.ec2.modify_vpc_attribute(VpcId=vpc["VpcId"], **{attr[0].upper() + attr[1:]: {"Value": True}})
        self._tag(vpc["VpcId"], i)
        rt = self.ec2.describe_route_tables(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["RouteTables"][0]
        sg = self.ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])[
            "SecurityGroups"
        ][0]
        return vpc["VpcId"], {
            "arn": f"arn:aws:ec2:{self.region}:{self.account}:vpc/{vpc['VpcId']}",
            "mainRouteTableId": rt["RouteTableId"],
            "defaultSecurityGroupId": sg["GroupId"],
        }

    def _subnet(self, name, i):
        aws_rules.check_cidr(name, i.get("cidrBlock"))
        sn = self.ec2.create_subnet(VpcId=i["vpcId"], CidrBlock=i["cidrBlock"], AvailabilityZone=i["availabilityZone"])[
            "Subnet"
        ]
        self._subnet_az[sn["SubnetId"]] = sn["AvailabilityZone"]
        self._subnet_cidrs.append(sn["CidrBlock"])
        self._subnet_cidr[sn["SubnetId"]] = sn["CidrBlock"]
        self._tag(sn["SubnetId"], i)
        return sn["SubnetId"], {
            "arn": sn.get("SubnetArn", ""),
            "availabilityZone": sn["AvailabilityZone"],
            "availabilityZoneId": sn.get("AvailabilityZoneId", ""),
        }

    def _internetGateway(self, name, i):
        igw = self.ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
        self.ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=i["vpcId"])
        self._tag(igw, i)
        return igw, {"arn": f"arn:aws:ec2:{self.region}:{self.account}:internet-gateway/{igw}"}

    def _eip(self, name, i):
        eip = self.ec2.allocate_address(Domain="vpc")
        self._tag(eip["AllocationId"], i)
        return eip["AllocationId"], {"allocationId": eip["AllocationId"], "publicIp": eip["PublicIp"]}

    def _natGateway(self, name, i):
        nat = self.ec2.create_nat_gateway(
            SubnetId=i["subnetId"],
            AllocationId=i["allocationId"],
            TagSpecifications=[{"ResourceType": "natgateway", "Tags": tag_list(i)}],
        )["NatGateway"]
        addr = (nat.get("NatGatewayAddresses") or [{}])[0]
        return nat["NatGatewayId"], {"publicIp": addr.get("PublicIp", ""), "privateIp": addr.get("PrivateIp", "")}

    def _routeTable(self, name, i):
        rt = self.ec2.create_route_table(VpcId=i["vpcId"])["RouteTable"]["RouteTableId"]
        self._tag(rt, i)
        return rt, {}

    def _route(self, name, i):
        target = {k[0].upper() + k[1:]: i[k] for k in ("gatewayId", "natGatewayId") if i.get(k)}
        self.ec2.create_route(RouteTableId=i["routeTableId"], DestinationCidrBlock=i["destinationCidrBlock"], **target)
        return f"r-{i['routeTableId']}{short_id(i['destinationCidrBlock'])[:8]}", {}

    def _routeTableAssociation(self, name, i):
        assoc = self.ec2.associate_route_table(SubnetId=i["subnetId"], RouteTableId=i["routeTableId"])
        return assoc["AssociationId"], {}

    def _vpcEndpoint(self, name, i):
        ep = self.ec2.create_vpc_endpoint(
            VpcId=i["vpcId"],
            ServiceName=i["serviceName"],
            VpcEndpointType=i.get("vpcEndpointType", "Gateway"),
            RouteTableIds=i.get("routeTableIds") or [],
        )["VpcEndpoint"]
        self._tag(ep["VpcEndpointId"], i)
        return ep["VpcEndpointId"], {
            "arn": f"arn:aws:ec2:{self.region}:{self.account}:vpc-endpoint/{ep['VpcEndpointId']}"
        }

    def _securityGroup(self, name, i):
        group_name = i.get("name") or f"{name}-{short_id(name)[:7]}"
        sg = self.ec2.create_security_group(
            GroupName=group_name, Description=i.get("description") or "Managed by Pulumi", VpcId=i["vpcId"]
        )["GroupId"]
        # pulumi-aws removes AWS's default allow-all egress from groups it manages; do the same.
        self.ec2.revoke_security_group_egress(
            GroupId=sg, IpPermissions=[{"IpProtocol": "-1", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}]
        )
        self._tag(sg, i)
        return sg, {"name": group_name, "arn": f"arn:aws:ec2:{self.region}:{self.account}:security-group/{sg}"}

    def _permission(self, name, i) -> dict:
        aws_rules.check_cidr(name, i.get("cidrIpv4"))
        aws_rules.check_cidr(name, i.get("cidrIpv6"))
        perm: dict = {"IpProtocol": i["ipProtocol"]}
        if i["ipProtocol"] != "-1":
            perm.update(FromPort=int(i["fromPort"]), ToPort=int(i["toPort"]))
        if i.get("referencedSecurityGroupId"):
            perm["UserIdGroupPairs"] = [
                {"GroupId": i["referencedSecurityGroupId"], "Description": i.get("description", "")}
            ]
        if i.get("cidrIpv4"):
            perm["IpRanges"] = [{"CidrIp": i["cidrIpv4"], "Description": i.get("description", "")}]
        if i.get("cidrIpv6"):
            perm["Ipv6Ranges"] = [{"CidrIpv6": i["cidrIpv6"], "Description": i.get("description", "")}]
        if not any(k in perm for k in ("UserIdGroupPairs", "IpRanges", "Ipv6Ranges")):
            raise AwsRejected(name, "MissingParameter", "a rule needs a CIDR or a referenced security group")
        return perm

    def _securityGroupIngressRule(self, name, i):
        out = self.ec2.authorize_security_group_ingress(
            GroupId=i["securityGroupId"],
            IpPermissions=[self._permission(name, i)],
            TagSpecifications=[{"ResourceType": "security-group-rule", "Tags": tag_list(i)}],
        )
        return out["SecurityGroupRules"][0]["SecurityGroupRuleId"], {}

    def _securityGroupEgressRule(self, name, i):
        out = self.ec2.authorize_security_group_egress(
            GroupId=i["securityGroupId"],
            IpPermissions=[self._permission(name, i)],
            TagSpecifications=[{"ResourceType": "security-group-rule", "Tags": tag_list(i)}],
        )
        return out["SecurityGroupRules"][0]["SecurityGroupRuleId"], {}

    def _placementGroup(self, name, i):
        aws_rules.check_placement_group(name, i, set(self.placement_groups))
        pg_id = f"pg-{short_id(i['name'])}"
        self.placement_groups[i["name"]] = i["strategy"]
        return i["name"], {
            "placementGroupId": pg_id,
            "arn": f"arn:aws:ec2:{self.region}:{self.account}:placement-group/{i['name']}",
        }
