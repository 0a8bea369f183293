"""dcgm-exporter's job map (hpcc_node/dcgm.py): Slurm's Prolog writes each of the job's GPUs' file, its Epilog takes
the job out, a shared GPU keeps every job's line, and no mapping error ever refuses a job; the bootstrap's questions
(exporter-version, counters) answered from the contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcc_contract import dcgm as contract
from hpcc_node import dcgm
from tests.node.test_health_service import Node

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize(
    ("value", "indices"),
    [("0", [0]), ("0,1,2", [0, 1, 2]), ("0-3", [0, 1, 2, 3]), ("1,4-6", [1, 4, 5, 6]), ("2,1,2", [2, 1]), (" 7 ", [7])],
)
def test_slurm_job_gpus_lists_and_ranges(value, indices):
    assert dcgm.gpu_indices(value) == indices


@pytest.mark.parametrize("value", ["", "a", "0,", "3-1", "0-64", "1;2", "../0", "1.0", "-1", "0-3-4"])
def test_anything_else_is_no_gpu_list(value):
    with pytest.raises(ValueError):
        dcgm.gpu_indices(value)


def files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(directory.iterdir()) if not p.name.startswith(".")}


def test_a_job_maps_its_gpus_once_and_its_end_removes_them(tmp_path):
    d = tmp_path / "map"
    dcgm.map_job(str(d), "41", [0, 1])
    dcgm.map_job(str(d), "41", [0, 1])  # the Prolog again (a requeue): one line still
    assert files(d) == {"0": "41\n", "1": "41\n"}
    dcgm.unmap_job(str(d), "41")
    assert files(d) == {}


def test_a_shared_gpu_keeps_each_jobs_line_until_that_job_ends(tmp_path):
    d = tmp_path / "map"
    dcgm.map_job(str(d), "41", [0, 1])
    dcgm.map_job(str(d), "42", [1, 2])
    assert files(d) == {"0": "41\n", "1": "41\n42\n", "2": "42\n"}
    dcgm.unmap_job(str(d), "41")
    assert files(d) == {"1": "42\n", "2": "42\n"}
    dcgm.unmap_job(str(d), "410")  # no prefix match
    assert files(d) == {"1": "42\n", "2": "42\n"}


def test_the_files_are_readable_by_the_exporter_and_no_temporary_is_left(tmp_path):
    d = tmp_path / "map"
    dcgm.map_job(str(d), "7", [3])
    assert (d / "3").stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in d.iterdir()) == [".lock", "3"]


@pytest.mark.parametrize("job", ["", "4a", "../1", "1\n2", "-1", "9" * 21])
def test_a_job_id_is_digits(tmp_path, job):
    with pytest.raises(ValueError):
        dcgm.map_job(str(tmp_path), job, [0])


def test_mapping_errors_are_logged_never_raised(tmp_path):
    said: list[str] = []
    at = {"HPCC_DCGM_JOB_MAP_DIR": str(tmp_path)}
    dcgm.job_started({"SLURM_JOB_ID": "x1", "SLURM_JOB_GPUS": "0", **at}, said.append)
    dcgm.job_started({"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0-x", **at}, said.append)
    blocked = tmp_path / "file"
    blocked.write_text("")
    dcgm.job_started({"SLURM_JOB_ID": "1", "SLURM_JOB_GPUS": "0", "HPCC_DCGM_JOB_MAP_DIR": str(blocked)}, said.append)
    dcgm.job_ended({"SLURM_JOB_ID": "1;", **at}, said.append)
    assert len(said) == 4 and all(line.startswith("dcgm job map: job ") for line in said), said
    dcgm.job_started({"SLURM_JOB_ID": "1", **at}, said.append)  # no GPUs: nothing
    dcgm.job_ended({"SLURM_JOB_ID": "1", "HPCC_DCGM_JOB_MAP_DIR": str(tmp_path / "none")}, said.append)
    assert len(said) == 4


def test_slurms_prolog_maps_the_job_and_its_epilog_unmaps_it(tmp_path):
    node = Node(tmp_path)
    node.monitor().boot()
    d = tmp_path / "map"
    job = {"SLURM_JOB_ID": "41", "SLURM_JOB_GPUS": "0,2-3", "HPCC_DCGM_JOB_MAP_DIR": str(d)}
    assert node.cli("prolog", **job).returncode == 0
    assert files(d) == {"0": "41\n", "2": "41\n", "3": "41\n"}
    assert node.cli("epilog", **job).returncode == 0
    assert files(d) == {}


def test_a_prolog_that_refuses_the_node_maps_nothing_and_a_mapping_error_refuses_no_job(tmp_path):
    node = Node(tmp_path)
    node.monitor().boot()
    d = tmp_path / "map"
    (node.standin / "gpus").write_text("7\n")  # the fast checks fail
    assert node.cli("prolog", SLURM_JOB_ID="41", SLURM_JOB_GPUS="0", HPCC_DCGM_JOB_MAP_DIR=str(d)).returncode == 1
    assert not d.exists()
    (node.standin / "gpus").unlink()
    out = node.cli("prolog", SLURM_JOB_ID="42", SLURM_JOB_GPUS="0,x", HPCC_DCGM_JOB_MAP_DIR=str(d))
    assert out.returncode == 0 and "dcgm job map: job '42' not mapped" in out.stderr


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hpcc_node.dcgm", *args], capture_output=True, text=True, env=env)


def test_the_bootstraps_questions():
    assert _cli("counters").stdout == contract.COUNTERS_CSV
    paired = _cli("exporter-version", "1:4.6.0-1")
    assert (paired.returncode, paired.stdout) == (0, "4.8.3\n")
    unpaired = _cli("exporter-version", "1:4.8.0-1")
    assert unpaired.returncode == 1
    assert "DCGM '1:4.8.0-1' has no dcgm-exporter hpcc verified" in unpaired.stdout
    assert contract.README_SECTION in unpaired.stdout
    assert _cli("exporter-version").returncode == 2
