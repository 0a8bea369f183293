"""Names, tags and parameter paths that tie AWS resources to a cluster.

Tags are the source of truth for what belongs to a cluster (status, hostfile and reap find
resources by `hpcc:cluster`), so every name and tag is made here and nowhere else.
"""

from __future__ import annotations

TAG_CLUSTER = "hpcc:cluster"
TAG_ROLE = "hpcc:role"  # head | compute
TAG_NODE = "hpcc:node"  # head | compute-000 ...
TAG_INSTANCE = "hpcc:instance"  # on a node's status parameter: the ARN of the instance allowed to write it
TAG_INTERFACES = "hpcc:interfaces"  # the node's interface layout; a change replaces the node
HEAD = "head"


def compute_node_name(index: int) -> str:
    return f"compute-{index:03d}"


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


def bundle_bucket(cluster: str, account: str) -> str:
    """The cluster's private bundle bucket: at most 5 + 32 + 9 + 12 = 58 of S3's 63 characters. The account makes
    the global name the cluster's own (like the IAM role names, one cluster of a name per account)."""
    return f"hpcc-{cluster}-bundles-{account}"


def bundle_key(sha256: str) -> str:
    """Content-addressed: a bundle's key is its archive's sha256, so one key never holds two bundles."""
    return f"bundles/{sha256}.tar.gz"


def image_pin(cluster: str) -> str:
    """The Pulumi name of the resource that keeps the image (infra/components/pins.py); `--update-image` replaces it."""
    return resource_name(cluster, "image-pin")


def tags(cluster: str, what: str, extra: dict[str, str] | None = None, **hpcc: str) -> dict[str, str]:
    out = dict(extra or {})
    out.update({"Name": resource_name(cluster, what), TAG_CLUSTER: cluster})
    out.update({f"hpcc:{k}": v for k, v in hpcc.items()})
    return out


class Paths:
    """SSM parameter and secret names under the cluster's own prefix (the nodes' role can read only these)."""

    def __init__(self, cluster: str):
        self.prefix = f"/hpcc/{cluster}"
        self.fsx = f"{self.prefix}/fsx"  # JSON {"dnsName", "mountName"}: written once the file system exists
        self.hosts = f"{self.prefix}/hosts"  # line 1 head IP, then compute IPs in name order
        self.settings = f"{self.prefix}/settings"  # KEY=VALUE lines the nodes read at run time (infra/node_settings.py)
        self.nodes = f"{self.prefix}/nodes"  # /nodes/<node>: the node's bootstrap status (JSON)
        self.ssh_secret = f"hpcc/{cluster}/ssh-key"  # Secrets Manager: the cluster's SSH private key
        self.munge_secret = f"hpcc/{cluster}/munge-key"  # Secrets Manager: Slurm's munge key (scheduler: slurm)
        # the host CA and the certificates' parameters (hpcc_node/certstore.py makes the same names)
        self.host_ca_secret = f"hpcc/{cluster}/host-ca"  # Secrets Manager: the head's alone
        self.user_secret = f"hpcc/{cluster}/user-key"  # Secrets Manager: the login user's key (not root's), by the head
        self.hostkeys = f"{self.prefix}/hostkeys"  # /hostkeys/<node>: the node's host public keys, by the node
        self.certs = f"{self.prefix}/certs"  # /certs/<node>: its host certificates and the CAs, by the head
        self.rotation = f"{self.prefix}/rotation"  # the key rotation the head follows, by `hpcc rotate-keys`
        # JSON {"sha256", "bucket", "key"}: the bundle nodes boot from and follow (infra/bundle.py); not a settings
        # key, because nodes booted before it refuse unknown settings keys.
        self.bundle = f"{self.prefix}/bundle"
        self.pinned_image = f"{self.prefix}/pinned/image"  # JSON ImageInfo, resolved at the first up and kept
        self.pinned_az = f"{self.prefix}/pinned/availability-zone"  # likewise

    def node(self, node: str) -> str:
        return f"{self.nodes}/{node}"
