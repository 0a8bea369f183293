"""The head's certificate signer's S3 client (hpcc_node/certs_agent.py signer_s3, issue 38's "4,096 certificates
signed in < 10 min"): in process with the controller's construction where the head agent's Python has boto3, the
AWS CLI's otherwise, said in the agent's log; a compute node's agent keeps its own client; the timeouts, retries and
pool come from hpcc_node/controller/clients.py alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hpcc_node import awscli, certs, certs_agent
from hpcc_node.controller import clients, observe

ROOT = Path(__file__).resolve().parents[2]
HEAD_ENV = {"AWS_DEFAULT_REGION": "us-east-1"}


def test_the_heads_signer_calls_s3_in_process_with_the_controllers_timeouts_retries_and_pool():
    lines: list[str] = []
    s3, kind = certs_agent.signer_s3("head", object(), HEAD_ENV, lines.append)
    assert kind == "boto3" and s3.meta.service_model.service_name == "s3"
    config = s3.meta.config
    assert (config.connect_timeout, config.read_timeout) == (clients.CONNECT_SECONDS, clients.READ_SECONDS)
    assert config.retries == {"mode": "adaptive", "total_max_attempts": clients.ATTEMPTS}
    assert config.max_pool_connections == clients.POOL
    assert lines == ["host certificates: the signer calls S3 in process (boto3)"]


def test_the_timeouts_are_clients_py_s_not_a_copy(monkeypatch):
    """One place: changing clients.py's values changes the signer's client."""
    monkeypatch.setattr(clients, "READ_SECONDS", 7)
    monkeypatch.setattr(clients, "CONNECT_SECONDS", 2)
    s3, _ = certs_agent.signer_s3("head", None, HEAD_ENV, lambda _: None)
    assert (s3.meta.config.connect_timeout, s3.meta.config.read_timeout) == (2, 7)


def test_without_boto3_the_signer_calls_s3_through_the_cli_with_the_same_timeouts_and_says_so(monkeypatch):
    monkeypatch.setattr(clients, "_boto3", lambda: None)
    lines: list[str] = []
    s3, kind = certs_agent.signer_s3("head", object(), HEAD_ENV, lines.append)
    assert kind == "cli" and isinstance(s3, awscli.Client) and s3.service == "s3"
    assert s3.options == clients.cli_timeouts()
    assert len(lines) == 1 and f"no boto3 in {sys.executable}" in lines[0] and "through the AWS CLI" in lines[0]


@pytest.mark.parametrize("wanted", ["boto3", "botocore"])
def test_a_clients_setting_that_cannot_be_given_falls_back_to_the_cli_naming_why(monkeypatch, wanted):
    """The controller refuses to start on these; the agent never fails its node: the CLI, and the reason logged."""
    monkeypatch.setattr(clients, "_boto3", lambda: None)
    lines: list[str] = []
    s3, kind = certs_agent.signer_s3("head", None, {"HPCC_AWS_CLIENTS": wanted}, lines.append)
    assert kind == "cli" and isinstance(s3, awscli.Client)
    assert "HPCC_AWS_CLIENTS=" in lines[0] and wanted in lines[0] and "through the AWS CLI" in lines[0]


def test_a_compute_nodes_agent_keeps_its_own_client_even_with_boto3_at_hand():
    own, lines = object(), []
    assert certs_agent.signer_s3("compute", own, HEAD_ENV, lines.append) == (own, "cli")
    assert lines == []


def test_a_client_pools_a_connection_for_every_thread_that_shares_it():
    assert clients.POOL >= max(certs.PARALLEL, observe.READERS)


def test_the_heads_agent_runs_under_the_controllers_python_and_a_compute_nodes_under_python3():
    """templates/steps/: start_controller hands its Python (controller_python: the one with boto3) to the agent's
    start, systemd's unit and the daemon both; the default, python3, is what a compute node runs."""
    controller = (ROOT / "templates/steps/controller.sh.j2").read_text()
    sync = (ROOT / "templates/steps/sync.sh.j2").read_text()
    start = controller.split("start_controller() {", 1)[1]
    assert start.index("python=$(controller_python)") < start.index("HPCC_AGENT_PYTHON=$python")
    assert "\nHPCC_AGENT_PYTHON=python3\n" in sync
    assert '"ExecStart=/usr/bin/env $HPCC_AGENT_PYTHON -m hpcc_node.agent"' in sync
    assert 'setsid env "${envs[@]}" "$HPCC_AGENT_PYTHON" -m hpcc_node.agent' in sync
    step = sync.split("step_sync() {", 1)[1]
    assert step.index("start_controller") < step.index("agent_unit")  # the Python is chosen before the agent starts
