"""Every operator command against a two-group stack file (issue 32), as a new user runs them from the project `hpcc
init` wrote: plan, preflight --emulate, up and destroy up to where they need real AWS (Pulumi faked, AWS emulated),
status, events, hostfile, replace, reap and ssh against the emulated cluster. Each takes the stack file the same way
(`hpcc status Pulumi.duo.yaml`, no --region), ends in a result or a message, never a traceback; up shows the change
in groups, nodes and cost and asks before `pulumi up`, destroy names the file system's data and asks."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from infra.ops import cli_support
from infra.ops.cli import app
from infra.ops.project import init_project
from infra.plan.embedded_aws import embedded_aws
from tests.ops.fleet import fleet
from tests.ops.support import TWO_GROUPS, FakeStack, pre_event, two_groups

REGION = "us-east-1"
COUNTS = {"gpu": 2, "cpu": 4}  # TWO_GROUPS' groups
PARAM = "aws:ssm/parameter:Parameter"


@pytest.fixture(autouse=True)
def no_session(monkeypatch):
    """`hpcc ssh` becomes its session (os.execvp): in a test that would replace pytest itself."""
    monkeypatch.setattr("infra.ops.ssh.run_session", lambda argv: pytest.fail(f"would have run {argv}"))


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project of `hpcc init`, the two-group stack file in it, run from there, with no AWS_REGION set."""
    proj = tmp_path / "proj"
    init_project(proj, "c6i-oneccl")
    path = two_groups(proj)
    monkeypatch.chdir(proj)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    return path


def run(*args, **kwargs):
    out = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"}, **kwargs)
    assert "Traceback" not in out.output and isinstance(out.exception, (SystemExit, type(None))), out.output
    return out


def text(out) -> str:
    return " ".join(out.output.split())


def fake_pulumi(monkeypatch, stack):
    monkeypatch.setattr("infra.ops.up.require_pulumi", lambda which=None: "/usr/bin/pulumi")
    monkeypatch.setattr("infra.ops.up.local_stack", lambda name, project: stack)


def ops(stack):
    return [name for name, _ in stack.calls if name in ("preview", "up", "destroy", "import_stack")]


def test_plan_and_the_whole_preflight(project):
    plan = run("plan", project.name, "--out", "plan")
    assert plan.exit_code == 0, plan.output
    assert "partitions gpu (default), cpu, all (every node)" in text(plan)
    assert not re.search(r"\bi-[0-9a-f]{8,}|10\.0\.\d+\.\d+", plan.output)  # no made-up instance id or address
    assert "hpcc ssh Pulumi.duo.yaml (Session Manager to the head, as ubuntu)" in text(plan)
    pre = run("preflight", project.name, "--emulate")
    assert pre.exit_code == 0 and "preflight: 0 error(s)" in text(pre), pre.output


def test_the_reading_commands_take_the_stack_file_for_cluster_and_region(project):
    with embedded_aws(REGION):
        fleet(COUNTS, cluster="duo")
        status = run("status", project.name)
        assert status.exit_code == 0 and "gpu-001" in status.output and "cpu-003" in status.output, status.output
        assert run("events", project.name).exit_code == 0
        hosts = run("hostfile", project.name, "--group", "gpu")
        assert hosts.exit_code == 0 and len(hosts.output.splitlines()) == 2, hosts.output
        assert run("status", "--cluster", "duo").exit_code == 0  # the region from the stack file naming duo
        assert run("status", "--stack", "duo").exit_code == 0  # Pulumi.duo.yaml here: no Pulumi CLI needed
        replace = run("replace", project.name, "gpu-001")
        assert replace.exit_code == 0 and "gpu-001" in replace.output, replace.output
        assert run("replace", project.name, "gpu-099").exit_code == 2  # an unknown node: a usage error
        reap = run("reap", project.name)
        assert reap.exit_code == 0 and "dry run: --yes deletes" in text(reap), reap.output
        head = run("ssh", project.name, "--print")
        assert head.exit_code == 0, head.output
        assert re.fullmatch(
            r"aws ssm start-session --region us-east-1 --target i-[0-9a-f]+ --document-name "
            r"AWS-StartInteractiveCommand --parameters 'command=sudo -iu ubuntu'\n",
            head.output,
        )
        node = run("ssh", project.name, "cpu-002", "--print")
        assert node.output.endswith("--parameters 'command=sudo -iu ubuntu ssh -t cpu-002'\n"), node.output
        bad = run("ssh", project.name, "cpu-2; rm -rf /", "--print")
        assert bad.exit_code == 1 and "not a node name" in bad.output
    assert run("status", project.name, "--cluster", "other").exit_code == 2  # two clusters named: which one?
    nothing = run("status")
    assert nothing.exit_code == 2 and "Pulumi.duo.yaml" in text(nothing)  # what to give, and what is here


def test_up_shows_the_change_in_groups_nodes_and_cost_and_asks_first(project, monkeypatch):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, project).planned()  # the stack as its first up left it: gpu 2, cpu 4
        stack.events = lambda _: [pre_event("update", stack.urn("duo-groups-param"), PARAM, diffs=["value"])]
        fake_pulumi(monkeypatch, stack)
        config = {
            **TWO_GROUPS,
            "hpcc:cluster": {
                **TWO_GROUPS["hpcc:cluster"],
                "nodeGroups": [
                    {"name": "gpu", "instanceType": "p5.48xlarge", "count": 10, "spares": 1},
                    {"name": "cpu", "instanceType": "c6i.16xlarge", "count": 4, "market": "spot"},
                    {"name": "compute", "instanceType": "c6i.16xlarge", "count": 2},
                ],
            },
        }
        project.write_text(yaml.safe_dump({"config": config}))
        fleet({"gpu": 10, "cpu": 4, "compute": 2}, cluster="duo")
        args = ["up", project.name, "--wait-minutes", "0", "--hostfile", "hostfile"]

        refused = run(*args)  # no terminal, no --yes: shown, then refused
        said = text(refused)
        assert refused.exit_code == 1 and ops(stack) == ["preview"], refused.output
        assert "gpu: 2 -> 10 x p5.48xlarge (+8 nodes)" in said and "+ group compute: 2 x c6i.16xlarge (new)" in said
        assert "nodes: 6 -> 16 (+10)" in said and "(+$792.00/h, on-demand list prices)" in said
        assert said.index("gpu: 2 -> 10") < said.index("preview:")  # the user's terms first, resources below
        assert "--yes" in said and "--preview-only" in said

        monkeypatch.setattr(cli_support, "interactive", lambda: True)
        assert run(*args, input="n\n").exit_code == 1 and ops(stack) == ["preview"] * 2
        looked = run(*args, "--preview-only")
        assert looked.exit_code == 0 and "nothing was changed" in text(looked) and "up" not in ops(stack)
        went = run(*args, input="y\n")
        assert went.exit_code == 0 and ops(stack)[-2:] == ["preview", "up"], went.output
        monkeypatch.setattr(cli_support, "interactive", lambda: False)
        assert run(*args, "--yes").exit_code == 0 and ops(stack)[-2:] == ["preview", "up"]


def test_destroy_names_the_file_system_and_its_data_and_asks(project, monkeypatch):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, project).planned()
        fake_pulumi(monkeypatch, stack)
        refused = run("destroy", project.name)
        said = text(refused)
        assert refused.exit_code == 1 and ops(stack) == [], refused.output  # nothing unprotected, nothing deleted
        assert "duo-fsx (FSx for Lustre SCRATCH_2, 1200 GiB) and ALL ITS DATA" in said and "--yes" in said
        assert "gpu: 2 x p5.48xlarge (1 spare); cpu: 4 x c6i.16xlarge (spot)" in said
        monkeypatch.setattr(cli_support, "interactive", lambda: True)
        assert run("destroy", project.name, input="n\n").exit_code == 1 and ops(stack) == []
        gone = run("destroy", project.name, input="y\n")
        assert ops(stack) == ["import_stack", "destroy"] and gone.exit_code in (0, 1), gone.output
        assert "left in us-east-1" in text(gone) or "still tagged" in text(gone)


def test_ssh_follows_the_stack_ssh_to_the_heads_public_ip_when_it_allows_cidrs(tmp_path, monkeypatch):
    from tests.ops.support import edit_response

    path = two_groups(tmp_path, ssh={"allowedCidrs": ["10.1.0.0/24"]}, image={"loginUser": "alice"})
    monkeypatch.setattr(cli_support, "aws_for", lambda region: aws)
    with embedded_aws(REGION):
        from infra.ops.aws import Aws

        aws = Aws(REGION)
        fleet(COUNTS, cluster="duo")

        def public(parsed):
            for r in parsed.get("Reservations", []):
                for i in r["Instances"]:
                    if {"Key": "hpcc:role", "Value": "head"} in i.get("Tags", []):
                        i["PublicIpAddress"] = "198.18.0.7"

        edit_response(aws.client("ec2"), "DescribeInstances", public)
        assert run("ssh", path, "--print").output == "ssh -t alice@198.18.0.7\n"
        assert run("ssh", path, "gpu-000", "--print").output == "ssh -t alice@198.18.0.7 'ssh -t gpu-000'\n"
        ran = []
        monkeypatch.setattr("infra.ops.ssh.run_session", ran.append)  # never become a real session in a test
        monkeypatch.setattr("shutil.which", lambda tool: f"/usr/bin/{tool}")
        assert run("ssh", path, "gpu-001").exit_code == 0 and ran == [
            ["ssh", "-t", "alice@198.18.0.7", "ssh -t gpu-001"]
        ]
        monkeypatch.setattr("shutil.which", lambda tool: None)  # no ssh client: say so, and the command
        out = run("ssh", path)
        assert out.exit_code == 1 and "no `ssh` on PATH" in out.output and "ssh -t alice@198.18.0.7" in out.output
        assert len(ran) == 1


def test_the_version_and_the_commands_in_the_order_of_the_work():
    assert re.fullmatch(r"hpcc \d+\.\d+\.\S+\n", run("--version").output)
    commands = run("--help").output.split("Commands")[1]
    listed = re.findall(r"^│ (\S+) ", commands, re.M)
    assert listed == [c for c in cli_support_workflow() if c in listed] and listed[:3] == [
        "init",
        "deployer-policy",
        "plan",
    ]
    assert listed.index("up") < listed.index("ssh") < listed.index("status") < listed.index("destroy")


def cli_support_workflow():
    from infra.ops.cli import WORKFLOW

    return WORKFLOW


def test_init_keeps_hpccs_output_out_of_the_users_repository(tmp_path):
    init_project(tmp_path / "a", "c6i-oneccl")
    assert {"plan/", "hostfile"} <= set((tmp_path / "a" / ".gitignore").read_text().splitlines())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / ".gitignore").write_text("secrets/\nhostfile")
    init_project(tmp_path / "b", "c6i-oneccl")
    lines = (tmp_path / "b" / ".gitignore").read_text().splitlines()
    assert lines[:2] == ["secrets/", "hostfile"] and "plan/" in lines and lines.count("hostfile") == 1


def test_plan_previous_says_the_change_in_nodes_groups_and_cost_before_the_resources(project):
    assert run("plan", project.name, "--out", "old").exit_code == 0
    two_groups(project.parent, nodeGroups=[{"name": "gpu", "instanceType": "p5.48xlarge", "count": 3, "spares": 1}])
    out = run("plan", project.name, "--out", "new", "--previous", "old")
    said = text(out)
    assert out.exit_code == 0, out.output
    assert "gpu: 2 -> 3 x p5.48xlarge (+1 node)" in said and "- group cpu: 4 x c6i.16xlarge (spot) (removed" in said
    assert "nodes: 6 -> 3 (-3)" in said and "(+$87.44/h, on-demand list prices)" in said
    assert said.index("gpu: 2 -> 3") < said.index("Changes against old")
