"""The host CA of the cluster's own (hpcc_node/certs.py) with the real ssh-keygen: the head signs what a node
published, for the principals the head knows, for 7 days, again at half-life; the node installs what names its own
host keys; a rotation adds, switches and retires a CA in order, each phase once."""

import subprocess

import pytest

from hpcc_contract.names import NO_ROTATION, certs_key, hostkeys_key
from hpcc_node import certs, certs_agent, certstore
from tests.node.cert_support import (
    ARN_PREFIX,
    BUCKET,
    FakeAws,
    cert_text,
    host_keys,
    instance_of,
    make_head,
    make_node,
    member,
    sshd_stand_in,
)

NOW = 1_795_000_000  # 2026-11-18
DAY = 86400
HOSTS = ["10.0.0.4", "10.0.0.5", "10.0.0.6"]
MEMBERS = [member(n, ip) for n, ip in zip(["head", "compute-000", "compute-001"], HOSTS, strict=True)]


@pytest.fixture
def cluster(tmp_path):
    aws = FakeAws()
    head = make_head(aws)
    nodes = {
        name: make_node(aws, tmp_path, name, ip)
        for name, ip in zip(["head", "compute-000", "compute-001"], HOSTS, strict=True)
    }
    return aws, head, nodes


def issued(aws, node):
    return certstore.read_issued(aws.objects[certs_key(node)])


def published_by(aws, node):
    return certstore.read_published(aws.objects[hostkeys_key(ARN_PREFIX + instance_of(node))])


def test_the_head_signs_each_published_host_key_for_the_principals_it_knows(cluster):
    aws, head, nodes = cluster
    assert head.sign_pending(MEMBERS, NOW) == []  # nothing published yet: nothing signed, the CA made and stored
    authority = certstore.read_authority(aws.secrets["hpcc/llm/host-ca"])
    nodes["compute-000"].publish()
    assert head.sign_pending(MEMBERS, NOW) == ["compute-000"]
    paths, changed = nodes["compute-000"].install(issued(aws, "compute-000"))
    assert changed and sorted(p.rsplit("/", 1)[1] for p in paths) == [
        "ssh_host_ecdsa_key-cert.pub",
        "ssh_host_ed25519_key-cert.pub",
    ]
    text = cert_text(paths[0])
    assert "Principals: \n                compute-000\n                10.0.0.5\n                ip-10-0-0-5\n" in text
    assert f'Key ID: "llm/compute-000/{instance_of("compute-000")}"' in text  # the membership's instance
    assert "Valid: from 2026-11-18T11:01:40 to 2026-11-25T11:01:40" in text  # 7 days from 5 min before signing
    assert f"Signing CA: ED25519 {certstore.fingerprint(authority.signer['public'])}" in text
    known = nodes["compute-000"].known_hosts
    assert open(known).read().splitlines()[1:] == [f"@cert-authority * {authority.signer['public']}"]
    # what it applied, for hpcc rotate-keys to wait on
    nodes["compute-000"].publish()
    published = published_by(aws, "compute-000")
    assert published.trust == [certstore.fingerprint(authority.signer["public"])] == [published.cert_ca]
    assert head.sign_pending(MEMBERS, NOW + 60) == []  # a rerun signs nothing


def test_the_python_fingerprint_and_certified_key_are_ssh_keygens(cluster, tmp_path):
    aws, head, nodes = cluster
    nodes["head"].publish()
    head.sign_pending(MEMBERS, NOW)
    for path, key in nodes["head"].host_keys():
        listed = subprocess.run(["ssh-keygen", "-lf", f"{path}.pub"], capture_output=True, text=True).stdout.split()[1]
        assert certstore.fingerprint(key) == listed
    certified = {certstore.certified_key(c) for c in issued(aws, "head").certs}
    assert certified == {k for _, k in nodes["head"].host_keys()}


def test_keys_published_under_another_instance_than_the_membership_lists_are_not_signed(tmp_path):
    """The head reads a member's keys at its own instance's key only: what another instance (a node's previous
    one, or another node's root, which may write only its own key) published is never read for it."""
    aws = FakeAws()
    make_node(aws, tmp_path, "compute-001", "10.0.0.6", instance="i-0aaaaaaaaaaaaaaa1").publish()
    assert make_head(aws).sign_pending(MEMBERS, NOW) == []
    assert "certs/compute-001.json" not in aws.objects


def test_a_key_published_for_another_address_is_not_signed(cluster):
    aws, head, nodes = cluster
    nodes["compute-001"].ip = "10.0.0.9"  # the node's previous instance, or a root claiming another address
    nodes["compute-001"].publish()
    assert head.sign_pending(MEMBERS, NOW) == []
    assert "certs/compute-001.json" not in aws.objects


@pytest.mark.parametrize("later, again", [(3 * DAY, False), (3.5 * DAY, True), (8 * DAY, True)])
def test_certificates_are_signed_again_at_half_life(cluster, later, again):
    aws, head, nodes = cluster
    nodes["compute-000"].publish()
    head.sign_pending(MEMBERS, NOW)
    first = issued(aws, "compute-000")
    assert (head.sign_pending(MEMBERS, NOW + later) == ["compute-000"]) is again
    if again:
        second = issued(aws, "compute-000")
        assert second.valid_from == NOW + later - certs.SKEW and second.certs != first.certs
        _, changed = nodes["compute-000"].install(second)
        assert changed


def test_a_node_installs_no_certificate_for_a_key_it_does_not_serve(cluster, tmp_path):
    aws, head, nodes = cluster
    nodes["compute-000"].publish()
    head.sign_pending(MEMBERS, NOW)
    paths, changed = nodes["compute-001"].install(issued(aws, "compute-000"))  # another node's certificates
    assert (paths, changed) == ([], False)


def test_a_rotation_adds_switches_and_retires_a_ca_once_each(cluster):
    aws, head, nodes = cluster
    for n in nodes.values():
        n.publish()
    head.sign_pending(MEMBERS, NOW)
    old = certstore.read_authority(aws.secrets["hpcc/llm/host-ca"]).signer["public"]
    fp = certstore.fingerprint

    head.sign_pending(MEMBERS, NOW + 60, certstore.Rotation("20261118T070000Z", "add"))
    added = certstore.read_authority(aws.secrets["hpcc/llm/host-ca"])
    new = added.keys[1]["public"]
    assert added.trusted == [old, new] and added.signer["public"] == old
    assert all(issued(aws, n).cas == [old, new] and issued(aws, n).ca == fp(old) for n in nodes)
    head.sign_pending(MEMBERS, NOW + 120, certstore.Rotation("20261118T070000Z", "add"))  # again: no third CA
    assert certstore.read_authority(aws.secrets["hpcc/llm/host-ca"]) == added

    head.sign_pending(MEMBERS, NOW + 180, certstore.Rotation("20261118T070000Z", "switch"))
    assert all(issued(aws, n).cas == [old, new] and issued(aws, n).ca == fp(new) for n in nodes)
    head.sign_pending(MEMBERS, NOW + 240, certstore.Rotation("20261118T070000Z", "retire"))
    retired = certstore.read_authority(aws.secrets["hpcc/llm/host-ca"])
    assert retired.trusted == [new] and retired.rotation == "20261118T070000Z:retire"
    assert all(issued(aws, n).cas == [new] for n in nodes)


def test_a_head_that_missed_phases_applies_them_in_order():
    pairs = iter([{"private": "p2", "public": "ssh-ed25519 AAAB"}])
    start = certstore.Authority([{"private": "p1", "public": "ssh-ed25519 AAAA"}], 0, "")
    moved = certs.advance(start, certstore.Rotation("20261118T070000Z", "retire"), lambda: next(pairs))
    assert moved == certstore.Authority([{"private": "p2", "public": "ssh-ed25519 AAAB"}], 0, "20261118T070000Z:retire")


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"id": "x", "phase": "add"}', "expected a YYYYMMDDTHHMMSSZ id"),
        ('{"id": "20261118T070000Z", "phase": "drop"}', "one of add, switch, retire"),
        ("add", "is not"),
    ],
)
def test_a_malformed_rotation_parameter_is_refused_naming_it(text, problem):
    with pytest.raises(ValueError, match=problem):
        certstore.read_rotation(text)


@pytest.mark.parametrize(
    "text", ["pending", "", '{"ip": "10.0.0.5", "keys": ["rm -rf /"], "trust": []}', '{"ip": "10.0.0.5"}', "[1]"]
)
def test_whatever_a_node_wrote_that_is_not_keys_is_nothing(text):
    assert certstore.read_published(text) is None


def test_the_rotation_parameter_as_pulumi_creates_it_is_no_rotation():
    assert certstore.read_rotation(NO_ROTATION) is None  # what Pulumi creates it with


def doc_of(members):
    return {
        "generation": 1,
        "head": {"name": "head", "ip": members[0].ip, "instance": members[0].instance},
        "nodes": [{"name": m.name, "ip": m.ip, "instance": m.instance, "state": "ready"} for m in members[1:]],
    }


def agent_part(aws, tmp_path, name, ip, logs, reloads):
    part = certs_agent.Certs(
        aws,
        aws,
        BUCKET,
        "llm",
        "head" if name == "head" else "compute",
        name,
        ip,
        ARN_PREFIX + instance_of(name),
        log=logs.append,
        reload=lambda: reloads.append(name) or "reloaded",
    )
    part.me = make_node(aws, tmp_path, name, ip)
    return part


def test_the_agents_tick_signs_installs_reloads_once_and_renews_at_half_life(tmp_path):
    aws, logs, reloads = FakeAws(), [], []
    doc = doc_of(MEMBERS[:2])
    agents = {
        name: agent_part(aws, tmp_path, name, ip, logs, reloads)
        for name, ip in (("head", HOSTS[0]), ("compute-000", HOSTS[1]))
    }
    agents["compute-000"].tick(doc, NOW)  # publishes
    agents["head"].tick(doc, NOW)  # signs itself and compute-000
    agents["compute-000"].tick(doc, NOW + 60)  # installs
    aws.gets.clear()
    agents["compute-000"].tick(doc, NOW + 120)  # nothing new: one conditional GET of its own certificates
    assert reloads == ["head", "compute-000"], logs
    assert aws.gets == ["certs/compute-000.json"]
    agents["head"].tick(doc, NOW + 4 * DAY)
    agents["compute-000"].tick(doc, NOW + 4 * DAY + 60)
    assert reloads == ["head", "compute-000", "head", "compute-000"], logs
    assert published_by(aws, "compute-000").cert_ca == issued(aws, "compute-000").ca


def test_an_error_in_the_certificates_is_logged_and_the_tick_goes_on(tmp_path):
    logs = []
    part = agent_part(FakeAws(), tmp_path, "head", HOSTS[0], logs, [])
    part.tick({"generation": 1, "head": {"ip": HOSTS[0]}, "nodes": "not a list"}, NOW)
    assert logs and logs[0].startswith("host certificates: ") and logs[0].endswith("; next tick")


def test_a_cluster_booted_before_the_host_ca_signs_with_the_cluster_key_until_a_rotation_retires_it(tmp_path):
    """Its nodes on the old bundle trust only root's cluster key as CA: the upgraded head signs with it, the new
    CA trusted beside it, and `hpcc rotate-keys` takes the cluster key out of the CA set."""
    aws = FakeAws()
    key = tmp_path / "id_hpcc"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    cluster_pub = certstore.key_line(key.with_suffix(".pub").read_text())
    old_known = tmp_path / "known"
    old_known.write_text(f"# hpcc llm: a node is who the cluster key certified\n@cert-authority * {cluster_pub}\n")
    assert certs.legacy_signer(str(tmp_path / "none"), str(key)) is None  # a node booted with the host CA
    head = make_head(aws)
    head.legacy = certs.legacy_signer(str(old_known), str(key))
    node = make_node(aws, tmp_path, "compute-000", HOSTS[1])
    node.publish()
    head.sign_pending(MEMBERS, NOW)
    first = issued(aws, "compute-000")
    assert first.ca == certstore.fingerprint(cluster_pub) and first.cas[0] == cluster_pub and len(first.cas) == 2
    for phase in certstore.PHASES:
        head.sign_pending(MEMBERS, NOW + 60, certstore.Rotation("20261124T150000Z", phase))
    last = issued(aws, "compute-000")
    assert cluster_pub not in last.cas and len(last.cas) == 1 and last.ca == certstore.fingerprint(last.cas[0])
    assert cluster_pub not in aws.secrets["hpcc/llm/host-ca"]
    logs = []
    part = agent_part(aws, tmp_path, "head", HOSTS[0], logs, [])
    part.head.legacy = certs.legacy_signer(str(old_known), str(key))
    aws.secrets.pop("hpcc/llm/host-ca")
    for _ in range(2):
        part.tick(None, NOW)
    assert sum("run `hpcc rotate-keys` once every node runs this bundle" in line for line in logs) == 1, logs


def test_a_replacement_at_its_predecessors_address_is_signed_for_its_own_keys(cluster, tmp_path):
    aws, head, nodes = cluster
    nodes["compute-000"].publish()
    head.sign_pending(MEMBERS, NOW)
    assert head.sign_pending(MEMBERS, NOW + 60) == []  # looked at again, nothing changed
    # its sshd's keys made again, same instance and address: found by the head's window of 10 a tick
    again = make_node(aws, tmp_path / "again", "compute-000", HOSTS[1])
    again.publish()
    assert head.sign_pending(MEMBERS, NOW + 120) == ["compute-000"]
    paths, changed = again.install(issued(aws, "compute-000"))
    assert changed and len(paths) == 2
    # a replacement instance given its predecessor's address: due at once (the certificates name another instance)
    new = make_node(aws, tmp_path / "new", "compute-000", HOSTS[1], instance="i-0bbbbbbbbbbbbbbb2")
    new.publish()
    members = [MEMBERS[0], member("compute-000", HOSTS[1], "i-0bbbbbbbbbbbbbbb2"), MEMBERS[2]]
    head.cursor = 1  # the window would not look at compute-000 this tick
    assert head.sign_pending(members, NOW + 180) == ["compute-000"]
    assert issued(aws, "compute-000").instance == "i-0bbbbbbbbbbbbbbb2"
    assert new.install(issued(aws, "compute-000"))[1]


def test_the_bootstrap_publishes_at_its_status_keys_instance_and_installs_what_the_head_signed(tmp_path):
    from hpcc_node import certs_boot

    assert certs_boot.instance_arn(f"status/{ARN_PREFIX}i-0abc123.json") == f"{ARN_PREFIX}i-0abc123"
    with pytest.raises(ValueError, match="is not status/<instance ARN>.json"):
        certs_boot.instance_arn("status/../certs/head.json")
    aws, ticks = FakeAws(), []
    node = make_node(aws, tmp_path, "compute-000", HOSTS[1])

    def sleep(_):  # the head's agent signs during the node's wait
        ticks.append(make_head(aws).sign_pending(MEMBERS, NOW))

    paths = certs_boot.wait_for_certificates(node, NOW + 600, clock=lambda: NOW, sleep=sleep)
    assert ticks == [["compute-000"]] and len(paths) == 2
    assert published_by(aws, "compute-000").cert_ca == issued(aws, "compute-000").ca
    late = make_node(aws, tmp_path, "compute-001", HOSTS[2])
    with pytest.raises(TimeoutError, match="certs/compute-001.json is absent or unreadable"):
        certs_boot.wait_for_certificates(late, NOW, clock=lambda: NOW + 1, sleep=lambda _: None)


def test_a_transient_s3_error_during_the_wait_is_tried_again_and_a_permanent_one_fails_at_once(tmp_path):
    """A connect timeout (the AWS CLI's error, as the box's loaded S3 gave one) must not fail a node's boot."""
    from hpcc_node import awscli, certs_boot

    aws = FakeAws()
    node = make_node(aws, tmp_path, "compute-000", HOSTS[1])
    real, errors = (
        node.fetch,
        [
            awscli.ClientError("CliError", 'Connect timeout on endpoint URL: "http://s3"', "get_object"),
            awscli.ClientError("SlowDown", "x", "get_object"),
        ],
    )

    def flaky():
        if errors:
            raise errors.pop(0)
        return real()

    node.fetch = flaky
    signed = []
    paths = certs_boot.wait_for_certificates(
        node, NOW + 600, clock=lambda: NOW, sleep=lambda _: signed.append(make_head(aws).sign_pending(MEMBERS, NOW))
    )
    assert len(paths) == 2 and errors == []
    denied = make_node(aws, tmp_path, "compute-001", HOSTS[2])
    denied.fetch = lambda: (_ for _ in ()).throw(awscli.ClientError("AccessDenied", "no", "get_object"))
    with pytest.raises(awscli.ClientError, match="AccessDenied"):
        certs_boot.wait_for_certificates(denied, NOW + 600, clock=lambda: NOW, sleep=lambda _: None)


@pytest.mark.parametrize("code", ["NoSuchKey", "AccessDenied"])  # 403 without s3:ListBucket: a compute node's
def test_a_missing_object_reads_as_none(code):
    from tests.node.cert_support import S3Error

    class Missing:
        def get_object(self, **_):
            raise S3Error(code)

    assert certstore.get(Missing(), BUCKET, "certs/head.json") == (None, "")


def test_a_certificate_is_due_for_another_instance_at_the_same_address(cluster):
    aws, head, nodes = cluster
    nodes["compute-000"].publish()
    head.sign_pending(MEMBERS, NOW)
    first, a = issued(aws, "compute-000"), head.authority
    assert not certs.due(first, HOSTS[1], a, NOW + 60, instance_of("compute-000"))
    assert certs.due(first, HOSTS[1], a, NOW + 60, "i-0bbbbbbbbbbbbbbb2")  # not left to the window of 10 a tick


def test_the_head_signs_a_whole_booting_fleet_in_one_tick_with_its_s3_requests_in_parallel(tmp_path):
    """A 120-node boot at once: one tick signs every node that published (the head once signed 50 a tick, each S3
    request through its own node's pacer), and its requests overlap: a fake S3 that answers two nodes' published keys
    only once both are asked for fails a head that reads them one at a time."""
    import threading

    aws = FakeAws()
    head = make_head(aws)
    names = [f"compute-{i:03d}" for i in range(120)]
    ips = [f"10.0.{i // 200}.{i % 200 + 10}" for i in range(120)]
    keys = host_keys(tmp_path / "shared")  # one node's keys published for every node: signing is what is counted
    for name, ip in zip(names, ips, strict=True):
        node = certs.Node(aws, BUCKET, "llm", name, ip, ARN_PREFIX + instance_of(name), run=sshd_stand_in(keys))
        node.publish()
    two_at_once = threading.Barrier(2, timeout=10)
    read = aws.get_object

    def get_object(Bucket, Key, IfNoneMatch=""):
        if Key in (hostkeys_key(ARN_PREFIX + instance_of(n)) for n in ("compute-000", "compute-001")):
            two_at_once.wait()  # compute-000's and compute-001's keys come back only once both are asked for
        return read(Bucket, Key, IfNoneMatch)

    aws.get_object = get_object
    signed = head.sign_pending([member(n, ip) for n, ip in zip(names, ips, strict=True)], NOW)
    assert sorted(signed) == names
    assert all(certstore.read_issued(aws.objects[certs_key(n)]).ip == ip for n, ip in zip(names, ips, strict=True))


def test_a_node_in_the_renewal_window_without_a_certificate_is_signed_not_a_crash(tmp_path, monkeypatch):
    """More nodes due than BATCH: those left over join the renewal window with no certificate yet (the scale
    simulator found the head's tick raising AttributeError there, every tick)."""
    monkeypatch.setattr(certs, "BATCH", 1)
    aws = FakeAws()
    head = make_head(aws)
    keys = host_keys(tmp_path / "shared")
    names, ips = ["compute-000", "compute-001"], ["10.0.0.5", "10.0.0.6"]
    members = [member(n, ip) for n, ip in zip(names, ips, strict=True)]
    assert head.sign_pending(members, NOW) == []  # compute-000 looked up; nothing published yet
    for name, ip in zip(names, ips, strict=True):
        certs.Node(aws, BUCKET, "llm", name, ip, ARN_PREFIX + instance_of(name), run=sshd_stand_in(keys)).publish()
    # compute-001 looked up too; compute-000 is the one due this tick, compute-001 (no certificate) in the window
    assert sorted(head.sign_pending(members, NOW)) == names
