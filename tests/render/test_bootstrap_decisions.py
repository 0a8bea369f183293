"""The decisions the bootstrap makes, run for real: OS and Lustre package, hostfile lines, fabric settings."""

import pytest

from hpcc_contract.hostfile import FORMATS, HostEntry
from infra.facts.fabric import fabric_env, mpirun_options
from infra.render.node_settings import parse
from tests.facts.instance_data import facts_for as lookup
from tests.render.bootstrap_cases import contexts, settings
from tests.render.bootstrap_shell import run

KERNEL = "6.8.0-1019-aws"


@pytest.mark.parametrize(
    "release,expected,package",
    [
        ('ID=ubuntu\nVERSION_ID="20.04"\n', "ubuntu-20.04", f"apt lustre-client-modules-{KERNEL}"),
        ('ID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu-22.04", f"apt lustre-client-modules-{KERNEL}"),
        ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu-24.04", f"apt lustre-client-modules-{KERNEL}"),
        ('NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2"\n', "amzn-2", "amazon-linux-extras lustre"),
        ('NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2023"\n', "amzn-2023", "dnf lustre-client"),
    ],
)
def test_lustre_package_per_os(tmp_path, release, expected, package):
    (tmp_path / "os-release").write_text(release)
    run_ = run(["os", "lustre"], f'os=$(os_id {tmp_path / "os-release"}); echo "$os"; lustre_package "$os" {KERNEL}')
    assert run_.stdout.splitlines() == [expected, package], run_.stderr


@pytest.mark.parametrize(
    "release,codename",
    [
        ('ID=ubuntu\nVERSION_ID="22.04"\nVERSION_CODENAME=jammy\nUBUNTU_CODENAME=jammy\n', "jammy"),
        ('ID=ubuntu\nVERSION_ID="24.04"\nUBUNTU_CODENAME=noble\n', "noble"),  # no VERSION_CODENAME: the Ubuntu one
        ('NAME="Amazon Linux"\nID="amzn"\nVERSION_ID="2023"\n', ""),
    ],
)
def test_os_codename_comes_from_os_release(tmp_path, release, codename):
    (tmp_path / "os-release").write_text(release)
    out = run(["os"], f'os_codename {tmp_path / "os-release"}; echo "ID=${{ID:-unset}}"')
    assert out.stdout.splitlines() == [codename, "ID=unset"], out.stderr  # and nothing leaks into the caller


@pytest.mark.parametrize(
    "release", ['ID=centos\nVERSION_ID="7"\n', 'ID=ubuntu\nVERSION_ID="18.04"\n', 'ID=rhel\nVERSION_ID="9.4"\n']
)
def test_unsupported_os_is_refused(tmp_path, release):
    (tmp_path / "os-release").write_text(release)
    assert run(["os"], f"os_id {tmp_path / 'os-release'}").returncode != 0


def test_debian_runs_the_bootstrap_but_has_no_fsx_lustre_client(tmp_path):
    (tmp_path / "os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    assert run(["os"], f"os_id {tmp_path / 'os-release'}").stdout.strip() == "debian-12"
    assert run(["lustre"], "lustre_package debian-12 6.1.0").returncode != 0


def test_a_kernel_without_a_lustre_package_names_the_nearest_kernels():
    available = [
        "5.15.0-1050-aws",
        "6.2.0-1017-aws",
        "6.5.0-1020-aws",
        "6.8.0-1015-aws",
        "6.8.0-1018-aws",
        "6.8.0-1021-aws",
        "6.8.0-1024-aws",
        "6.11.0-1004-aws",
    ]
    listing = "\\n".join(available)
    out = run(["lustre"], f"printf '{listing}\\n' | nearest_versions {KERNEL}").stdout.split()
    assert out == ["6.8.0-1015-aws", "6.8.0-1018-aws", "6.8.0-1021-aws", "6.8.0-1024-aws"]
    out = run(["lustre"], f"printf '{listing}\\n' | nearest_versions 4.14.0-1-aws").stdout.split()
    assert out == ["5.15.0-1050-aws", "6.2.0-1017-aws"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_hostfile_lines_match_infra_hostfile(fmt):
    ips = ["10.0.16.4", "10.0.16.5", "10.0.16.6", "10.0.16.10"]  # head first, then compute-000..
    out = run(["launch_env"], f"HPCC_HOSTS=({' '.join(ips)})\nhostfile {fmt} 8")
    expected = FORMATS[fmt]([HostEntry(f"compute-{i:03d}", ip, 8) for i, ip in enumerate(ips[1:])])
    assert out.stdout == expected, out.stderr


def test_fabric_settings_per_instance_type():
    p5 = dict(fabric_env(lookup("p5.48xlarge"), True))
    assert p5["FI_PROVIDER"] == "efa" and p5["FI_EFA_USE_DEVICE_RDMA"] == "1" and p5["FI_EFA_FORK_SAFE"] == "1"
    assert p5["NCCL_SOCKET_IFNAME"] == "^lo,docker"
    p3dn = dict(fabric_env(lookup("p3dn.24xlarge"), True))
    assert p3dn["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in p3dn  # no GPUDirect RDMA on V100
    c6i = dict(fabric_env(lookup("c6i.16xlarge"), False))
    assert c6i["FI_PROVIDER"] == "tcp" and c6i["CCL_ATL_TRANSPORT"] == "ofi" and "NCCL_SOCKET_IFNAME" not in c6i
    assert "pml ^cm" in mpirun_options(True) and "pml" not in mpirun_options(False)


def test_every_node_gets_the_compute_nodes_launch_environment():
    """The ranks run on the compute nodes: every node reads the one settings value, which carries the compute
    type's fabric settings, not the head type's (p5-llm: a c5n head without GPUDirect RDMA for p5 compute nodes)."""
    launch = parse(settings()["p5-llm"])
    assert dict(launch.fabric)["FI_EFA_USE_DEVICE_RDMA"] == "1" and launch.mpirun_options == mpirun_options(True)
    assert launch.slots == lookup("p5.48xlarge").slots
    ctxs = dict(contexts())
    assert ctxs["p5-llm-head"].efa_devices == 1 and ctxs["p5-llm-compute"].efa_devices == 32  # each checks its own
    assert not ctxs["p5-llm-head"].gpudirect_rdma and ctxs["p5-llm-compute"].gpudirect_rdma


def test_launch_env_writes_the_fabric_variables_and_the_ofi_nccl_dir(tmp_path):
    out = run(
        ["launch_env"],
        "HPCC_NAMES=(head compute-000 compute-001)\nHPCC_HOSTS=(10.0.0.4 10.0.0.5 10.0.0.6)\n"
        "ofi_nccl_dir() { echo /opt/amazon/ofi-nccl/lib; }\ncluster_env",
    )
    env = dict(line.split("=", 1) for line in out.stdout.splitlines())
    assert env["MASTER_ADDR"] == "10.0.0.5" and env["NNODES"] == "2" and env["NPROC_PER_NODE"] == "8"
    assert env["HPCC_HOSTS"] == "10.0.0.5:8,10.0.0.6:8"
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["LD_LIBRARY_PATH"].startswith("/opt/amazon/ofi-nccl/lib:")
    names = "HPCC_NAMES=(head compute-000 compute-001)\nHPCC_HOSTS=(10.0.0.4 10.0.0.5 10.0.0.6)\n"
    rank = run(["identify", "launch_env"], names + "HPCC_NODE=compute-001\nHPCC_IP=10.0.0.6\nnode_env")
    assert "NODE_RANK=1" in rank.stdout.splitlines() and "HPCC_GROUP=compute" in rank.stdout.splitlines()
    head = run(["identify", "launch_env"], names + "HPCC_NODE=head\nHPCC_IP=10.0.0.4\nnode_env")
    assert "NODE_RANK" not in head.stdout


def test_each_group_has_its_hostfiles_and_rendezvous_and_holes_take_no_rank():
    """Per-group hostfiles and env (/etc/hpcc/groups/<group>/) besides the cluster's; nothing assumes contiguous
    numbering: gpu-001 is a hole, cpu-1000 follows cpu-000."""
    names = (
        "HPCC_NAMES=(head cpu-000 cpu-1000 gpu-000 gpu-002)\n"
        "HPCC_HOSTS=(10.0.0.4 10.0.0.10 10.0.0.11 10.0.0.20 10.0.0.22)\nofi_nccl_dir() { :; }\n"
    )
    out = run(
        ["identify", "launch_env"],
        names + 'node_groups; echo ---; hostfile openmpi 8 gpu; echo ---; '
        'hostfile openmpi 8; echo ---; cluster_env gpu; echo ---; HPCC_NODE=gpu-002 HPCC_IP=10.0.0.22 node_env',
    )
    assert out.returncode == 0, out.stderr
    groups, gpu, every, env, node = out.stdout.split("---\n")
    assert groups.split() == ["cpu", "gpu"]
    assert gpu.splitlines() == ["10.0.0.20 slots=8", "10.0.0.22 slots=8"]
    assert every.splitlines() == [f"10.0.0.{i} slots=8" for i in (10, 11, 20, 22)]
    env = dict(line.split("=", 1) for line in env.splitlines())
    assert (env["MASTER_ADDR"], env["NNODES"], env["HPCC_HOSTFILE"]) == (
        "10.0.0.20",
        "2",
        "/etc/hpcc/groups/gpu/hostfile",
    )
    assert "NODE_RANK=3" in node.splitlines() and "HPCC_GROUP=gpu" in node.splitlines()


def test_the_launch_environment_of_2000_nodes_is_written_whole():
    """2,000 compute nodes: every host function runs to its end under pipefail (a pipe into head failed it: 141)."""
    count = 2000
    names = "HPCC_NAMES=(head " + " ".join(f"compute-{i:03d}" for i in range(count)) + ")\n"
    hosts = "HPCC_HOSTS=(10.0.0.4 " + " ".join(f"10.1.{i // 250}.{i % 250 + 1}" for i in range(count)) + ")\n"
    out = run(
        ["identify", "launch_env"],
        names + hosts + "ofi_nccl_dir() { :; }\ncluster_env; echo ---; "
        "cluster_env compute; echo ---; hostfile openmpi 8 | wc -l",
    )
    assert out.returncode == 0, out.stderr
    every, group, lines = out.stdout.split("---\n")
    for text in (every, group):
        env = dict(line.split("=", 1) for line in text.splitlines())
        assert (env["MASTER_ADDR"], env["NNODES"]) == ("10.1.0.1", str(count))
    assert int(lines) == count
