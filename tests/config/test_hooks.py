"""User hooks (infra/config/hooks.py, templates/steps/hooks.sh.j2): checked with findings naming the field and the fix,
pinned in the bundle, run with a clean environment and a timeout, and a failing one fails the node as class hook."""

from __future__ import annotations

import textwrap

import pytest

from infra.config.hooks import MAX_BYTES
from infra.config.parse import ConfigError, parse
from infra.config.stackfile import load
from infra.render.bundle import build
from tests.facts.instance_data import offline_facts
from tests.render.bootstrap_shell import context, run
from tests.render.test_bootstrap_steps import COMMON

BASE = {
    "name": "hks",
    "headNode": {"instanceType": "c6i.xlarge"},
    "compute": {"instanceType": "c6i.16xlarge", "count": 2},
}


def _cfg(hooks: dict):
    return parse("us-east-1", {**BASE, "hooks": hooks}).cluster


def _problems(hooks: dict) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        _cfg(hooks)
    return dict(err.value.problems)


def test_each_bad_hook_is_named_by_its_field_with_the_fix(tmp_path):
    (tmp_path / "big.sh").write_bytes(b"#" * (MAX_BYTES + 1))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "setup.sh").write_text("#!/bin/bash\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "setup.sh").write_text("#!/bin/bash\n")
    (tmp_path / "bad name.sh").write_text("#!/bin/bash\n")
    problems = _problems(
        {
            "onNodeStart": [str(tmp_path / "missing.sh"), str(tmp_path / "a"), str(tmp_path / "big.sh")],
            "onNodeReady": [str(tmp_path / "a/setup.sh"), str(tmp_path / "b/setup.sh"), str(tmp_path / "bad name.sh")],
        }
    )
    assert (
        "does not exist; give the path of a script relative to the stack file"
        in problems["cluster.hooks.onNodeStart[0]"]
    )
    assert "is not a regular file" in problems["cluster.hooks.onNodeStart[1]"]
    assert f"more than {MAX_BYTES}" in problems["cluster.hooks.onNodeStart[2]"]
    assert "another hook is also named 'setup.sh'" in problems["cluster.hooks.onNodeReady[1]"]
    assert "cluster.hooks.onNodeReady[0]" not in problems
    assert "renamed so" in problems["cluster.hooks.onNodeReady[2]"]


def test_paths_in_a_stack_file_are_relative_to_its_directory(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "ready.sh").write_text("#!/bin/bash\necho ready\n")
    stack = tmp_path / "Pulumi.dev.yaml"
    stack.write_text(
        textwrap.dedent("""\
        config:
          aws:region: us-east-1
          hpcc:cluster:
            name: hks
            compute: {instanceType: c6i.16xlarge, count: 2}
            hooks: {onNodeReady: [hooks/ready.sh]}
        """)
    )
    assert load(stack).cluster.hooks.on_node_ready == [str(tmp_path / "hooks" / "ready.sh")]


def test_hooks_are_pinned_in_the_bundle_and_an_edit_is_a_new_bundle(tmp_path):
    script = tmp_path / "ready.sh"
    script.write_text("#!/bin/bash\necho one\n")
    script.chmod(0o600)
    cfg = _cfg({"onNodeStart": [str(script)], "onNodeReady": [str(script)]})
    first = build(cfg, "us-east-1", offline_facts())
    assert first.files["hooks/ready.sh"] == b"#!/bin/bash\necho one\n"
    assert first.manifest()["hooks"] == {"onNodeStart": ["ready.sh"], "onNodeReady": ["ready.sh"]}
    compute = first.files["roles/compute.sh"].decode()
    assert "\n  run_hooks onNodeStart ready.sh\n" in compute
    assert compute.index("run_hooks onNodeReady ready.sh") < compute.index("run_step sync step_sync")
    assert compute.index("run_hooks onNodeStart") < compute.index("run_step os step_os")
    script.write_text("#!/bin/bash\necho two\n")
    assert build(cfg, "us-east-1", offline_facts()).sha256 != first.sha256


HOOK_SCRIPT = (
    'use_step() { HPCC_STEP=$1; }\nfail() { echo "FAIL class=$HPCC_FAIL_CLASS step=$HPCC_STEP: $*"; exit 1; }\n'
    'HPCC_START=$(date +%s); HPCC_DEADLINE=$(( HPCC_START + 600 )); HPCC_NODE=compute-001; HPCC_IP=10.0.16.5\n'
)


def _hooks(tmp_path, **scripts):
    d = tmp_path / "hooks"
    d.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (d / name).write_text("#!/bin/bash\n" + body)
        (d / name).chmod(0o755)
    return {"HPCC_HOOKS_DIR": str(d), "PATH": "/usr/bin:/bin", "SECRET_OF_THE_BOOTSTRAP": "x"}


def test_a_hook_runs_with_a_clean_environment_and_the_nodes_identity(tmp_path):
    env = _hooks(
        tmp_path,
        **{
            "show.sh": 'echo "node=$HPCC_NODE ip=$HPCC_NODE_IP hook=$HPCC_HOOK role=$HPCC_ROLE"\n'
            'echo "leaked=${SECRET_OF_THE_BOOTSTRAP:-none} ${AWS_ENDPOINT_URL:-none}"\n'
        },
    )
    env["AWS_ENDPOINT_URL"] = "http://example.invalid"
    out = run(COMMON + ["hooks"], HOOK_SCRIPT + "run_hooks onNodeStart show.sh\necho after", context(), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "node=compute-001 ip=10.0.16.5 hook=onNodeStart role=compute" in out.stdout
    assert "leaked=none none" in out.stdout and out.stdout.rstrip().endswith("after")


def test_a_failing_hook_fails_the_node_as_class_hook_naming_it_and_stops_there(tmp_path):
    env = _hooks(
        tmp_path, **{"ok.sh": "echo fine\n", "bad.sh": "echo broken >&2; exit 4\n", "never.sh": "echo never\n"}
    )
    out = run(COMMON + ["hooks"], HOOK_SCRIPT + "run_hooks onNodeReady ok.sh bad.sh never.sh", context(), env=env)
    assert out.returncode == 1 and "never" not in out.stdout
    assert "FAIL class=hook step=hook:bad.sh: onNodeReady hook bad.sh failed (exit 4)" in out.stdout


def test_a_hook_that_runs_too_long_is_stopped_and_named(tmp_path):
    env = _hooks(tmp_path, **{"slow.sh": "sleep 30\n"})
    out = run(
        COMMON + ["hooks"],
        HOOK_SCRIPT + "HPCC_HOOK_SECONDS=1\nrun_hooks onNodeReady slow.sh",
        context(),
        env=env,
        timeout=20,
    )
    assert out.returncode == 1
    assert "FAIL class=hook step=hook:slow.sh: onNodeReady hook slow.sh timed out after 1 s" in out.stdout
