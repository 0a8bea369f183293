"""The node agent's settings parser and the bootstrap's (templates/steps/settings.sh.j2) read the same texts the
same way (that the node package is plain Python 3.8 with the standard library only: tests/test_architecture.py)."""

import shlex
from pathlib import Path

import pytest

from hpcc_contract.settings import SettingsError
from hpcc_node.settings import parse
from tests.node.agent_support import SETTINGS
from tests.render.bootstrap_cases import settings
from tests.render.bootstrap_shell import context, run

ROOT = Path(__file__).resolve().parents[2]


def bash_accepts(text: str) -> bool:
    out = run(["settings"], f"apply_settings {shlex.quote(text)} && echo accepted", context())
    return out.stdout.strip() == "accepted"


def python_accepts(text: str) -> bool:
    try:
        parse(text)
    except SettingsError:
        return False
    return True


def without(key: str) -> str:
    return "".join(line + "\n" for line in SETTINGS.splitlines() if not line.startswith(key + "="))


TEXTS = [
    *settings().values(),
    SETTINGS + "REBOOT=1\n",
    SETTINGS.replace("SLOTS=8", "SLOTS=08"),
    SETTINGS.replace("SLOTS=8", "SLOTS=0"),
    SETTINGS + "SLOTS=8\n",
    without("JOIN_TIMEOUT_MINUTES"),
    SETTINGS + "just words\n",
    SETTINGS.replace("MOUNT_POINT=/fsx", "MOUNT_POINT=/fsx$(reboot)"),
    SETTINGS + "FABRIC=FI_X=1;reboot\n",
    SETTINGS + "AUTHORIZED_KEY=ssh-ed25519 " + "A" * 68 + " me@host\n",
    SETTINGS.replace("SCHEDULER=slurm", "SCHEDULER=pbs"),
    "\n\n" + SETTINGS + "\n\n",
]


def test_python_and_bash_accept_and_refuse_the_same_settings_texts():
    verdicts = [(python_accepts(t), bash_accepts(t)) for t in TEXTS]
    assert [p for p, _ in verdicts] == [b for _, b in verdicts], verdicts
    assert sum(p for p, _ in verdicts) >= len(settings()) + 2 and not all(p for p, _ in verdicts)


def test_python_takes_the_optional_defaults_and_lists_the_repeated_keys():
    parsed = parse(
        "".join(
            line + "\n"
            for line in SETTINGS.splitlines()
            if not line.startswith(("SCHEDULER=", "SLURM_NODE=", "SLURM_GPUS="))
        )
    )
    assert parsed["SCHEDULER"] == "none" and parsed["SLURM_NODE"] == ""
    assert parsed["FABRIC"][0] == "FI_PROVIDER=efa" and len(parsed["FABRIC"]) == 5


def test_python_refuses_slurm_keys_without_slurm_which_the_program_never_writes():
    with pytest.raises(SettingsError, match="go with slurm only"):
        parse(SETTINGS.replace("SCHEDULER=slurm", "SCHEDULER=none"))


PY38 = Path("/root/.pyenv/versions/3.8.18/bin/python")


@pytest.mark.skipif(not PY38.exists(), reason="no Python 3.8 interpreter here")
def test_the_agent_runs_its_self_check_under_python_3_8(tmp_path):
    """The oldest Python of the images (Ubuntu 22.04 has 3.10, AL2023 3.9; 3.8 is the floor we state)."""
    import subprocess

    from tests.node.agent_support import CONFIG, node

    config, sha = node(tmp_path, "compute-000")
    env = {
        "HPCC_ROLE": "compute",
        **{f"HPCC_{k.upper()}": v for k, v in CONFIG.items()},
        "HPCC_STATUS_KEY": config.status_key,
        "HPCC_ETC": config.etc,
        "PYTHONPATH": f"{config.opt}/current",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [str(PY38), "-m", "hpcc_node.agent", "--self-check"],
        cwd=f"{config.opt}/current",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "self-check passed" in out.stdout, out.stderr
    (tmp_path / "compute-000/etc/node").write_text("garbage\n")
    out = subprocess.run(
        [str(PY38), "-m", "hpcc_node.agent", "--self-check"],
        cwd=f"{config.opt}/current",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "StateError" in out.stderr, out.stderr
