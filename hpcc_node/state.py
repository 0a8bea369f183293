"""What a node keeps between ticks, in files: its identity and applied membership generation (/etc/hpcc/node, written by
the bootstrap's write_state, templates/steps/sync.sh.j2), the settings text it applied, and the agent's own
record of the bundle it booted with, drift and refused bundles (/etc/hpcc/agent.json). Read back checked line by
line, never executed."""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from hpcc_contract import hosts

INSTANCE_ID = re.compile(r"i-[0-9a-f]{1,40}")  # as identify.sh.j2 checks it
IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")


class StateError(ValueError):
    pass


class NodeState(NamedTuple):
    node: str
    instance_id: str
    ip: str
    hosts_version: int


def valid_name(name: str) -> bool:
    """head or <group>-NNN, one spelling a name (hpcc_contract/hosts.py)."""
    return hosts.valid_name(name)


def parse_state(text: str) -> NodeState:
    fields: Dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key not in ("HPCC_NODE", "HPCC_INSTANCE_ID", "HPCC_IP", "HOSTS_VERSION"):
            raise StateError(f"unexpected line {line[:60]!r}")
        fields[key] = value
    try:
        if (
            not valid_name(fields["HPCC_NODE"])
            or not INSTANCE_ID.fullmatch(fields["HPCC_INSTANCE_ID"])
            or not IPV4.fullmatch(fields["HPCC_IP"])
            or not fields["HOSTS_VERSION"].isdigit()
        ):
            raise StateError("a malformed value")
    except KeyError as e:
        raise StateError(f"{e.args[0]} is missing") from None
    return NodeState(fields["HPCC_NODE"], fields["HPCC_INSTANCE_ID"], fields["HPCC_IP"], int(fields["HOSTS_VERSION"]))


def parse_hosts(text: str, vpc_cidr: str) -> List[Tuple[str, str]]:
    """The hosts text's (name, address) pairs, with the rules the bootstrap keeps (hpcc_contract/hosts.py)."""
    try:
        return hosts.parse_hosts(text, vpc_cidr)
    except hosts.HostsError as e:
        raise StateError(f"hosts: {e}") from None


class AgentRecord(NamedTuple):
    """The agent's own state across re-executions and restarts."""

    boot_digest: str = ""  # the role script's sha256 the node booted with (its boot steps)
    drifted: Optional[str] = None  # why the node should be replaced when idle
    refused: Dict[str, str] = {}  # bundle sha -> why this node refused it (never fetched again)
    halted: Optional[str] = None  # the sha of a rollout the canaries halted (the head reports it)
    previous: str = ""  # the bundle this node ran before its current one (a canary's rollback target)


def read_record(path: str) -> AgentRecord:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return AgentRecord()
    return AgentRecord(
        str(data.get("bootDigest", "")),
        data.get("drifted"),
        dict(data.get("refused", {})),
        data.get("halted"),
        str(data.get("previous", "")),
    )


def write_record(path: str, record: AgentRecord) -> None:
    data = {
        "bootDigest": record.boot_digest,
        "drifted": record.drifted,
        "refused": record.refused,
        "halted": record.halted,
        "previous": record.previous,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def read_text(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


LOCK = "hpcc-sync.lock"  # in /run: held by the running agent for its whole life
PID = "hpcc-sync.pid"


def lock_or_exit(run: str) -> Any:
    """The agent's lock, held until it exits or execs; a second agent exits 0 naming the first's pid."""
    lock = open(os.path.join(run, LOCK), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pid = read_text(os.path.join(run, PID)) or "?"
        print(f"hpcc node agent: already running (pid {pid.strip()})", file=sys.stderr)
        sys.exit(0)
    with open(os.path.join(run, PID), "w") as f:
        f.write(f"{os.getpid()}\n")
    return lock
