"""The rendered bootstrap: well-formed, small enough, reviewed through golden snapshots."""

import gzip
import re
import shutil
import subprocess

import pytest

from hpcc_contract.names import state_bucket
from infra.render.userdata import LOADER_LIMIT, USER_DATA_LIMIT, render_loader, user_data
from tests.facts.instance_data import MOTO_ACCOUNT
from tests.render.bootstrap_cases import (
    GOLDEN,
    GOLDEN_EXAMPLE,
    cases,
    contexts,
    golden_path,
    golden_texts,
    planned_scripts,
)

CASES = dict(cases())


@pytest.mark.parametrize("name", sorted(CASES))
def test_rendered_script_passes_shellcheck_and_bash_n(name, tmp_path):
    assert shutil.which("shellcheck"), "shellcheck is installed by `make deps`"
    path = tmp_path / f"{name}.sh"
    path.write_text(CASES[name])
    check = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    syntax = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr


@pytest.mark.parametrize("name,ctx", list(contexts()), ids=[n for n, _ in contexts()])
def test_the_user_data_is_the_loader_within_4096_bytes_gzipped(name, ctx):
    packed = user_data(ctx)
    assert len(packed) <= LOADER_LIMIT == 4096 < USER_DATA_LIMIT
    loader = gzip.decompress(packed).decode()
    assert loader == render_loader(ctx) and f'exec bash "$D/current/roles/{ctx.role}.sh"' in loader
    assert ctx.bundle_parameter in loader and "set -Eeuo pipefail" not in loader  # not the role's script


def test_a_loader_beyond_its_bound_is_refused_by_the_program(monkeypatch):
    import infra.render.userdata

    ctx = dict(contexts())["p5-llm-compute"]
    monkeypatch.setattr(infra.render.userdata, "render_loader", lambda c: CASES["p5-llm-compute"])  # the old user data
    with pytest.raises(ValueError, match="the loader's bound is 4096"):
        user_data(ctx)


def test_one_golden_snapshot_per_role_matches_the_planned_bundles_scripts():
    planned = planned_scripts()
    assert sorted(planned) == ["compute", "head"] and sorted(p.name for p in GOLDEN.iterdir()) == sorted(
        golden_path(role).name for role in ("compute", "head")
    )
    for role, script in planned.items():
        assert script == CASES[f"{GOLDEN_EXAMPLE}-{role}"]  # the plan's bundle holds the rendering tested below
    for role, text in golden_texts(planned).items():
        assert text == golden_path(role).read_text(), "the templates changed: run `make golden` and review the diff"


@pytest.mark.parametrize("name,ctx", list(contexts()), ids=[n for n, _ in contexts()])
def test_the_lines_that_depend_on_the_role_and_type(name, ctx):
    """What each example and role changes in the script (the snapshots cover the rest, once per role)."""
    script = CASES[name]
    assert script.splitlines()[1].startswith(
        f"# hpcc node script: cluster {ctx.cluster}, {ctx.role} node ({ctx.instance_type})."
    )
    for path in (ctx.settings_parameter, ctx.fsx_parameter, ctx.ssh_secret_id):
        assert f'"{path}"' in script, path
    assert (
        state_bucket(ctx.cluster, "") in script
    )  # the state bucket's name (bash repeats it), when the settings give none
    assert ("-m hpcc_node.controller" in script) == (ctx.role == "head")
    assert f'AWS_DEFAULT_REGION="{ctx.region}"' in script and f"HPCC_VPC_CIDR:-{ctx.vpc_cidr}" in script
    key_step = "head_key" if ctx.role == "head" else "compute_key"
    assert f'  {key_step} "{ctx.ssh_secret_id}" "cluster key" || fail' in script
    user_secret = ctx.ssh_secret_id.replace("/ssh-key", "/user-key")  # hpcc_contract.names.Paths.user_secret
    assert f'    {key_step} "{user_secret}" "login user\'s key" || fail' in script
    assert ("\n  launch_helpers\n" in script) == (ctx.role == "head")
    if ctx.efa_enabled:
        assert f'[ "$found" -eq {ctx.efa_devices} ]' in script and "fi_info -p tcp" not in script
    else:
        assert "fi_info -p tcp" in script and "fi_info -p efa" not in script


def test_no_secret_in_any_script():
    for script in CASES.values():
        assert "PRIVATE KEY" not in script and "aws_secret_access_key" not in script.lower()


# Under pipefail a reader that stops early (head, grep -q, awk's exit) fails its writer with SIGPIPE (exit 141) once the
# writer has more to say: a step that worked at 3 nodes failed at 2,000 (and now and then at 3).
EARLY_EXIT = re.compile(r"\|\s*(head\b|grep\s[^|]*-[a-zA-Z]*[qm]|awk\s[^|]*\bexit\b|sed\s[^|]*\bq\b)")


def test_no_pipe_ends_in_a_reader_that_stops_early():
    from infra.render.userdata import TEMPLATES

    found = [
        f"{part.name}:{n}: {line.strip()}"
        for part in sorted(TEMPLATES.rglob("*.j2"))
        for n, line in enumerate(part.read_text().splitlines(), 1)
        if EARLY_EXIT.search(line)
    ]
    assert not found, "\n".join(found)


def test_every_partial_is_included_once():
    from infra.render.userdata import TEMPLATES

    for script in CASES.values():
        for part in sorted((TEMPLATES / "steps").glob("*.sh.j2")):
            header = part.read_text().splitlines()[0].split("{{")[0]  # "# --- step: ..."
            assert script.count(header) == 1, part.name


def test_efa_step_matches_the_role():
    assert "fi_info -p efa -t FI_EP_RDM" in CASES["p5-llm-compute"] and "modprobe ib_uverbs" in CASES["p5-llm-compute"]
    assert "-eq 32 ]" in CASES["p5-llm-compute"]
    assert "fi_info -p tcp" in CASES["c6i-oneccl-compute"] and "fi_info -p efa" not in CASES["c6i-oneccl-compute"]


# -- day 2: what leaves the user data alone (no node is replaced for it) ------------------------------

BASE = {
    "name": "day2",
    "headNode": {"instanceType": "c5n.18xlarge"},
    "compute": {"instanceType": "p5.48xlarge", "count": 4},
}
LIFE_CHANGES = {  # what changes over a cluster's life without a new image or instance type
    "count 5": {"compute": {"count": 5}},
    "count 512": {"compute": {"count": 512}},
    "count 1": {"compute": {"count": 1}},
    "tags": {"tags": {"team": "nlp", "cost-center": "42"}},
    "timeouts": {"bootstrap": {"timeoutMinutes": 120, "joinTimeoutMinutes": 45}},
    "mount point and user": {"fsx": {"mountPoint": "/lustre"}, "image": {"loginUser": "ec2-user"}},
}
COMPUTE_TYPE = {"compute type": {"compute": {"instanceType": "g6e.48xlarge"}}}  # 4 EFA devices, no GPUDirect RDMA


def _merged(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(base.get(key, {}), value) if isinstance(value, dict) and key != "tags" else value
    return out


def _planned(change: dict) -> tuple[dict, str, object]:
    """(role -> the loader's user data, the settings value, the bundle) the program makes for BASE + change."""
    from infra.config.parse import parse
    from infra.render.bundle import build
    from infra.render.node_settings import settings_value
    from infra.render.roles import role_contexts
    from tests.facts.instance_data import offline_facts

    cfg = parse("us-east-1", _merged(BASE, change)).cluster
    return (
        {role: user_data(ctx) for role, ctx in role_contexts(cfg, "us-east-1", offline_facts()).items()},
        settings_value(cfg, "us-east-1", offline_facts(), MOTO_ACCOUNT),
        build(cfg, "us-east-1", offline_facts()),
    )


@pytest.mark.parametrize("change", sorted({**LIFE_CHANGES, **COMPUTE_TYPE}))
def test_the_heads_script_and_every_loader_are_byte_identical_across_day_2_changes(change):
    before, settings_before, bundle_before = _planned({})
    after, settings_after, bundle_after = _planned({**LIFE_CHANGES, **COMPUTE_TYPE}[change])
    assert after == before  # the user data (loaders): no new launch-template version for any of these
    assert bundle_after.files["roles/head.sh"] == bundle_before.files["roles/head.sh"]
    if change != "tags":  # what did change reaches the nodes through the settings instead
        assert settings_after != settings_before


@pytest.mark.parametrize("change", sorted(LIFE_CHANGES))
def test_the_bundle_is_byte_identical_across_count_tags_and_timeouts(change):
    assert _planned(LIFE_CHANGES[change])[2].archive == _planned({})[2].archive


def test_a_new_compute_type_does_change_the_compute_roles_script_and_so_the_bundle():
    """It needs new nodes anyway (another type): its facts (GPUs, EFA devices) are in the compute script."""
    before, after = _planned({})[2], _planned(COMPUTE_TYPE["compute type"])[2]
    script = after.files["roles/compute.sh"].decode()
    assert script != before.files["roles/compute.sh"].decode() and "-eq 4 ]" in script
    assert after.sha256 != before.sha256


def test_the_user_data_holds_no_settings_value():
    script = CASES["p5-llm-compute"]
    for value in ("29500", '"/fsx"', "--mca pml", "FI_PROVIDER=efa", "slots=8", "NNODES=2"):
        assert value not in script, value


def test_comment_only_lines_are_left_out_but_the_header_titles_shebangs_and_directives_stay():
    from infra.render.userdata import without_comments

    script = (
        "#!/bin/bash\n# header: what this is\nset -e\n# why the next line\n  # indented why\n"
        "# --- ssh: the step's title\n# shellcheck disable=SC2086\necho $x  # trailing comment stays\n"
        "cat <<'SH'\n#!/bin/bash\n# a written script's usage\nSH\n"
    )
    assert without_comments(script) == (
        "#!/bin/bash\n# header: what this is\nset -e\n# --- ssh: the step's title\n"
        "# shellcheck disable=SC2086\necho $x  # trailing comment stays\n"
        "cat <<'SH'\n#!/bin/bash\nSH\n"
    )
    for name, script in CASES.items():  # what EC2 gets: no comment-only line but those kept on purpose
        body = script.split("\nset -Eeuo pipefail\n", 1)[1]
        kept = [line for line in body.splitlines() if line.lstrip().startswith("#")]
        assert all(line.lstrip().startswith(("#!", "# shellcheck", "# ---")) for line in kept), (name, kept[:3])


@pytest.mark.parametrize("name,ctx", list(contexts()), ids=[n for n, _ in contexts()])
def test_the_loader_passes_shellcheck_and_bash_n(name, ctx, tmp_path):
    path = tmp_path / f"{name}-loader.sh"
    path.write_text(render_loader(ctx))
    check = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0
