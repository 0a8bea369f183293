"""Pulumi mocks backed by moto: each AWS resource the program registers is created in the embedded
AWS when moto models it, and checked by `aws_rules` where moto does not (placement groups, EFA
interface layouts, FSx ports and mount names, data repository associations)."""

from __future__ import annotations

import json
import threading

import boto3
import pulumi
from botocore.exceptions import ClientError

from infra.plan import aws_rules, internals
from infra.plan.aws_rules import AwsRejected
from infra.plan.mocks_network import NetworkMocks, short_id, tag_list
from infra.plan.mocks_s3 import S3Mocks
from infra.plan.mocks_state import StateMocks
from infra.plan.recorder import plain

# Parameters whose size a config field sets, and the fix (the groups value: one entry per node group).
PARAMETER_FIELDS = {
    "-groups-param": lambda _fits: (
        "cluster.nodeGroups sets its size (one entry per group, infra/render/groups_param.py): give fewer groups"
    ),
}


class MotoMocks(NetworkMocks, S3Mocks, StateMocks, pulumi.runtime.Mocks):
    def __init__(self, region: str):
        self.region = region
        self.lock = threading.Lock()
        self.ec2 = boto3.client("ec2", region_name=region)
        self.iam = boto3.client("iam", region_name=region)
        self.ssm = boto3.client("ssm", region_name=region)
        self.fsx = boto3.client("fsx", region_name=region)
        self.secrets = boto3.client("secretsmanager", region_name=region)
        self.s3 = boto3.client("s3", region_name=region)
        self.s3_blocks: dict[str, dict] = {}  # bucket -> its public access block (moto keeps it but checks nothing)
        self.sts = boto3.client("sts", region_name=region)
        self.account = self.sts.get_caller_identity()["Account"]
        # What moto does not keep, kept here: placement groups, launch-template inputs, FSx extras.
        self.placement_groups: dict[str, str] = {}
        self.launch_templates: dict[str, dict] = {}
        self.file_systems: dict[str, dict] = {}
        self.associations: dict[str, int] = {}
        self._type_info: dict[str, dict] = {}
        self._offerings: dict[str, set[str]] = {}
        self._subnet_az: dict[str, str] = {}
        self._subnet_cidrs: list[str] = []
        self._subnet_cidr: dict[str, str] = {}
        self._subnet_used: dict[str, int] = {}  # addresses given to instances, per subnet
        self.inputs: dict[tuple[str, str], dict] = {}  # (type, name) -> plain inputs, for the recorder
        self.outputs: dict[tuple[str, str], dict] = {}  # (type, name) -> what the handler generated, likewise
        self.closed = False

    def close(self) -> None:
        """Refuse all further work: the embedded AWS these clients talk to is about to stop."""
        self.closed = True

    def _open(self, what: str) -> None:
        if self.closed:
            raise AwsRejected(what, "PlanClosed", "the offline plan has ended; nothing more is created")

    # -- invokes -------------------------------------------------------------------------------
    def call(self, args: pulumi.runtime.MockCallArgs):
        handler = {
            "aws:index/getCallerIdentity:getCallerIdentity": self._caller_identity,
            "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": self._offerings_call,
            "aws:ssm/getParameter:getParameter": self._get_parameter,
            "aws:ec2/getAmi:getAmi": self._get_ami,
        }.get(args.token)
        if handler is None:
            raise AwsRejected(args.token, "NotImplemented", "the offline plan has no mock for this lookup")
        with self.lock:
            self._open(args.token)
            return handler(args.args)

    def _caller_identity(self, _args):
        ident = self.sts.get_caller_identity()
        return {"accountId": ident["Account"], "arn": ident["Arn"], "userId": ident["UserId"], "id": ident["Account"]}

    def _offerings_call(self, args):
        filters = [{"Name": f["name"], "Values": f["values"]} for f in args.get("filters") or []]
        found = self.ec2.describe_instance_type_offerings(
            LocationType=args.get("locationType", "region"), Filters=filters
        )
        items = sorted(found["InstanceTypeOfferings"], key=lambda o: (o["Location"], o["InstanceType"]))
        return {
            "id": self.region,
            "instanceTypes": [o["InstanceType"] for o in items],
            "locations": [o["Location"] for o in items],
            "locationTypes": [o["LocationType"] for o in items],
        }

    def _get_parameter(self, args):
        try:
            p = self.ssm.get_parameter(Name=args["name"], WithDecryption=bool(args.get("withDecryption")))["Parameter"]
        except self.ssm.exceptions.ParameterNotFound:
            raise AwsRejected(args["name"], "ParameterNotFound", "no such SSM parameter in this region") from None
        return {
            "id": p["Name"],
            "name": p["Name"],
            "value": p["Value"],
            "type": p["Type"],
            "arn": p["ARN"],
            "version": p["Version"],
            "insecureValue": p["Value"],
            "withDecryption": bool(args.get("withDecryption")),
        }

    def _get_ami(self, args):
        filters = [{"Name": f["name"], "Values": f["values"]} for f in args.get("filters") or []]
        kwargs = {"Filters": filters}
        if args.get("owners"):
            kwargs["Owners"] = args["owners"]
        images = self.ec2.describe_images(**kwargs)["Images"]
        if not images:
            wanted = "; ".join(f"{f['Name']}={','.join(f['Values'])}" for f in filters)
            raise AwsRejected(
                "cluster.image",
                "InvalidAMIID.NotFound",
                f"no image matches {wanted} in {self.region}; check cluster.image",
            )
        img = max(images, key=lambda i: i.get("CreationDate", ""))
        return {
            "id": img["ImageId"],
            "imageId": img["ImageId"],
            "name": img["Name"],
            "architecture": img["Architecture"],
            "rootDeviceName": img["RootDeviceName"],
            "rootDeviceType": img["RootDeviceType"],
            "ownerId": img["OwnerId"],
            "creationDate": img.get("CreationDate"),
            "virtualizationType": img["VirtualizationType"],
        }

    # -- resources -----------------------------------------------------------------------------
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if not args.custom:
            self.inputs[(args.typ, args.name)] = plain(args.inputs)
            return f"{args.name}-component", {}
        handler = getattr(self, "_" + args.typ.split(":")[-1][0].lower() + args.typ.split(":")[-1][1:], None)
        if handler is None:
            raise AwsRejected(args.name, "NotImplemented", f"the offline plan has no mock for {args.typ}")
        inputs = plain(args.inputs)
        self.inputs[(args.typ, args.name)] = inputs
        with self.lock:
            self._open(args.name)
            try:
                rid, outputs = handler(args.name, inputs)
            except ClientError as exc:  # what the embedded AWS refused: a message naming the resource
                raise AwsRejected(args.name, exc.response["Error"]["Code"], exc.response["Error"]["Message"]) from None
        self.outputs[(args.typ, args.name)] = outputs
        return rid, {**inputs, **outputs}

    def _tag(self, rid: str, inputs: dict) -> None:
        if inputs.get("tags"):
            self.ec2.create_tags(Resources=[rid], Tags=tag_list(inputs))

    def _secret(self, name, i):
        arn = self.secrets.create_secret(Name=i["name"], Description=i.get("description", ""), Tags=tag_list(i))["ARN"]
        return arn, {"arn": arn}

    def _role(self, name, i):
        role = self.iam.create_role(
            RoleName=i["name"], AssumeRolePolicyDocument=i["assumeRolePolicy"], Tags=tag_list(i)
        )["Role"]
        return role["RoleName"], {"arn": role["Arn"], "uniqueId": role["RoleId"]}

    def _rolePolicyAttachment(self, name, i):
        self.iam.attach_role_policy(RoleName=i["role"], PolicyArn=i["policyArn"])
        return f"{i['role']}-{short_id(i['policyArn'])[:8]}", {}

    def _rolePolicy(self, name, i):
        policy_name = i.get("name") or name
        json.loads(i["policy"])
        self.iam.put_role_policy(RoleName=i["role"], PolicyName=policy_name, PolicyDocument=i["policy"])
        return f"{i['role']}:{policy_name}", {"name": policy_name}

    def _instanceProfile(self, name, i):
        prof = self.iam.create_instance_profile(InstanceProfileName=i["name"], Tags=tag_list(i))["InstanceProfile"]
        self.iam.add_role_to_instance_profile(InstanceProfileName=i["name"], RoleName=i["role"])
        return prof["InstanceProfileName"], {"arn": prof["Arn"], "uniqueId": prof["InstanceProfileId"]}

    def _parameter(self, name, i):
        try:
            aws_rules.check_parameter(name, i, self._subnet_cidrs)
        except aws_rules.ValueTooLarge as exc:  # name the config field that sizes the value, and the fix
            fix = next((f for suffix, f in PARAMETER_FIELDS.items() if name.endswith(suffix)), None)
            if fix is None:
                raise
            raise AwsRejected(name, exc.code, f"{exc.message}: {fix(exc.fits)}") from None
        value = i["insecureValue"] if i.get("insecureValue") is not None else i["value"]
        if name.endswith("-groups-param"):  # where the controller will launch every group's nodes
            aws_rules.check_group_addresses(name, value, self._subnet_cidr, self._subnet_used)
        self.ssm.put_parameter(
            Name=i["name"],
            Value=value,
            Type=i.get("type", "String"),
            Tier=i.get("tier", "Standard"),
            Description=i.get("description", ""),
            Tags=tag_list(i),
        )
        return i["name"], {"arn": f"arn:aws:ssm:{self.region}:{self.account}:parameter{i['name']}", "version": 1}

    def _lustreFileSystem(self, name, i):
        groups = i.get("securityGroupIds") or []
        ingress = [
            p for g in self.ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"] for p in g["IpPermissions"]
        ]
        # FSx refuses a file system whose groups do not admit Lustre LNET traffic between its own servers.
        missing = aws_rules.lustre_ports_missing(ingress, set(groups))
        if missing:
            raise AwsRejected(
                name,
                "BadRequest",
                "the file system's security groups do not permit Lustre LNET network "
                f"traffic on port(s) {', '.join(map(str, missing))} from themselves",
            )
        lustre = {"DeploymentType": i.get("deploymentType", "SCRATCH_1")}
        if i.get("perUnitStorageThroughput"):
            lustre["PerUnitStorageThroughput"] = int(i["perUnitStorageThroughput"])
        subnet = i["subnetIds"]
        fs = self.fsx.create_file_system(
            FileSystemType="LUSTRE",
            StorageCapacity=int(i["storageCapacity"]),
            StorageType=i.get("storageType", "SSD"),
            SubnetIds=[subnet] if isinstance(subnet, str) else subnet,
            SecurityGroupIds=groups,
            LustreConfiguration=lustre,
            FileSystemTypeVersion=i.get("fileSystemTypeVersion", "2.10"),
            Tags=tag_list(i),
        )["FileSystem"]
        # moto returns no MountName: SCRATCH_1 has "fsx", every other type a unique string.
        mount = "fsx" if lustre["DeploymentType"] == "SCRATCH_1" else short_id(fs["FileSystemId"])[:8]
        self.file_systems[fs["FileSystemId"]] = {
            **fs,
            "LustreConfiguration": lustre,
            "_version": i.get("fileSystemTypeVersion"),
        }
        return fs["FileSystemId"], {
            "arn": fs["ResourceARN"],
            "dnsName": fs["DNSName"],
            "mountName": mount,
            "networkInterfaceIds": [],
            "vpcId": fs.get("VpcId", ""),
            "ownerId": self.account,
        }

    def _dataRepositoryAssociation(self, name, i):
        fs = self.file_systems.get(i["fileSystemId"])
        if fs is None:
            raise AwsRejected(name, "FileSystemNotFound", f"{i['fileSystemId']} does not exist")
        aws_rules.check_data_repository(name, i, fs, self.associations.get(i["fileSystemId"], 0))
        self.associations[i["fileSystemId"]] = self.associations.get(i["fileSystemId"], 0) + 1
        dra = f"dra-{short_id(i['fileSystemId'], i['fileSystemPath'])}"
        return dra, {
            "arn": f"arn:aws:fsx:{self.region}:{self.account}:association/{i['fileSystemId']}/{dra}",
            "associationId": dra,
        }

    def _type(self, itype: str) -> dict:
        if itype not in self._type_info:
            found = self.ec2.describe_instance_types(InstanceTypes=[itype])["InstanceTypes"]
            self._type_info[itype] = found[0]
            offers = self.ec2.describe_instance_type_offerings(
                LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": [itype]}]
            )
            self._offerings[itype] = {o["Location"] for o in offers["InstanceTypeOfferings"]}
        return self._type_info[itype]

    def _launchTemplate(self, name, i):
        try:
            info = self._type(i["instanceType"])
        except ClientError as exc:  # EC2's answer (InvalidInstanceType), as every other refusal here
            raise AwsRejected(
                name,
                exc.response["Error"]["Code"],
                f"unknown instance type {i.get('instanceType')!r}: {exc.response['Error']['Message']}",
            ) from None
        aws_rules.check_launch_template(name, i, info)
        data = {
            "InstanceType": i["instanceType"],
            "ImageId": i["imageId"],
            "MetadataOptions": {
                "HttpTokens": i.get("metadataOptions", {}).get("httpTokens", "optional"),
                "HttpEndpoint": i.get("metadataOptions", {}).get("httpEndpoint", "enabled"),
            },
            "NetworkInterfaces": [
                {
                    "NetworkCardIndex": n.get("networkCardIndex", 0),
                    "DeviceIndex": n["deviceIndex"],
                    "InterfaceType": n.get("interfaceType", "interface"),
                    # a group's template names no subnet: EC2 Fleet's override gives it
                    **({"SubnetId": n["subnetId"]} if n.get("subnetId") else {}),
                    "Groups": n.get("securityGroups", []),
                }
                for n in i.get("networkInterfaces") or []
            ],
            "UserData": i.get("userData", ""),
        }
        if i.get("placement"):
            placement = {
                "GroupName": i["placement"].get("groupName"),
                "AvailabilityZone": i["placement"].get("availabilityZone"),
            }
            data["Placement"] = {k: v for k, v in placement.items() if v is not None}  # no group: a reservation's nodes
        lt = self.ec2.create_launch_template(
            LaunchTemplateName=i["name"],
            LaunchTemplateData=data,
            TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list(i)}],
        )
        lt_id = lt["LaunchTemplate"]["LaunchTemplateId"]
        self.launch_templates[lt_id] = i
        return lt_id, {
            "arn": f"arn:aws:ec2:{self.region}:{self.account}:launch-template/{lt_id}",
            "latestVersion": 1,
            "defaultVersion": 1,
        }

    def _instance(self, name, i):
        ref = i.get("launchTemplate") or {}
        lt = self.launch_templates.get(ref.get("id"))
        if lt is None:
            raise AwsRejected(
                name, "InvalidLaunchTemplateId.NotFound", f"launch template {ref.get('id')} does not exist"
            )
        primary = next(
            n for n in lt["networkInterfaces"] if n.get("networkCardIndex", 0) == 0 and n["deviceIndex"] == 0
        )
        subnet_az = self._subnet_az.get(primary["subnetId"])
        if subnet_az is None:
            raise AwsRejected(name, "InvalidSubnetID.NotFound", f"subnet {primary['subnetId']} does not exist")
        # Instance-level values override the launch template's, as in RunInstances.
        lt = {
            **lt,
            "instanceType": i.get("instanceType") or lt["instanceType"],
            "imageId": i.get("ami") or lt["imageId"],
        }
        self._type(lt["instanceType"])
        aws_rules.check_instance_launch(
            name, i, lt, self.placement_groups, subnet_az, self._offerings[lt["instanceType"]]
        )
        aws_rules.check_free_address(
            name, self._subnet_cidr[primary["subnetId"]], self._subnet_used.get(primary["subnetId"], 0)
        )
        self._subnet_used[primary["subnetId"]] = self._subnet_used.get(primary["subnetId"], 0) + 1
        tags = {}
        for spec in lt.get("tagSpecifications") or []:
            if spec.get("resourceType") == "instance":
                tags.update(spec.get("tags") or {})
        tags.update(i.get("tags") or {})
        # moto ignores a launch template's interfaces and placement, so pass the primary interface explicitly.
        nic = {
            "DeviceIndex": 0,
            "SubnetId": primary["subnetId"],
            "Groups": primary.get("securityGroups", []),
            "AssociatePublicIpAddress": str(primary.get("associatePublicIpAddress")).lower() == "true",
        }
        inst = self._run_instance(name, lt, ref, nic, tags)
        return inst.id, {
            "arn": f"arn:aws:ec2:{self.region}:{self.account}:instance/{inst.id}",
            "privateIp": inst.private_ip,
            "publicIp": inst.public_ip or "",
            "availabilityZone": subnet_az,
            "instanceType": lt["instanceType"],
            "subnetId": primary["subnetId"],
            "primaryNetworkInterfaceId": inst.nics[0].id,
            "ami": lt["imageId"],
            "instanceState": "running",
            "tagsAll": tags,
        }

    def _run_instance(self, name: str, lt: dict, ref: dict, nic: dict, tags: dict):
        """RunInstances straight into moto's EC2 backend (infra/plan/internals.py says why); moto's refusals
        become AWS's answer for the named resource."""
        try:
            return internals.run_instance(
                self.account,
                self.region,
                image_id=lt["imageId"],
                instance_type=lt["instanceType"],
                nic=nic,
                tags=tags,
                launch_template={"LaunchTemplateId": ref["id"], "Version": str(ref.get("version", "$Latest"))},
                http_tokens=lt.get("metadataOptions", {}).get("httpTokens", "optional"),
                client_token=f"plan-{name}",
            )  # moto's idempotency token
        except internals.moto_errors() as exc:
            raise AwsRejected(name, *internals.moto_error(exc)) from None
        except StopIteration:  # moto's subnet ran out of addresses; escaping a coroutine, it would hang the plan
            raise AwsRejected(name, "InsufficientFreeAddressesInSubnet", "moto found no free address") from None
