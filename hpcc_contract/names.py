"""Names, tags and parameter paths that tie AWS resources to a cluster.

Tags are the source of truth for what belongs to a cluster (status, hostfile and reap find
resources by `hpcc:cluster`), so every name and tag is made here and nowhere else: the program, the operator's
commands, the policy pack and the nodes call these functions (tests/test_architecture.py fails on a spelling
anywhere else). The bootstrap's bash repeats a few of them; tests run both.
"""

from __future__ import annotations

import hashlib
from typing import Dict, Optional

from hpcc_contract.hosts import group_of

TAG_CLUSTER = "hpcc:cluster"
TAG_ROLE = "hpcc:role"  # head | compute
TAG_NODE = "hpcc:node"  # head | <group>-000 ...: set by the controller once the ledger names the instance
TAG_GROUP = "hpcc:group"  # a compute instance's group, set at launch by the group's launch template
# A compute instance's launch, its CreateFleet ClientToken (the ledger's launch record), set at launch by the
# controller: a controller killed before recording a launch's answer finds its instances by it
TAG_LAUNCH = "hpcc:launch"
# A compute instance's launch-template version and launch spec (the digest of what only a new instance takes: type,
# image, EFA, root volume, market, placement), set at launch by the controller: a rolling replacement moves the
# instances whose spec is not the group's; an instance without them (launched before them) is never rolled
TAG_TEMPLATE_VERSION = "hpcc:template-version"
TAG_LAUNCH_SPEC = "hpcc:launch-spec"
TAG_INSTANCE = "hpcc:instance"  # on a node's status parameter: the ARN of the instance allowed to write it
TAG_INTERFACES = "hpcc:interfaces"  # the node's interface layout; a change replaces the node
HEAD = "head"


def node_name(group: str, index: int) -> str:
    """`<group>-NNN`: three digits below 1000, plain digits above (gpu-999, gpu-1000, never gpu-0000); names are
    never compacted (a removed node leaves a hole)."""
    return f"{group}-{index:03d}"


def boot_key(node: str) -> str:
    """Whose bootstrap a node runs, by its name: the head's (`head`) or its node group's (`gpu-007`: `gpu`). The
    bundle holds one script a key (boot_script), each rendered for its own instance type, GPUs and EFA devices; no
    group is named head (infra/facts/limits.py RESERVED_GROUP_NAMES)."""
    return group_of(node) or HEAD


def boot_script(key: str) -> str:
    """The bundle's path of a boot_key's script: roles/head.sh, roles/<group>.sh (`compute:`'s: roles/compute.sh)."""
    return f"roles/{key}.sh"


def compute_node_name(index: int) -> str:
    """A node of the group `compute:` means."""
    return node_name("compute", index)


def resource_name(cluster: str, what: str) -> str:
    return f"{cluster}-{what}"


def role_name(cluster: str, role: str) -> str:
    """The IAM role and instance profile of a node role. The compute nodes keep the name every node had before
    the head got a role of its own, so upgrading a running cluster does not pull the profile from under them."""
    return f"hpcc-{cluster}-{'head' if role == 'head' else 'node'}"


def placement_group_name(cluster: str) -> str:
    return f"hpcc-{cluster}"


def launch_template_name(cluster: str, role: str) -> str:
    return f"hpcc-{cluster}-{role}"


def state_bucket(cluster: str, account: str) -> str:
    """The controller's membership object and the nodes' status objects: 5 + 32 + 7 + 12 = 56 characters."""
    return f"hpcc-{cluster}-state-{account}"


MEMBERSHIP_KEY = "membership.json"  # the controller's membership (hpcc_node/controller/membership.py)
MEMBERSHIP_DELTAS_PREFIX = "membership-deltas/"  # each generation's change from the one before, in a ring of keys
MEMBERSHIP_DELTAS_KEPT = 32  # the ring's size: a node more generations behind reads the whole membership.json
MEMBERSHIP_GENERATION_META = "generation"  # membership.json's user metadata (HeadObject answers it): its generation
MEMBERSHIP_SHA256_META = "sha256"  # ... and the sha256 of its bytes, which a node's patched copy must match
STATUS_PREFIX = "status/"  # the nodes' statuses: status/<instance-arn>.json, each node its own
STATUS_HOSTS_VERSION_META = "hosts-version"  # a status object's user metadata: the membership generation applied
HOSTKEYS_PREFIX = "hostkeys/"  # hpcc_node/certstore.py: hostkeys/<instance-arn>.json, each node its own
CERTS_PREFIX = "certs/"  # hpcc_node/certstore.py: certs/<node>.json, written by the head only
NO_ROTATION = "none"  # the rotation parameter as Pulumi creates it, before `hpcc rotate-keys`


def membership_delta_key(generation: int) -> str:
    """The key of generation `generation`'s delta: a ring of MEMBERSHIP_DELTAS_KEPT keys, each overwritten by the
    generation KEPT later (bounded without deletes; the delta names its own generation)."""
    return f"{MEMBERSHIP_DELTAS_PREFIX}{generation % MEMBERSHIP_DELTAS_KEPT}.json"


def hostkeys_key(instance_arn: str) -> str:
    """The state-bucket key of a node's published host keys (written by that instance only)."""
    return f"{HOSTKEYS_PREFIX}{instance_arn}.json"


def certs_key(node: str) -> str:
    """The state-bucket key of the certificates the head wrote for a node."""
    return f"{CERTS_PREFIX}{node}.json"


def key_comment(cluster: str) -> str:
    """The comment of the cluster's SSH keys (root's cluster key, the login user's), as ssh-keygen -C gets it."""
    return f"hpcc-{cluster}"


def fleet_client_token(cluster: str, group: str, now: float, batch: int) -> str:
    """CreateFleet's ClientToken: unique in the account (other clusters launch too), at most 64 ASCII characters
    (EC2 API reference, "Ensuring idempotency"), the same for the same loop's batch."""
    tag = hashlib.sha256(cluster.encode()).hexdigest()[:10]
    return f"hpcc-{tag}-{group[:24]}-{int(now)}-{batch}"


def ledger_table(cluster: str) -> str:
    """The controller's DynamoDB ledger (hpcc_node/controller/ledger.py)."""
    return f"hpcc-{cluster}-ledger"


def group_resource(cluster: str, group: str) -> str:
    """The Pulumi name of a group's resource whose deletion terminates its instances
    (infra/program/components/groups.py)."""
    return resource_name(cluster, f"group-{group}")


def launch_template_resource(cluster: str, what: str) -> str:
    """The Pulumi name of the head's launch template (`what`: its role) or a group's (`what`: the group's name),
    infra/program/components/compute.py; `hpcc up` finds a group's launch change in the preview by it."""
    return resource_name(cluster, f"{what}-lt")


def bundle_bucket(cluster: str, account: str) -> str:
    """The cluster's private bundle bucket: at most 5 + 32 + 9 + 12 = 58 of S3's 63 characters. The account makes
    the global name the cluster's own (like the IAM role names, one cluster of a name per account)."""
    return f"hpcc-{cluster}-bundles-{account}"


BUNDLES_PREFIX = "bundles/"  # the bundle bucket's objects the nodes may read


def bundle_key(sha256: str) -> str:
    """Content-addressed: a bundle's key is its archive's sha256, so one key never holds two bundles."""
    return f"{BUNDLES_PREFIX}{sha256}.tar.gz"


def image_pin(cluster: str) -> str:
    """The Pulumi name of the resource that keeps the image (infra/program/components/pins.py); `--update-image`
    replaces it."""
    return resource_name(cluster, "image-pin")


def tags(cluster: str, what: str, extra: Optional[Dict[str, str]] = None, **hpcc: str) -> Dict[str, str]:
    out = dict(extra or {})
    out.update({"Name": resource_name(cluster, what), TAG_CLUSTER: cluster})
    out.update({f"hpcc:{k}": v for k, v in hpcc.items()})
    return out


class Paths:
    """SSM parameter and secret names under the cluster's own prefix (the nodes' role can read only these)."""

    def __init__(self, cluster: str):
        self.prefix = f"/hpcc/{cluster}"
        self.secret_prefix = f"hpcc/{cluster}"  # Secrets Manager names have no leading '/'
        self.fsx = f"{self.prefix}/fsx"  # JSON {"dnsName", "mountName"}: written once the file system exists
        self.hosts = f"{self.prefix}/hosts"  # no longer written: membership is the state bucket's membership.json
        self.groups = (
            f"{self.prefix}/groups"  # JSON: the node groups the controller keeps (infra/render/groups_param.py)
        )
        self.settings = (
            f"{self.prefix}/settings"  # KEY=VALUE lines the nodes read at run time (infra/render/node_settings.py)
        )
        self.nodes = f"{self.prefix}/nodes"  # no longer written: statuses are the state bucket's status/ objects
        self.ssh_secret = f"{self.secret_prefix}/ssh-key"  # Secrets Manager: the cluster's SSH private key
        self.munge_secret = f"{self.secret_prefix}/munge-key"  # Secrets Manager: Slurm's munge key (scheduler: slurm)
        # the host CA and the rotation (hpcc_node/certstore.py makes the same names; keys and certificates are
        # state-bucket objects: HOSTKEYS_PREFIX, CERTS_PREFIX)
        self.host_ca_secret = f"{self.secret_prefix}/host-ca"  # Secrets Manager: the head's alone
        self.user_secret = (
            f"{self.secret_prefix}/user-key"  # Secrets Manager: the login user's key (not root's), by the head
        )
        self.rotation = f"{self.prefix}/rotation"  # the key rotation the head follows, by `hpcc rotate-keys` (Pulumi's)
        # JSON {"sha256", "bucket", "key"}: the bundle nodes boot from and follow (infra/render/bundle.py); not a
        # settings key, because nodes booted before it refuse unknown settings keys.
        self.bundle = f"{self.prefix}/bundle"
        self.pinned_image = f"{self.prefix}/pinned/image"  # JSON ImageInfo, resolved at the first up and kept
        self.pinned_az = f"{self.prefix}/pinned/availability-zone"  # likewise

    def node(self, node: str) -> str:
        return f"{self.nodes}/{node}"
