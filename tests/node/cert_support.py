"""A fake of the AWS calls the host certificates make (the rotation parameter, the host-ca secret, the state bucket's
objects with ETags), and nodes whose host keys are real ssh-keygen keys in a directory: what
tests/node/test_host_certs.py, test_host_keys.py and test_rotate_keys.py share."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pwd
import subprocess
from pathlib import Path

from moto.core.exceptions import JsonRESTError
from moto.secretsmanager.models import SecretsManagerBackend

from hpcc_node import certs, cluster_keys, sshkeys
from hpcc_node.aws import AwsError, NotFound

BUCKET = "hpcc-llm-state-123456789012"
ARN_PREFIX = "arn:aws:ec2:us-east-1:123456789012:instance/"


def instance_of(name: str) -> str:
    """A stable instance id per node name (tests name a replacement's instance themselves)."""
    return "i-" + hashlib.sha256(name.encode()).hexdigest()[:17]


def member(name: str, ip: str, instance: str = "") -> certs.Member:
    return certs.Member(name, ip, instance or instance_of(name))


class S3Error(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.response = {"Error": {"Code": code}}


class FakeAws:
    """SSM and Secrets Manager as hpcc_node.aws.Aws, S3 as a boto3-shaped client (one object serves both)."""

    def __init__(self):
        self.params: dict[str, tuple[int, str]] = {}
        self.secrets: dict[str, str] = {}
        self.objects: dict[str, str] = {}
        self.puts: list[str] = []
        self.gets: list[str] = []
        # the SSH and login keys of cluster llm, created empty as Pulumi creates them
        # (infra/program/components/identity.py)
        self.keys = SecretsManagerBackend("us-east-1", "123456789012")
        for secret in KEY_SECRETS:
            self.keys.create_secret(f"hpcc/llm{secret}", None, None, None, None, None, None, [], False)

    def get_object(self, Bucket, Key, IfNoneMatch=""):
        assert Bucket == BUCKET
        self.gets.append(Key)
        if Key not in self.objects:
            raise S3Error("NoSuchKey")
        etag = hashlib.md5(self.objects[Key].encode()).hexdigest()
        if IfNoneMatch == etag:
            raise S3Error("304")
        return {"Body": io.BytesIO(self.objects[Key].encode()), "ETag": etag}

    def put_object(self, Bucket, Key, Body, ContentType=""):
        assert Bucket == BUCKET
        self.objects[Key] = Body.decode()
        self.puts.append(Key)
        return {}

    def get_parameters(self, names):
        return {n: self.params[n] for n in names if n in self.params}

    def put_parameter(self, name, value):
        self.params[name] = (self.params.get(name, (0, ""))[0] + 1, value)
        self.puts.append(name)

    def call(self, *args):
        if len(args) > 3 and args[3].endswith(KEY_SECRETS):
            return self.key_call(args[1], _options(args[2:]))
        if args[:2] == ("secretsmanager", "get-secret-value"):
            if args[3] not in self.secrets:
                raise NotFound("ResourceNotFoundException")
            return self.secrets[args[3]] + "\n"
        if args[:2] == ("secretsmanager", "put-secret-value"):
            value = args[5]  # the CLI reads file:// values (hpcc_node/certs.py writes the CA through a scratch file)
            self.secrets[args[3]] = Path(value[len("file://") :]).read_text() if value.startswith("file://") else value
            return "{}"
        raise AssertionError(f"unexpected call {args}")

    def key_call(self, operation: str, o: dict) -> str:
        """The aws CLI's secretsmanager commands hpcc_node/cluster_keys.py makes, on moto's model of the labels."""
        b, sid = self.keys, o["secret-id"]
        try:
            if operation == "get-secret-value":
                return b.get_secret_value(sid, None, o.get("version-stage") or "AWSCURRENT")["SecretString"] + "\n"
            if operation == "put-secret-value":
                value = o["secret-string"]
                if value.startswith("file://"):
                    value = Path(value[len("file://") :]).read_text()
                return b.put_secret_value(
                    sid, value, None, o.get("client-request-token"), o.get("version-stages", "AWSCURRENT").split()
                )
            if operation == "list-secret-version-ids":
                return b.list_secret_version_ids(sid)
            if operation == "update-secret-version-stage":
                return json.dumps(
                    b.update_secret_version_stage(
                        sid, o["version-stage"], o.get("remove-from-version-id"), o.get("move-to-version-id")
                    )
                )
        except JsonRESTError as e:
            raise NotFound(str(e)) if e.code == 404 or "NotFound" in e.error_type else AwsError(str(e)) from None
        raise AssertionError(f"unexpected call {operation} {o}")


KEY_SECRETS = (
    "/ssh-key",
    "/user-key",
)  # their labels matter (cluster_keys.py): moto's Secrets Manager model holds them


def _options(args) -> dict:
    """`--name value` pairs of a CLI call (`--query X --output text` included)."""
    return {args[i][2:]: args[i + 1] for i in range(0, len(args) - 1, 2)}


def host_keys(directory: Path, types=("ed25519", "ecdsa")) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for t in types:
        path = directory / f"ssh_host_{t}_key"
        path.unlink(missing_ok=True)
        Path(f"{path}.pub").unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", t, "-N", "", "-f", str(path)], check=True)
        out.append(path)
    return out


def sshd_stand_in(keys: list[Path]):
    """A `run` that answers `sshd -T` with these HostKey lines and runs everything else."""

    def run(args, **kw):
        if args[:2] == ["sshd", "-T"]:
            return subprocess.CompletedProcess(args, 0, "".join(f"hostkey {k}\n" for k in keys), "")
        return subprocess.run(args, **kw)

    return run


def make_node(aws: FakeAws, tmp: Path, name: str, ip: str, cluster: str = "llm", instance: str = "") -> certs.Node:
    keys = host_keys(tmp / name)
    return certs.Node(
        aws,
        BUCKET,
        cluster,
        name,
        ip,
        ARN_PREFIX + (instance or instance_of(name)),
        run=sshd_stand_in(keys),
        known_hosts=str(tmp / name / "known_hosts"),
    )


def make_head(aws: FakeAws, cluster: str = "llm") -> certs.Head:
    return certs.Head(aws, aws, BUCKET, cluster, ARN_PREFIX)


def cert_text(path: str | Path) -> str:
    return subprocess.run(
        ["ssh-keygen", "-L", "-f", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={"TZ": "UTC", "PATH": "/usr/bin:/bin"},
    ).stdout


def seed_keys(aws: FakeAws) -> dict[str, str]:
    """Root's cluster key and the login user's key, as the head's first boot puts them (ssh.sh.j2 head_key)."""
    out = {}
    for secret in KEY_SECRETS:
        out[secret] = sshkeys.key_pair("hpcc-llm")[0]
        aws.keys.put_secret_value(f"hpcc/llm{secret}", out[secret], None, None, ["AWSCURRENT"])
    return out


def node_keys(aws: FakeAws, tmp: Path, name: str) -> cluster_keys.Keys:
    """A node's Keys with root's and the login user's (alice's) homes under tmp/name, as its bootstrap left them."""
    homes = {"root": tmp / name / "root", "alice": tmp / name / "alice"}
    for home in homes.values():
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        (home / ".ssh" / "id_hpcc").touch()
    return cluster_keys.Keys(
        aws,
        "llm",
        "10.0.0.0/16",
        lambda: "alice",
        home_of=lambda user: pwd.struct_passwd(
            (user, "x", os.getuid(), os.getgid(), "", str(homes[user]), "/bin/bash")
        ),
    )
