"""The shared fleet box (issue 30): one box booted once per test run for every scenario that fits its shape - the
cluster, Slurm, day 2, the fleet, its recovery from faults, the health checks, upgrades, key rotation and the small
cloud - and the baseline each scenario starts from and leaves it in.

The shape: the cpu profile with Slurm, group `a` of 3 nodes and group `b` of 1; every compute node is told it has 8
GPUs (HPCC_HEALTH_GPUS; Slurm's Gres=gpu:8 too) and gets the GPU stand-ins on its PATH (dcgm-exporter's started by
the metrics step) and the box's shared file system at /fsx (one host directory every compute node binds there, so
what one node writes the others read, as on FSx), so the
health checks run (tests/box/standins), the Xid check reading the stand-in kernel log inject-xid writes
(HPCC_XID_STANDIN=/var/log/kern.log, where a cluster's node reads /dev/kmsg); b's first instance fails its bootstrap
at `ssh` (the fleet's boot scenario: a bad node delays no other and is replaced); the controller's timers are the
box's, with a held spare's deep check every minute and a reboot's verdict awaited 45 s.

The baseline (`differences`): every group at its count with every slot ready in the ledger (no `hpcc replace`
waiting to be taken up) on a running instance whose node is alive, idle in Slurm at its address, no job and no
reservation; no group protected; the membership's last generation applied by every node and every hostfile listing
exactly the compute nodes; every node on the planned bundle and agent, ready and healthy; the controller running; no
fault, slowed link, hung mount, stopped agent or stand-in fault left, and no day-2 change left to undo. A group's
launch template version is not part of it: a roll (test_box_recovery) leaves its group on the new version, as a
cluster would be. Each test starts once the baseline holds (`wait_baseline`), and what it changed is undone after it
(FleetBox.restore, then the next check): a test that cannot restore it makes the next one fail with what differs,
never inherit it.
"""

from __future__ import annotations

import calendar
import os
import time
from pathlib import Path

from hpcc_contract.names import node_name
from hpcc_contract.version import AGENT_VERSION
from hpcc_node.controller.model import READY
from hpcc_node.controller.observe import slurm_nodes
from tests.box.cloud import CONTROLLER_TIMERS, Fault, FleetBox
from tests.box.machine import sh

STANDINS = Path(__file__).resolve().parent / "standins"
MOUNT = "/fsx"  # the settings' default mount point (fsx.mountPoint)
SHARED_FS = Path("/var/lib/hpcc-box-fsx")  # the host's tmpfs behind every compute node's /fsx
SHARED_FS_MIB = 256
STANDIN_STATE = "/var/log/hpcc-standin"  # a node's stand-in faults (tests/box/standins); empty: healthy
GROUPS = [{"name": "a", "count": 3}, {"name": "b", "count": 1}]
SPARE_CHECK = 60  # a held spare's deep check every minute (12 h on a cluster: Timers.spare_check_seconds)
REBOOT_TIMEOUT = 45  # a rebooted node's verdict is awaited this long (20 min on a cluster): a box node never reboots


def fresh_shared_fs() -> None:
    """The box's cluster file system, empty: a tmpfs on the host that every compute node binds at /fsx, so what one
    node writes there the others read, as on FSx for Lustre (the image cache imports an image once for all). Mounted
    before the box starts: a node's mount namespace made before it would not see it."""
    if os.path.ismount(SHARED_FS):
        sh("umount", "-l", str(SHARED_FS))
    SHARED_FS.mkdir(parents=True, exist_ok=True)
    sh("mount", "-t", "tmpfs", "-o", f"size={SHARED_FS_MIB}m,mode=1777", "hpcc-box-fsx", str(SHARED_FS))


def prepare(box: FleetBox):
    """Each compute node before its bootstrap: the GPU and enroot stand-ins on its PATH and the box's shared file
    system at the mount point."""

    def on(node) -> None:
        for tool in ("nvidia-smi", "dcgmi", "dcgm-exporter", "enroot"):
            wrapper = node.root / "usr/local/bin" / tool
            wrapper.write_text(
                f"#!/bin/sh\n# box stand-in: tests/box/standins/{tool}, this node's state\n"
                f'HPCC_STANDIN_STATE="${{HPCC_STANDIN_STATE:-{STANDIN_STATE}}}" '
                f'exec python3 {STANDINS / tool} "$@"\n'
            )
            wrapper.chmod(0o755)
        box._mountpoint(Path(MOUNT))
        if not os.path.ismount(SHARED_FS):
            raise AssertionError(f"{SHARED_FS} is not mounted: fresh_shared_fs() before the box starts")
        node.run("mount", "--bind", str(SHARED_FS), MOUNT, check=True)

    return on


def shared_fleet() -> FleetBox:
    """The shared box, not started."""
    box = FleetBox(
        profile="cpu",
        scheduler="slurm",
        groups=[dict(g) for g in GROUPS],
        faults=[Fault("b", times=1)],  # the first boot's: b's first instance fails at ssh
        # inject-xid's driver lines go to each node's /var/log/kern.log: the Xid check's stand-in source there
        # (on EC2 it reads /dev/kmsg; the bootstrap creates the stand-in, root's file)
        # and the metrics step starts the stand-in dcgm-exporter (its wrapper, as nvidia-smi's) on each of them
        compute_env={
            "HPCC_HEALTH_GPUS": "8",
            "HPCC_XID_STANDIN": "/var/log/kern.log",
            "HPCC_DCGM_EXPORTER": "/usr/local/bin/dcgm-exporter",
        },
        slurm_gpus=8,  # and Slurm's: a job's --gpus reach its Prolog as SLURM_JOB_GPUS (dcgm-exporter's job map)
        timers={**CONTROLLER_TIMERS, "spare_check_seconds": SPARE_CHECK, "reboot_timeout_seconds": REBOOT_TIMEOUT},
    )
    box.prepare = prepare(box)
    return box


def boot(box: FleetBox, timeout: float = 600) -> None:
    """Start the shared box and wait for its baseline; what the first boot did is kept in `box.first_boot`."""
    fresh_shared_fs()
    box.start()
    box._mountpoint(Path(MOUNT))  # the head mounts the cluster's file system too (its controller writes there)
    box.head.run("mount", "--bind", str(SHARED_FS), MOUNT, check=True)
    code = box.boot_head(timeout=300)
    if code != 0:
        raise AssertionError(f"the shared box's head did not boot ({code})\n{box.diagnose()}")
    box.controller_started = time.time()
    box.start_controller()
    (fault,) = box.faults
    with box.phases.timed("the controller's launches until the baseline"):
        deadline = time.time() + timeout
        while not fault.hit:  # b's first instance launched (and failing): later ones boot clean
            if time.time() > deadline:
                raise AssertionError(f"group b was never launched\n{box.diagnose()}")
            time.sleep(0.5)
        box.faults.clear()
        wait_baseline(box, "the shared box's first boot", timeout=max(60.0, deadline - time.time()))
    ledger = box.ledger()
    box.first_boot = {
        "failed": list(fault.hit),
        "slots": ledger.slots,
        "events": ledger.events,
        "bootstrap_done": {n.name: bootstrap_done_at(box.log(n)) for n in box.compute},
    }


def bootstrap_done_at(log: str) -> float | None:
    """When a node's bootstrap logged its last line, `ready` (the log's UTC stamps: templates/steps/log.sh.j2)."""
    done = [line for line in log.splitlines() if line.endswith(" [ready] ready")]
    return float(calendar.timegm(time.strptime(done[-1].split()[0], "%Y-%m-%dT%H:%M:%SZ"))) if done else None


def expected_names(box: FleetBox) -> set[str]:
    return {node_name(g["name"], i) for g in GROUPS for i in range(g["count"])}


def differences(box: FleetBox) -> list[str]:
    """What differs from the baseline (module docstring); empty when it holds."""
    out = [f"a day-2 change not undone: {what}" for _, what, _ in box.undos]
    out += [f"a fault left on group {f.group}" for f in box.faults]
    if [(g["name"], g["count"], g.get("spares", 0)) for g in box.groups] != [
        (g["name"], g["count"], 0) for g in GROUPS
    ]:
        out.append(f"groups {box.groups}, not {GROUPS}")
    if len(box.controller_pids()) != 1:
        out.append(f"controller processes on the head: {box.controller_pids()}")
    ledger = box.ledger()
    names, slots = expected_names(box), ledger.slots
    if set(slots) != names:
        out.append(f"the ledger's slots are {sorted(slots)}, not {sorted(names)}")
    out += [f"group {n} protected: {g.protected}" for n, g in ledger.groups.items() if g.protected]
    instances = box.instances()
    ips = {}
    for name in sorted(names & set(slots)):
        s = slots[name]
        inst, seen = instances.get(s.instance_id), box.launched.get(s.instance_id)
        if s.state != READY:
            out.append(f"{name} is {s.state} in the ledger ({s.reason})")
        elif s.replace_requested:  # `hpcc replace` recorded, not yet taken up: the baseline is not back yet
            out.append(f"{name} has a replacement requested that the controller has not begun")
        if inst is None or inst["State"]["Name"] != "running" or seen is None or not seen.node.alive:
            out.append(f"{name}'s instance {s.instance_id} is not running with a live node")
        else:
            ips[name] = inst["PrivateIpAddress"]
    out += _slurm_differences(box, names, ips)
    out += _node_differences(box, ips)
    return out


def _slurm_differences(box: FleetBox, names: set[str], ips: dict[str, str]) -> list[str]:
    out = []
    nodes = slurm_nodes(box.on_head("sinfo", "--json").stdout)
    for name in sorted(names):
        n = nodes.get(name)
        if n is None or n.states - {"CLOUD"} != {"IDLE"} or n.addr != ips.get(name):
            out.append(f"{name} in Slurm: {n}, not idle at {ips.get(name)}")
    jobs = box.on_head("squeue", "-h", "-o", "%i %j %T %N").stdout.strip()
    if jobs:
        out.append(f"jobs left in Slurm: {jobs.splitlines()}")
    reservations = box.on_head("scontrol", "show", "reservation", "--oneliner").stdout.strip()
    if reservations and not reservations.startswith("No reservations"):
        out.append(f"reservations left: {reservations[:300]}")
    return out


def _node_differences(box: FleetBox, ips: dict[str, str]) -> list[str]:
    out = []
    doc = box.membership()
    hostfile = [f"{ip} slots={box.slots}" for _, ip in sorted(ips.items())]
    planned = box.plan()["bundleSha256"]
    for node in [box.head, *box.compute]:
        where = node.name
        info = node.file("/etc/hpcc/node")
        if not info.exists() or f"HOSTS_VERSION={doc['generation']}" not in info.read_text():
            out.append(f"{where} has not applied membership generation {doc['generation']}")
        listed = node.file("/etc/hpcc/hostfile")
        if not listed.exists() or listed.read_text().splitlines() != hostfile:
            out.append(f"{where}'s hostfile is not {hostfile}")
        try:
            st = box.status(node.instance_id)
        except Exception as e:  # not written yet: a booting node
            out.append(f"{where} has no status ({e})")
            st = {}
        if st and st.get("hostsVersion") != doc["generation"]:  # written once its whole apply returned
            out.append(f"{where}'s status says membership generation {st.get('hostsVersion')}, not {doc['generation']}")
        if st and (st.get("phase"), st.get("bundle"), st.get("agentVersion"), st.get("drifted")) != (
            "ready",
            planned,
            AGENT_VERSION,
            None,
        ):
            fields = {k: st.get(k) for k in ("phase", "bundle", "agentVersion", "drifted", "health")}
            out.append(f"{where}'s status is {fields}, not ready on the planned bundle and agent")
        if node.role == "compute":
            out += _leftovers_on(node)
    return out


def _leftovers_on(node) -> list[str]:
    """A compute node's faults a test may have left: a slowed link, a hung mount, a stand-in fault, a stopped agent."""
    out = []
    qdisc = node.run("tc", "qdisc", "show", "dev", "eth0").stdout
    if "tbf" in qdisc or "netem" in qdisc:
        out.append(f"{node.name}'s link is shaped: {qdisc.strip()}")
    if node.run("test", "-p", f"{MOUNT}/.hpcc-health-{node.name}").returncode == 0:
        out.append(f"{node.name}'s mount probe is a FIFO (a hung mount)")
    state = node.file(STANDIN_STATE)
    if state.is_dir() and any(state.iterdir()):
        out.append(f"{node.name}'s stand-ins have faults: {sorted(p.name for p in state.iterdir())}")
    pid = node.file("/run/hpcc-sync.pid")
    if pid.exists() and pid.read_text().strip().isdigit():
        stat = Path(f"/proc/{pid.read_text().strip()}/stat")
        if stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "T":
            out.append(f"{node.name}'s agent is stopped")
    return out


def wait_baseline(box: FleetBox, why: str, timeout: float = 420, every: float = 2.0) -> tuple[float, list[str]]:
    """Until the baseline holds; returns the seconds it took and what differed at first (empty: it held at once).
    On timeout: AssertionError naming `why` (the test about to start, or the one that just ended) and what still
    differs, with every node's log tail."""
    started, first = time.time(), None
    while True:
        try:
            left = differences(box)
        except Exception as e:  # a read that failed (a node going away): not the baseline yet
            left = [f"reading the box failed: {type(e).__name__}: {e}"]
        first = left if first is None else first
        if not left:
            return time.time() - started, first
        if time.time() - started > timeout:
            raise AssertionError(
                f"{why}: the shared box is not at its baseline after {timeout:.0f} s; it differs in:\n  "
                + "\n  ".join(left)
                + f"\n{box.diagnose()}"
            )
        time.sleep(every)
