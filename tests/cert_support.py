"""A fake of the AWS calls the host certificates make (SSM parameters, the host-ca secret), and nodes whose host keys
are real ssh-keygen keys in a directory: what tests/test_host_certs.py, test_host_keys.py and test_rotate_keys.py share."""

from __future__ import annotations

import subprocess
from pathlib import Path

from hpcc_node import certs
from hpcc_node.aws import NotFound


class FakeAws:
    def __init__(self):
        self.params: dict[str, tuple[int, str]] = {}
        self.secrets: dict[str, str] = {}
        self.puts: list[str] = []

    def get_parameters(self, names):
        return {n: self.params[n] for n in names if n in self.params}

    def put_parameter(self, name, value):
        self.params[name] = (self.params.get(name, (0, ""))[0] + 1, value)
        self.puts.append(name)

    def call(self, *args):
        if args[:2] == ("secretsmanager", "get-secret-value"):
            if args[3] not in self.secrets:
                raise NotFound("ResourceNotFoundException")
            return self.secrets[args[3]] + "\n"
        if args[:2] == ("secretsmanager", "put-secret-value"):
            self.secrets[args[3]] = args[5]
            return "{}"
        raise AssertionError(f"unexpected call {args}")


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
    return certs.Node(aws, cluster, name, ip, run=sshd_stand_in(keys), known_hosts=str(tmp / name / "known_hosts"),
                      instance=instance)


def cert_text(path: str | Path) -> str:
    return subprocess.run(["ssh-keygen", "-L", "-f", str(path)], capture_output=True, text=True, check=True,
                          env={"TZ": "UTC", "PATH": "/usr/bin:/bin"}).stdout
