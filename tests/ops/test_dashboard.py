"""`hpcc dashboard` (infra/ops/dashboard.py): the Session Manager forward to Grafana on the head's 127.0.0.1, what it
prints (the URL, how to read the password on the head, never the password), a forward that ends, bad options."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from infra.facts import grafana as facts
from infra.ops import OpsError, forward
from infra.ops import dashboard as ops_dashboard
from infra.ops.cli import WORKFLOW, app
from infra.render.grafana import PASSWORD_PATH


def test_the_forward_reaches_grafana_on_the_heads_localhost_through_session_manager():
    argv = forward.forward_argv("us-east-1", "i-0head", "127.0.0.1", facts.PORT, 49152)
    assert argv[:3] == ["aws", "ssm", "start-session"] and argv[argv.index("--target") + 1] == "i-0head"
    assert argv[argv.index("--document-name") + 1] == "AWS-StartPortForwardingSessionToRemoteHost"
    assert argv[-1] == f"host=127.0.0.1,portNumber={facts.PORT},localPortNumber=49152"


def test_it_says_where_the_password_is_and_how_to_read_it_never_the_password():
    said = ops_dashboard.how_to_log_in("http://127.0.0.1:49152", "hpcc ssh Pulumi.llm.yaml")
    assert "http://127.0.0.1:49152" in said and "hpcc ssh Pulumi.llm.yaml" in said
    assert f"sudo cat {PASSWORD_PATH}" in said and "Ctrl-C" in said


def test_a_forward_that_ends_says_what_it_printed():
    with pytest.raises(OpsError, match="to the head's Grafana ended: TargetNotConnected"):
        with forward.Forward(["sh", "-c", "echo TargetNotConnected >&2; exit 254"], 9, 10, ops_dashboard.WHAT):
            pass


def test_holding_a_forward_that_ends_by_itself_is_an_error_not_a_silent_exit():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        fwd = forward.Forward(["sh", "-c", "sleep 2"], s.getsockname()[1], 10, ops_dashboard.WHAT)
        with fwd:
            with pytest.raises(OpsError, match="ended"):
                ops_dashboard.hold(fwd, sleep=lambda _: None)


@pytest.mark.parametrize("args, words", [(["--port", "0"], "--port"), (["--port", "http"], "--port")])
def test_bad_options_are_a_usage_error(args, words):
    out = CliRunner().invoke(app, ["dashboard", "--cluster", "llm", *args])
    assert out.exit_code == 2 and words in out.output, out.output


def test_a_local_port_in_use_is_a_usage_error_before_any_aws_call():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        out = CliRunner().invoke(app, ["dashboard", "--cluster", "llm", "--port", str(s.getsockname()[1])])
    assert out.exit_code == 2 and "listens on it already" in out.output, out.output


def test_dashboard_is_listed_after_top():
    assert WORKFLOW.index("dashboard") == WORKFLOW.index("top") + 1
