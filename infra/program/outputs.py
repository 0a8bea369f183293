"""The stack outputs (camelCase, sorted where they are lists) built from the components."""

from __future__ import annotations

import pulumi

from hpcc_contract.names import node_name
from infra.config.estimates import hourly_cost
from infra.config.model import ClusterConfig, StackConfig
from infra.program.components.compute import Compute
from infra.program.components.state import ControllerState
from infra.program.components.storage import Storage
from infra.render.groups_param import partitions


def ssm_login(region: str, instance_id: str, user: str) -> str:
    """Session Manager lands as ssm-user, who has no cluster key; start the login user's shell instead (ssm-user
    may sudo by default). AWS-StartInteractiveCommand runs one command as the session:
    https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html"""
    return (
        f"aws ssm start-session --region {region} --target {instance_id} "
        f"--document-name AWS-StartInteractiveCommand --parameters 'command=sudo -iu {user}'"
    )


def group_outputs(cluster: ClusterConfig, compute: Compute) -> list[dict]:
    """Each group: its type, count, spares, slots, market, the names its nodes get (EC2 picks addresses at launch,
    and the controller names instances as the ledger claims them: `hpcc status` and `hpcc hostfile` read them live)
    and its Slurm partition (None without Slurm or without nodes), `defaultPartition` on the one a job without `-p`
    lands on."""
    names, default = partitions(cluster, [g.itype for g in compute.groups])
    return [
        {
            "name": g.name,
            "instanceType": g.itype.name,
            "count": g.config.count,
            "spares": g.config.spares,
            "slots": g.itype.slots,
            "market": g.config.market,
            "nodes": node_range(g.name, g.config.count),
            "partition": g.name if g.name in names else None,
            "defaultPartition": g.name == default,
        }
        for g in compute.groups
    ]


def node_range(group: str, count: int) -> str:
    """`gpu-000..gpu-511`, or "" for an empty group."""
    return f"{node_name(group, 0)}..{node_name(group, count - 1)}" if count else ""


def stack_outputs(
    cfg: StackConfig, availability_zone: pulumi.Input[str], compute: Compute, storage: Storage, state: ControllerState
) -> dict[str, object]:
    cluster = cfg.cluster
    head = compute.head.instance
    public_ip = head.public_ip.apply(lambda ip: ip or None) if compute.head_is_public else None
    if compute.head_is_public:
        ssh = public_ip.apply(lambda ip: f"ssh {cluster.image.user}@{ip}")
    else:
        ssh = head.id.apply(lambda iid: ssm_login(cfg.region, iid, cluster.image.user))
    return {
        "clusterName": cluster.name,
        "region": cfg.region,
        "availabilityZone": availability_zone,
        "headNode": {
            "instanceId": head.id,
            "privateIp": head.private_ip,
            "publicIp": public_ip,
            "instanceType": compute.head.itype.name,
        },
        "nodeGroups": group_outputs(cluster, compute),
        "stateBucket": state.bucket,
        "ledgerTable": state.table,
        "fsx": {
            "id": storage.file_system_id,
            "dnsName": storage.dns_name,
            "mountName": storage.mount_name,
            "mountPoint": cluster.fsx.mount_point,
        },
        "sshCommand": ssh,
        # null when a node type's price is unknown (infra/config/estimates.py): never a wrong number
        "estimatedHourlyCostUsd": hourly_cost(cluster, compute.head.itype, [g.itype for g in compute.groups]),
    }
