"""A controller-run cluster in moto for the operator-command tests, built as the program and the controller leave it:
the settings and groups parameters, the ledger table (written through the controller's own Ledger, holding the
lease), the state bucket with membership.json and each node's `status/<instance-arn>.json`, and EC2 instances
tagged as the groups' launch templates and the controller tag them."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Dict, List

import boto3

from hpcc_node.controller import membership, model
from hpcc_node.controller.ledger import Ledger, table_definition

REGION = "us-east-1"
C = "fleet"
ACCOUNT = "123456789012"  # moto's
TABLE = f"hpcc-{C}-ledger"
BUCKET = f"hpcc-{C}-state-{ACCOUNT}"
TYPES = {"gpu": "c6i.large", "cpu": "c6i.xlarge"}  # moto knows these; slots come from their vCPUs


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
    now: List[float] = field(default_factory=lambda: [time.time()])
    head: str = ""
    ids: Dict[str, str] = field(default_factory=dict)  # node -> instance id

    def clock(self) -> float:
        return self.now[0]

    def read(self):
        """The ledger as it is (no lease taken)."""
        return Ledger(self.ddb, TABLE, "reader", self.clock).load()

    def ledger(self, owner: str = "head-1") -> Ledger:
        led = Ledger(self.ddb, TABLE, owner, self.clock)
        assert led.acquire()
        return led

    def launch(self, role: str, group: str = "", state: str = "running") -> str:
        tags = [{"Key": "hpcc:cluster", "Value": C}, {"Key": "hpcc:role", "Value": role}]
        tags += [{"Key": "hpcc:group", "Value": group}] if group else []
        iid = self.ec2.run_instances(ImageId=self.image, MinCount=1, MaxCount=1, SubnetId=self.subnet,
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
        self.s3.put_object(Bucket=BUCKET, Key=f"status/{arn(iid)}.json", Body=json.dumps(body).encode())

    def publish(self) -> int:
        """membership.json from the ledger, as the controller publishes it (decide.membership_body's shape)."""
        led = self.ledger()
        loaded = led.load()
        ips = {i["InstanceId"]: i.get("PrivateIpAddress", "") for r in self.ec2.describe_instances()["Reservations"]
               for i in r["Instances"]}
        nodes = [{"name": s.name, "group": s.group, "ip": ips.get(s.instance_id, ""), "instance": s.instance_id,
                  "state": s.state} for s in sorted(loaded.slots.values(), key=lambda s: s.name)
                 if s.state in (model.BOOTING, model.READY, model.DRAINING, model.FAILED)]
        body = {"nodes": nodes, "groups": {g: 0 for g in TYPES}, "bundle": {},
                "head": {"name": "head", "ip": ips.get(self.head, ""), "instance": self.head}}
        generation, etag = membership.head(self.s3, BUCKET)
        etag = membership.publish(self.s3, BUCKET, body, generation + 1, etag)
        led.set_membership(generation + 1, "d", etag)
        return generation + 1

    def groups(self, counts: Dict[str, int]) -> None:
        value = {"format": 1, "groups": [{"name": g, "instance_type": TYPES[g], "count": n} for g, n in counts.items()]}
        self.ssm.put_parameter(Name=f"/hpcc/{C}/groups", Value=json.dumps(value), Type="String", Overwrite=True)


def fleet(counts: Dict[str, int], scheduler: str = "slurm", settings: bool = True) -> Fleet:
    """Inside mock_aws: a cluster of these groups, every node ready and on generation 1, the head ready."""
    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/19")["Subnet"]["SubnetId"]
    image = ec2.register_image(Name="hpcc-test", RootDeviceName="/dev/sda1")["ImageId"]
    f = Fleet(ec2, boto3.client("dynamodb", region_name=REGION), boto3.client("s3", region_name=REGION),
              boto3.client("ssm", region_name=REGION), subnet, image)
    f.ddb.create_table(**table_definition(TABLE))
    f.s3.create_bucket(Bucket=BUCKET)
    if settings:
        f.ssm.put_parameter(Name=f"/hpcc/{C}/settings", Type="String", Overwrite=True,
                            Value=f"CLUSTER={C}\nSCHEDULER={scheduler}\nSTATE_BUCKET={BUCKET}\nLEDGER_TABLE={TABLE}\n")
    f.groups(counts)
    f.head = f.launch("head")
    for group, n in counts.items():
        for i in range(n):
            f.name(model.node_name(group, i), group, i)
    generation = f.publish()
    f.status(f.head, name="head", phase="ready", step="sync", generation=generation)
    for node, iid in f.ids.items():
        f.status(iid, name=node, phase="ready", step="sync", generation=generation)
    return f
