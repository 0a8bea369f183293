"""The hpcc Pulumi program: read the stack config, wire the components, export the outputs."""

import pulumi

from infra.config.parse import ConfigError, parse
from infra.config.validators.check import check_config
from infra.config.validators.type_rules import cluster_architecture, resolve_types
from infra.facts.instance_types import ec2_facts
from infra.facts.subnets import private_cidr
from infra.program.components.bundle import BundleArgs, BundleStore
from infra.program.components.compute import Compute, ComputeArgs
from infra.program.components.identity import Identity, IdentityArgs
from infra.program.components.launch_policy import launch_limits
from infra.program.components.network import Network, NetworkArgs
from infra.program.components.pins import Pins, PinsArgs
from infra.program.components.security import Security, SecurityArgs
from infra.program.components.state import ControllerState, StateArgs
from infra.program.components.storage import Storage, StorageArgs
from infra.program.outputs import stack_outputs
from infra.render.bundle import build as build_bundle

try:  # the running stack's config, as `pulumi up` or the plan's mock runtime hands it over
    cfg = parse(pulumi.Config("aws").get("region"), pulumi.Config("hpcc").get_object("cluster"))
except ConfigError as err:
    raise pulumi.RunError(f"invalid stack config:\n{err}") from None

# The node types' facts from the EC2 this runs against (the account's; offline, the embedded AWS), asked once per
# type; the rules that need them run here, before anything is created.
facts = ec2_facts(cfg.region)
type_errors = [f for f in check_config(cfg, facts) if f.is_error]
if type_errors:
    raise pulumi.RunError("invalid stack config:\n" + "\n".join(f"{f.field}: {f.message}" for f in type_errors))

cluster = cfg.cluster
extra_tags = dict(cluster.tags)
pins = Pins(
    "pins", PinsArgs(cluster, extra_tags, cluster_architecture(resolve_types(cfg, facts)[0]) or "x86_64", cfg.region)
)
az = pins.availability_zone

network = Network(
    "network", NetworkArgs(cluster.name, cfg.region, az, extra_tags, private_cidr=private_cidr(cluster.node_count))
)
security = Security("security", SecurityArgs(cluster.name, network.vpc_id, cluster.ssh.allowed_cidrs, extra_tags))
identity = Identity(
    "identity",
    IdentityArgs(
        cluster.name,
        cfg.region,
        extra_tags,
        cluster.scheduler,
        launch_limits(cluster),
        cluster.metrics_workspace_arn,
        ecr=cluster.containers_on and cluster.containers.ecr,
        ngc_secret=cluster.containers.ngc_secret if cluster.containers_on else None,
    ),
)
storage = Storage(
    "storage",
    StorageArgs(
        cluster.name, cluster.fsx, network.private_subnet_id, security.lustre_sg_id, security.lustre_rules, extra_tags
    ),
)
# What the nodes run (infra/render/bundle.py), stored where they fetch it; the user data is only its loader.
bundle = build_bundle(cluster, cfg.region, facts)
store = BundleStore(
    "bundle",
    BundleArgs(
        cluster.name, identity.account, bundle.archive, bundle.sha256, list(identity.role_arns.values()), extra_tags
    ),
)
state = ControllerState("state", StateArgs(cluster.name, identity.account, identity.role_arns, extra_tags))
compute = Compute(
    "compute",
    ComputeArgs(
        config=cluster,
        region=cfg.region,
        facts=facts,
        availability_zone=az,
        image=pins.image,
        private_subnet_id=network.private_subnet_id,
        public_subnet_id=network.public_subnet_id,
        subnet_azs={False: network.private_subnet_az, True: network.public_subnet_az},
        nodes_sg_id=security.nodes_sg_id,
        head_ssh_sg_id=security.head_ssh_sg_id,
        instance_profile_arns=identity.instance_profile_arns,
        account=identity.account,
        extra_tags=extra_tags,
        boot_after=[store.pointer],
    ),
)

for key, value in stack_outputs(cfg, az, compute, storage, state).items():
    pulumi.export(key, value)
