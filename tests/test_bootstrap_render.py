"""The rendered bootstrap: well-formed, small enough, reviewed through golden snapshots."""

import gzip
import shutil
import subprocess

import pytest

from infra.userdata import USER_DATA_LIMIT, user_data
from tests.bootstrap_cases import GOLDEN, cases, contexts

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
def test_user_data_fits_ec2_limit_and_unpacks_to_the_script(name, ctx):
    packed = user_data(ctx)
    assert len(packed) <= USER_DATA_LIMIT
    assert gzip.decompress(packed).decode() == CASES[name]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_snapshot_matches(name):
    golden = GOLDEN / f"{name}.sh"
    assert golden.exists(), "run `make golden` and review the new snapshot"
    assert CASES[name] == golden.read_text(), "the templates changed: run `make golden` and review the diff"


def test_no_secret_in_any_script():
    for script in CASES.values():
        assert "PRIVATE KEY" not in script and "aws_secret_access_key" not in script.lower()


def test_every_partial_is_included_once():
    from infra.userdata import TEMPLATES
    for script in CASES.values():
        for part in sorted((TEMPLATES / "steps").glob("*.sh.j2")):
            header = part.read_text().splitlines()[0].split("{{")[0]  # "# --- step: ..."
            assert script.count(header) == 1, part.name


def test_efa_step_matches_the_role():
    assert "fi_info -p efa -t FI_EP_RDM" in CASES["p5-llm-compute"] and "modprobe ib_uverbs" in CASES["p5-llm-compute"]
    assert "-eq 32 ]" in CASES["p5-llm-compute"]
    assert "fi_info -p tcp" in CASES["c6i-oneccl-compute"] and "fi_info -p efa" not in CASES["c6i-oneccl-compute"]
