"""The stack outputs (camelCase, sorted where they are lists) built from the components."""

from __future__ import annotations

import pulumi

from infra.components.compute import Compute
from infra.components.storage import Storage
from infra.config import StackConfig
from infra.hostfile import HostEntry, openmpi
from infra.estimates import hourly_cost


def ssm_login(region: str, instance_id: str, user: str) -> str:
    """Session Manager lands as ssm-user, who has no cluster key; start the login user's shell instead (ssm-user
    may sudo by default). AWS-StartInteractiveCommand runs one command as the session:
    https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html"""
    return (f"aws ssm start-session --region {region} --target {instance_id} "
            f"--document-name AWS-StartInteractiveCommand --parameters 'command=sudo -iu {user}'")


def stack_outputs(cfg: StackConfig, availability_zone: pulumi.Input[str], compute: Compute,
                  storage: Storage) -> dict[str, object]:
    cluster = cfg.cluster
    head = compute.head.instance
    nodes = compute.compute_nodes
    public_ip = head.public_ip.apply(lambda ip: ip or None) if compute.head_is_public else None

    compute_nodes = pulumi.Output.all(*[pulumi.Output.all(n.instance.id, n.instance.private_ip) for n in nodes]).apply(
        lambda pairs: sorted(
            ({"name": n.name, "instanceId": iid, "privateIp": ip, "instanceType": n.itype.name, "slots": n.itype.slots}
             for n, (iid, ip) in zip(nodes, pairs)), key=lambda d: d["name"]))
    hostfile = compute_nodes.apply(lambda cn: openmpi(HostEntry(d["name"], d["privateIp"], d["slots"]) for d in cn))
    if compute.head_is_public:
        ssh = public_ip.apply(lambda ip: f"ssh {cluster.image.user}@{ip}")
    else:
        ssh = head.id.apply(lambda iid: ssm_login(cfg.region, iid, cluster.image.user))
    return {
        "clusterName": cluster.name,
        "region": cfg.region,
        "availabilityZone": availability_zone,
        "headNode": {"instanceId": head.id, "privateIp": head.private_ip, "publicIp": public_ip},
        "computeNodes": compute_nodes,
        "hostfile": hostfile,
        "fsx": {"id": storage.file_system_id, "dnsName": storage.dns_name, "mountName": storage.mount_name,
                "mountPoint": cluster.fsx.mount_point},
        "sshCommand": ssh,
        # null when a node type's price is unknown (infra/estimates.py): never a wrong number
        "estimatedHourlyCostUsd": hourly_cost(cluster, compute.head.itype, [nodes[0].itype]),
    }
