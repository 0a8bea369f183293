"""Rules over a parsed StackConfig. Each yields Findings; an error stops the plan."""

from __future__ import annotations

import ipaddress

from infra.catalog import known_types, lookup
from infra.validators.findings import ERROR, WARNING, Finding
from infra.validators.inputs import SSH_MAX_IPV4_ADDRESSES, ipv4_address_count, mount_point_problems

FSX = "cluster.fsx"
PERSISTENT_THROUGHPUT = {
    ("PERSISTENT_1", "SSD"): (50, 100, 200),
    ("PERSISTENT_1", "HDD"): (12, 40),
    ("PERSISTENT_2", "SSD"): (125, 250, 500, 1000),
}
# First base, then the step: SCRATCH_1 is 1200, 2400, then multiples of 3600.
CAPACITY_STEPS = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
HDD_STEPS = {12: 6000, 40: 1800}


def instance_types_known(cfg):
    for field, name in (("cluster.headNode.instanceType", cfg.cluster.head_node.instance_type),
                        ("cluster.compute.instanceType", cfg.cluster.compute.instance_type)):
        itype = lookup(name)
        if itype is None:
            yield Finding(ERROR, field, f"{name!r} is not in hpcc's instance catalog (infra/catalog.py); "
                                        f"use one of: {', '.join(known_types())}")
        elif itype.arch != "x86_64":
            yield Finding(ERROR, field, f"{name} is {itype.arch}; hpcc builds x86_64 clusters only")


def efa_matches_type(cfg):
    compute = cfg.cluster.compute
    itype = lookup(compute.instance_type)
    if itype is None:
        return
    if compute.efa is True and not itype.efa_supported:
        efa_types = [t for t in known_types() if lookup(t).efa_supported]
        yield Finding(ERROR, "cluster.compute.efa",
                      f"{itype.name} has no EFA; remove `efa: true` to run over TCP, or pick an EFA type "
                      f"such as {', '.join(efa_types[:6])}")
    elif compute.efa is False and itype.efa_supported:
        yield Finding(WARNING, "cluster.compute.efa",
                      f"{itype.name} supports EFA but it is turned off: collectives will run over TCP, "
                      "typically several times slower; remove `efa: false` to use it")


def fsx_capacity(cfg):
    fsx = cfg.cluster.fsx
    cap, dep = fsx.storage_capacity, fsx.deployment_type
    field = f"{FSX}.storageCapacityGiB"
    if fsx.storage_type == "HDD":
        step = HDD_STEPS.get(fsx.per_unit_storage_throughput or 0)
        if step and cap % step:
            yield Finding(ERROR, field, f"PERSISTENT_1 HDD at {fsx.per_unit_storage_throughput} MB/s/TiB needs a "
                                        f"multiple of {step}; got {cap}")
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
            yield Finding(ERROR, field, f"{fsx.deployment_type} has a fixed throughput; remove this key, or use a "
                                        "PERSISTENT deployment type to choose one")
    elif allowed is None:
        yield Finding(ERROR, f"{FSX}.storageType", f"{fsx.storage_type} storage is not offered with {fsx.deployment_type}; use SSD")
    elif fsx.per_unit_storage_throughput is None:
        yield Finding(ERROR, field, f"{fsx.deployment_type} {fsx.storage_type} needs one of {', '.join(map(str, allowed))} MB/s/TiB")
    elif fsx.per_unit_storage_throughput not in allowed:
        yield Finding(ERROR, field, f"{fsx.deployment_type} {fsx.storage_type} needs one of "
                                    f"{', '.join(map(str, allowed))} MB/s/TiB; got {fsx.per_unit_storage_throughput}")


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
        yield Finding(ERROR, field, "SCRATCH_1 file systems cannot have data repository associations; use SCRATCH_2 or PERSISTENT_2")
    if fsx.lustre_version == "2.10":
        yield Finding(ERROR, field, "data repository associations need Lustre 2.12 or 2.15; set lustreVersion: \"2.15\"")


def fsx_mount_point(cfg):
    for problem in mount_point_problems(cfg.cluster.fsx.mount_point):
        yield Finding(ERROR, f"{FSX}.mountPoint", problem)


def spot_and_reservation(cfg):
    compute = cfg.cluster.compute
    if compute.market == "spot" and compute.capacity_reservation_id:
        yield Finding(ERROR, "cluster.compute.capacityReservationId",
                      "a capacity reservation holds on-demand capacity; set market: on-demand, or drop the reservation")


def az_in_region(cfg):
    az = cfg.cluster.availability_zone
    if az and not az.startswith(cfg.region):
        yield Finding(ERROR, "cluster.availabilityZone", f"{az} is not in aws:region {cfg.region}; "
                                                         f"use one of {cfg.region}a, {cfg.region}b, ... or leave it out")


def ssh_not_open_to_world(cfg):
    for i, cidr in enumerate(cfg.cluster.ssh.allowed_cidrs):
        if ipaddress.ip_network(cidr).prefixlen == 0:
            yield Finding(ERROR, f"cluster.ssh.allowedCidrs[{i}]",
                          f"{cidr} opens SSH to the whole internet; name your own network (e.g. 203.0.113.0/24), "
                          "or leave the list empty and log in with SSM Session Manager")


def ssh_ipv4_only(cfg):
    """The VPC has no IPv6 block (infra/components/network.py), so an IPv6 source could never connect."""
    for i, cidr in enumerate(cfg.cluster.ssh.allowed_cidrs):
        net = ipaddress.ip_network(cidr)
        if net.version == 6 and net.prefixlen > 0:  # ::/0 is reported as the whole internet
            yield Finding(ERROR, f"cluster.ssh.allowedCidrs[{i}]",
                          f"{cidr} is IPv6, but the cluster's VPC has no IPv6 addresses, so no IPv6 client can reach "
                          "the head node; list the IPv4 networks you connect from")


def ssh_address_space_capped(cfg):
    """Many narrow entries can add up to the internet (0.0.0.0/1 + 128.0.0.0/1): count the union."""
    nets = [ipaddress.ip_network(c) for c in cfg.cluster.ssh.allowed_cidrs]
    v4 = [n for n in nets if n.version == 4]
    if any(n.prefixlen == 0 for n in v4):
        return  # reported as the whole internet
    total = ipv4_address_count(v4)
    if total > SSH_MAX_IPV4_ADDRESSES:
        yield Finding(ERROR, "cluster.ssh.allowedCidrs",
                      f"these networks together hold {total:,} IPv4 addresses; "
                      f"SSH is for your own networks: at most {SSH_MAX_IPV4_ADDRESSES:,} addresses (a /16) in all. "
                      "Name the narrower ranges you connect from, or leave the list empty and use SSM Session Manager")


def head_public_needs_single_interface(cfg):
    head = lookup(cfg.cluster.head_node.instance_type)
    if cfg.cluster.ssh.allowed_cidrs and head is not None and head.network_cards > 1 and head.efa_supported:
        yield Finding(ERROR, "cluster.headNode.instanceType",
                      f"SSH from the internet needs a public IP, which {head.name} (several network cards) cannot "
                      "get; use a single-card head type such as c5n.18xlarge, or drop cluster.ssh.allowedCidrs and use SSM")


def image_supports_type(cfg):
    image = cfg.cluster.image
    fam = image.resolved_family
    for name in (cfg.cluster.compute.instance_type, cfg.cluster.head_node.instance_type):
        if fam and fam.startswith("base-oss") and name.startswith("p3"):
            yield Finding(WARNING, "cluster.image",
                          f"current Base OSS DLAMIs ({fam}) do not list {name} as supported (V100 needs an older or "
                          "proprietary-driver image); pin one that does with cluster.image.amiId")
            return


RULES = [
    instance_types_known,
    efa_matches_type,
    fsx_capacity,
    fsx_throughput,
    fsx_lustre_version,
    fsx_data_repository,
    fsx_mount_point,
    spot_and_reservation,
    az_in_region,
    ssh_not_open_to_world,
    ssh_ipv4_only,
    ssh_address_space_capped,
    head_public_needs_single_interface,
    image_supports_type,
]
