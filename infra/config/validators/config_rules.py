"""Rules over a parsed StackConfig. Each yields Findings; an error stops the plan."""

from __future__ import annotations

import ipaddress

from hpcc_contract.settings import mount_point_problems
from infra.config.hooks import hook_findings
from infra.config.validators.findings import ERROR, WARNING, Finding
from infra.config.validators.inputs import SSH_MAX_IPV4_ADDRESSES, ipv4_address_count
from infra.facts import limits
from infra.facts.subnets import PRIVATE_CIDRS, addresses_needed, largest_count, private_cidr

FSX = "cluster.fsx"
PERSISTENT_THROUGHPUT = {
    ("PERSISTENT_1", "SSD"): (50, 100, 200),
    ("PERSISTENT_1", "HDD"): (12, 40),
    ("PERSISTENT_2", "SSD"): (125, 250, 500, 1000),
}
# First base, then the step: SCRATCH_1 is 1200, 2400, then multiples of 3600.
CAPACITY_STEPS = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
HDD_STEPS = {12: 6000, 40: 1800}


def fsx_capacity(cfg):
    fsx = cfg.cluster.fsx
    cap, dep = fsx.storage_capacity, fsx.deployment_type
    field = f"{FSX}.storageCapacityGiB"
    if fsx.storage_type == "HDD":
        step = HDD_STEPS.get(fsx.per_unit_storage_throughput or 0)
        if step and cap % step:
            yield Finding(
                ERROR,
                field,
                f"PERSISTENT_1 HDD at {fsx.per_unit_storage_throughput} MB/s/TiB needs a multiple of {step}; got {cap}",
            )
        return
    step = CAPACITY_STEPS[dep]
    if cap not in (1200, 2400) and (cap < step or cap % step):
        yield Finding(ERROR, field, f"{dep} needs 1200, 2400 or a multiple of {step}; got {cap}")
    if cap > 524_288:
        yield Finding(ERROR, field, f"{cap} GiB is beyond FSx for Lustre's 512 TiB per file system")


def fsx_throughput(cfg):
    fsx = cfg.cluster.fsx
    field = f"{FSX}.perUnitStorageThroughput"
    allowed = PERSISTENT_THROUGHPUT.get((fsx.deployment_type, fsx.storage_type))
    if fsx.deployment_type.startswith("SCRATCH"):
        if fsx.per_unit_storage_throughput is not None:
            yield Finding(
                ERROR,
                field,
                f"{fsx.deployment_type} has a fixed throughput; remove this key, or use a "
                "PERSISTENT deployment type to choose one",
            )
    elif allowed is None:
        return  # fsx_hdd_deployment says why
    elif fsx.per_unit_storage_throughput is None:
        yield Finding(
            ERROR,
            field,
            f"{fsx.deployment_type} {fsx.storage_type} needs one of {', '.join(map(str, allowed))} MB/s/TiB",
        )
    elif fsx.per_unit_storage_throughput not in allowed:
        yield Finding(
            ERROR,
            field,
            f"{fsx.deployment_type} {fsx.storage_type} needs one of "
            f"{', '.join(map(str, allowed))} MB/s/TiB; got {fsx.per_unit_storage_throughput}",
        )


def fsx_hdd_deployment(cfg):
    """HDD storage is for PERSISTENT_1 only (FSx API reference, CreateFileSystem, StorageType:
    https://docs.aws.amazon.com/fsx/latest/APIReference/API_CreateFileSystem.html)."""
    fsx = cfg.cluster.fsx
    if fsx.storage_type == "HDD" and fsx.deployment_type != "PERSISTENT_1":
        yield Finding(
            ERROR,
            f"{FSX}.storageType",
            f"FSx for Lustre takes HDD storage with PERSISTENT_1 only, not "
            f"{fsx.deployment_type}; use SSD, or deploymentType: PERSISTENT_1",
        )


def fsx_lustre_version(cfg):
    fsx = cfg.cluster.fsx
    if fsx.lustre_version == "2.10" and fsx.deployment_type == "PERSISTENT_2":
        yield Finding(ERROR, f"{FSX}.lustreVersion", "PERSISTENT_2 needs Lustre 2.12 or 2.15; 2.15 is recommended")


def fsx_data_repository(cfg):
    fsx = cfg.cluster.fsx
    if fsx.data_repository_path is None:
        if fsx.export_deletions:
            yield Finding(WARNING, f"{FSX}.exportDeletions", "has no effect without fsx.dataRepositoryPath")
        return
    field = f"{FSX}.dataRepositoryPath"
    if fsx.deployment_type == "SCRATCH_1":
        yield Finding(
            ERROR,
            field,
            "SCRATCH_1 file systems cannot have data repository associations; use SCRATCH_2 or PERSISTENT_2",
        )
    if fsx.lustre_version == "2.10":
        yield Finding(
            ERROR, field, "data repository associations need Lustre 2.12 or 2.15; set lustreVersion: \"2.15\""
        )


def fsx_mount_point(cfg):
    for problem in mount_point_problems(cfg.cluster.fsx.mount_point):
        yield Finding(ERROR, f"{FSX}.mountPoint", problem)


def spot_and_reservation(cfg):
    """Per group: a reservation holds on-demand capacity; a Capacity Block is named by its reservation."""
    c = cfg.cluster
    for i, group in enumerate(c.node_groups):
        field = c.group_field(i, "capacityReservationId")
        if group.market == "spot" and group.capacity_reservation_id:
            yield Finding(
                ERROR,
                field,
                "a capacity reservation holds on-demand capacity; set market: on-demand, or drop the reservation",
            )
        if group.market == "capacity-block" and not group.capacity_reservation_id:
            yield Finding(
                ERROR,
                field,
                "market: capacity-block launches into a purchased Capacity Block: give its id (cr-...), which "
                "`aws ec2 describe-capacity-reservations --filters Name=reservation-type,Values=capacity-block` lists",
            )


def group_names_unique(cfg):
    """A group's name begins its nodes' names and its Slurm partition: two groups of one name would share both."""
    c = cfg.cluster
    seen: dict[str, int] = {}
    for i, group in enumerate(c.node_groups):
        if group.name in seen:
            yield Finding(
                ERROR,
                c.group_field(i, "name"),
                f"{group.name!r} is also the name of {c.group_field(seen[group.name])}; give each group its own name",
            )
        seen.setdefault(group.name, i)


def spares_need_slurm(cfg):
    """A group's spares are held idle by a Slurm reservation (hpcc_node/controller/health/decide.py)."""
    c = cfg.cluster
    for i, group in enumerate(c.node_groups):
        if group.spares and c.scheduler != "slurm":
            yield Finding(
                ERROR,
                c.group_field(i, "spares"),
                "spares are held idle by a Slurm reservation: give cluster.scheduler: slurm, or leave spares out",
            )


def roll_bound(cfg):
    """`maxUnavailable` is how many of the group a roll takes out at once: above the count it says nothing more
    than the count (the whole group at once), which is likely a mistake in a group that runs jobs."""
    c = cfg.cluster
    for i, group in enumerate(c.node_groups):
        if group.update_strategy != "manual" and group.count and group.max_unavailable >= group.count > 1:
            yield Finding(
                WARNING,
                c.group_field(i, "maxUnavailable"),
                f"{group.max_unavailable} of a group of {group.count}: a roll may take the whole group out at once; "
                f"give at most {group.count - 1} to keep some nodes in service, or updateStrategy: manual",
            )


def node_cap(cfg):
    """At most MAX_NODES compute nodes across the groups (the README says what bounds it); read from its module
    at each call, so a test can lift the cap (tests/facts/plan_scale.py)."""
    c = cfg.cluster
    if c.node_count > limits.MAX_NODES:
        counts = " + ".join(str(g.count) for g in c.node_groups)
        yield Finding(
            ERROR,
            c.count_field,
            f"the groups hold {counts} = {c.node_count} nodes; a cluster holds at most "
            f"{limits.MAX_NODES}: lower the counts, or split the work over two clusters",
        )


def az_in_region(cfg):
    az = cfg.cluster.availability_zone
    if az and not az.startswith(cfg.region):
        yield Finding(
            ERROR,
            "cluster.availabilityZone",
            f"{az} is not in aws:region {cfg.region}; use one of {cfg.region}a, {cfg.region}b, ... or leave it out",
        )


def ssh_not_open_to_world(cfg):
    for i, cidr in enumerate(cfg.cluster.ssh.allowed_cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            yield Finding(
                ERROR,
                f"cluster.ssh.allowedCidrs[{i}]",
                f"{cidr} opens SSH to the whole internet; name your own network (e.g. 203.0.113.0/24), "
                "or leave the list empty and log in with SSM Session Manager",
            )


def ssh_ipv4_only(cfg):
    """The VPC has no IPv6 block (infra/program/components/network.py), so an IPv6 source could never connect."""
    for i, cidr in enumerate(cfg.cluster.ssh.allowed_cidrs):
        net = ipaddress.ip_network(cidr)
        if net.version == 6 and net.prefixlen > 0:  # ::/0 is reported as the whole internet
            yield Finding(
                ERROR,
                f"cluster.ssh.allowedCidrs[{i}]",
                f"{cidr} is IPv6, but the cluster's VPC has no IPv6 addresses, so no IPv6 client can reach "
                "the head node; list the IPv4 networks you connect from",
            )


def ssh_address_space_capped(cfg):
    """Many narrow entries can add up to the internet (0.0.0.0/1 + 128.0.0.0/1): count the union."""
    nets = [ipaddress.ip_network(c) for c in cfg.cluster.ssh.allowed_cidrs]
    v4 = [n for n in nets if n.version == 4]
    if any(n.prefixlen == 0 for n in v4):
        return  # reported as the whole internet
    total = ipv4_address_count(v4)
    if total > SSH_MAX_IPV4_ADDRESSES:
        yield Finding(
            ERROR,
            "cluster.ssh.allowedCidrs",
            f"these networks together hold {total:,} IPv4 addresses; "
            f"SSH is for your own networks: at most {SSH_MAX_IPV4_ADDRESSES:,} addresses (a /16) in all. "
            "Name the narrower ranges you connect from, or leave the list empty and use SSM Session Manager",
        )


def image_supports_type(cfg):
    image = cfg.cluster.image
    fam = image.resolved_family
    for name in (*(g.instance_type for g in cfg.cluster.node_groups), cfg.cluster.head_node.instance_type):
        if fam and fam.startswith("base-oss") and name.startswith("p3"):
            yield Finding(
                WARNING,
                "cluster.image",
                f"current Base OSS DLAMIs ({fam}) do not list {name} as supported (V100 needs an older or "
                "proprietary-driver image); pin one that does with cluster.image.amiId",
            )
            return


def slurm_has_a_package(cfg):
    """Slurm comes from the distribution: Debian's and Ubuntu's `slurm-wlm` packages (packages.ubuntu.com:
    21.08 in jammy, 23.11 in noble); Amazon Linux 2023 ships none (ParallelCluster builds its own from source),
    so a Slurm cluster on it is refused here, before anything is created."""
    cluster = cfg.cluster
    if cluster.scheduler == "slurm" and cluster.image.amazon_linux:
        yield Finding(
            ERROR,
            "cluster.scheduler",
            "slurm needs the distribution's slurm-wlm packages, which Amazon Linux 2023 does not have; use "
            "an Ubuntu DLAMI (image.family: base-oss-nvidia-driver-gpu-ubuntu-22.04 or -24.04), or "
            "scheduler: none",
        )


def hook_files(cfg):
    yield from hook_findings(cfg)  # checks files on disk: the paths are the user's project's


def subnet_holds_the_nodes(cfg):
    """infra/facts/subnets.py: the private subnet must hold every node; a count no candidate holds is refused."""
    count = cfg.cluster.node_count
    if private_cidr(count) is None:
        most = max(largest_count(c) for c in PRIVATE_CIDRS)
        yield Finding(
            ERROR,
            cfg.cluster.count_field,
            f"{count} nodes need {addresses_needed(count)} addresses in the private subnet; the largest "
            f"({PRIVATE_CIDRS[-1]}) holds {most} compute nodes: give at most {most}, or split the cluster",
        )


RULES = [
    fsx_capacity,
    fsx_hdd_deployment,
    fsx_throughput,
    fsx_lustre_version,
    fsx_data_repository,
    fsx_mount_point,
    spot_and_reservation,
    group_names_unique,
    spares_need_slurm,
    roll_bound,
    node_cap,
    az_in_region,
    ssh_not_open_to_world,
    ssh_ipv4_only,
    ssh_address_space_capped,
    image_supports_type,
    slurm_has_a_package,
    hook_files,
    subnet_holds_the_nodes,
]
