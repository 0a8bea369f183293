"""The controller's AWS clients (hpcc_node/controller/clients.py): boto3 in process when the head has it, the CLI's
otherwise or when asked, short timeouts and adaptive retries either way, a hung connection that fails in seconds as
an error the controller catches, and the head's boto3 pin the same as the operator's."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from hpcc_node.controller import clients

ROOT = Path(__file__).resolve().parents[2]


def test_boto3_clients_carry_short_timeouts_and_adaptive_retries():
    made, kind = clients.clients({"AWS_DEFAULT_REGION": "us-east-1"})
    assert kind == "boto3" and sorted(made) == sorted(clients.SERVICES)
    config = made["dynamodb"].meta.config
    assert (config.connect_timeout, config.read_timeout) == (clients.CONNECT_SECONDS, clients.READ_SECONDS)
    assert config.retries == {"mode": "adaptive", "total_max_attempts": clients.ATTEMPTS}


def test_the_cli_clients_pass_the_same_timeouts_on_every_call():
    seen = []

    def run(argv, **_):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, '{"Reservations": []}', "")

    made, kind = clients.clients({"HPCC_AWS_CLIENTS": "cli"}, run=None)
    assert kind == "cli"
    made, kind = clients.clients({}, run=run)  # a runner asks for the CLI's clients
    assert kind == "cli"
    made["ec2"].describe_instances(Filters=[])
    argv = seen[0]
    i = argv.index("--cli-read-timeout")
    assert argv[i + 1] == str(clients.READ_SECONDS)
    assert argv[argv.index("--cli-connect-timeout") + 1] == str(clients.CONNECT_SECONDS)


def test_what_cannot_be_given_is_refused_naming_the_fix(monkeypatch):
    with pytest.raises(clients.ClientsError, match="use boto3, cli"):
        clients.clients({"HPCC_AWS_CLIENTS": "botocore"})
    monkeypatch.setattr(clients, "_boto3", lambda: None)
    with pytest.raises(clients.ClientsError, match=re.escape(clients.BOTO3)):
        clients.clients({"HPCC_AWS_CLIENTS": "boto3"})
    assert clients.clients({})[1] == "cli"  # without boto3, unset means the CLI


def test_a_connection_that_never_answers_fails_in_seconds_as_an_error_the_controller_catches(monkeypatch):
    monkeypatch.setattr(clients, "READ_SECONDS", 1)
    monkeypatch.setattr(clients, "ATTEMPTS", 1)
    with socket.socket() as listener:  # accepts (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        made, _ = clients.clients({"AWS_DEFAULT_REGION": "us-east-1"})
        assert made["dynamodb"].meta.config.read_timeout == 1
        with pytest.raises(clients.errors()) as e:
            made["dynamodb"].describe_table(TableName="t")
    assert "timeout" in type(e.value).__name__.lower() or "timed out" in str(e.value).lower()


def test_the_heads_wheels_are_the_operators_pins_each_with_its_hash():
    pins = dict(
        line.split("#")[0].strip().split("==")
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line.split("#")[0]
    )
    wheels = {name: version for name, version, _ in clients.HEAD_WHEELS}
    name, version = clients.BOTO3.split("==")
    assert pins[name] == wheels[name] == version and pins["botocore"] == wheels["botocore"]
    lines = clients.head_requirements().splitlines()
    assert len(lines) == len(clients.HEAD_WHEELS) and all(
        re.fullmatch(r"\S+==\S+ --hash=sha256:[0-9a-f]{64}", x) for x in lines
    )


def test_the_head_wheels_are_everything_boto3_imports():
    """--no-deps installs only what is listed: the list must close over boto3's requirements (read from the
    installed distributions' metadata), or the controller's import fails on the head."""
    from importlib.metadata import requires

    listed = {name.lower() for name, _, _ in clients.HEAD_WHEELS}
    todo, seen = ["boto3"], set()
    while todo:
        name = todo.pop()
        seen.add(name)
        for req in requires(name) or []:
            dep = re.split(r"[ ;<>=!~\[(]", req, maxsplit=1)[0].lower()
            if "extra ==" in req or dep in seen:
                continue
            todo.append(dep)
    assert seen <= listed, sorted(seen - listed)


def test_the_controller_step_gets_the_requirements_from_the_bundles_module():
    import sys

    out = subprocess.run([sys.executable, "-m", "hpcc_node.controller.clients"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == clients.head_requirements()
