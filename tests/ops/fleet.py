"""A controller-run cluster in moto for the operator-command tests, built as the program and the controller leave it:
the settings and groups parameters, the ledger table (written through the controller's own Ledger, holding the
lease), the state bucket with membership.json and each node's `status/<instance-arn>.json`, and EC2 instances
tagged as the groups' launch templates and the controller tag them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import boto3

from hpcc_contract import groups as groups_format
from hpcc_contract.ledger import table_definition
from hpcc_contract.names import Paths, ledger_table, node_name, state_bucket
from hpcc_node.controller import membership, model
from hpcc_node.controller.ledger import Ledger

REGION = "us-east-1"
C = "fleet"
ACCOUNT = "123456789012"  # moto's
TABLE = ledger_table(C)
BUCKET = state_bucket(C, ACCOUNT)
TYPES = {
    "gpu": "c6i.large",
    "cpu": "c6i.xlarge",
    "compute": "c6i.16xlarge",
}  # moto knows these; slots come from their vCPUs


def arn(iid: str) -> str:
    return f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{iid}"


@dataclass
class Fleet:
    ec2: object
    ddb: object
    s3: object
    ssm: object
    subnet: str
    image: str
    now: list[float] = field(default_factory=lambda: [time.time()])
    cluster: str = C
    head: str = ""
    ids: dict[str, str] = field(default_factory=dict)  # node -> instance id

    @property
    def table(self) -> str:
        return ledger_table(self.cluster)

    @property
    def bucket(self) -> str:
        return state_bucket(self.cluster, ACCOUNT)

    def clock(self) -> float:
        return self.now[0]

    def read(self):
        """The ledger as it is (no lease taken)."""
        return Ledger(self.ddb, self.table, "reader", self.clock).load()

    def ledger(self, owner: str = "head-1") -> Ledger:
        led = Ledger(self.ddb, self.table, owner, self.clock)
        assert led.acquire()
        return led

    def launch(self, role: str, group: str = "", state: str = "running") -> str:
        tags = [{"Key": "hpcc:cluster", "Value": self.cluster}, {"Key": "hpcc:role", "Value": role}]
        tags += [{"Key": "hpcc:group", "Value": group}] if group else []
        iid = self.ec2.run_instances(
            ImageId=self.image,
            MinCount=1,
            MaxCount=1,
            SubnetId=self.subnet,
            InstanceType=TYPES.get(group, "c6i.large"),
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )["Instances"][0]["InstanceId"]
        if state == "terminated":
            self.ec2.terminate_instances(InstanceIds=[iid])
        return iid

    def name(self, node: str, group: str, index: int, state: str = model.READY, **changes) -> str:
        """Launch an instance for `node` and name it in the ledger as the controller does, then tag it."""
        iid = self.launch("compute", group)
        led = self.ledger()
        slot = led.load().slots.get(node) or model.Slot(node, group, index)
        slot = led.name(slot, iid, self.clock())
        if state != model.BOOTING or changes:
            led.put_slot(slot, state=state, **changes)
        self.ec2.create_tags(Resources=[iid], Tags=[{"Key": "hpcc:node", "Value": node}])
        self.ids[node] = iid
        return iid

    def status(self, iid: str, **fields) -> None:
        """The node's own status object (membership.status_body's fields and today's)."""
        body = json.loads(membership.status_body(fields.pop("name", ""), iid, fields.pop("ok", True)))
        body.update(fields)
        self.s3.put_object(Bucket=self.bucket, Key=f"status/{arn(iid)}.json", Body=json.dumps(body).encode())

    def publish(self) -> int:
        """membership.json from the ledger, as the controller publishes it (decide.membership_body's shape)."""
        led = self.ledger()
        loaded = led.load()
        ips = {
            i["InstanceId"]: i.get("PrivateIpAddress", "")
            for r in self.ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        }
        nodes = [
            {
                "name": s.name,
                "group": s.group,
                "ip": ips.get(s.instance_id, ""),
                "instance": s.instance_id,
                "state": s.state,
            }
            for s in sorted(loaded.slots.values(), key=lambda s: s.name)
            if s.state in (model.BOOTING, model.READY, model.DRAINING, model.FAILED)
        ]
        body = {
            "nodes": nodes,
            "groups": {},
            "bundle": {},
            "head": {"name": "head", "ip": ips.get(self.head, ""), "instance": self.head},
        }
        generation, etag = membership.head(self.s3, self.bucket)
        etag = membership.publish(self.s3, self.bucket, body, generation + 1, etag)
        led.set_membership(generation + 1, "d", etag)
        return generation + 1

    def groups(self, counts: dict[str, int]) -> None:
        value = groups_format.dumps([{"name": g, "instance_type": TYPES[g], "count": n} for g, n in counts.items()])
        self.ssm.put_parameter(Name=Paths(self.cluster).groups, Value=value, Type="String", Overwrite=True)


def fleet(
    counts: dict[str, int], scheduler: str = "slurm", settings: bool = True, cluster: str = C, ready: bool = True
) -> Fleet:
    """Inside mock_aws: a cluster of these groups, every node ready and on generation 1, the head ready. Where the
    program already created the table, the bucket or the settings (a planned stack), they are kept."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/19")["Subnet"]["SubnetId"]
    image = ec2.register_image(Name="hpcc-test", RootDeviceName="/dev/sda1")["ImageId"]
    f = Fleet(
        ec2,
        boto3.client("dynamodb", region_name=REGION),
        boto3.client("s3", region_name=REGION),
        boto3.client("ssm", region_name=REGION),
        subnet,
        image,
        cluster=cluster,
    )
    if f.table not in f.ddb.list_tables()["TableNames"]:
        f.ddb.create_table(**table_definition(f.table))
    if f.bucket not in [b["Name"] for b in f.s3.list_buckets()["Buckets"]]:
        f.s3.create_bucket(Bucket=f.bucket)
    if settings:
        name = Paths(cluster).settings
        try:
            text = f.ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except f.ssm.exceptions.ParameterNotFound:
            text = f"CLUSTER={cluster}\nSCHEDULER={scheduler}\n"
        if "STATE_BUCKET=" not in text:
            text += f"STATE_BUCKET={f.bucket}\nLEDGER_TABLE={f.table}\n"
        f.ssm.put_parameter(Name=name, Type="String", Overwrite=True, Value=text)
    f.groups(counts)
    heads = [
        i["InstanceId"]
        for r in ec2.describe_instances(
            Filters=[
                {"Name": "tag:hpcc:cluster", "Values": [cluster]},
                {"Name": "tag:hpcc:role", "Values": ["head"]},
                {"Name": "instance-state-name", "Values": ["pending", "running"]},
            ]
        )["Reservations"]
        for i in r["Instances"]
    ]
    f.head = heads[0] if heads else f.launch("head")  # a planned stack's head is the head
    for group, n in counts.items():
        for i in range(n):
            f.name(node_name(group, i), group, i, model.READY if ready else model.BOOTING)
    generation = f.publish()
    f.status(f.head, name="head", phase="ready", step="sync", generation=generation)
    for node, iid in f.ids.items():
        f.status(iid, name=node, phase="ready" if ready else "pending", step="sync", generation=generation)
    return f
