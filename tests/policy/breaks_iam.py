"""Breaks of the cluster's permissions for the policy tests (tests/policy/test_policy.py): IAM grants, the bucket
policies and secrets in user data or state, each in one place; BREAKS names the rule that must catch it and words
of its message. The network, instance and storage breaks: tests/policy/breaks.py."""

import base64
import gzip
import json

from hpcc_contract import names
from policy import bucket_rules, records
from tests.policy.breaks import cluster_name, edit_policy, first, launch_template, ssm_core_attachment


def iam_star_on_star(g):
    edit_policy(g, lambda d: d["Statement"].append({"Effect": "Allow", "Action": "*", "Resource": "*"}))


def iam_service_wildcard(g):
    edit_policy(g, lambda d: d["Statement"][0].update(Action=["ssm:*"]))


def iam_other_clusters_parameters(g):
    edit_policy(
        g,
        lambda d: d["Statement"][0]["Resource"].append(
            "arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/someone-else/*"
        ),
    )


def iam_prefix_lookalike(g):
    c = cluster_name(g)
    edit_policy(
        g,
        lambda d: d["Statement"][0]["Resource"].append(
            f"arn:aws:ssm:us-east-1:123456789012:parameter{names.Paths(c + '2').prefix}/*"
        ),
    )


def iam_every_secret(g):
    edit_policy(
        g,
        lambda d: next(s for s in d["Statement"] if s.get("Sid") == "ClusterSshKey").update(
            Resource=["arn:aws:secretsmanager:us-east-1:123456789012:secret:*"]
        ),
    )


def ssm_core_reach_unnarrowed(g):
    g.append(ssm_core_attachment(g))
    policy = node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"] = [s for s in doc["Statement"] if s.get("Effect") != "Deny"]
    policy["inputs"]["policy"] = json.dumps(doc)


def deny_with_condition_does_not_narrow(g):
    g.append(ssm_core_attachment(g))  # attached by hand: only the Deny would narrow its reads
    policy = node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"][-1].update(Condition={"Bool": {"aws:SecureTransport": "true"}})
    policy["inputs"]["policy"] = json.dumps(doc)


def inline_role_policy_reads_every_secret(g):
    role = first(g, records.ROLE)
    role["inputs"]["inlinePolicies"] = [
        {
            "name": "extra",
            "policy": json.dumps(
                {"Statement": [{"Effect": "Allow", "Action": "secretsmanager:Get*", "Resource": "*"}]}
            ),
        }
    ]


def iam_admin_attached(g):
    g.append(
        dict(
            ssm_core_attachment(g),
            inputs=dict(ssm_core_attachment(g)["inputs"], policyArn="arn:aws:iam::aws:policy/AdministratorAccess"),
        )
    )


def node_policy(g, role="node"):
    return first(g, records.ROLE_POLICY, lambda r: r["name"].endswith(f"-{role}-policy"))


def _add_statement(g, statement, role="node"):
    policy = node_policy(g, role)
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"].append(statement)
    policy["inputs"]["policy"] = json.dumps(doc)


def metrics_written_to_every_workspace(g):
    """observability.remoteWrite grants the head one named workspace; a pattern would let it write anywhere."""
    workspaces = "arn:aws:aps:us-east-1:123456789012:workspace/*"
    _add_statement(g, {"Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": [workspaces]}, "head")


def metrics_written_by_the_compute_nodes(g):
    workspace = "arn:aws:aps:us-east-1:123456789012:workspace/ws-b226cc2a-a446-46a9-933a-ac50479a5568"
    _add_statement(g, {"Effect": "Allow", "Action": ["aps:RemoteWrite"], "Resource": [workspace]})


def _own_parameter(g, path):
    return f"arn:aws:ssm:us-east-1:123456789012:parameter{names.Paths(cluster_name(g)).prefix}/{path}"


def node_rewrites_the_settings(g):
    _add_statement(g, {"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": _own_parameter(g, "settings")})


def _edit_statement(g, sid, edit, role="node"):
    policy = node_policy(g, role)
    doc = json.loads(policy["inputs"]["policy"])
    edit(next(st for st in doc["Statement"] if st.get("Sid") == sid))
    policy["inputs"]["policy"] = json.dumps(doc)


def node_writes_every_status(g):
    _edit_statement(
        g, "ReportOwnStatus", lambda st: st.update(Resource=[st["Resource"][0].split("/status/")[0] + "/status/*"])
    )


def node_writes_the_ledger(g):
    _add_statement(
        g,
        {
            "Effect": "Allow",
            "Action": ["dynamodb:PutItem"],
            "Resource": f"arn:aws:dynamodb:us-east-1:123456789012:table/{names.ledger_table(cluster_name(g))}",
        },
    )


def node_launches_instances(g):
    _add_statement(
        g,
        {
            "Effect": "Allow",
            "Action": ["ec2:RunInstances"],
            "Resource": "arn:aws:ec2:*:*:instance/*",
            "Condition": {"StringEquals": {"aws:RequestTag/hpcc:cluster": cluster_name(g)}},
        },
    )


def controller_tags_any_instance(g):
    _edit_statement(g, "NameClusterInstances", lambda st: st.pop("Condition"), role="head")


def controller_reboots_any_instance(g):
    role = first(g, records.ROLE, lambda r: r["inputs"]["name"].endswith("-head"))
    role["inputs"]["inlinePolicies"] = [
        {
            "name": "remedy",
            "policy": json.dumps(
                {"Statement": [{"Effect": "Allow", "Action": ["ec2:RebootInstances"], "Resource": "*"}]}
            ),
        }
    ]


def controller_modifies_any_instances_metadata(g):
    _edit_statement(g, "ModifyClusterInstanceMetadata", lambda st: st.pop("Condition"), role="head")


def controller_passes_any_role(g):
    _edit_statement(
        g, "PassComputeRole", lambda st: st.update(Resource=["arn:aws:iam::123456789012:role/*"]), role="head"
    )


def _edit_state_policy(graph, sid, edit):
    policy = first(graph, bucket_rules.BUCKET_POLICY, lambda r: "-state-" in str(r["inputs"]["bucket"]))
    doc = json.loads(policy["inputs"]["policy"])
    edit(next(st for st in doc["Statement"] if st.get("Sid") == sid))
    policy["inputs"]["policy"] = json.dumps(doc)


def state_bucket_readable_by_anyone(g):
    _edit_state_policy(g, "NodesReadMembership", lambda st: st.update(Principal="*"))


def state_bucket_lets_nodes_write_every_status(g):
    _edit_state_policy(
        g, "NodesWriteOwnStatus", lambda st: st.update(Resource=[st["Resource"][0].split("/status/")[0] + "/status/*"])
    )


def state_bucket_lets_nodes_write_the_certificates(g):
    _edit_state_policy(
        g, "NodesWriteOwnStatus", lambda st: st["Resource"].append(st["Resource"][0].split("/status/")[0] + "/certs/*")
    )


def state_bucket_writable_by_other_principals(g):
    policy = first(g, bucket_rules.BUCKET_POLICY, lambda r: "-state-" in str(r["inputs"]["bucket"]))
    doc = json.loads(policy["inputs"]["policy"])
    doc["Statement"] = [st for st in doc["Statement"] if st.get("Sid") != "OnlyTheClusterWritesState"]
    policy["inputs"]["policy"] = json.dumps(doc)


def state_bucket_deny_spares_everyone(g):
    _edit_state_policy(
        g,
        "OnlyTheClusterWritesState",
        lambda st: st["Condition"]["ArnNotEquals"].update({"aws:PrincipalArn": ["arn:aws:iam::123456789012:role/*"]}),
    )


def compute_node_publishes_any_nodes_host_keys(g):
    _edit_statement(
        g,
        "PublishOwnHostKeys",
        lambda st: st.update(Resource=[st["Resource"][0].split("/hostkeys/")[0] + "/hostkeys/*"]),
    )


def compute_node_puts_the_ssh_key(g):
    policy = node_policy(g)
    doc = json.loads(policy["inputs"]["policy"])
    next(st for st in doc["Statement"] if st.get("Sid") == "ClusterSshKey")["Action"].append(
        "secretsmanager:PutSecretValue"
    )
    policy["inputs"]["policy"] = json.dumps(doc)


def head_tags_the_status_parameters(g):
    _add_statement(
        g,
        {"Effect": "Allow", "Action": ["ssm:AddTagsToResource"], "Resource": _own_parameter(g, "nodes/*")},
        role="head",
    )


def controller_terminates_any_instance(g):
    role = first(g, records.ROLE, lambda r: r["inputs"]["name"].endswith("-head"))
    role["inputs"]["inlinePolicies"] = [
        {
            "name": "scale",
            "policy": json.dumps(
                {
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["ec2:TerminateInstances", "autoscaling:SetDesiredCapacity"],
                            "Resource": "*",
                        }
                    ]
                }
            ),
        }
    ]


def controller_launches_without_a_template(g):
    _edit_statement(g, "LaunchClusterInstances", lambda st: st["Condition"].pop("ArnLike"), role="head")


def controller_launches_any_image(g):
    _edit_statement(g, "LaunchTemplateImageAndGroups", lambda st: st["Condition"].pop("Bool"), role="head")


def controller_launches_any_type(g):
    _edit_statement(
        g,
        "LaunchClusterInstances",
        lambda st: st["Condition"]["StringEquals"].update({"ec2:InstanceType": ["*"]}),
        role="head",
    )


def controller_launches_without_imdsv2(g):
    _edit_statement(
        g,
        "LaunchClusterInstances",
        lambda st: st["Condition"]["StringEquals"].pop("ec2:MetadataHttpTokens"),
        role="head",
    )


def controller_launches_into_any_reservation(g):
    _add_statement(
        g,
        {
            "Effect": "Allow",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            "Resource": ["arn:aws:ec2:us-east-1:123456789012:capacity-reservation/*"],
            "Condition": {"ArnLike": {"ec2:LaunchTemplate": "arn:aws:ec2:us-east-1:123456789012:launch-template/*"}},
        },
        role="head",
    )


def controller_launches_from_any_template(g):
    _edit_statement(g, "LaunchFromClusterTemplates", lambda st: st.pop("Condition"), role="head")


def compute_node_reads_the_host_ca(g):
    _add_statement(
        g,
        {
            "Effect": "Allow",
            "Action": "secretsmanager:GetSecretValue",
            "Resource": "arn:aws:secretsmanager:us-east-1:123456789012:secret:"
            f"{names.Paths(cluster_name(g)).secret_prefix}/host-*",
        },
    )


def compute_node_writes_host_certificates(g):
    _add_statement(g, {"Effect": "Allow", "Action": "ssm:PutParameter", "Resource": _own_parameter(g, "certs/*")})


PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n-----END OPENSSH PRIVATE "
    "KEY-----\n"
)


def private_key_in_gzipped_user_data(g):
    lt = launch_template(g, "head")
    script = gzip.decompress(base64.b64decode(lt["inputs"]["userData"])).decode()
    script += f"cat > /root/.ssh/id_ed25519 <<'K'\n{PEM}K\n"
    lt["inputs"]["userData"] = base64.b64encode(gzip.compress(script.encode())).decode()


def aws_keys_in_instance_user_data(g):
    first(g, records.INSTANCE)["inputs"]["userData"] = (
        "#!/bin/bash\nexport AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n"
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
    )


def munge_key_as_a_secret_version(g):
    g.append(
        {
            "type": records.SECRET_VERSION,
            "name": "llm-munge-key-value",
            "custom": True,
            "inputs": {"secretId": "hpcc/llm/munge-key", "secretString": "c2VjcmV0"},
            "outputs": {},
        }
    )


def _edit_bucket_policy(graph, edit):
    policy = first(graph, bucket_rules.BUCKET_POLICY, lambda r: "-bundles-" in str(r["inputs"]["bucket"]))
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
    first(g, bucket_rules.PUBLIC_BLOCK)["inputs"]["blockPublicPolicy"] = False


def bundle_bucket_without_public_block(g):
    g.remove(first(g, bucket_rules.PUBLIC_BLOCK))


BREAKS = [
    ("iam-least-privilege", iam_star_on_star, "every action on every resource"),
    ("iam-least-privilege", iam_service_wildcard, "ssm:*"),
    ("iam-least-privilege", iam_other_clusters_parameters, "hpcc/someone-else"),
    ("iam-least-privilege", iam_prefix_lookalike, "2/*: the nodes may read only"),
    ("iam-least-privilege", iam_every_secret, "secret:*"),
    ("iam-least-privilege", iam_admin_attached, "AdministratorAccess"),
    ("iam-least-privilege", ssm_core_reach_unnarrowed, "on * through AmazonSSMManagedInstanceCore"),
    ("iam-least-privilege", deny_with_condition_does_not_narrow, "add a Deny of these actions"),
    ("iam-least-privilege", inline_role_policy_reads_every_secret, "secretsmanager:GetSecretValue on *"),
    (
        "iam-least-privilege",
        metrics_written_to_every_workspace,
        "reaches arn:aws:aps:us-east-1:123456789012:workspace/*",
    ),
    (
        "iam-least-privilege",
        metrics_written_by_the_compute_nodes,
        "reaches arn:aws:aps:us-east-1:123456789012:workspace/ws-",
    ),
    ("bundle-bucket-private", bundles_readable_by_anyone, "Statement[0] lets * in"),
    (
        "bundle-bucket-private",
        bundles_readable_by_another_account,
        "lets arn:aws:iam::999999999999:role/hpcc-llm-node in",
    ),
    ("bundle-bucket-private", bundles_writable_by_the_nodes, "allows s3:GetObject, s3:PutObject"),
    ("bundle-bucket-private", bundle_bucket_public_policy_allowed, "blockPublicPolicy must be true"),
    ("bundle-bucket-private", bundle_bucket_without_public_block, "no public access block"),
    (
        "node-writes-own-only",
        node_rewrites_the_settings,
        "ssm:PutParameter on arn:aws:ssm:us-east-1:123456789012:parameter/hpcc/",
    ),
    ("node-writes-own-only", node_writes_every_status, "a compute node writes only its own status"),
    ("node-writes-own-only", node_writes_the_ledger, "only the head's controller writes"),
    ("node-writes-own-only", node_launches_instances, "only the head's controller launches"),
    ("node-writes-own-only", controller_tags_any_instance, "without a condition that the resource is tagged"),
    ("node-writes-own-only", controller_passes_any_role, "iam:PassRole"),
    ("node-writes-own-only", controller_reboots_any_instance, "allows ec2:RebootInstances on * without a condition"),
    (
        "node-writes-own-only",
        controller_modifies_any_instances_metadata,
        "allows ec2:ModifyInstanceMetadataOptions on arn:aws:ec2:",
    ),
    ("state-bucket-private", state_bucket_readable_by_anyone, "lets * in"),
    ("state-bucket-private", state_bucket_lets_nodes_write_every_status, "writes only its own status"),
    ("state-bucket-private", state_bucket_lets_nodes_write_the_certificates, "s3:PutObject on arn:aws:s3:::"),
    ("state-bucket-private", state_bucket_writable_by_other_principals, "no Deny of object writes"),
    ("state-bucket-private", state_bucket_deny_spares_everyone, "no Deny of object writes"),
    ("node-writes-own-only", compute_node_publishes_any_nodes_host_keys, "writes only its own status and host keys"),
    ("node-writes-own-only", compute_node_puts_the_ssh_key, "only the head writes"),
    ("node-writes-own-only", head_tags_the_status_parameters, "ssm:AddTagsToResource"),
    ("node-writes-own-only", controller_terminates_any_instance, "without a condition that the resource is tagged"),
    ("node-writes-own-only", compute_node_writes_host_certificates, "llm/certs/* without the hpcc:instance condition"),
    ("node-writes-own-only", controller_launches_without_a_template, "without the ec2:LaunchTemplate condition"),
    ("node-writes-own-only", controller_launches_any_image, "not given by the template"),
    ("node-writes-own-only", controller_launches_any_type, "of any instance type"),
    ("node-writes-own-only", controller_launches_without_imdsv2, "without IMDSv2 required"),
    ("node-writes-own-only", controller_launches_into_any_reservation, "not every one of the account"),
    ("node-writes-own-only", controller_launches_from_any_template, "only the cluster's launch templates"),
    ("host-ca-head-only", compute_node_reads_the_host_ca, "lets the compute nodes read the host CA"),
    ("no-secrets-in-user-data", private_key_in_gzipped_user_data, "userData holds a private key block"),
    ("no-secrets-in-user-data", aws_keys_in_instance_user_data, "an AWS secret access key"),
    ("no-secret-values-in-state", munge_key_as_a_secret_version, "hpcc/llm/munge-key puts the secret's value"),
]


# Breaks that grant writes as well as reads: node-writes-own-only fails them too, rightly.
ALSO_WRITES = {iam_star_on_star, iam_service_wildcard, iam_every_secret}


# Controller grants that reach beyond the cluster: iam-least-privilege fails them too, rightly.
ALSO_REACH = {
    controller_tags_any_instance,
    controller_modifies_any_instances_metadata,
    controller_passes_any_role,
    controller_launches_any_image,
    controller_launches_into_any_reservation,
    controller_launches_from_any_template,
}


def rules_failed(rule, breaker):
    return (
        {rule}
        | ({"node-writes-own-only"} if breaker in ALSO_WRITES else set())
        | ({"iam-least-privilege"} if breaker in ALSO_REACH else set())
    )
