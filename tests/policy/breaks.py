"""Breaks of a real planned graph for the policy tests (tests/policy/test_policy.py): instances, storage and the
network, each edited in one place; BREAKS names the rule that must catch it and words of its message. The permissions'
breaks: tests/policy/breaks_iam.py. Also the graph helpers both use."""

import copy
import json

from policy import iam_rules, network_rules, records
from policy.records import LT

INGRESS = records.INGRESS


def planned_graph(planned):
    result, _ = planned
    return copy.deepcopy([{k: r[k] for k in ("type", "name", "inputs", "dependsOn")} for r in result.resources])


def first(graph, token, pred=lambda r: True):
    return next(r for r in graph if r["type"] == token and pred(r))


def launch_template(graph, role="compute"):
    return first(graph, LT, lambda r: r["name"].endswith(f"-{role}-lt"))


def cluster_name(graph):
    return first(graph, records.ROLE)["inputs"]["tags"]["hpcc:cluster"]


def edit_policy(graph, edit):
    policy = first(graph, records.ROLE_POLICY)
    doc = json.loads(policy["inputs"]["policy"])
    edit(doc)
    policy["inputs"]["policy"] = json.dumps(doc)


def ssm_core_attachment(graph, role="node"):
    name = next(r["inputs"]["name"] for r in graph if r["type"] == records.ROLE and r["inputs"]["name"].endswith(role))
    return {
        "type": records.ATTACHMENT,
        "name": "ssm-core",
        "dependsOn": [],
        "inputs": {"role": name, "policyArn": iam_rules.SSM_CORE},
    }


# --- one break per behaviour; each names the rule that must catch it and words of its message -------------


def imds_optional_on_template(g):
    launch_template(g)["inputs"]["metadataOptions"]["httpTokens"] = "optional"


def imds_missing_on_template(g):
    del launch_template(g, "head")["inputs"]["metadataOptions"]


def imds_optional_on_instance(g):
    first(g, records.INSTANCE)["inputs"]["metadataOptions"] = {"httpTokens": "optional"}


def instance_from_foreign_template(g):
    node = first(g, records.INSTANCE)  # the head: compute instances are the controller's, not the stack's
    node["inputs"]["launchTemplate"] = {"id": "lt-0123456789abcdef0", "version": "1"}
    node["inputs"].pop("metadataOptions")  # leaves IMDS to that template (the nodes set their own: compute.py)
    node["dependsOn"] = [d for d in node["dependsOn"] if not d.endswith("-lt")]


def root_volume_unencrypted(g):
    launch_template(g)["inputs"]["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"


def root_volume_unmapped(g):
    launch_template(g, "head")["inputs"]["blockDeviceMappings"] = []


def fsx_unknown_type(g):
    first(g, records.LUSTRE)["inputs"]["deploymentType"] = "SCRATCH_3"


def lustre_port_open_to_world(g):
    rule = first(g, INGRESS, lambda r: r["name"].endswith("-lustre-in-nodes-988"))
    rule["inputs"].pop("referencedSecurityGroupId")
    rule["inputs"]["cidrIpv4"] = "0.0.0.0/0"


def ssh_open_to_world_v6(g):
    g.append(
        {
            "type": INGRESS,
            "name": "extra-ssh",
            "dependsOn": [],
            "inputs": {
                "securityGroupId": "sg-1",
                "ipProtocol": "tcp",
                "fromPort": 22,
                "toPort": 22,
                "cidrIpv6": "::/0",
            },
        }
    )


def ssh_open_to_world_in_two_halves(g):
    for i, cidr in enumerate(("0.0.0.0/1", "128.0.0.0/1")):
        g.append(
            {
                "type": INGRESS,
                "name": f"half-{i}",
                "dependsOn": [],
                "inputs": {
                    "securityGroupId": "sg-1",
                    "ipProtocol": "tcp",
                    "fromPort": 22,
                    "toPort": 22,
                    "cidrIpv4": cidr,
                },
            }
        )


def ssh_sixteens_add_up(g):
    """Each rule within the limit on its own; only the group's union is too wide (the graph check alone)."""
    for i, cidr in enumerate(("198.18.0.0/16", "198.19.0.0/16")):
        g.append(
            {
                "type": INGRESS,
                "name": f"wide-{i}",
                "dependsOn": [],
                "inputs": {
                    "securityGroupId": "sg-1",
                    "ipProtocol": "tcp",
                    "fromPort": 22,
                    "toPort": 22,
                    "cidrIpv4": cidr,
                },
            }
        )


def ssh_from_ipv6_in_an_ipv4_vpc(g):
    g.append(
        {
            "type": INGRESS,
            "name": "v6-ssh",
            "dependsOn": [],
            "inputs": {
                "securityGroupId": "sg-1",
                "ipProtocol": "tcp",
                "fromPort": 22,
                "toPort": 22,
                "cidrIpv6": "2001:db8::/64",
            },
        }
    )


def _ssh_from(g, name, **source):
    g.append(
        {
            "type": INGRESS,
            "name": name,
            "dependsOn": [],
            "inputs": {"securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, **source},
        }
    )


def ssh_from_a_prefix_list_of_another_stack(g):
    _ssh_from(g, "pl-ssh", prefixListId="pl-0123456789abcdef0")


def prefix_list(g, entries, extra=()):
    g.append(
        {
            "type": network_rules.PREFIX_LIST,
            "name": "office",
            "dependsOn": [],
            "inputs": {
                "name": "office",
                "addressFamily": "IPv4",
                "maxEntries": 4,
                "entries": [{"cidr": c} for c in entries],
            },
        }
    )
    g.extend(
        {
            "type": network_rules.PREFIX_LIST_ENTRY,
            "name": f"office-{i}",
            "dependsOn": [],
            "inputs": {"prefixListId": "office", "cidr": c},
        }
        for i, c in enumerate(extra)
    )
    _ssh_from(g, "pl-ssh", prefixListId="office")


def ssh_from_a_prefix_list_holding_the_world_in_two_halves(g):
    prefix_list(g, ["0.0.0.0/1"], extra=["128.0.0.0/1"])  # one inline entry, one entry resource


def ssh_from_a_prefix_list_holding_the_world(g):
    prefix_list(g, ["203.0.113.0/24", "0.0.0.0/0"])


def ssh_from_an_address_the_pack_cannot_read(g):
    _ssh_from(g, "odd-ssh", cidrIpv4="10.0.0.0/33")


def ssh_from_another_accounts_group(g):
    _ssh_from(g, "peer-ssh", referencedSecurityGroupId="111122223333/sg-0123456789abcdef0")


def inline_sg_open_to_world(g):
    first(g, records.SG)["inputs"]["ingress"] = [
        {"protocol": "tcp", "fromPort": 3389, "toPort": 3389, "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"]}
    ]


def compute_public_ip(g):
    launch_template(g)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"] = "true"


def compute_instance_got_public_ip(g):
    # what the stack policy sees under `pulumi up`: outputs, where an instance's publicIp is filled in. The stack
    # launches no compute instance any more (the controller does); one added to it is still held to the rule.
    node = copy.deepcopy(first(g, records.INSTANCE))
    node["name"] = "llm-compute-000"
    node["inputs"]["tags"] = {**node["inputs"]["tags"], "hpcc:role": "compute", "hpcc:node": "compute-000"}
    node["inputs"]["publicIp"] = "54.1.2.3"
    g.append(node)


def compute_public_ip_left_to_subnet(g):
    del launch_template(g)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"]


def subnet_maps_public_ips(g):
    first(g, records.SUBNET, lambda r: r["name"].endswith("-private"))["inputs"]["mapPublicIpOnLaunch"] = True


def efa_egress_missing(g):
    g[:] = [r for r in g if not r["name"].endswith("-efa-out")]


def efa_ingress_tcp_only(g):
    rule = first(g, INGRESS, lambda r: r["name"].endswith("-efa-in"))
    rule["inputs"].update(ipProtocol="tcp", fromPort=0, toPort=65535)


def node_outside_efa_group(g):
    lustre_sg = first(g, INGRESS, lambda r: "lustre-in-self" in r["name"])["inputs"]["securityGroupId"]
    launch_template(g)["inputs"]["networkInterfaces"][-1]["securityGroups"] = [lustre_sg]


BREAKS = [
    ("imdsv2-required", imds_optional_on_template, "httpTokens is 'optional'"),
    ("imdsv2-required", imds_missing_on_template, "httpTokens is None"),
    ("imdsv2-required", imds_optional_on_instance, "overrides the template"),
    ("imdsv2-required", instance_from_foreign_template, "template outside this stack"),
    ("ebs-encrypted", root_volume_unencrypted, "encrypted is 'false'"),
    ("ebs-encrypted", root_volume_unmapped, "AMI snapshot's encryption"),
    ("file-system-encrypted", fsx_unknown_type, "'SCRATCH_3'"),
    ("no-world-ingress", lustre_port_open_to_world, "tcp 988"),
    ("no-world-ingress", ssh_open_to_world_v6, "::/0 opens tcp 22"),
    ("no-world-ingress", inline_sg_open_to_world, "tcp 3389"),
    ("no-world-ingress", ssh_open_to_world_in_two_halves, "together admit 4,294,967,296 IPv4 addresses"),
    ("no-world-ingress", ssh_sixteens_add_up, "(wide-0, wide-1) together admit 131,072"),
    ("no-world-ingress", ssh_from_ipv6_in_an_ipv4_vpc, "no VPC of the stack has IPv6"),
    ("no-world-ingress", ssh_from_a_prefix_list_of_another_stack, "a prefix list this stack does not define"),
    ("no-world-ingress", ssh_from_a_prefix_list_holding_the_world_in_two_halves, "together admit 4,294,967,296"),
    (
        "no-world-ingress",
        ssh_from_a_prefix_list_holding_the_world,
        "entry 0.0.0.0/0 opens tcp 22 to the whole internet",
    ),
    ("no-world-ingress", ssh_from_an_address_the_pack_cannot_read, "not an address or network the pack can judge"),
    ("no-world-ingress", ssh_from_another_accounts_group, "a security group of another account"),
    ("compute-nodes-private", compute_public_ip, "associatePublicIpAddress is true"),
    ("compute-nodes-private", compute_public_ip_left_to_subnet, "subnet's default decides"),
    ("compute-nodes-private", compute_instance_got_public_ip, "has public IP 54.1.2.3"),
    ("compute-nodes-private", subnet_maps_public_ips, "mapPublicIpOnLaunch is true"),
    ("efa-group-self-referencing", efa_egress_missing, "both from and to itself"),
    ("efa-group-self-referencing", efa_ingress_tcp_only, "both from and to itself"),
    ("efa-group-self-referencing", node_outside_efa_group, "not in the self-referencing EFA group"),
]
