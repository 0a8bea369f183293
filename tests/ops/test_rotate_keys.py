"""`hpcc rotate-keys` (infra/ops/rotate_keys.py) against a cluster whose head and nodes run the real certificate code
(hpcc_node/certs.py, real ssh-keygen) on one store (the rotation parameter as Pulumi creates it, the state bucket's
membership, host keys and certificates): each wait between phases lets every agent tick once.
The phases go in order, each only once every node applied the one before; a second rotation is refused while one
runs; --resume carries it on; a node that never applies a phase stops the command naming it."""

import json

import pytest
from botocore.exceptions import ClientError
from typer.testing import CliRunner

from hpcc_node import certs, certs_agent, certstore
from infra.ops import OpsError, rotate_keys
from tests.node.cert_support import ARN_PREFIX, BUCKET, FakeAws, instance_of, make_node, node_keys, seed_keys

HOSTS = ["10.0.0.4", "10.0.0.5", "10.0.0.6"]
NODES = ["head", "compute-000", "compute-001"]


class OpsAws:
    """The operator's side of the same parameters (infra/ops/aws.Aws.call's shape)."""

    region = "us-east-1"

    def __init__(self, store: FakeAws):
        self.store, self.puts = store, []

    def client(self, service):
        assert service == "s3"
        return self.store

    def call(self, service, op, **kw):
        if op == "get_caller_identity":
            return {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/ops"}
        if op == "get_parameter":  # the settings: none, so the bucket is the program's name for it
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": "none"}}, "GetParameter")
        if op == "get_parameters":
            return {
                "Parameters": [{"Name": n, "Value": v} for n, (_, v) in self.store.get_parameters(kw["Names"]).items()]
            }
        if op == "put_parameter":
            if not kw["Overwrite"] and kw["Name"] in self.store.params:
                raise ClientError({"Error": {"Code": "ParameterAlreadyExists", "Message": "exists"}}, "PutParameter")
            self.puts.append(certstore.read_rotation(kw["Value"]).phase)
            self.store.put_parameter(kw["Name"], kw["Value"])
            return {}
        raise AssertionError(op)


class Cluster:
    def __init__(self, tmp_path, frozen=()):
        self.store, self.now, self.frozen, self.logs = FakeAws(), 1_795_000_000.0, set(frozen), []
        self.tmp, self.logins, self.watch = tmp_path, [], False  # watch: record who_lets_in_whom after each tick
        self.store.params["/hpcc/llm/rotation"] = (1, "none")  # as Pulumi creates it
        self.first_keys = seed_keys(self.store)
        self.doc = {
            "generation": 1,
            "head": {"name": "head", "ip": HOSTS[0], "instance": instance_of("head")},
            "nodes": [
                {"name": n, "ip": ip, "instance": instance_of(n), "state": "ready"}
                for n, ip in zip(NODES[1:], HOSTS[1:], strict=True)
            ],
        }
        self.store.objects["membership.json"] = json.dumps(self.doc)
        self.agents = {}
        for name, ip in zip(NODES, HOSTS, strict=True):
            part = certs_agent.Certs(
                self.store,
                self.store,
                BUCKET,
                "llm",
                "head" if name == "head" else "compute",
                name,
                ip,
                ARN_PREFIX + instance_of(name),
                log=self.logs.append,
                reload=lambda: "reloaded",
                keys=node_keys(self.store, tmp_path, name),
            )
            part.me = make_node(self.store, tmp_path, name, ip)
            self.agents[name] = part
        self.ops = OpsAws(self.store)
        for _ in range(3):
            self.tick()

    def tick(self, _seconds: float = 0) -> None:
        self.now += 60
        for name in ("head", "compute-000", "compute-001"):
            if name not in self.frozen:
                self.agents[name].tick(self.doc, self.now)
                if self.watch:
                    self.logins.append(self.who_lets_in_whom())

    def who_lets_in_whom(self) -> dict[tuple[str, str, str], bool]:
        """(user, from, to) -> whether the key `from` logs in with is in `to`'s authorized_keys, now."""
        out = {}
        for user in ("root", "alice"):
            ssh = {n: tmp / n / user / ".ssh" for n, tmp in ((n, self.tmp) for n in NODES)}
            for a in NODES:
                key = (ssh[a] / "id_hpcc.pub").read_text().split()[1]
                for b in NODES:
                    out[(user, a, b)] = key in (ssh[b] / "authorized_keys").read_text().split()
        return out

    def rotate(self, resume=False, timeout=600.0):
        said = []
        rid = rotate_keys.rotate(self.ops, "llm", resume, timeout, said.append, clock=lambda: self.now, sleep=self.tick)
        return rid, said


def authority(cluster):
    return certstore.read_authority(cluster.store.secrets["hpcc/llm/host-ca"])


def test_a_rotation_goes_add_switch_retire_waiting_for_every_node(tmp_path):
    c = Cluster(tmp_path)
    old = authority(c).signer["public"]
    assert rotate_keys.lagging(rotate_keys.Cluster(c.ops, "llm"), "add") == (NODES, 3)  # nothing applied yet
    rid, said = c.rotate()
    assert c.ops.puts == ["add", "switch", "retire"]
    assert said[0] == f"rotation {rid} started" and said[-1].startswith(f"rotation {rid} done")
    for phase in ("add", "switch", "retire"):  # progress shown, each phase complete before the next
        assert f"{phase}: 3/3 nodes applied" in said
        assert said.index(f"{phase}: 3/3 nodes applied") < len(said) - 1
    new = authority(c)
    assert new.trusted != [old] and len(new.trusted) == 1
    for name in NODES:
        lines = [
            line
            for line in open(c.agents[name].me.known_hosts).read().splitlines()
            if line.startswith("@cert-authority")
        ]
        assert lines == [f"@cert-authority * {new.trusted[0]}"]


def test_the_rotation_gives_root_and_the_login_user_new_keys_and_every_login_works_at_every_step(tmp_path):
    c = Cluster(tmp_path)
    before = {(n, u): (tmp_path / n / u / ".ssh" / "id_hpcc").read_text() for n in NODES for u in ("root", "alice")}
    assert set(before.values()) == {c.first_keys["/ssh-key"], c.first_keys["/user-key"]}  # the agents' first tick
    c.watch = True
    c.rotate()
    # after every single agent's tick, every node's key (root's, the login user's) opens every node
    assert len(c.logins) >= 9 and all(all(step.values()) for step in c.logins), [
        k for step in c.logins for k, ok in step.items() if not ok
    ][:5]
    for n in NODES:
        for user, secret in (("root", "/ssh-key"), ("alice", "/user-key")):
            ssh = tmp_path / n / user / ".ssh"
            new = c.store.keys.get_secret_value(f"hpcc/llm{secret}", None, "AWSCURRENT")["SecretString"]
            assert (ssh / "id_hpcc").read_text() == new != before[(n, user)]
            cluster_lines = [
                line for line in (ssh / "authorized_keys").read_text().splitlines() if line.endswith(" hpcc-llm")
            ]
            assert cluster_lines == [f'from="10.0.0.0/16" {(ssh / "id_hpcc.pub").read_text().strip()}']
    labels = json.loads(c.store.keys.list_secret_version_ids("hpcc/llm/ssh-key"))["Versions"]
    assert sorted(s for v in labels for s in v["VersionStages"]) == ["AWSCURRENT"]  # the old key has no label left
    assert any("cluster keys: hpcc/llm/ssh-key: a new key, AWSPENDING" in line for line in c.logs), c.logs


def test_a_second_rotation_is_refused_while_one_runs_and_resume_carries_it_on(tmp_path):
    c = Cluster(tmp_path, frozen={"compute-001"})
    with pytest.raises(OpsError, match=r"phase add: compute-001 did not apply it within 1 min.*--resume"):
        c.rotate(timeout=60)
    with pytest.raises(
        OpsError, match=r"rotation \d{8}T\d{6}Z is still at phase add: run `hpcc rotate-keys --cluster llm --resume`"
    ):
        c.rotate()
    c.frozen.clear()
    rid, said = c.rotate(resume=True)
    assert c.ops.puts == ["add", "switch", "retire"] and said[-1].startswith(f"rotation {rid} done")
    assert c.rotate(resume=True) == ("", ["no rotation is running: nothing to resume"])
    rid2, _ = c.rotate()  # after a finished one, a new one may start
    assert rid2 and c.ops.puts[-3:] == ["add", "switch", "retire"]


def test_a_node_applied_a_phase_only_when_it_serves_and_trusts_what_the_head_wrote():
    ca1, ca2 = certs.new_key_pair()["public"], certs.new_key_pair()["public"]
    f1, f2 = certstore.fingerprint(ca1), certstore.fingerprint(ca2)
    switch = certstore.Issued("10.0.0.5", [], [ca1, ca2], f2, 0, 1, "", "20261125T050000Z:switch")

    def published(trust, ca, keys="20261125T050000Z:switch", authorized=2):
        return certstore.Published("10.0.0.5", [], trust, ca, "", keys, {"root": authorized, "alice": authorized})

    assert rotate_keys.applied("switch", switch, published([f1, f2], f2))
    assert not rotate_keys.applied("switch", switch, published([f1, f2], f1))  # old certs
    assert not rotate_keys.applied("switch", switch, published([f2], f2))  # trust not both
    assert not rotate_keys.applied("retire", switch, published([f1, f2], f2))
    assert not rotate_keys.applied("switch", switch, published([f1, f2], f2, "20261125T050000Z:add"))  # keys of add
    assert not rotate_keys.applied("switch", switch, published([f1, f2], f2, authorized=1))  # the old key dropped early
    assert not rotate_keys.applied("add", None, None)


def test_the_command_reports_a_malformed_rotation_parameter_without_a_traceback(monkeypatch, tmp_path):
    from infra.ops import cli, cli_support

    c = Cluster(tmp_path)
    c.store.params["/hpcc/llm/rotation"] = (1, "not json")
    monkeypatch.setattr(cli_support, "aws_for", lambda region: c.ops)
    out = CliRunner().invoke(cli.app, ["rotate-keys", "--cluster", "llm"])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    assert "/hpcc/llm/rotation: the rotation parameter is not" in out.output and "--value none" in out.output


def test_a_cluster_with_no_membership_is_named_without_a_traceback(monkeypatch, tmp_path):
    from infra.ops import cli, cli_support

    c = Cluster(tmp_path)
    del c.store.objects["membership.json"]
    monkeypatch.setattr(cli_support, "aws_for", lambda region: c.ops)
    out = CliRunner().invoke(cli.app, ["rotate-keys", "--cluster", "llm"])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    assert f"no membership.json in s3://{BUCKET}" in " ".join(out.output.split()), out.output
