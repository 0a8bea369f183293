"""Containers (issue 35) on the shared box (tests/box/shared.py), whose compute nodes share one file system at /fsx
as a cluster's nodes share FSx for Lustre.

- (a) images imported once per cluster: a real OCI registry on the host's bridge address (tests/box/registry.py:
  Debian's docker-registry) holds an image built in the test; every compute node asks the shared image cache for it
  at the same moment (`python3 -m hpcc_node.containers ensure`, the bundle's code, with enroot's part played by
  tests/box/standins/enroot over skopeo, umoci and mksquashfs). All get the same squashfs on the shared file system,
  one import ran (the others waited on its lock) and the registry's access log shows each layer fetched once: the
  issue's target, 1 pull per image per cluster. A second round touches the registry not at all.
- (b) a multi-node job runs in real containers made from the cached image: Slurm's own OCI support (oci.conf,
  `srun --container`; https://slurm.schedmd.com/containers.html) with crun, which the box has where enroot and pyxis
  cannot run. The bundle's rootfs is the cached squashfs unpacked once on the shared file system, its mounts the ones
  every hpcc container gets (hpcc_contract/container_mounts.py: the file system, /etc/hpcc). Every task sees the
  image, the shared file system and the hostfile, and every node's container reaches the first node's over the
  network.
- (c) a spare released for a requeued job already holds its image: the job asks for it as pyxis would (the importer
  entry, from the job), the node's image service (started by the test as the agent makes it: the box's bundle has
  containers off) checks the caller through Slurm (pidinfo: no cgroups here), answers and records the use; the
  controller names the image for group a's held spare, whose agent copies it while idle; a fatal Xid downs the job's
  node, the job restarts on the spare from its local copy of the digest it ran, and the registry sees no request.

Printed: `[containers] ...` lines with what was measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hpcc_contract.container_mounts import container_mounts, oci_mounts
from hpcc_contract.containers import ROOT_ENROOT_CONFIG, image_name
from hpcc_contract.prewarm import ROOT_VOLUME_DIR
from hpcc_node.controller.model import READY
from infra.render.containers import render_importer_entry
from tests.box.cloud import FleetBox
from tests.box.node import node_env
from tests.box.registry import MARKER, Registry
from tests.box.shared import MOUNT, SHARED_FS
from tests.box.test_box_fleet import wait_for
from tests.box.test_box_health import INJECT_XID, PERSON, hold_a_spare, job_fields

pytestmark = [pytest.mark.box, pytest.mark.long]

CACHE = f"{MOUNT}/.hpcc/images"
OCI_CONF = "/etc/slurm/oci.conf"
OCI_DIR = ".hpcc-box-oci"  # the bundles, under the shared file system
# The crun calls of SchedMD's containers page, with crun's own cgroup handling off: a box node's /sys/fs/cgroup holds
# no controller (tests/box/harness.py), as slurmd's own use of cgroups is off there.
CRUN = "crun --cgroup-manager=disabled --root=/run/hpcc-box-crun"
OCI_LINES = (
    f'RunTimeQuery="{CRUN} state %n.%u.%j.%s.%t"',
    f'RunTimeKill="{CRUN} kill -a %n.%u.%j.%s.%t"',
    f'RunTimeDelete="{CRUN} delete --force %n.%u.%j.%s.%t"',
    f'RunTimeRun="{CRUN} run --bundle %b %n.%u.%j.%s.%t"',
)
# Each node's container but the first node's sends a line to the first's (busybox nc, host network), each to a port
# of its own (its place in the job's node list): one listener takes one connection, and a second client's data
# would be lost in its backlog. The first writes what it took to the shared file system, a file a peer. Slurm's
# variables are read as data; nothing is interpolated.
PEERS = r"""
first=${SLURM_NODE_ALIASES%%,*}; ip=${first#*[}; ip=${ip%%]*}
me=$(hostname); i=0; index=-1; rest=$SLURM_NODE_ALIASES
while [ -n "$rest" ]; do
  entry=${rest%%,*}; [ "${entry##*:}" = "$me" ] && index=$i; i=$((i + 1))
  if [ "$rest" = "$entry" ]; then rest=; else rest=${rest#*,}; fi
done
out=/fsx/.hpcc-box-oci/peers-$SLURM_JOB_ID
if [ "$index" = 0 ]; then
  n=1
  while [ "$n" -lt "$SLURM_NNODES" ]; do nc -l -p $((7700 + n)) -w 60 >"$out.$n" & n=$((n + 1)); done
  wait
else
  line="$(hostname) $(cat /hpcc-image-marker) $(wc -l </etc/hpcc/hostfile)"
  i=0
  # the line is in nc's stdin before it connects: the listener (stdin /dev/null) half-closes at once, and busybox nc
  # exits 0 on that EOF without sending if its stdin is a pipe still empty (`echo | nc` lost a line in CI)
  until nc -w 3 "$ip" $((7700 + index)) 2>/dev/null <<LINE
$line
LINE
  do
    i=$((i + 1)); [ "$i" -lt 60 ] || exit 1; sleep 0.5
  done
fi
"""


@pytest.fixture(scope="module")
def registry(box_machine, tmp_path_factory):
    reg = Registry(tmp_path_factory.mktemp("registry"))
    reg.start()
    try:
        yield reg
    finally:
        reg.stop()


def ensure_env(node) -> dict:
    """A node's root running the bundle's image cache, as its image service does: the bundle's code, its name, and
    enroot allowed plain HTTP for the box's registry (enroot's own variable)."""
    return {
        **node_env(node),
        "PYTHONPATH": "/opt/hpcc/current",
        "HPCC_NODE": node.name,
        "ENROOT_ALLOW_HTTP": "yes",
    }


def ensure_at_once(box: FleetBox, reference: str, timeout: float = 180) -> dict[str, dict]:
    """`ensure REFERENCE` started on every compute node at once; node -> its JSON answer (every one must succeed)."""
    started = {
        n.name: subprocess.Popen(
            n.enter("python3", "-m", "hpcc_node.containers", "ensure", reference),
            env=ensure_env(n),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in box.compute
    }
    answers, failures = {}, []
    for name, proc in started.items():
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failures.append(f"{name}: still running after {timeout} s; stderr: {err[-1500:]}")
            continue
        if proc.returncode != 0:
            failures.append(f"{name}: exit {proc.returncode}; stderr: {err[-1500:]}")
            continue
        answers[name] = {**json.loads(out), "log": err}
    assert not failures, "\n".join(failures) + "\n" + box.diagnose()
    return answers


def test_a_every_node_asking_for_one_image_at_once_imports_it_once(fleet, registry):
    reference = registry.build("hpcc/train", "v1")
    image = registry.images[reference]
    started = time.time()
    answers = ensure_at_once(fleet, reference)
    took = time.time() - started
    paths = {a["path"] for a in answers.values()}
    assert len(paths) == 1 and paths <= {f"{CACHE}/sha256-{image['digest'].split(':')[1]}.sqsh"}, answers
    assert {a["digest"] for a in answers.values()} == {image["digest"]}, answers
    pulls = registry.blob_gets(reference)
    assert set(pulls.values()) == {1}, f"layer fetches {pulls}\n{registry.access_log.read_text()[-3000:]}"
    (path,) = paths
    node = fleet.compute[-1]
    held = node.run("unsquashfs", "-cat", path, MARKER)
    assert held.stdout.strip() == image["token"], held.stderr
    waited = sorted(name for name, a in answers.items() if "waiting for node" in a["log"])
    listed = node.run("python3", "-m", "hpcc_node.containers", "list", env=ensure_env(node))
    (entry,) = [e for e in json.loads(listed.stdout)["images"] if e["digest"] == image["digest"]]
    print(
        f"\n[containers] {len(answers)} nodes asked for {reference} at once: {max(pulls.values())} fetch of each of "
        f"its {len(pulls)} layer(s) from the registry, {took:.1f} s until every node had it; imported by "
        f"{entry['importedBy']}, {', '.join(waited) or 'no node'} said whom they waited for"
    )
    again = ensure_at_once(fleet, reference)
    assert {a["path"] for a in again.values()} == paths
    assert registry.blob_gets(reference) == pulls, "a second round fetched layers again"


@pytest.fixture(scope="module")
def slurm_oci(box_machine):
    """oci.conf on the head, which configless Slurm ships to every node; removed after the module."""
    state = {}

    def enable(box: FleetBox) -> None:
        if state:
            return
        box.head.file(OCI_CONF).write_text("".join(f"{line}\n" for line in OCI_LINES))
        reconfigure(box)
        state["box"] = box
        deadline = time.time() + 60
        missing = [n.name for n in box.compute]
        while missing:
            # slurmd's configless cache, seen from the node (/run/slurm/conf links into its spool directory)
            missing = [n.name for n in box.compute if n.run("test", "-f", "/run/slurm/conf/oci.conf").returncode]
            if missing and time.time() > deadline:
                raise AssertionError(f"oci.conf not on {missing} 60 s after scontrol reconfigure\n{box.diagnose()}")
            time.sleep(0.5)

    yield enable
    if state:
        state["box"].head.file(OCI_CONF).unlink(missing_ok=True)
        reconfigure(state["box"])
    shutil.rmtree(SHARED_FS / OCI_DIR, ignore_errors=True)


def reconfigure(box: FleetBox) -> None:
    done = box.on_head("scontrol", "reconfigure")
    assert done.returncode == 0, done.stderr


def oci_bundle(squashfs: str, name: str) -> str:
    """An OCI bundle on the shared file system: the cached squashfs unpacked as its rootfs, crun's default spec with
    the host's network and host name (MPI's peers are the nodes) and hpcc's container mounts; its path on a node."""
    host = SHARED_FS / OCI_DIR / name
    shutil.rmtree(host, ignore_errors=True)
    host.mkdir(parents=True)
    unpacked = subprocess.run(
        ["unsquashfs", "-q", "-d", str(host / "rootfs"), str(SHARED_FS / Path(squashfs).relative_to(MOUNT))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    subprocess.run(["crun", "spec"], cwd=host, check=True)
    spec = json.loads((host / "config.json").read_text())
    spec["process"]["terminal"] = False
    spec.pop("hostname", None)
    spec["linux"]["namespaces"] = [n for n in spec["linux"]["namespaces"] if n["type"] not in ("network", "uts")]
    spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/sys/fs/cgroup"]
    spec["mounts"] += oci_mounts(container_mounts(MOUNT), exists=os.path.exists)
    (host / "config.json").write_text(json.dumps(spec, indent=1))
    return f"{MOUNT}/{OCI_DIR}/{name}"


def test_b_a_multi_node_job_runs_in_containers_of_the_cached_image_and_reaches_the_file_system_and_its_peers(
    fleet, registry, slurm_oci
):
    reference = registry.build("hpcc/train", "v2")
    image = registry.images[reference]
    node = fleet.compute[0]
    got = node.run("python3", "-m", "hpcc_node.containers", "ensure", reference, env=ensure_env(node))
    assert got.returncode == 0, got.stderr
    slurm_oci(fleet)
    bundle = oci_bundle(json.loads(got.stdout)["path"], "train-v2")
    (SHARED_FS / OCI_DIR / "peers.sh").write_text(PEERS)
    nodes = len(fleet.compute)
    started = time.time()
    run = fleet.on_head(
        "srun", "-N", str(nodes), f"--container={bundle}", "sh", f"{MOUNT}/{OCI_DIR}/peers.sh", timeout=120
    )
    took = time.time() - started
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}\n{fleet.diagnose()}"
    received = sorted((SHARED_FS / OCI_DIR).glob("peers-*.*"))
    lines = [line.split() for path in received for line in path.read_text().splitlines()]
    hosts = {n.run("hostname").stdout.strip() for n in fleet.compute}
    assert len(lines) == nodes - 1, lines
    assert {line[0] for line in lines} < hosts and len({line[0] for line in lines}) == nodes - 1, (lines, hosts)
    assert {line[1] for line in lines} == {image["token"]}, "a container did not run the cached image"
    assert {line[2] for line in lines} == {str(nodes)}, "the hostfile in the container is not the node's"
    print(
        f"\n[containers] srun -N {nodes} --container: {nodes} containers of {reference} ran in {took:.1f} s; "
        f"{nodes - 1} reached the first node's over the network, each with the image, /fsx and the hostfile"
    )


# -- (c) a requeued job's image on the spare it restarts on -----------------------------------------------------------

SERVE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
from hpcc_node.containers.jobcheck import slurm_job_check
from hpcc_node.containers.service import make_service
service = make_service(sys.argv[1], sys.argv[2], slurm_job_check())
service.bind()
print("serving", flush=True)
service.serve()
"""


def start_image_service(node, log: Path) -> subprocess.Popen:
    """The node's image service as the agent makes it (service.make_service with the real job check), started here:
    the box's bundle has containers off (its containers step would install enroot and pyxis), so no agent runs it."""
    node.file(ROOT_ENROOT_CONFIG).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(node.file(ROOT_ENROOT_CONFIG), 0o700)
    proc = subprocess.Popen(
        node.enter("python3", "-c", SERVE, MOUNT, node.name),
        env=ensure_env(node),
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "serving", log.read_text()
    return proc


def registry_requests(registry: Registry, repository: str) -> list[str]:
    """Every request the registry logged for the repository (manifests and blobs, any method)."""
    text = registry.access_log.read_text(errors="replace")
    return [line for line in text.splitlines() if f" /v2/{repository}/" in line]


def test_c_a_spare_released_for_a_requeued_job_already_holds_its_image_and_its_restart_asks_no_registry(
    fleet, registry, tmp_path
):
    """A job asks for its image as pyxis does (the importer entry, as the job's user, from the job): the node's image
    service checks it runs that job (Slurm's pidinfo: the box has no cgroups), answers the shared cache's squashfs and
    records the use. The controller then names the image for group a's held spare, whose agent copies it to its own
    disk while idle. A fatal Xid downs the job's node; the job is requeued onto the spare, and its restart gets the
    spare's local copy of the digest it ran, with no request to the registry at all."""
    reference = registry.build("hpcc/train", "v3")
    image = registry.images[reference]
    repository = "hpcc/train"
    before = hold_a_spare(fleet)
    victim, spare = fleet.node("a-000"), fleet.node("a-002")
    local_copy = spare.file(f"{ROOT_VOLUME_DIR}/{image_name(image['digest'])}")
    person = fleet.on_head("scontrol", "update", "nodename=a-001", "state=drain", f"reason={PERSON}")
    assert person.returncode == 0, person.stderr
    work = fleet.workdir / "images-job"
    work.mkdir(exist_ok=True)
    entry = SHARED_FS / OCI_DIR / "pyxis-importer"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(render_importer_entry())
    entry.chmod(0o755)
    flag = work / "finish"
    script = (
        f"t0=$(date +%s.%N); p=$({MOUNT}/{OCI_DIR}/pyxis-importer get docker://{reference} </dev/null) || exit 3; "
        f't1=$(date +%s.%N); echo "image $SLURMD_NODENAME ${{SLURM_RESTART_COUNT:-0}} $p $t0 $t1"; '
        f"while [ ! -e {flag} ]; do sleep 1; done; echo done"
    )
    services = {n.name: start_image_service(n, work / f"service-{n.name}.log") for n in (victim, spare)}
    job = ""
    try:  # no -w: a requeued job keeps its node list; a-001 drained and a-002 held leave a-000 the one to run it
        submit = fleet.on_head(
            "sbatch", "--parsable", "--requeue", "-N", "1", "-p", "a",
            f"--output={work}/job-%j.out", "--open-mode=append", "--wrap", script,
        )  # fmt: skip
        assert submit.returncode == 0, submit.stderr
        job = submit.stdout.strip().split(";")[0]
        out = work / f"job-{job}.out"

        def starts() -> list[list[str]]:
            text = out.read_text() if out.exists() else ""
            return [line.split() for line in text.splitlines() if line.startswith("image ")]

        def why() -> str:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(work.glob("service-*.log")))
            return f"job {job}: {job_fields(fleet, job)}\n{out.read_text() if out.exists() else '(no output)'}\n{logs}"

        first = wait_for(lambda: starts(), 120, fleet, why=why)[0]
        shared_path = f"{CACHE}/{image_name(image['digest'])}"
        assert first[1:4] == ["a-000", "0", shared_path], (first, why())
        wait_for(local_copy.exists, 240, fleet, why=lambda: f"a-002's local copy of {image['digest']}\n{why()}")
        asked_before = registry_requests(registry, repository)

        injected = time.time()
        run = victim.run("env", "HPCC_STANDIN_STATE=/var/log", "python3", str(INJECT_XID), "79")
        assert run.returncode == 0, run.stderr
        again = wait_for(lambda: len(starts()) > 1 and starts()[1], 300, fleet, every=0.5, why=why)
        t_again = time.time() - injected
        assert again[1:4] == ["a-002", "1", f"{ROOT_VOLUME_DIR}/{image_name(image['digest'])}"], (again, why())
        asked_after = registry_requests(registry, repository)
        assert asked_after == asked_before, f"the restart asked the registry: {asked_after[len(asked_before) :]}"
        answer_s = float(again[5]) - float(again[4])
        print(
            f"\n[containers] job {job} requeued from a-000 (Xid 79) onto the spare a-002 and running again after "
            f"{t_again:.1f} s; its image answered in {answer_s * 1000:.0f} ms from a-002's local copy (the copy made "
            f"while the spare was idle), no request to the registry; the first start took "
            f"{(float(first[5]) - float(first[4])) * 1000:.0f} ms from the shared cache"
        )
        wait_for(
            lambda: (
                (s := fleet.ledger().slots).get("a-000")
                and s["a-000"].state == READY
                and s["a-000"].instance_id != before["a-000"].instance_id
            ),
            600,
            fleet,
            why="a-000 replaced by a new instance, ready",
        )
    finally:
        flag.touch()
        if job and job_fields(fleet, job).get("JobState") not in ("COMPLETED", None):
            fleet.on_head("scancel", job)
        fleet.on_head("scontrol", "update", "nodename=a-001", "state=resume")
        for proc in services.values():
            proc.kill()
            proc.wait(timeout=30)
