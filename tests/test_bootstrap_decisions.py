"""The decisions the bootstrap makes, run for real: OS and Lustre package, hostfile lines, fabric settings, pacing."""

import subprocess
from pathlib import Path

import pytest

from infra.bootstrap_pacing import SSM_REQUESTS_PER_SECOND, STEPS, pacing_for
from infra.catalog import lookup
from infra.fabric import fabric_env, mpirun_options
from infra.hostfile import FORMATS, HostEntry

STEPS_DIR = Path(__file__).resolve().parent.parent / "templates" / "steps"


def shell(partial: str, script: str) -> subprocess.CompletedProcess:
    """Source a (Jinja-free) function partial and run SCRIPT against it."""
    body = (STEPS_DIR / partial).read_text()
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{body}\n{script}"], capture_output=True, text=True)


@pytest.mark.parametrize("release,expected,package", [
    ('ID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu-22.04", "apt lustre-client-modules-6.8.0-1019-aws"),
    ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu-24.04", "apt lustre-client-modules-6.8.0-1019-aws"),
    ('ID=ubuntu\nVERSION_ID="20.04"\n', "ubuntu-20.04", "apt lustre-client-modules-6.8.0-1019-aws"),
    ('ID="amzn"\nVERSION_ID="2"\n', "amzn-2", "amazon-linux-extras lustre"),
    ('ID="amzn"\nVERSION_ID="2023"\n', "amzn-2023", "dnf lustre-client"),
])
def test_lustre_package_per_os(tmp_path, release, expected, package):
    (tmp_path / "os-release").write_text(release)
    os_run = shell("os.sh.j2", f"os_id {tmp_path / 'os-release'}")
    assert os_run.stdout.strip() == expected
    pkg = shell("lustre.sh.j2", f"lustre_package {expected} 6.8.0-1019-aws")
    assert pkg.stdout.strip() == package


@pytest.mark.parametrize("release", ['ID=centos\nVERSION_ID="7"\n', 'ID=ubuntu\nVERSION_ID="18.04"\n'])
def test_unsupported_os_is_refused(tmp_path, release):
    (tmp_path / "os-release").write_text(release)
    assert shell("os.sh.j2", f"os_id {tmp_path / 'os-release'}").returncode != 0


def test_debian_runs_the_bootstrap_but_has_no_fsx_lustre_client(tmp_path):
    (tmp_path / "os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    assert shell("os.sh.j2", f"os_id {tmp_path / 'os-release'}").stdout.strip() == "debian-12"
    assert shell("lustre.sh.j2", "lustre_package debian-12 6.1.0").returncode != 0


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_hostfile_lines_match_infra_hostfile(fmt):
    ips = ["10.0.16.4", "10.0.16.5", "10.0.16.6", "10.0.16.10"]  # head first, then compute-000..
    hosts_decl = "HPCC_HOSTS=(" + " ".join(ips) + ")"
    body = (STEPS_DIR / "launch_env.sh.j2").read_text().split("ofi_nccl_dir()")[0]  # the Jinja-free helpers
    run = subprocess.run(["bash", "-c", f"set -euo pipefail\n{body}\n{hosts_decl}\nhostfile {fmt} 8"],
                         capture_output=True, text=True)
    expected = FORMATS[fmt]([HostEntry(f"compute-{i:03d}", ip, 8) for i, ip in enumerate(ips[1:])])
    assert run.stdout == expected


def test_fabric_settings_per_instance_type():
    p5 = dict(fabric_env(lookup("p5.48xlarge"), True))
    assert p5["FI_PROVIDER"] == "efa" and p5["FI_EFA_USE_DEVICE_RDMA"] == "1" and p5["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    p3dn = dict(fabric_env(lookup("p3dn.24xlarge"), True))
    assert p3dn["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in p3dn  # no GPUDirect RDMA on V100
    c6i = dict(fabric_env(lookup("c6i.16xlarge"), False))
    assert c6i["FI_PROVIDER"] == "tcp" and c6i["CCL_ATL_TRANSPORT"] == "ofi" and "NCCL_SOCKET_IFNAME" not in c6i
    assert "pml ^cm" in mpirun_options(True) and "pml" not in mpirun_options(False)


@pytest.mark.parametrize("nodes", [2, 9, 65, 257, 512, 513])
def test_api_calls_stay_under_ssm_throughput(nodes):
    """Per node: 2 parameter polls until present, 1-2 secret calls, 8 status writes (a constant). The cluster's
    rate: polling nodes / (1.5 x poll interval); start-up writes nodes x 8 / start window. Both at most 20/s."""
    pacing = pacing_for(nodes)
    assert pacing.peak_requests_per_second(nodes) <= SSM_REQUESTS_PER_SECOND / 2
    assert STEPS == 8
    if nodes == 513:  # 512 compute + head: poll every 18 s, start spread over 206 s
        assert (pacing.poll_seconds, pacing.start_jitter_seconds) == (18, 206)
        assert round(pacing.peak_requests_per_second(nodes), 1) == 19.9
