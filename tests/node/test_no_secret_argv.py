"""No secret value on a command line or in an environment (issue 33, finding 2): any local user reads every process's
argv in /proc/<pid>/cmdline. The head's real Secrets Manager calls (hpcc_node/certs.py's host CA at first boot and
through every phase of a rotation, hpcc_node/cluster_keys.py's SSH and login keys) run through the real
hpcc_node.aws.Aws against moto's Secrets Manager, every child process recorded; then each value the secrets ended
up holding is looked for in every argv and environment. The node side's one AWS caller also refuses such a call
before it runs, and the bootstrap's own put-secret-value calls pass files."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from moto.core.exceptions import JsonRESTError
from moto.secretsmanager.models import SecretsManagerBackend

from hpcc_node import awscli, certs, certstore, sshkeys
from hpcc_node.aws import Aws, AwsError, secret_on_command_line
from tests.node.cert_support import ARN_PREFIX, BUCKET, FakeAws, member

ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("hpcc/llm/host-ca", "hpcc/llm/ssh-key", "hpcc/llm/user-key")
RID = "20261129T040000Z"


class SecretsCli:
    """`aws secretsmanager ...` as the CLI answers it, on moto's model; every child process's argv and env kept."""

    def __init__(self):
        self.backend = SecretsManagerBackend("us-east-1", "123456789012")
        for name in SECRETS:
            self.backend.create_secret(name, None, None, None, None, None, None, [], False)
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, argv, **kw):
        self.calls.append((list(argv), dict(kw.get("env") or {})))
        assert argv[:2] == ["aws", "secretsmanager"], argv
        op, o = argv[2], {argv[i][2:]: argv[i + 1] for i in range(3, len(argv) - 1, 2)}
        b, sid = self.backend, o.get("secret-id")
        try:
            if op == "get-secret-value":
                out = b.get_secret_value(sid, None, o.get("version-stage") or "AWSCURRENT")["SecretString"] + "\n"
            elif op == "put-secret-value":
                value = o["secret-string"]
                value = Path(value[len("file://") :]).read_text() if value.startswith("file://") else value
                out = b.put_secret_value(
                    sid, value, None, o.get("client-request-token"), o.get("version-stages", "AWSCURRENT").split()
                )
            elif op == "list-secret-version-ids":
                out = b.list_secret_version_ids(sid)
            elif op == "update-secret-version-stage":
                out = json.dumps(
                    b.update_secret_version_stage(
                        sid, o["version-stage"], o.get("remove-from-version-id"), o.get("move-to-version-id")
                    )
                )
            else:
                raise AssertionError(f"unexpected call {argv}")
        except JsonRESTError as e:
            return subprocess.CompletedProcess(
                argv, 254, "", f"An error occurred ({e.error_type}) when calling the {op} operation: {e.message}"
            )
        return subprocess.CompletedProcess(argv, 0, out if isinstance(out, str) else json.dumps(out), "")

    def values(self) -> list[str]:
        """Every value every secret holds, each version."""
        out = []
        for name in SECRETS:
            for v in json.loads(self.backend.list_secret_version_ids(name))["Versions"]:
                out.append(self.backend.get_secret_value(name, v["VersionId"], None)["SecretString"])
        return out


def _pieces(secret: str) -> set[str]:
    """What would give a secret away: each line of it (a key's base64 body), each private key of the CA's JSON."""
    out = {line for line in secret.splitlines() if len(line) >= 16 and "-----" not in line}
    try:
        out |= {k["private"] for k in json.loads(secret).get("keys", [])}
    except (ValueError, AttributeError):
        pass
    return out | {secret}


def test_no_secret_reaches_a_command_line_or_an_environment_in_the_heads_secret_calls(tmp_path):
    cli = SecretsCli()
    for name in ("hpcc/llm/ssh-key", "hpcc/llm/user-key"):  # the head's first boot put them (ssh.sh.j2, file://)
        cli.backend.put_secret_value(name, sshkeys.key_pair("hpcc-llm")[0], None, None, ["AWSCURRENT"])
    aws = Aws(run=cli, sleep=lambda s: None, pace_file=str(tmp_path / "pace"))
    head = certs.Head(aws, FakeAws(), BUCKET, "llm", ARN_PREFIX)
    members = [member("head", "10.0.0.4"), member("compute-000", "10.0.0.5")]
    head.sign_pending(members, 1_795_000_000)  # the first boot: the CA made and stored
    for i, phase in enumerate(certstore.PHASES):  # a whole rotation: add, switch, retire
        head.sign_pending(members, 1_795_000_060 + i, certstore.Rotation(RID, phase))
    puts = [argv for argv, _ in cli.calls if argv[2] == "put-secret-value"]
    assert len(puts) >= 4, "the CA's first write, its phases and the two keys' new versions"
    secrets = [s for s in cli.values() if s.strip()]
    assert len(secrets) >= 5
    leaked = [
        (argv[:3], piece[:24])
        for argv, env in cli.calls
        for s in secrets
        for piece in _pieces(s)
        if any(piece in a for a in argv) or any(piece in str(v) for v in env.values())
    ]
    assert not leaked, f"a secret's value on a command line or in an environment: {leaked[:3]}"
    assert not [argv for argv, _ in cli.calls if "PRIVATE KEY" in " ".join(argv)]


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["secretsmanager", "put-secret-value", "--secret-id", "s", "--secret-string", '{"keys": []}'], "inline"),
        (["secretsmanager", "put-secret-value", "--secret-id", "s", "--secret-string=abc"], "inline"),
        (["secretsmanager", "put-secret-value", "--secret-id", "s", "--secret-binary", "abc"], "inline"),
        (["ssm", "put-parameter", "--value", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n"], "private key"),
        (["secretsmanager", "put-secret-value", "--secret-id", "s", "--secret-string", "file:///tmp/x/key"], ""),
    ],
)
def test_the_node_sides_aws_caller_refuses_a_secret_on_the_command_line(tmp_path, argv, refused):
    assert (refused in secret_on_command_line(argv)) if refused else secret_on_command_line(argv) == ""
    if not refused:
        return
    ran = []
    aws = Aws(run=lambda *a, **k: ran.append(a), sleep=lambda s: None, pace_file=str(tmp_path / "pace"))
    with pytest.raises(AwsError, match="refused"):
        aws.call(*argv)
    assert ran == []


def test_the_controllers_cli_clients_refuse_a_private_key_in_their_input():
    ran = []
    client = awscli.Client("ssm", run=lambda *a, **k: ran.append(a))
    with pytest.raises(awscli.ClientError, match="refused"):
        client.put_parameter(Name="/x", Value="-----BEGIN RSA PRIVATE KEY-----")
    assert ran == []


def test_every_put_secret_value_of_the_bootstrap_passes_a_file():
    calls = [
        (p.name, line.strip())
        for p in sorted((ROOT / "templates").rglob("*.j2"))
        for line in p.read_text().splitlines()
        if "put-secret-value" in line and not line.lstrip().startswith("#")
    ]
    assert calls, "the bootstrap puts the cluster and munge keys"
    bad = [c for c in calls if not re.search(r"--secret-(string|binary) \"?fileb?://", c[1])]
    assert not bad, bad
