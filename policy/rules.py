"""hpcc's mandatory security rules, as plain Python over resource records (policy/records.py), so the same
functions run under `pulumi up --policy-pack policy` (policy/pack.py) and offline over `hpcc plan`'s graph.

Each rule has a per-resource check `(type, inputs) -> [message]`, which the pack runs before the resource is
created, and/or a graph check `(records) -> [message]` for what needs several resources (the pack runs it over
the whole stack). The checks live by concern: node_rules.py (IMDS, encryption at rest, user data),
network_rules.py (ingress, public IPs, the EFA group), iam_rules.py (least privilege); this module is the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

if __package__:  # imported as the package `policy` (the tests)
    from . import bucket_rules, iam_rules, network_rules, node_rules, write_rules
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import bucket_rules  # type: ignore[no-redef]
    import iam_rules  # type: ignore[no-redef]
    import network_rules  # type: ignore[no-redef]
    import node_rules  # type: ignore[no-redef]
    import write_rules  # type: ignore[no-redef]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    resource_check: Callable[..., list[str]] | None = None  # (type, inputs, graph=None)
    graph_check: Callable[[list[dict]], list[str]] | None = None

    def check(self, resources: list[dict]) -> list[str]:
        """Every violation over a graph of records, each message prefixed with the resource's name."""
        out = []
        if self.resource_check is not None:
            for r in resources:
                out += [f"{r['name']}: {m}" for m in self.resource_check(r["type"], r["inputs"], resources)]
        if self.graph_check is not None:
            out += self.graph_check(resources)
        return out


RULES = [
    Rule(
        "imdsv2-required",
        "IMDSv2 (httpTokens required), a hop limit of at most 2 and no IPv6 endpoint on every "
        "launch template and instance",
        node_rules.imdsv2_resource,
        node_rules.imdsv2_graph,
    ),
    Rule("ebs-encrypted", "Root and data EBS volumes are encrypted at rest", node_rules.ebs_encrypted_resource),
    Rule(
        "file-system-encrypted",
        "The FSx for Lustre file system is of a type encrypted at rest",
        node_rules.file_system_encrypted_resource,
    ),
    Rule(
        "no-world-ingress",
        "No port (SSH or any other) is open to 0.0.0.0/0 or ::/0, nor to more than a /16 of "
        "IPv4 (a /48 of IPv6) counting all of a group's rules; no IPv6 source while the VPC has none",
        network_rules.world_ingress_resource,
        network_rules.world_ingress_graph,
    ),
    Rule(
        "compute-nodes-private",
        "Compute nodes get no public IP; no subnet assigns one by default",
        network_rules.private_compute_resource,
        network_rules.private_compute_graph,
    ),
    Rule(
        "efa-group-self-referencing",
        "A group allows all traffic from and to itself, and every node interface is in it",
        None,
        network_rules.efa_group_graph,
    ),
    Rule(
        "iam-least-privilege",
        "No '*' on '*', no service-wide actions; the nodes' role reaches only its "
        "cluster's parameters and secrets, all its policies together",
        iam_rules.iam_resource,
        iam_rules.node_role_reach_graph,
    ),
    Rule(
        "bundle-bucket-private",
        "The bundle bucket blocks all public access, and its policy lets only the "
        "cluster's own node roles read bundles (nobody outside the account, nothing but s3:GetObject)",
        bucket_rules.bucket_policy_resource,
        bucket_rules.public_block_graph,
    ),
    Rule(
        "state-bucket-private",
        "The controller's state bucket blocks all public access (bundle-bucket-private "
        "checks every bucket's block), and its policy lets only the cluster's roles in: the head gets, puts and "
        "lists; a compute node reads membership.json and writes only its own status object",
        bucket_rules.state_bucket_policy_resource,
    ),
    Rule(
        "node-writes-own-only",
        "The nodes' roles write only their own status, the head the cluster's empty "
        "secrets once, and the head's controller only its own cluster's instances (under a hpcc:cluster tag "
        "condition), ledger, state bucket and compute role: never the settings, hosts, FSx or bundle, a parameter's "
        "tags, a secret's metadata, or IAM; a compute node never launches, tags or terminates",
        None,
        write_rules.node_writes_graph,
    ),
    Rule(
        "host-ca-head-only",
        "Only the head's role reads the host CA (secret:hpcc/<cluster>/host-ca): a compute "
        "node that could would certify any host",
        None,
        write_rules.host_ca_graph,
    ),
    Rule("no-secrets-in-user-data", "No private key or AWS key in user data (decoded)", node_rules.secrets_resource),
    Rule(
        "no-secret-values-in-state",
        "No secret value in the stack: the secrets are created empty and written by the nodes",
        node_rules.secret_values_resource,
    ),
]


def check(resources: list[dict]) -> dict[str, list[str]]:
    """Every rule's violations over a graph; an empty dict when it passes."""
    found = {rule.name: rule.check(resources) for rule in RULES}
    return {k: v for k, v in found.items() if v}
