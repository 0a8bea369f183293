"""up/destroy: the Pulumi call is a fake workspace (no CLI here); preflight before it, the preview guard, and
destroy's leftover check run for real against moto (the wait itself: tests/ops/test_up_wait.py)."""

from __future__ import annotations

import pytest
from rich.console import Console
from typer.testing import CliRunner

from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.cli import app
from infra.ops.up import destroy, up
from infra.plan.embedded_aws import embedded_aws
from infra.plan.runner import plan_stack_file
from tests.ops.fleet import fleet
from tests.ops.support import EXAMPLES, FakeStack, inject_errors, pre_event, replacement_events

REGION = "us-east-1"
CPU = EXAMPLES / "c6i-oneccl.yaml"
CPU_FAMILY = "base-oss-nvidia-driver-gpu-ubuntu-22.04"  # the example's image: the default family


def console():
    return Console(record=True, width=200)


def test_without_pulumi_cli_says_how_to_install(monkeypatch):
    with pytest.raises(OpsError, match="https://www.pulumi.com/docs/install/"):
        up(CPU, "dev", which=lambda _: None)
    monkeypatch.setattr("shutil.which", lambda _: None)
    for cmd in (["up", str(CPU), "--stack", "dev"], ["destroy", str(CPU), "--stack", "dev"]):
        out = CliRunner().invoke(app, cmd)
        assert out.exit_code == 1 and "pulumi.com/docs/install" in out.output and "Traceback" not in out.output


def test_preflight_error_stops_before_pulumi(tmp_path):
    with embedded_aws(REGION) as env:
        aws = Aws(REGION)
        inject_errors(aws.client("ec2"), "RunInstances", ["DryRunOperation", "InsufficientInstanceCapacity"])
        stack = FakeStack(env, CPU)
        with pytest.raises(OpsError, match="preflight found errors"):
            up(CPU, "dev", aws=aws, stack_factory=lambda name: stack, console=console(), hostfile_path=tmp_path / "h")
        assert stack.calls == []


def test_destroy_that_leaves_an_eni_behind_lists_it(tmp_path):
    with embedded_aws(REGION) as env:
        plan_stack_file(CPU, aws=env)
        ec2 = env.client("ec2")
        subnet = ec2.describe_subnets(Filters=[{"Name": "tag:Name", "Values": ["cpu-oneccl-private"]}])["Subnets"][0][
            "SubnetId"
        ]
        aws = Aws(REGION)

        def half_destroy():  # Pulumi removed everything but an interface it never knew about
            from infra.ops.reap.run import reap

            eni = ec2.create_network_interface(
                SubnetId=subnet,
                TagSpecifications=[
                    {"ResourceType": "network-interface", "Tags": [{"Key": "hpcc:cluster", "Value": "cpu-oneccl"}]}
                ],
            )["NetworkInterface"]["NetworkInterfaceId"]
            inv = reap(aws, "cpu-oneccl")
            for kind in ("network-interface", "subnet", "vpc"):
                inv.items = [i for i in inv.items if i.kind != kind]
            from infra.ops.reap.run import DELETERS, ORDER, Waits

            for kind in ORDER:
                if inv.of(kind):
                    DELETERS[kind](aws, inv.of(kind), Waits(poll=0, timeout=5))
            half_destroy.eni = eni

        out = console()
        left = destroy(
            CPU, "dev", aws=aws, stack_factory=lambda name: FakeStack(env, CPU, on_destroy=half_destroy), console=out
        )
        kinds = {(i.kind, i.id) for i in left.items}
        assert ("network-interface", half_destroy.eni) in kinds
        assert "hpcc reap --cluster cpu-oneccl --region us-east-1 --yes" in out.export_text()


# -- the preview guard, --update-image, destroy's unprotect -------------------------------------------------

INSTANCE = "aws:ec2/instance:Instance"
PARAM = "aws:ssm/parameter:Parameter"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
NODES = ["head"]  # the one Pulumi instance: the controller launches the groups' nodes


def all_ready(env):
    """What the controller leaves once every node is ready (tests/ops/fleet.py): the one group `compute` of 4."""
    fleet({"compute": 4}, cluster="cpu-oneccl")


def quick_up(stack, tmp_path, out=None, **options):
    return up(
        CPU,
        "dev",
        aws=Aws(REGION),
        stack_factory=lambda name: stack,
        console=out or console(),
        hostfile_path=tmp_path / "hostfile",
        poll=0,
        sleep=lambda _: None,
        skip_preflight=True,
        wait_seconds=0,
        **options,
    )


def ops(stack):
    return [name for name, _ in stack.calls if name in ("preview", "up", "destroy", "import_stack")]


def test_up_stops_before_replacing_an_instance_unless_allowed(tmp_path):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        urn = stack.urn("cpu-oneccl-head")  # compute instances are the controller's, not Pulumi's: the head is one
        stack.events = lambda _: replacement_events(urn, INSTANCE, keys=["launchTemplate.version"])
        out = console()
        with pytest.raises(OpsError, match=r"replace instance cpu-oneccl-head \(launchTemplate.version\)"):
            quick_up(stack, tmp_path, out)
        assert ops(stack) == ["preview"]  # nothing applied
        assert "preview: 1 to replace" in out.export_text()
        all_ready(env)
        report = quick_up(stack, tmp_path, allow_replace=True)
        assert ops(stack) == ["preview", "preview", "up"] and report.ok


def test_up_stops_before_the_controller_rolls_a_group_unless_allowed(tmp_path):
    """A new compute type is a new launch-template version: the controller then replaces the group's 4 running
    nodes (updateStrategy rolling by default), which the guard names by the group (issue 37)."""
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        stack.events = lambda _: [
            pre_event("update", stack.urn("cpu-oneccl-groups-param"), PARAM, diffs=["value"]),
            pre_event("update", stack.urn("cpu-oneccl-compute-lt"), LT, diffs=["instanceType", "userData"]),
        ]
        out = console()
        with pytest.raises(OpsError, match=r"replace nodes of group compute \(instanceType\)"):
            quick_up(stack, tmp_path, out)
        assert ops(stack) == ["preview"] and "preview: 2 to update" in out.export_text()
        all_ready(env)
        assert quick_up(stack, tmp_path, allow_replace=True).ok
        assert ops(stack) == ["preview", "preview", "up"]


def test_up_goes_ahead_when_the_preview_only_updates_a_parameter_or_creates_an_instance(tmp_path):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        stack.events = lambda _: [
            pre_event("update", stack.urn("cpu-oneccl-groups-param"), PARAM, diffs=["value"]),  # a group grown
            pre_event("create", stack.urn("cpu-oneccl-head").replace("-head", "-extra"), INSTANCE),
            pre_event("same", stack.urn("cpu-oneccl-head"), INSTANCE),
        ]
        all_ready(env)
        out = console()
        report = quick_up(stack, tmp_path, out)
        assert ops(stack) == ["preview", "up"] and report.ok
        assert "preview: 1 to create, 1 to update" in out.export_text()


def test_update_image_replaces_the_pin_in_preview_and_up_only_when_a_newer_image_exists(tmp_path):
    from infra.plan.embedded_aws import publish_dlami

    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        if not any(r["urn"].endswith("::cpu-oneccl-image-pin") for r in stack.state):  # the pin the program keeps
            stack.state.append({"urn": f"urn:pulumi:dev::hpcc::{PARAM}::cpu-oneccl-image-pin", "type": PARAM})
        pin = stack.urn("cpu-oneccl-image-pin")
        node_urns = [stack.urn(f"cpu-oneccl-{n}") for n in NODES]
        stack.events = lambda kw: (
            [e for u in kw.get("replace", []) for e in replacement_events(u, PARAM, ["value"])]
            + (
                [e for u in node_urns for e in replacement_events(u, INSTANCE, ["launchTemplate.version"])]
                if kw.get("replace")
                else []
            )
        )
        all_ready(env)
        out = console()
        assert quick_up(stack, tmp_path, out, update_image=True).ok  # nothing newer: no replacement, no guard
        assert [(name, kw.get("replace") or []) for name, kw in stack.calls if name in ("preview", "up")] == [
            ("preview", []),
            ("up", []),
        ]
        assert "--update-image: no newer image" in " ".join(out.export_text().split())

        stack.calls.clear()
        publish_dlami(REGION, CPU_FAMILY, "20261201")
        with pytest.raises(OpsError, match="replace instance cpu-oneccl-head"):
            quick_up(stack, tmp_path, update_image=True)
        assert [kw.get("replace") for name, kw in stack.calls if name == "preview"] == [[pin]]
        assert "up" not in ops(stack)
        all_ready(env)
        report = quick_up(stack, tmp_path, update_image=True, allow_replace=True)
        assert [kw.get("replace") for name, kw in stack.calls if name in ("preview", "up")][-2:] == [[pin], [pin]]
        assert report.ok


def test_update_image_without_a_pin_in_the_state_says_so(tmp_path):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        stack.state = [r for r in stack.state if not r["urn"].endswith("::cpu-oneccl-image-pin")]
        with pytest.raises(OpsError, match="--update-image: stack 'dev' has no cpu-oneccl-image-pin"):
            quick_up(stack, tmp_path, update_image=True)
        assert ops(stack) == []


def cli_up(tmp_path, *extra: str) -> list[str]:
    """`hpcc up` on the CPU example, preflight skipped, no wait; --yes: there is no terminal here to ask on."""
    hostfile = str(tmp_path / "hostfile")
    return [
        "up",
        str(CPU),
        "--stack",
        "dev",
        "--skip-preflight",
        "--wait-minutes",
        "0",
        "--hostfile",
        hostfile,
        *extra,
        "--yes",
    ]


def test_cli_up_stops_on_the_guard_and_goes_ahead_with_allow_replace(tmp_path, monkeypatch):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        urn = stack.urn("cpu-oneccl-head")
        stack.events = lambda _: [pre_event("delete", urn, INSTANCE)]
        monkeypatch.setattr("infra.ops.up.require_pulumi", lambda which=None: "/usr/bin/pulumi")
        monkeypatch.setattr("infra.ops.up.local_stack", lambda name, project: stack)
        args = cli_up(tmp_path)
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 1 and "delete instance cpu-oneccl-head" in out.output
        assert "--allow-replace" in out.output and ops(stack) == ["preview"]
        all_ready(env)
        out = CliRunner().invoke(app, [*args, "--allow-replace"])
        assert out.exit_code == 0, out.output
        assert ops(stack) == ["preview", "preview", "up"]


def test_cli_up_check_measures_the_fabric_once_every_node_is_ready_and_names_a_slow_one(tmp_path, monkeypatch):
    """`hpcc up --check`: the fabric check (hpcc check fabric) after the wait; a bad provider is refused first."""
    from infra.ops import check_fabric as cf
    from tests.ops.test_check_fabric import NODES, fake_head

    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        monkeypatch.setattr("infra.ops.up.require_pulumi", lambda which=None: "/usr/bin/pulumi")
        monkeypatch.setattr("infra.ops.up.local_stack", lambda name, project: stack)
        args = cli_up(tmp_path, "--check")
        bad = CliRunner().invoke(app, [*args, "--check-provider", "udp"])
        assert bad.exit_code == 2 and "--check-provider must be efa or tcp" in bad.output and ops(stack) == []
        all_ready(env)
        rates, asked = {n: 12000.0 for n in NODES}, []
        rates["gpu-002"] = 900.0
        monkeypatch.setattr(
            cf, "cluster_nodes", lambda aws, cluster: (asked.append(cluster) or NODES, "203.0.113.7", [])
        )
        monkeypatch.setattr(cf, "ssh_runner", lambda via: fake_head(rates))
        out = CliRunner().invoke(app, [*args, "--check-provider", "tcp"])
        assert out.exit_code == 1 and "gpu-002" in out.output.split("below the floor")[1], out.output
        assert asked == ["cpu-oneccl"] and ops(stack) == ["preview", "up"]  # the config's cluster, once up
        rates["gpu-002"] = 12000.0
        assert CliRunner().invoke(app, args).exit_code == 0


def test_destroy_unprotects_the_file_system_first(tmp_path):
    with embedded_aws(REGION) as env:
        stack = FakeStack(env, CPU).planned()
        fsx = stack.urn("cpu-oneccl-fsx")
        assert next(r for r in stack.state if r["urn"] == fsx)["protect"] is True
        out = console()
        destroy(CPU, "dev", aws=Aws(REGION), stack_factory=lambda name: stack, console=out)
        assert ops(stack) == ["import_stack", "destroy"]
        imported = {r["urn"]: r for r in stack.calls[-2][1]["resources"]}
        assert imported[fsx]["protect"] is False and len(imported) == len(stack.state)
        assert "unprotected cpu-oneccl-fsx" in out.export_text()
