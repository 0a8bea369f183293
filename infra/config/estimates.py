"""A rough hourly cost: on-demand instance prices (infra/facts/prices.py, carried on each InstanceType) plus NAT and FSx
(us-east-1 list prices). A type without a known price makes the whole estimate unknown (None), never a guess."""

from __future__ import annotations

from collections.abc import Callable

from infra.config.model import ClusterConfig
from infra.facts.instance_types import InstanceType

NAT_GATEWAY_HOURLY = 0.045
HOURS_PER_MONTH = 730
# USD per GB-month, by (deployment type, storage type, throughput per TiB)
FSX_GB_MONTH = {
    ("SCRATCH_1", "SSD", None): 0.140,
    ("SCRATCH_2", "SSD", None): 0.140,
    ("PERSISTENT_1", "SSD", 50): 0.145,
    ("PERSISTENT_1", "SSD", 100): 0.210,
    ("PERSISTENT_1", "SSD", 200): 0.290,
    ("PERSISTENT_1", "HDD", 12): 0.025,
    ("PERSISTENT_1", "HDD", 40): 0.083,
    ("PERSISTENT_2", "SSD", 125): 0.145,
    ("PERSISTENT_2", "SSD", 250): 0.210,
    ("PERSISTENT_2", "SSD", 500): 0.340,
    ("PERSISTENT_2", "SSD", 1000): 0.600,
}


def unpriced(head: InstanceType, *computes: InstanceType) -> list[str]:
    """The node types whose price is unknown (shown as "price unknown")."""
    return sorted({t.name for t in (head, *computes) if t.hourly_usd is None})


def hourly_cost(cluster: ClusterConfig, head: InstanceType, computes: list[InstanceType]) -> float | None:
    """`computes`: each group's type, in the order of cluster.node_groups. Upper bound for spot: spot prices move,
    so the on-demand price is used for both markets (a Capacity Block's price is paid up front and not counted).
    None when a node type's price is unknown."""
    known = {t.name: t.hourly_usd for t in (head, *computes)}
    if len(computes) != len(cluster.node_groups):
        raise ValueError("one type per node group")
    return hourly_cost_of(cluster, known.get)


def hourly_cost_of(cluster: ClusterConfig, price_of: Callable[[str], float | None]) -> float | None:
    """The same estimate with each type's price from `price_of` (the dated snapshot, infra/facts/prices.py, when
    `hpcc up` weighs a change before the program runs). None when a node type's price is unknown."""
    head = price_of(cluster.head_node.instance_type)
    found = [price_of(g.instance_type) for g in cluster.node_groups]
    nodes = [usd for usd in found if usd is not None]
    if head is None or len(nodes) < len(found):
        return None
    fsx = cluster.fsx
    gb_month = FSX_GB_MONTH.get((fsx.deployment_type, fsx.storage_type, fsx.per_unit_storage_throughput), 0.14)
    total = head + sum(g.count * usd for g, usd in zip(cluster.node_groups, nodes, strict=True)) + NAT_GATEWAY_HOURLY
    total += fsx.storage_capacity * gb_month / HOURS_PER_MONTH
    return round(total, 2)


# Typical minutes, from AWS's guidance and ParallelCluster experience: FSx creation, instance launch to
# user data, and the bootstrap itself (Lustre client install dominates; a preinstalled client halves it).
FSX_CREATE_MINUTES = {"SCRATCH_1": 7, "SCRATCH_2": 7, "PERSISTENT_1": 12, "PERSISTENT_2": 12}
BOOT_MINUTES_GPU, BOOT_MINUTES_CPU = 6, 3
BOOTSTRAP_MINUTES = 4


def minutes_to_ready(cluster: ClusterConfig, *computes: InstanceType) -> int:
    """Nodes boot while the file system is created; the bootstrap's mount waits for whichever is later (the
    slowest group's boot)."""
    boot = max(BOOT_MINUTES_GPU if t.gpus or t.neuron_cores else BOOT_MINUTES_CPU for t in computes)
    return max(FSX_CREATE_MINUTES[cluster.fsx.deployment_type], boot) + BOOTSTRAP_MINUTES


# EC2's RunInstances resource-rate bucket, per account and Region: 1,000 instances at once, then 2 a second
# (EC2 API reference, "Request throttling for the Amazon EC2 API", resource token bucket sizes and refill rates).
RUN_INSTANCES_BUCKET = 1000
RUN_INSTANCES_REFILL_PER_SECOND = 2


def launch_minutes(nodes: int, launches_per_minute: int) -> int:
    """Minutes to launch `nodes` from a full bucket: the controller's own waves, or EC2's refill once the bucket is
    spent, whichever is slower (other launches in the account draw on the same bucket)."""
    waves = -(-max(nodes, 0) // max(launches_per_minute, 1))
    refill = -(-max(nodes - RUN_INSTANCES_BUCKET, 0) // (RUN_INSTANCES_REFILL_PER_SECOND * 60))
    return max(waves, refill)


def ready_timeout_minutes(bootstrap_minutes: int, nodes: int, launches_per_minute: int, boot_grace_minutes: int) -> int:
    """How long `hpcc up` waits for every node, replacements included: the launches (launch_minutes), a first boot,
    one replacement round (a hung boot is seen at the boot grace, then a new instance boots), and 5 minutes of
    margin. It grows with the count only through the launches: each node boots on its own, never waiting for its
    peers."""
    return (
        launch_minutes(nodes, launches_per_minute) + max(bootstrap_minutes, boot_grace_minutes) + bootstrap_minutes + 5
    )
