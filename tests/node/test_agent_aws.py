"""The agent's AWS caller: the CLI through the node's one pacer file, retried with backoff, 10 names a read."""

import json
import subprocess

import pytest

from hpcc_node.aws import Aws, AwsError, NotFound


class Cli:
    def __init__(self, *answers):
        self.answers, self.argvs = list(answers), []

    def __call__(self, argv, **kw):
        self.argvs.append(argv)
        rc, out = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return subprocess.CompletedProcess(argv, rc, out if rc == 0 else "", out if rc else "")


def caller(tmp_path, cli, **kw):
    clock, sleeps = [100.0], []

    def sleep(s):
        sleeps.append(s)
        clock[0] += s

    return Aws(
        run=cli, clock=lambda: clock[0], sleep=sleep, rand=lambda: 0.0, pace_file=str(tmp_path / "pace"), **kw
    ), sleeps


def test_calls_are_paced_one_interval_apart_through_the_shared_file(tmp_path):
    aws, sleeps = caller(tmp_path, Cli((0, "{}")), interval_ms=400)
    (tmp_path / "pace").write_text("100000\n")  # another process of the node called at t=100 s
    aws.get_parameters(["/a"])
    aws.get_parameters(["/a"])
    assert sleeps == [0.4, 0.4] and (tmp_path / "pace").read_text() == "100800\n"


def test_s3_calls_wait_for_no_pacer_here_and_in_the_bootstraps_aws_retry(tmp_path, fake):
    """S3 is paced as S3 (infra/render/pacing.py): the agent's s3api calls and the bootstrap's take no pacer turn,
    SSM's do; one rule in both languages (hpcc_node/aws.py UNPACED, retry.sh.j2 aws_retry), run side by side."""
    from hpcc_node.aws import UNPACED
    from tests.render.bootstrap_fixtures import tool
    from tests.render.bootstrap_shell import run
    from tests.render.test_bootstrap_steps import COMMON, ctx_for, preamble, record_pacer_turns

    aws, sleeps = caller(tmp_path, Cli((0, "{}")), interval_ms=400)
    (tmp_path / "pace").write_text("100000\n")
    aws.get_object("b", "k", str(tmp_path / "out"))
    aws.call("s3api", "head-object", "--bucket", "b", "--key", "k")
    assert sleeps == [] and (tmp_path / "pace").read_text() == "100000\n"
    aws.get_parameters(["/a"])
    assert sleeps == [0.4]
    shell_tmp, bin_dir, env = fake
    tool(bin_dir, "aws", "true\n")
    calls = "".join(f"aws_retry {service} x >/dev/null\n" for service in (*UNPACED, "ssm", "s3api"))
    stamps = shell_tmp / "stamps"
    out = run(COMMON, preamble(shell_tmp) + record_pacer_turns(stamps) + calls, ctx_for(shell_tmp), env=env)
    assert out.returncode == 0, out.stderr
    assert len(stamps.read_text().split()) == 1  # the ssm call's turn only


def test_a_failed_call_is_retried_with_doubling_backoff_then_given_up(tmp_path):
    cli = Cli((255, "ThrottlingException"), (255, "ThrottlingException"), (0, "{}"))
    aws, sleeps = caller(tmp_path, cli, interval_ms=100, backoff_seconds=2, attempts=3)
    assert aws.get_parameters(["/a"]) == {}
    assert [s for s in sleeps if s >= 1] == [2, 4] and len(cli.argvs) == 3
    aws, _ = caller(tmp_path, Cli((255, "ThrottlingException")), attempts=2)
    with pytest.raises(AwsError, match="ThrottlingException"):
        aws.put_parameter("/a", "v")
    aws, _ = caller(tmp_path, Cli((254, "An error occurred (NoSuchKey) when calling GetObject")), attempts=5)
    with pytest.raises(NotFound):
        aws.get_object("b", "k", "/dev/null")


def test_reads_take_ten_names_a_call(tmp_path):
    answer = json.dumps({"Parameters": [{"Name": "/p", "Version": 3, "Value": "v"}]})
    cli = Cli((0, answer))
    aws, _ = caller(tmp_path, cli)
    assert aws.get_parameters([f"/n{i}" for i in range(12)]) == {"/p": (3, "v")}
    assert [len(a) - 6 for a in cli.argvs] == [10, 2]  # aws ssm get-parameters --names ... --output json
