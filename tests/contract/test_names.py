"""The contract's names as running clusters carry them: changing one orphans every existing cluster's resource of
that name (reap, status and the nodes find them by these), so each spelling is pinned here, the one place outside
hpcc_contract/ that may spell them (tests/test_architecture.py)."""

from __future__ import annotations

from hpcc_contract import names


def test_the_tags_and_the_state_buckets_keys():
    assert (names.TAG_CLUSTER, names.TAG_ROLE, names.TAG_NODE, names.TAG_GROUP, names.TAG_INSTANCE) == (
        "hpcc:cluster",
        "hpcc:role",
        "hpcc:node",
        "hpcc:group",
        "hpcc:instance",
    )
    arn = "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"
    assert (names.MEMBERSHIP_KEY, names.STATUS_PREFIX, names.NO_ROTATION) == ("membership.json", "status/", "none")
    assert names.hostkeys_key(arn) == f"hostkeys/{arn}.json" and names.certs_key("gpu-1000") == "certs/gpu-1000.json"
    assert names.bundle_key("ab12") == "bundles/ab12.tar.gz"


def test_the_parameters_and_secrets_of_a_cluster():
    p = names.Paths("llm")
    assert (p.prefix, p.settings, p.groups, p.bundle, p.fsx, p.rotation) == (
        "/hpcc/llm",
        "/hpcc/llm/settings",
        "/hpcc/llm/groups",
        "/hpcc/llm/bundle",
        "/hpcc/llm/fsx",
        "/hpcc/llm/rotation",
    )
    assert (p.pinned_image, p.pinned_az, p.node("gpu-000")) == (
        "/hpcc/llm/pinned/image",
        "/hpcc/llm/pinned/availability-zone",
        "/hpcc/llm/nodes/gpu-000",
    )
    assert (p.ssh_secret, p.user_secret, p.munge_secret, p.host_ca_secret) == (
        "hpcc/llm/ssh-key",
        "hpcc/llm/user-key",
        "hpcc/llm/munge-key",
        "hpcc/llm/host-ca",
    )


def test_the_aws_resource_names_of_a_cluster():
    assert (names.state_bucket("llm", "123456789012"), names.bundle_bucket("llm", "123456789012")) == (
        "hpcc-llm-state-123456789012",
        "hpcc-llm-bundles-123456789012",
    )
    assert (names.ledger_table("llm"), names.placement_group_name("llm")) == ("hpcc-llm-ledger", "hpcc-llm")
    assert (names.role_name("llm", "head"), names.role_name("llm", "compute")) == ("hpcc-llm-head", "hpcc-llm-node")
    assert names.launch_template_name("llm", "gpu") == "hpcc-llm-gpu" and names.key_comment("llm") == "hpcc-llm"
    assert names.resource_name("llm", "vpc") == "llm-vpc" and names.tags("llm", "vpc") == {
        "Name": "llm-vpc",
        "hpcc:cluster": "llm",
    }


def test_node_names_have_three_digits_below_a_thousand_and_launch_tokens_fit_ec2():
    assert [names.node_name("gpu", i) for i in (0, 999, 1000)] == ["gpu-000", "gpu-999", "gpu-1000"]
    token = names.fleet_client_token("c" * 32, "g" * 12, 1e9, 7)
    assert token.startswith("hpcc-") and len(token) <= 64 and token.isascii()
