"""`hpcc rotate-keys` on a booted box, with SSH running across the nodes the whole time: an SSH session opened before
the rotation (a job's long-lived ssh) lives through it, and a loop of new connections from the head to every compute
node never fails, while the host CA and root's cluster key are added, switched to and the old ones retired. At the
end every node trusts and serves the new CA only, logs in with the new cluster key, and refuses the old one. (The
box's image has no login user: tests/ops/test_rotate_keys.py rotates that key.)

On the shared fleet box (tests/box/shared.py: groups a and b the head's controller launched, Slurm); the new keys
are the baseline afterwards, nothing to undo. Only FleetBox/Node's public API (box.node, box.compute, node.run,
node.enter, box.client), and the command's own function (infra/ops/rotate_keys.rotate) on the box's moto: it
reads the membership and each node's host keys and certificates from the state bucket."""

from __future__ import annotations

import subprocess

import pytest

from hpcc_contract import names
from hpcc_contract.names import Paths
from hpcc_node import certstore
from infra.ops import rotate_keys, store
from tests.box.cloud import FleetBox
from tests.box.node import REGION

pytestmark = [pytest.mark.box, pytest.mark.long]


class BoxAws:
    """infra/ops/aws.Aws's shape (call, client, region), on the box's moto server."""

    region = REGION

    def __init__(self, box: FleetBox):
        self.box = box

    def client(self, service: str):
        return self.box.client(service)

    def call(self, service: str, operation: str, **kwargs) -> dict:
        return getattr(self.box.client(service), operation)(**kwargs)


@pytest.fixture
def box(fleet):
    return fleet


def known_cas(node) -> list[str]:
    text = node.run("cat", "/etc/ssh/ssh_known_hosts.hpcc", check=True).stdout
    return [line.split(" ", 2)[2] for line in text.splitlines() if line.startswith("@cert-authority ")]


def test_a_rotation_keeps_ssh_across_the_nodes_working(box, tmp_path):
    head, computes = box.node("head"), box.compute
    ips = [n.ip for n in computes]
    old = known_cas(head)
    assert len(old) == 1 and all(known_cas(n) == old for n in computes)
    old_key = tmp_path / "old-cluster-key"  # root's cluster key before the rotation, as a copy kept would be
    old_key.write_text(head.run("cat", "/root/.ssh/id_hpcc", check=True).stdout)
    old_key.chmod(0o600)
    old_public = head.run("cat", "/root/.ssh/id_hpcc.pub", check=True).stdout.split()[1]
    done = tmp_path / "rotation-done"  # the host's /tmp is the head's too
    # a job's long-lived SSH session, opened before the rotation; it outlives the rotation's deadlines (3 x 900 s)
    session = subprocess.Popen(
        head.enter("ssh", "-o", "BatchMode=yes", ips[0], "for i in $(seq 3000); do echo tick; sleep 1; done"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # new connections all through it, as mpirun's launches would make (a loaded machine may take seconds to answer:
    # ConnectTimeout is a deadline, and a refused key or host fails at once whatever it is)
    loop = subprocess.Popen(
        head.enter(
            "bash",
            "-c",
            f"while [ ! -e {done} ]; do for ip in "
            + " ".join(ips)
            + "; do ssh -o BatchMode=yes -o ConnectTimeout=60 $ip true "
            "&& echo ok || echo FAILED $ip; done; sleep 1; done",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    said: list[str] = []
    try:
        rid = rotate_keys.rotate(BoxAws(box), box.name, False, 900, said.append)  # a deadline per phase
    finally:
        done.touch()
        out, _ = loop.communicate(timeout=300)  # it finishes the round it is in
        alive = session.poll() is None  # the session opened before the rotation is still up after it
        session.kill()
        ticks, err = session.communicate(timeout=60)
    assert rid and said[-1].startswith(f"rotation {rid} done"), said
    assert "FAILED" not in out and out.count("ok") >= 2 * len(ips), out[-2000:]
    assert alive and ticks.count("tick") > 10 and "Host key verification failed" not in err, (ticks[-200:], err)
    new = known_cas(head)
    assert len(new) == 1 and new != old and all(known_cas(n) == new for n in computes)
    bucket = store.names(BoxAws(box), box.name).bucket
    for n in box.nodes:  # what each node serves: certificates by the new CA, for its own address
        issued = certstore.read_issued(certstore.get(box.client("s3"), bucket, names.certs_key(n.name))[0])
        assert issued.ca == certstore.fingerprint(new[0]) and issued.ip == n.ip
    assert box.client("ssm").get_parameter(Name=Paths(box.name).rotation)["Parameter"][
        "Value"
    ] == certstore.rotation_text(certstore.Rotation(rid, "retire"))
    # root's cluster key: a new one on every node, the only cluster key any node accepts; the old one is refused
    new_public = head.run("cat", "/root/.ssh/id_hpcc.pub", check=True).stdout.split()[1]
    assert new_public != old_public
    for n in box.nodes:
        assert n.run("cat", "/root/.ssh/id_hpcc.pub", check=True).stdout.split()[1] == new_public
        cluster_lines = [
            line
            for line in n.run("cat", "/root/.ssh/authorized_keys", check=True).stdout.splitlines()
            if line.endswith(f" hpcc-{box.name}")
        ]
        assert len(cluster_lines) == 1 and new_public in cluster_lines[0].split(), cluster_lines
    # no config (its IdentityFile would offer the new key too) and no host check: only the old key is tried
    refused = head.run(
        "ssh",
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=5",
        "-i",
        str(old_key),
        f"root@{ips[0]}",
        "true",
    )
    assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused.stderr
