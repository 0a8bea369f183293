"""The policy pack's rules over real planned graphs: every example passes every rule; a copy of a real graph
broken in one place fails exactly that rule, with its message. The pack itself is driven through
pulumi-policy's own analyzer servicer (protobuf in, diagnostics out), as the Pulumi engine would drive it.

AmazonSSMManagedInstanceCore alone would let the nodes' role read every parameter in the account; the nodes'
inline policy denies reads outside /hpcc/<cluster>/ (infra/program/components/identity.py), and removing that Deny
fails `iam-least-privilege` (test_removing_the_deny_reopens_the_ssm_core_reach).
"""

import base64
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

from policy import iam_rules, network_rules, node_rules, records
from policy.pack import policies
from policy.records import LT
from policy.rules import RULES, check
from tests.policy import breaks as policy_breaks
from tests.policy import breaks_iam as policy_breaks_iam
from tests.policy.breaks import edit_policy, first, launch_template, planned_graph, prefix_list, ssm_core_attachment
from tests.policy.breaks_iam import node_policy, rules_failed
from tests.policy.support import KNOWN_GAP, identity_fix

RULE_NAMES = {r.name for r in RULES}
BREAKS = policy_breaks.BREAKS + policy_breaks_iam.BREAKS
INGRESS, EGRESS = records.INGRESS, records.EGRESS


def test_every_example_passes_every_rule(planned):
    assert check(planned_graph(planned)) == {}


def test_removing_the_deny_reopens_the_ssm_core_reach(planned):
    """Should AmazonSSMManagedInstanceCore be attached again (by hand), the Deny still narrows its reads."""
    graph = planned_graph(planned)
    graph.append(ssm_core_attachment(graph))
    assert {m for m in check(graph)["iam-least-privilege"] if KNOWN_GAP in m} == set()
    policy = node_policy(graph)
    doc = json.loads(policy["inputs"]["policy"])
    policy["inputs"]["policy"] = json.dumps(
        dict(doc, Statement=[st for st in doc["Statement"] if st.get("Effect") != "Deny"])
    )
    found = check(graph)
    assert set(found) == {"iam-least-privilege"}, found
    assert sum(KNOWN_GAP in m for m in found["iam-least-privilege"]) == 1, found


def test_the_nodes_session_manager_permissions_are_the_documented_minimum_and_nothing_is_attached(planned):
    from infra.program.components.identity import SESSION_MANAGER

    graph = planned_graph(planned)
    assert not [r for r in graph if r["type"] == records.ATTACHMENT]
    assert set(SESSION_MANAGER) == iam_rules.SESSION_MANAGER  # the program's and the pack's copies agree
    graph.append(ssm_core_attachment(graph))
    assert any("they need no managed policy" in m for m in check(graph)["iam-least-privilege"])


# The breaks run on one plan: each breaker edits resources every example has, and a rule's verdict on the break
# does not depend on the rest of the graph (every example passing every rule is checked on all of them). p5-llm has
# every kind the breakers touch (public head and its SSH rules, the S3 link, Slurm).
ONE_PLAN = pytest.mark.parametrize(
    "planned", [Path(__file__).resolve().parents[2] / "examples" / "p5-llm.yaml"], indirect=True, ids=["p5-llm"]
)


@ONE_PLAN
@pytest.mark.parametrize("rule,breaker,words", BREAKS, ids=[b[1].__name__ for b in BREAKS])
def test_a_broken_graph_fails_the_rule_with_its_message(planned, rule, breaker, words):
    graph = planned_graph(planned)
    breaker(graph)
    found = check(graph)
    assert set(found) == rules_failed(rule, breaker), found
    assert any(words in m for m in found[rule]), found[rule]


def test_every_rule_has_a_breaking_case():
    assert {b[0] for b in BREAKS} == RULE_NAMES


def test_both_aws_key_parts_are_recognised_alone():
    for script, what in (
        ("aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "secret access key"),
        ("KEY=ASIAIOSFODNN7EXAMPLE", "access key id"),
    ):
        found = node_rules.secrets_resource(
            records.INSTANCE, {"userDataBase64": base64.b64encode(script.encode()).decode()}
        )
        assert found and what in found[0], (script, found)
    # a checksum or a 40-character token with no key context is not a secret
    assert node_rules.secrets_resource(LT, {"userData": base64.b64encode(b"sha=" + b"a1" * 20).decode()}) == []


# --- the pack, driven the way the engine drives it --------------------------------------------------------


def _servicer():
    return _PolicyAnalyzerServicer(
        "hpcc", "0.0.1", policies(), EnforcementLevel.MANDATORY, None, None, None, None, None, None, None
    )


def _struct(inputs) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(json.loads(json.dumps(inputs)))
    return s


def _analyze(record, servicer=None):
    request = proto.AnalyzeRequest(
        type=record["type"],
        properties=_struct(record["inputs"]),
        urn=f"urn:pulumi:dev::hpcc::{record['type']}::{record['name']}",
        name=record["name"],
    )
    return list((servicer or _servicer()).Analyze(request, None).diagnostics)


def _analyze_stack(graph):
    urn = {r["name"]: f"urn:pulumi:dev::hpcc::{r['type']}::{r['name']}" for r in graph}
    request = proto.AnalyzeStackRequest(
        resources=[
            proto.AnalyzerResource(
                type=r["type"],
                properties=_struct(r["inputs"]),
                urn=urn[r["name"]],
                name=r["name"],
                dependencies=[urn[d] for d in r.get("dependsOn") or [] if d in urn],
            )
            for r in graph
        ]
    )
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
    main = Path(__file__).resolve().parents[2] / "policy" / "__main__.py"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the repository must not be importable
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT_DIRECTORY_RUN), str(main), json.dumps(template)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout.splitlines()[-1])
    assert loaded["package"] is False  # the modules were loaded by their plain names
    assert loaded["policies"] == [p.name for p in policies()]
    assert loaded["found"] == check([template]) and "imdsv2-required" in loaded["found"]


def test_pack_passes_every_example_through_the_engine_path(planned):
    graph = planned_graph(planned)
    servicer = _servicer()
    assert [d.message for r in graph for d in _analyze(r, servicer)] == []
    assert [d.message for d in _analyze_stack(graph)] == []


@ONE_PLAN
@pytest.mark.parametrize("rule,breaker,words", BREAKS, ids=[b[1].__name__ for b in BREAKS])
def test_pack_reports_each_break_as_a_mandatory_violation(planned, rule, breaker, words):
    graph = planned_graph(planned)
    breaker(graph)
    diagnostics = [d for r in graph for d in _analyze(r)] + _analyze_stack(graph)
    assert {d.policyName.removesuffix("-graph") for d in diagnostics} == rules_failed(rule, breaker)
    assert all(d.enforcementLevel == proto.MANDATORY for d in diagnostics)
    assert any(words in d.message for d in diagnostics), [d.message for d in diagnostics]


def test_a_value_unknown_in_preview_skips_only_the_rules_that_read_it(planned):
    lt = launch_template(planned_graph(planned))
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
    graph = planned_graph(planned)
    edit_policy(graph, lambda doc: doc.update(Statement=[st for st in doc["Statement"] if st.get("Effect") != "Deny"]))
    first(graph, records.ROLE)["inputs"]["managedPolicyArns"] = [iam_rules.SSM_CORE]
    found = iam_rules.node_role_reach_graph(graph)
    assert len(found) == 1 and found[0].count("ssm:GetParameter,") == 1, found
    assert iam_rules.node_role_reach_graph(identity_fix(graph)) == []


def test_snake_case_props_are_normalised_and_tag_keys_kept():
    props = {
        "metadata_options": {"http_tokens": "optional"},
        "tag_specifications": [{"resource_type": "instance", "tags": {"hpcc:role": "head", "cost_center": "x"}}],
        "network_interfaces": [{"device_index": 0, "associate_public_ip_address": "true"}],
        "block_device_mappings": [{"ebs": {"encrypted": "true"}}],
    }
    view = records.normalise(props)
    assert view["tagSpecifications"][0]["tags"] == {"hpcc:role": "head", "cost_center": "x"}
    assert node_rules.imdsv2_resource(LT, view) == node_rules.imdsv2_resource(
        LT, {"metadataOptions": {"httpTokens": "optional"}}
    )
    assert node_rules.imdsv2_resource(LT, view)
    assert network_rules.private_compute_resource(LT, view) == []  # the head: tag read through the view


# --- SSH sources: the config and the pack refuse the same sets ------------------------------------------------

SSH_CASES = [  # (allowedCidrs, refused)
    (["0.0.0.0/1", "128.0.0.0/1"], True),
    (["0.0.0.0/0"], True),
    (["::/0"], True),
    (["10.0.0.0/15"], True),
    (["10.0.0.0/16", "10.1.0.0/24"], True),
    (["198.18.0.0/16", "198.19.0.0/16"], True),
    (["2001:db8::/64"], True),
    ([f"192.0.{i}.0/24" for i in range(50)] + ["10.0.0.0/17", "10.1.0.0/17"], True),
    (["203.0.113.0/24"], False),
    (["10.0.0.0/16"], False),
    (["10.0.0.0/16", "10.0.0.0/17", "10.0.128.0/24"], False),
    (["203.0.113.5/32", "198.51.100.0/24"], False),
    ([f"192.0.{i}.0/24" for i in range(50)], False),
]


def _ssh_graph(planned, cidrs):
    """The planned graph with the head's SSH rules as infra/program/components/security.py writes them for these
    sources."""
    graph = [r for r in planned_graph(planned) if "-head-ssh-in-" not in r["name"]]
    for i, cidr in enumerate(cidrs):
        graph.append(
            {
                "type": INGRESS,
                "name": f"head-ssh-in-{i}",
                "dependsOn": [],
                "inputs": {
                    "securityGroupId": "sg-head",
                    "ipProtocol": "tcp",
                    "fromPort": 22,
                    "toPort": 22,
                    ("cidrIpv6" if ":" in cidr else "cidrIpv4"): cidr,
                },
            }
        )
    return graph


@pytest.mark.parametrize("cidrs,refused", SSH_CASES, ids=[",".join(c)[:40] for c, _ in SSH_CASES])
def test_config_and_pack_refuse_the_same_ssh_sources(planned, cidrs, refused):
    from infra.config.parse import ConfigError, parse

    cluster = {
        "name": "demo",
        "headNode": {"instanceType": "c5n.18xlarge"},
        "compute": {"instanceType": "c6i.16xlarge", "count": 1},
        "ssh": {"allowedCidrs": cidrs},
    }
    try:
        parse("us-east-1", cluster)
        config_refused = False
    except ConfigError as e:
        config_refused = any(p.startswith("cluster.ssh.allowedCidrs") for p, _ in e.problems)
    pack_found = check(_ssh_graph(planned, cidrs))
    assert config_refused == refused
    assert set(pack_found) == ({"no-world-ingress"} if refused else set()), pack_found


def test_config_and_pack_share_one_limit():
    from infra.config.validators.inputs import SSH_MAX_IPV4_ADDRESSES

    assert network_rules.MAX_INGRESS_ADDRESSES[4] == SSH_MAX_IPV4_ADDRESSES


def test_ipv6_source_passes_once_the_vpc_has_ipv6(planned):
    graph = _ssh_graph(planned, ["2001:db8::/64"])
    first(graph, records.VPC)["inputs"]["assignGeneratedIpv6CidrBlock"] = True
    assert check(graph) == {}
    graph = _ssh_graph(planned, ["2001:db8::/47"])  # wider than a /48 fails even then
    first(graph, records.VPC)["inputs"]["ipv6CidrBlock"] = "2600:1f18::/56"
    assert set(check(graph)) == {"no-world-ingress"}


def test_one_rule_wider_than_the_limit_is_refused_before_it_is_created():
    """The per-resource check (the pack runs it before creating the rule) sees one source; the union is the graph's."""
    rule = {
        "type": INGRESS,
        "name": "half",
        "inputs": {
            "securityGroupId": "sg-1",
            "ipProtocol": "tcp",
            "fromPort": 22,
            "toPort": 22,
            "cidrIpv4": "0.0.0.0/1",
        },
    }
    diagnostics = _analyze(rule)
    assert [d.policyName for d in diagnostics] == ["no-world-ingress"]
    assert "0.0.0.0/1 opens tcp 22 to 2,147,483,648 addresses" in diagnostics[0].message
    rule["inputs"]["cidrIpv4"] = "10.0.0.0/16"
    assert network_rules.world_ingress_resource(INGRESS, rule["inputs"]) == []


def test_a_prefix_list_of_narrow_networks_passes(planned):
    graph = planned_graph(planned)
    prefix_list(graph, ["203.0.113.0/24"], extra=["198.51.100.0/24"])
    assert check(graph) == {}
