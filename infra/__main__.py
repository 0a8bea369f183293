"""The hpcc Pulumi program: read the stack config, wire the components, export the outputs."""

import pulumi

from infra.catalog import lookup
from infra.components.compute import Compute, ComputeArgs
from infra.components.identity import Identity, IdentityArgs
from infra.components.network import Network, NetworkArgs
from infra.components.pins import Pins, PinsArgs
from infra.components.security import Security, SecurityArgs
from infra.components.storage import Storage, StorageArgs
from infra.config import ConfigError, from_pulumi_config
from infra.outputs import stack_outputs

try:
    cfg = from_pulumi_config()
except ConfigError as err:
    raise pulumi.RunError(f"invalid stack config:\n{err}") from None

cluster = cfg.cluster
extra_tags = dict(cluster.tags)
pins = Pins("pins", PinsArgs(cluster, extra_tags))
az = pins.availability_zone

network = Network("network", NetworkArgs(cluster.name, cfg.region, az, extra_tags))
security = Security("security", SecurityArgs(cluster.name, network.vpc_id, cluster.ssh.allowed_cidrs, extra_tags))
identity = Identity("identity", IdentityArgs(cluster.name, cfg.region, extra_tags))
storage = Storage("storage", StorageArgs(cluster.name, cluster.fsx, network.private_subnet_id, security.lustre_sg_id,
                                         security.lustre_rules, extra_tags))
compute = Compute("compute", ComputeArgs(
    config=cluster, region=cfg.region, head_type=lookup(cluster.head_node.instance_type),
    compute_type=lookup(cluster.compute.instance_type), availability_zone=az, image=pins.image,
    private_subnet_id=network.private_subnet_id, public_subnet_id=network.public_subnet_id,
    nodes_sg_id=security.nodes_sg_id, head_ssh_sg_id=security.head_ssh_sg_id,
    instance_profile_arns=identity.instance_profile_arns, extra_tags=extra_tags))

for key, value in stack_outputs(cfg, az, compute, storage).items():
    pulumi.export(key, value)
