"""The policy pack's rules over real planned graphs: every example passes every rule; a copy of a real graph
broken in one place fails exactly that rule, with its message. The pack itself is driven through
pulumi-policy's own analyzer servicer (protobuf in, diagnostics out), as the Pulumi engine would drive it.

AmazonSSMManagedInstanceCore alone would let the nodes' role read every parameter in the account; the nodes'
inline policy denies reads outside /hpcc/<cluster>/ (infra/components/identity.py), and removing that Deny
fails `iam-least-privilege` (test_removing_the_deny_reopens_the_ssm_core_reach).
"""

import base64
import copy
import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import proto
from pulumi_policy import EnforcementLevel
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from policy import bucket_rules, iam_rules, network_rules, node_rules, records
from policy.pack import policies
from policy.records import LT
from policy.rules import RULES, check
from tests.policy_support import KNOWN_GAP, identity_fix

RULE_NAMES = {r.name for r in RULES}
INGRESS, EGRESS = records.INGRESS, records.EGRESS


def _raw_graph(planned):
    result, _ = planned
    return copy.deepcopy([{k: r[k] for k in ("type", "name", "inputs", "dependsOn")} for r in result.resources])


def _graph(planned):
    return _raw_graph(planned)


def _first(graph, token, pred=lambda r: True):
    return next(r for r in graph if r["type"] == token and pred(r))


def _lt(graph, role="compute"):
    return _first(graph, LT, lambda r: r["name"].endswith(f"-{role}-lt"))


def _cluster(graph):
    return _first(graph, records.ROLE)["inputs"]["tags"]["hpcc:cluster"]


def _edit_policy(graph, edit):
    policy = _first(graph, records.ROLE_POLICY)
    doc = json.loads(policy["inputs"]["policy"])
    edit(doc)
    policy["inputs"]["policy"] = json.dumps(doc)


def test_every_example_passes_every_rule(planned):
    assert check(_graph(planned)) == {}


def test_removing_the_deny_reopens_the_ssm_core_reach(planned):
    """Should AmazonSSMManagedInstanceCore be attached again (by hand), the Deny still narrows its reads."""
    graph = _raw_graph(planned)
    graph.append(_ssm_core_attachment(graph))
    assert {m for m in check(graph)["iam-least-privilege"] if KNOWN_GAP in m} == set()
    policy = _node_policy(graph)
    doc = json.loads(policy["inputs"]["policy"])
    policy["inputs"]["policy"] = json.dumps(dict(doc, Statement=[st for st in doc["Statement"] if st.get("Effect") != "Deny"]))
    found = check(graph)
    assert set(found) == {"iam-least-privilege"}, found
    assert sum(KNOWN_GAP in m for m in found["iam-least-privilege"]) == 1, found


def _ssm_core_attachment(graph, role="node"):
    name = next(r["inputs"]["name"] for r in graph if r["type"] == records.ROLE and r["inputs"]["name"].endswith(role))
    return {"type": records.ATTACHMENT, "name": "ssm-core", "dependsOn": [],
            "inputs": {"role": name, "policyArn": iam_rules.SSM_CORE}}


def test_the_nodes_session_manager_permissions_are_the_documented_minimum_and_nothing_is_attached(planned):
    from infra.components.identity import SESSION_MANAGER

    graph = _raw_graph(planned)
    assert not [r for r in graph if r["type"] == records.ATTACHMENT]
    assert set(SESSION_MANAGER) == iam_rules.SESSION_MANAGER  # the program's and the pack's copies agree
    graph.append(_ssm_core_attachment(graph))
    assert any("they need no managed policy" in m for m in check(graph)["iam-least-privilege"])


# --- one break per behaviour; each names the rule that must catch it and words of its message -------------


def imds_optional_on_template(g):
    _lt(g)["inputs"]["metadataOptions"]["httpTokens"] = "optional"


def imds_missing_on_template(g):
    del _lt(g, "head")["inputs"]["metadataOptions"]


def imds_optional_on_instance(g):
    _first(g, records.INSTANCE)["inputs"]["metadataOptions"] = {"httpTokens": "optional"}


def instance_from_foreign_template(g):
    node = _first(g, records.INSTANCE)  # the head: compute instances are the controller's, not the stack's
    node["inputs"]["launchTemplate"] = {"id": "lt-0123456789abcdef0", "version": "1"}
    node["inputs"].pop("metadataOptions")  # leaves IMDS to that template (the nodes set their own: compute.py)
    node["dependsOn"] = [d for d in node["dependsOn"] if not d.endswith("-lt")]


def root_volume_unencrypted(g):
    _lt(g)["inputs"]["blockDeviceMappings"][0]["ebs"]["encrypted"] = "false"


def root_volume_unmapped(g):
    _lt(g, "head")["inputs"]["blockDeviceMappings"] = []


def fsx_unknown_type(g):
    _first(g, records.LUSTRE)["inputs"]["deploymentType"] = "SCRATCH_3"


def lustre_port_open_to_world(g):
    rule = _first(g, INGRESS, lambda r: r["name"].endswith("-lustre-in-nodes-988"))
    rule["inputs"].pop("referencedSecurityGroupId")
    rule["inputs"]["cidrIpv4"] = "0.0.0.0/0"


def ssh_open_to_world_v6(g):
    g.append({"type": INGRESS, "name": "extra-ssh", "dependsOn": [], "inputs": {
        "securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv6": "::/0"}})


def ssh_open_to_world_in_two_halves(g):
    for i, cidr in enumerate(("0.0.0.0/1", "128.0.0.0/1")):
        g.append({"type": INGRESS, "name": f"half-{i}", "dependsOn": [], "inputs": {
            "securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": cidr}})


def ssh_sixteens_add_up(g):
    """Each rule within the limit on its own; only the group's union is too wide (the graph check alone)."""
    for i, cidr in enumerate(("198.18.0.0/16", "198.19.0.0/16")):
        g.append({"type": INGRESS, "name": f"wide-{i}", "dependsOn": [], "inputs": {
            "securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv4": cidr}})


def ssh_from_ipv6_in_an_ipv4_vpc(g):
    g.append({"type": INGRESS, "name": "v6-ssh", "dependsOn": [], "inputs": {
        "securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "cidrIpv6": "2001:db8::/64"}})


def _ssh_from(g, name, **source):
    g.append({"type": INGRESS, "name": name, "dependsOn": [], "inputs": {
        "securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22, **source}})


def ssh_from_a_prefix_list_of_another_stack(g):
    _ssh_from(g, "pl-ssh", prefixListId="pl-0123456789abcdef0")


def _prefix_list(g, entries, extra=()):
    g.append({"type": network_rules.PREFIX_LIST, "name": "office", "dependsOn": [], "inputs": {
        "name": "office", "addressFamily": "IPv4", "maxEntries": 4, "entries": [{"cidr": c} for c in entries]}})
    g.extend({"type": network_rules.PREFIX_LIST_ENTRY, "name": f"office-{i}", "dependsOn": [], "inputs": {
        "prefixListId": "office", "cidr": c}} for i, c in enumerate(extra))
    _ssh_from(g, "pl-ssh", prefixListId="office")


def ssh_from_a_prefix_list_holding_the_world_in_two_halves(g):
    _prefix_list(g, ["0.0.0.0/1"], extra=["128.0.0.0/1"])  # one inline entry, one entry resource


def ssh_from_a_prefix_list_holding_the_world(g):
    _prefix_list(g, ["203.0.113.0/24", "0.0.0.0/0"])


def ssh_from_an_address_the_pack_cannot_read(g):
    _ssh_from(g, "odd-ssh", cidrIpv4="10.0.0.0/33")


def ssh_from_another_accounts_group(g):
    _ssh_from(g, "peer-ssh", referencedSecurityGroupId="111122223333/sg-0123456789abcdef0")


def inline_sg_open_to_world(g):
    _first(g, records.SG)["inputs"]["ingress"] = [
        {"protocol": "tcp", "fromPort": 3389, "toPort": 3389, "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/0"]}]


def compute_public_ip(g):
    _lt(g)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"] = "true"


def compute_instance_got_public_ip(g):
    # what the stack policy sees under `pulumi up`: outputs, where an instance's publicIp is filled in. The stack
    # launches no compute instance any more (the controller does); one added to it is still held to the rule.
    node = copy.deepcopy(_first(g, records.INSTANCE))
    node["name"] = "llm-compute-000"
    node["inputs"]["tags"] = {**node["inputs"]["tags"], "hpcc:role": "compute", "hpcc:node": "compute-000"}
    node["inputs"]["publicIp"] = "54.1.2.3"
    g.append(node)


def compute_public_ip_left_to_subnet(g):
    del _lt(g)["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"]


def subnet_maps_public_ips(g):
    _first(g, records.SUBNET, lambda r: r["name"].endswith("-private"))["inputs"]["mapPublicIpOnLaunch"] = True


def efa_egress_missing(g):
    g[:] = [r for r in g if not r["name"].endswith("-efa-out")]


def efa_ingress_tcp_only(g):
    rule = _first(g, INGRESS, lambda r: r["name"].endswith("-efa-in"))
    rule["inputs"].update(ipProtocol="tcp", fromPort=0, toPort=65535)


def node_outside_efa_group(g):
    lustre_sg = _first(g, INGRESS, lambda r: "lustre-in-self" in r["name"])["inputs"]["securityGroupId"]
    _lt(g)["inputs"]["networkInterfaces"][-1]["securityGroups"] = [lustre_sg]


def iam_star_on_star(g):
    _edit_policy(g, lambda d: d["Statement"].append({"Effect": "Allow", "Action": "*", "Resource": "*"}))


def iam_service_wildcard(g):
    _edit_policy(g, lambda d: d["Statement"][0].update(Action=["ssm:*"]))


def iam_other_clusters_parameters(g):
    _edit_policy(g, lambda d: d["Statement"][0]["Resource"].append(
        "arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/someone-else/*"))


def iam_prefix_lookalike(g):
    c = _cluster(g)
    _edit_policy(g, lambda d: d["Statement"][0]["Resource"].append(
        f"arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/{c}2/*"))


def iam_every_secret(g):
    _edit_policy(g, lambda d: next(s for s in d["Statement"] if s.get("Sid") == "ClusterSshKey").update(
        Resource=["arn:aws:secretsmanager:us-east-1:123456789012:secret:*"]))


def ssm_core_reach_unnarrowed(g):
    g.append(_ssm_core_attachment(g))
    policy = _node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"] = [s for s in doc["Statement"] if s.get("Effect") != "Deny"]
    policy["inputs"]["policy"] = json.dumps(doc)


def deny_with_condition_does_not_narrow(g):
    g.append(_ssm_core_attachment(g))  # attached by hand: only the Deny would narrow its reads
    policy = _node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"][-1].update(Condition={"Bool": {"aws:SecureTransport": "true"}})
    policy["inputs"]["policy"] = json.dumps(doc)


def inline_role_policy_reads_every_secret(g):
    role = _first(g, records.ROLE)
    role["inputs"]["inlinePolicies"] = [{"name": "extra", "policy": json.dumps({"Statement": [
        {"Effect": "Allow", "Action": "secretsmanager:Get*", "Resource": "*"}]})}]


def iam_admin_attached(g):
    g.append(dict(_ssm_core_attachment(g), inputs=dict(_ssm_core_attachment(g)["inputs"],
                                                         policyArn="arn:aws:iam::aws:policy/AdministratorAccess")))


def _node_policy(g, role="node"):
    return _first(g, records.ROLE_POLICY, lambda r: r["name"].endswith(f"-{role}-policy"))


def _add_statement(g, statement, role="node"):
    policy = _node_policy(g, role)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"].append(statement)
    policy["inputs"]["policy"] = json.dumps(doc)


def _own_parameter(g, path):
    return f"arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/{_cluster(g)}/{path}"


def node_rewrites_the_settings(g):
    _add_statement(g, {"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": _own_parameter(g, "settings")})


def _edit_statement(g, sid, edit, role="node"):
    policy = _node_policy(g, role)
    doc = json.loads(policy["inputs"]["policy"])
    edit(next(st for st in doc["Statement"] if st.get("Sid") == sid))
    policy["inputs"]["policy"] = json.dumps(doc)


def node_writes_every_status(g):
    _edit_statement(g, "ReportOwnStatus", lambda st: st.update(Resource=[st["Resource"][0].split("/status/")[0]
                                                                         + "/status/*"]))


def node_writes_the_ledger(g):
    _add_statement(g, {"Effect": "Allow", "Action": ["dynamodb:PutItem"],
                       "Resource": f"arn:aws:dynamodb:us-east-1:123456789012:table/hpcc-{_cluster(g)}-ledger"})


def node_launches_instances(g):
    _add_statement(g, {"Effect": "Allow", "Action": ["ec2:RunInstances"], "Resource": "arn:aws:ec2:*:*:instance/*",
                       "Condition": {"StringEquals": {"aws:RequestTag/hpcc:cluster": _cluster(g)}}})


def controller_tags_any_instance(g):
    _edit_statement(g, "NameClusterInstances", lambda st: st.pop("Condition"), role="head")


def controller_reboots_any_instance(g):
    role = _first(g, records.ROLE, lambda r: r["inputs"]["name"].endswith("-head"))
    role["inputs"]["inlinePolicies"] = [{"name": "remedy", "policy": json.dumps({"Statement": [
        {"Effect": "Allow", "Action": ["ec2:RebootInstances"], "Resource": "*"}]})}]


def controller_passes_any_role(g):
    _edit_statement(g, "PassComputeRole", lambda st: st.update(Resource=["arn:aws:iam::123456789012:role/*"]),
                    role="head")


def _edit_state_policy(graph, sid, edit):
    policy = _first(graph, bucket_rules.BUCKET_POLICY, lambda r: "-state-" in str(r["inputs"]["bucket"]))
    doc = json.loads(policy["inputs"]["policy"])
    edit(next(st for st in doc["Statement"] if st.get("Sid") == sid))
    policy["inputs"]["policy"] = json.dumps(doc)


def state_bucket_readable_by_anyone(g):
    _edit_state_policy(g, "NodesReadMembership", lambda st: st.update(Principal="*"))


def state_bucket_lets_nodes_write_every_status(g):
    _edit_state_policy(g, "NodesWriteOwnStatus", lambda st: st.update(Resource=[st["Resource"][0].split("/status/")[0]
                                                                                + "/status/*"]))


def state_bucket_lets_nodes_write_the_certificates(g):
    _edit_state_policy(g, "NodesWriteOwnStatus", lambda st: st["Resource"].append(
        st["Resource"][0].split("/status/")[0] + "/certs/*"))


def compute_node_publishes_any_nodes_host_keys(g):
    _edit_statement(g, "PublishOwnHostKeys", lambda st: st.update(
        Resource=[st["Resource"][0].split("/hostkeys/")[0] + "/hostkeys/*"]))


def compute_node_puts_the_ssh_key(g):
    policy = _node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    next(st for st in doc["Statement"] if st.get("Sid") == "ClusterSshKey")["Action"].append("secretsmanager:PutSecretValue")
    policy["inputs"]["policy"] = json.dumps(doc)


def head_tags_the_status_parameters(g):
    _add_statement(g, {"Effect": "Allow", "Action": ["ssm:AddTagsToResource"], "Resource": _own_parameter(g, "nodes/*")},
                   role="head")


def controller_terminates_any_instance(g):
    role = _first(g, records.ROLE, lambda r: r["inputs"]["name"].endswith("-head"))
    role["inputs"]["inlinePolicies"] = [{"name": "scale", "policy": json.dumps({"Statement": [
        {"Effect": "Allow", "Action": ["ec2:TerminateInstances", "autoscaling:SetDesiredCapacity"], "Resource": "*"}]})}]


def compute_node_reads_the_host_ca(g):
    _add_statement(g, {"Effect": "Allow", "Action": "secretsmanager:GetSecretValue",
                       "Resource": f"arn:aws:secretsmanager:us-east-1:123456789012:secret:hpcc/{_cluster(g)}/host-*"})


def compute_node_writes_host_certificates(g):
    _add_statement(g, {"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": _own_parameter(g, "certs/*")})


PEM = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE KEY-----\n"


def private_key_in_gzipped_user_data(g):
    lt = _lt(g, "head")
    script = gzip.decompress(base64.b64decode(lt["inputs"]["userData"])).decode()
    script += f"cat > /root/.ssh/id_ed25519 <<'K'\n{PEM}K\n"
    lt["inputs"]["userData"] = base64.b64encode(gzip.compress(script.encode())).decode()


def aws_keys_in_instance_user_data(g):
    _first(g, records.INSTANCE)["inputs"]["userData"] = (
        "#!/bin/bash\nexport AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")


def munge_key_as_a_secret_version(g):
    g.append({"type": records.SECRET_VERSION, "name": "llm-munge-key-value", "custom": True,
              "inputs": {"secretId": "hpcc/llm/munge-key", "secretString": "c2VjcmV0"}, "outputs": {}})


def _edit_bucket_policy(graph, edit):
    policy = _first(graph, bucket_rules.BUCKET_POLICY, lambda r: "-bundles-" in str(r["inputs"]["bucket"]))
    doc = json.loads(policy["inputs"]["policy"])
    edit(doc["Statement"][0])
    policy["inputs"]["policy"] = json.dumps(doc)


def bundles_readable_by_anyone(g):
    _edit_bucket_policy(g, lambda s: s.update(Principal="*"))


def bundles_readable_by_another_account(g):
    _edit_bucket_policy(g, lambda s: s["Principal"]["AWS"].append("arn:aws:iam::999999999999:role/hpcc-llm-node"))


def bundles_writable_by_the_nodes(g):
    _edit_bucket_policy(g, lambda s: s["Action"].append("s3:PutObject"))


def bundle_bucket_public_policy_allowed(g):
    _first(g, bucket_rules.PUBLIC_BLOCK)["inputs"]["blockPublicPolicy"] = False


def bundle_bucket_without_public_block(g):
    g.remove(_first(g, bucket_rules.PUBLIC_BLOCK))


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
    ("no-world-ingress", ssh_from_a_prefix_list_holding_the_world, "entry 0.0.0.0/0 opens tcp 22 to the whole internet"),
    ("no-world-ingress", ssh_from_an_address_the_pack_cannot_read, "not an address or network the pack can judge"),
    ("no-world-ingress", ssh_from_another_accounts_group, "a security group of another account"),
    ("compute-nodes-private", compute_public_ip, "associatePublicIpAddress is true"),
    ("compute-nodes-private", compute_public_ip_left_to_subnet, "subnet's default decides"),
    ("compute-nodes-private", compute_instance_got_public_ip, "has public IP 54.1.2.3"),
    ("compute-nodes-private", subnet_maps_public_ips, "mapPublicIpOnLaunch is true"),
    ("efa-group-self-referencing", efa_egress_missing, "both from and to itself"),
    ("efa-group-self-referencing", efa_ingress_tcp_only, "both from and to itself"),
    ("efa-group-self-referencing", node_outside_efa_group, "not in the self-referencing EFA group"),
    ("iam-least-privilege", iam_star_on_star, "every action on every resource"),
    ("iam-least-privilege", iam_service_wildcard, "ssm:*"),
    ("iam-least-privilege", iam_other_clusters_parameters, "hpcc/someone-else"),
    ("iam-least-privilege", iam_prefix_lookalike, "2/*: the nodes may read only"),
    ("iam-least-privilege", iam_every_secret, "secret:*"),
    ("iam-least-privilege", iam_admin_attached, "AdministratorAccess"),
    ("iam-least-privilege", ssm_core_reach_unnarrowed, "on * through AmazonSSMManagedInstanceCore"),
    ("iam-least-privilege", deny_with_condition_does_not_narrow, "add a Deny of these actions"),
    ("iam-least-privilege", inline_role_policy_reads_every_secret, "secretsmanager:GetSecretValue on *"),
    ("bundle-bucket-private", bundles_readable_by_anyone, "Statement[0] lets * in"),
    ("bundle-bucket-private", bundles_readable_by_another_account, "lets arn:aws:iam::999999999999:role/hpcc-llm-node in"),
    ("bundle-bucket-private", bundles_writable_by_the_nodes, "allows s3:GetObject, s3:PutObject"),
    ("bundle-bucket-private", bundle_bucket_public_policy_allowed, "blockPublicPolicy must be true"),
    ("bundle-bucket-private", bundle_bucket_without_public_block, "no public access block"),
    ("node-writes-own-only", node_rewrites_the_settings, "ssm:PutParameter on arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/"),
    ("node-writes-own-only", node_writes_every_status, "a compute node writes only its own status"),
    ("node-writes-own-only", node_writes_the_ledger, "only the head's controller writes"),
    ("node-writes-own-only", node_launches_instances, "only the head's controller launches"),
    ("node-writes-own-only", controller_tags_any_instance, "without a condition that the resource is tagged"),
    ("node-writes-own-only", controller_passes_any_role, "iam:PassRole"),
    ("node-writes-own-only", controller_reboots_any_instance, "allows ec2:RebootInstances on * without a condition"),
    ("state-bucket-private", state_bucket_readable_by_anyone, "lets * in"),
    ("state-bucket-private", state_bucket_lets_nodes_write_every_status, "writes only its own status"),
    ("state-bucket-private", state_bucket_lets_nodes_write_the_certificates, "s3:PutObject on arn:aws:s3:::"),
    ("node-writes-own-only", compute_node_publishes_any_nodes_host_keys, "writes only its own status and host keys"),
    ("node-writes-own-only", compute_node_puts_the_ssh_key, "only the head writes"),
    ("node-writes-own-only", head_tags_the_status_parameters, "ssm:AddTagsToResource"),
    ("node-writes-own-only", controller_terminates_any_instance, "without a condition that the resource is tagged"),
    ("node-writes-own-only", compute_node_writes_host_certificates, "llm/certs/* without the hpcc:instance condition"),
    ("host-ca-head-only", compute_node_reads_the_host_ca, "lets the compute nodes read the host CA"),
    ("no-secrets-in-user-data", private_key_in_gzipped_user_data, "userData holds a private key block"),
    ("no-secrets-in-user-data", aws_keys_in_instance_user_data, "an AWS secret access key"),
    ("no-secret-values-in-state", munge_key_as_a_secret_version, "hpcc/llm/munge-key puts the secret's value"),
]


# Breaks that grant writes as well as reads: node-writes-own-only fails them too, rightly.
ALSO_WRITES = {iam_star_on_star, iam_service_wildcard, iam_every_secret}


# Controller grants that reach beyond the cluster: iam-least-privilege fails them too, rightly.
ALSO_REACH = {controller_tags_any_instance, controller_passes_any_role}


def _rules_failed(rule, breaker):
    return ({rule} | ({"node-writes-own-only"} if breaker in ALSO_WRITES else set())
            | ({"iam-least-privilege"} if breaker in ALSO_REACH else set()))


# The breaks run on one plan: each breaker edits resources every example has, and a rule's verdict on the break
# does not depend on the rest of the graph (every example passing every rule is checked on all of them). p5-llm has
# every kind the breakers touch (public head and its SSH rules, the S3 link, Slurm).
ONE_PLAN = pytest.mark.parametrize("planned", [Path(__file__).resolve().parent.parent / "examples" / "p5-llm.yaml"],
                                   indirect=True, ids=["p5-llm"])


@ONE_PLAN
@pytest.mark.parametrize("rule,breaker,words", BREAKS, ids=[b[1].__name__ for b in BREAKS])
def test_a_broken_graph_fails_the_rule_with_its_message(planned, rule, breaker, words):
    graph = _graph(planned)
    breaker(graph)
    found = check(graph)
    assert set(found) == _rules_failed(rule, breaker), found
    assert any(words in m for m in found[rule]), found[rule]


def test_every_rule_has_a_breaking_case():
    assert {b[0] for b in BREAKS} == RULE_NAMES


def test_both_aws_key_parts_are_recognised_alone():
    for script, what in (("aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                          "secret access key"), ("KEY=ASIAIOSFODNN7EXAMPLE", "access key id")):
        found = node_rules.secrets_resource(records.INSTANCE, {"userDataBase64": base64.b64encode(script.encode()).decode()})
        assert found and what in found[0], (script, found)
    # a checksum or a 40-character token with no key context is not a secret
    assert node_rules.secrets_resource(LT, {"userData": base64.b64encode(b"sha=" + b"a1" * 20).decode()}) == []


# --- the pack, driven the way the engine drives it --------------------------------------------------------


def _servicer():
    return _PolicyAnalyzerServicer("hpcc", "0.0.1", policies(), EnforcementLevel.MANDATORY,
                                   None, None, None, None, None, None, None)


def _struct(inputs) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(json.loads(json.dumps(inputs)))
    return s


def _analyze(record, servicer=None):
    request = proto.AnalyzeRequest(type=record["type"], properties=_struct(record["inputs"]),
                                   urn=f"urn:pulumi:dev::hpcc::{record['type']}::{record['name']}", name=record["name"])
    return list((servicer or _servicer()).Analyze(request, None).diagnostics)


def _analyze_stack(graph):
    urn = {r["name"]: f"urn:pulumi:dev::hpcc::{r['type']}::{r['name']}" for r in graph}
    request = proto.AnalyzeStackRequest(resources=[
        proto.AnalyzerResource(type=r["type"], properties=_struct(r["inputs"]), urn=urn[r["name"]], name=r["name"],
                               dependencies=[urn[d] for d in r.get("dependsOn") or [] if d in urn])
        for r in graph])
    return list(_servicer().AnalyzeStack(request, None).diagnostics)


def test_pack_has_every_rule_and_all_are_mandatory():
    pack = policies()
    assert {p.name.removesuffix("-graph") for p in pack} == RULE_NAMES
    assert all(p.enforcement_level == EnforcementLevel.MANDATORY for p in pack)
    main = open("policy/__main__.py").read()
    assert "EnforcementLevel.MANDATORY" in main and "policies()" in main


# Run in a fresh interpreter outside the repository: PolicyPack (whose gRPC server never returns) is replaced by a
# recorder, __main__.py runs as a script, and the rule table then checks one bad launch template.
SCRIPT_DIRECTORY_RUN = """
    import json, runpy, sys
    import pulumi_policy
    built = []
    pulumi_policy.PolicyPack = lambda **pack: built.append(pack)
    runpy.run_path(sys.argv[1], run_name="__main__")
    template = json.loads(sys.argv[2])
    print(json.dumps({"policies": [p.name for p in built[0]["policies"]], "package": "policy" in sys.modules,
                      "found": sys.modules["rules"].check([template])}))
"""


def test_pack_loads_as_a_script_directory_too(tmp_path):
    """The engine runs the pack as a program from its directory (PulumiPolicy.yaml, __main__.py puts the directory
    on sys.path), not as the package `policy` the tests import: every module must find its siblings both ways."""
    template = {"type": LT, "name": "lt", "dependsOn": [], "inputs": {"metadataOptions": {"httpTokens": "optional"}}}
    main = Path(__file__).resolve().parent.parent / "policy" / "__main__.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the repository must not be importable
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT_DIRECTORY_RUN), str(main), json.dumps(template)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout.splitlines()[-1])
    assert loaded["package"] is False  # the modules were loaded by their plain names
    assert loaded["policies"] == [p.name for p in policies()]
    assert loaded["found"] == check([template]) and "imdsv2-required" in loaded["found"]


def test_pack_passes_every_example_through_the_engine_path(planned):
    graph = _graph(planned)
    servicer = _servicer()
    assert [d.message for r in graph for d in _analyze(r, servicer)] == []
    assert [d.message for d in _analyze_stack(graph)] == []


@ONE_PLAN
@pytest.mark.parametrize("rule,breaker,words", BREAKS, ids=[b[1].__name__ for b in BREAKS])
def test_pack_reports_each_break_as_a_mandatory_violation(planned, rule, breaker, words):
    graph = _graph(planned)
    breaker(graph)
    diagnostics = [d for r in graph for d in _analyze(r)] + _analyze_stack(graph)
    assert {d.policyName.removesuffix("-graph") for d in diagnostics} == _rules_failed(rule, breaker)
    assert all(d.enforcementLevel == proto.MANDATORY for d in diagnostics)
    assert any(words in d.message for d in diagnostics), [d.message for d in diagnostics]


def test_a_value_unknown_in_preview_skips_only_the_rules_that_read_it(planned):
    lt = _lt(_graph(planned))
    lt["inputs"]["imageId"] = UNKNOWN_STRING_VALUE  # read by no rule
    lt["inputs"]["metadataOptions"]["httpTokens"] = "optional"
    lt["inputs"]["networkInterfaces"][0]["associatePublicIpAddress"] = UNKNOWN_STRING_VALUE
    found = {d.policyName: d for d in _analyze(lt)}
    assert found["imdsv2-required"].enforcementLevel == proto.MANDATORY
    assert "can't be known during preview" in found["compute-nodes-private"].message
    assert found["compute-nodes-private"].enforcementLevel == proto.ADVISORY
    assert set(found) == {"imdsv2-required", "compute-nodes-private"}


def test_node_role_reach_on_stack_outputs_is_reported_once(planned):
    """Under `pulumi up` the stack policy sees outputs, where the role also lists its attachments."""
    graph = _raw_graph(planned)
    _edit_policy(graph, lambda doc: doc.update(Statement=[st for st in doc["Statement"] if st.get("Effect") != "Deny"]))
    _first(graph, records.ROLE)["inputs"]["managedPolicyArns"] = [iam_rules.SSM_CORE]
    found = iam_rules.node_role_reach_graph(graph)
    assert len(found) == 1 and found[0].count("ssm:GetParameter,") == 1, found
    assert iam_rules.node_role_reach_graph(identity_fix(graph)) == []


def test_snake_case_props_are_normalised_and_tag_keys_kept():
    props = {"metadata_options": {"http_tokens": "optional"},
             "tag_specifications": [{"resource_type": "instance", "tags": {"hpcc:role": "head", "cost_center": "x"}}],
             "network_interfaces": [{"device_index": 0, "associate_public_ip_address": "true"}],
             "block_device_mappings": [{"ebs": {"encrypted": "true"}}]}
    view = records.normalise(props)
    assert view["tagSpecifications"][0]["tags"] == {"hpcc:role": "head", "cost_center": "x"}
    assert node_rules.imdsv2_resource(LT, view) == node_rules.imdsv2_resource(LT, {"metadataOptions": {"httpTokens": "optional"}})
    assert node_rules.imdsv2_resource(LT, view)
    assert network_rules.private_compute_resource(LT, view) == []  # the head: tag read through the view


# --- SSH sources: the config and the pack refuse the same sets ------------------------------------------------

SSH_CASES = [  # (allowedCidrs, refused)
    (["0.0.0.0/1", "128.0.0.0/1"], True), (["0.0.0.0/0"], True), (["::/0"], True), (["10.0.0.0/15"], True),
    (["10.0.0.0/16", "10.1.0.0/24"], True), (["198.18.0.0/16", "198.19.0.0/16"], True), (["2001:db8::/64"], True),
    ([f"192.0.{i}.0/24" for i in range(50)] + ["10.0.0.0/17", "10.1.0.0/17"], True),
    (["203.0.113.0/24"], False), (["10.0.0.0/16"], False), (["10.0.0.0/16", "10.0.0.0/17", "10.0.128.0/24"], False),
    (["203.0.113.5/32", "198.51.100.0/24"], False), ([f"192.0.{i}.0/24" for i in range(50)], False),
]


def _ssh_graph(planned, cidrs):
    """The planned graph with the head's SSH rules as infra/components/security.py writes them for these sources."""
    graph = [r for r in _graph(planned) if "-head-ssh-in-" not in r["name"]]
    for i, cidr in enumerate(cidrs):
        graph.append({"type": INGRESS, "name": f"head-ssh-in-{i}", "dependsOn": [], "inputs": {
            "securityGroupId": "sg-head", "ipProtocol": "tcp", "fromPort": 22, "toPort": 22,
            ("cidrIpv6" if ":" in cidr else "cidrIpv4"): cidr}})
    return graph


@pytest.mark.parametrize("cidrs,refused", SSH_CASES, ids=[",".join(c)[:40] for c, _ in SSH_CASES])
def test_config_and_pack_refuse_the_same_ssh_sources(planned, cidrs, refused):
    from infra.config import ConfigError, parse

    cluster = {"name": "demo", "headNode": {"instanceType": "c5n.18xlarge"},
               "compute": {"instanceType": "c6i.16xlarge", "count": 1}, "ssh": {"allowedCidrs": cidrs}}
    try:
        parse("us-east-1", cluster)
        config_refused = False
    except ConfigError as e:
        config_refused = any(p.startswith("cluster.ssh.allowedCidrs") for p, _ in e.problems)
    pack_found = check(_ssh_graph(planned, cidrs))
    assert config_refused == refused
    assert set(pack_found) == ({"no-world-ingress"} if refused else set()), pack_found


def test_config_and_pack_share_one_limit():
    from infra.validators.inputs import SSH_MAX_IPV4_ADDRESSES

    assert network_rules.MAX_INGRESS_ADDRESSES[4] == SSH_MAX_IPV4_ADDRESSES


def test_ipv6_source_passes_once_the_vpc_has_ipv6(planned):
    graph = _ssh_graph(planned, ["2001:db8::/64"])
    _first(graph, records.VPC)["inputs"]["assignGeneratedIpv6CidrBlock"] = True
    assert check(graph) == {}
    graph = _ssh_graph(planned, ["2001:db8::/47"])  # wider than a /48 fails even then
    _first(graph, records.VPC)["inputs"]["ipv6CidrBlock"] = "2600:1f18::/56"
    assert set(check(graph)) == {"no-world-ingress"}


def test_one_rule_wider_than_the_limit_is_refused_before_it_is_created():
    """The per-resource check (the pack runs it before creating the rule) sees one source; the union is the graph's."""
    rule = {"type": INGRESS, "name": "half", "inputs": {"securityGroupId": "sg-1", "ipProtocol": "tcp", "fromPort": 22,
                                                       "toPort": 22, "cidrIpv4": "0.0.0.0/1"}}
    diagnostics = _analyze(rule)
    assert [d.policyName for d in diagnostics] == ["no-world-ingress"]
    assert "0.0.0.0/1 opens tcp 22 to 2,147,483,648 addresses" in diagnostics[0].message
    rule["inputs"]["cidrIpv4"] = "10.0.0.0/16"
    assert network_rules.world_ingress_resource(INGRESS, rule["inputs"]) == []


def test_a_prefix_list_of_narrow_networks_passes(planned):
    graph = _graph(planned)
    _prefix_list(graph, ["203.0.113.0/24"], extra=["198.51.100.0/24"])
    assert check(graph) == {}
