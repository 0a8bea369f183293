"""`hpcc rotate-keys --cluster C`: a new host CA on a running cluster, without breaking a running job's SSH.

The command steps `/hpcc/<c>/rotation` through three phases (hpcc_node/certs.py applies them on the head; every
node's agent installs what the head wrote), and waits between phases until every node has applied the phase:
- add: the head makes a new CA; every node trusts both (two `@cert-authority` lines); certificates stay the old CA's;
- switch: the head signs every node's host keys with the new CA; both are still trusted, so a connection from a node
  that has not yet seen the new certificates, or to one still serving the old, is accepted;
- retire: the old CA is dropped from the secret and from every known-hosts file.
A node applied a phase when the certificates the head wrote for it (certs/<node>) are of the phase and the node's
own report (hostkeys/<node>: the CAs it trusts, the CA of the certificates it serves) says it installed them.
Open SSH sessions are never touched (their host key was checked at connect); new ones succeed through every phase.

One rotation at a time: a rotation whose retire not every node has applied is still running; the command refuses to
start another and `--resume` carries it on (re-running a phase changes nothing). The cluster's first rotation
parameter is created with Overwrite false, so two operators starting it at once do not both start one.
Not yet: rotating root's cluster key (hpcc/<c>/ssh-key), which the nodes read at boot only."""

from __future__ import annotations

import time
from typing import Callable

from hpcc_node import certstore
from infra.hosts_schema import node_name
from infra.naming import Paths
from infra.ops import OpsError
from infra.ops.aws import Aws, error_code

Clock = Callable[[], float]


def applied(phase: str, issued: certstore.Issued | None, published: certstore.Published | None) -> bool:
    """Whether a node has applied a phase: the head's certificates for it are of the phase, and the node says it
    trusts exactly those CAs and serves certificates by the one that signs."""
    if issued is None or published is None:
        return False
    trusted = [certstore.fingerprint(ca) for ca in issued.cas]
    of_phase = {"add": len(trusted) == 2 and issued.ca == trusted[0],
                "switch": len(trusted) == 2 and issued.ca == trusted[1],
                "retire": len(trusted) == 1 and issued.ca == trusted[0]}[phase]
    return of_phase and published.trust == trusted and published.cert_ca == issued.ca and published.ip == issued.ip


def _parameters(aws: Aws, names: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for i in range(0, len(names), 10):  # GetParameters takes at most 10 names
        for p in aws.call("ssm", "get_parameters", Names=names[i:i + 10]).get("Parameters", []):
            found[p["Name"]] = p["Value"]
    return found


def nodes_of(aws: Aws, cluster: str) -> list[str]:
    hosts = _parameters(aws, [Paths(cluster).hosts]).get(Paths(cluster).hosts)
    if hosts is None:
        raise OpsError(f"no {Paths(cluster).hosts} parameter: is {cluster!r} a running cluster in this region?")
    return [node_name(i) for i, line in enumerate(l for l in hosts.splitlines() if l.strip())]


def lagging(aws: Aws, cluster: str, phase: str) -> list[str]:
    """The nodes that have not applied the phase yet."""
    names, nodes = certstore.names(cluster), nodes_of(aws, cluster)
    read = _parameters(aws, [names.certs(n) for n in nodes] + [names.hostkeys(n) for n in nodes])
    return [n for n in nodes if not applied(phase, certstore.read_issued(read.get(names.certs(n))),
                                            certstore.read_published(read.get(names.hostkeys(n))))]


def current(aws: Aws, cluster: str) -> certstore.Rotation | None:
    name = certstore.names(cluster).rotation
    try:
        return certstore.read_rotation(_parameters(aws, [name]).get(name))
    except ValueError as e:
        raise OpsError(f"{name}: {e}; delete it (aws ssm delete-parameter --name {name}) to start again") from None


def put(aws: Aws, cluster: str, rotation: certstore.Rotation, create: bool) -> None:
    try:
        aws.call("ssm", "put_parameter", Name=certstore.names(cluster).rotation, Type="String",
                 Value=certstore.rotation_text(rotation), Overwrite=not create)
    except Exception as e:
        if error_code(e) == "ParameterAlreadyExists":
            raise OpsError("another rotation was started at the same moment: run again with --resume to follow it") from None
        raise


def wait_phase(aws: Aws, cluster: str, phase: str, timeout: float, say: Callable[[str], None],
               clock: Clock = time.time, sleep: Callable[[float], None] = time.sleep, poll: float = 15) -> None:
    deadline, last = clock() + timeout, None
    while True:
        behind = lagging(aws, cluster, phase)
        total = len(nodes_of(aws, cluster))
        line = f"{phase}: {total - len(behind)}/{total} nodes applied" + (
            f" (waiting for {', '.join(behind[:8])}{' ...' if len(behind) > 8 else ''})" if behind else "")
        if line != last:
            say(line)
            last = line
        if not behind:
            return
        if clock() >= deadline:
            raise OpsError(f"phase {phase}: {', '.join(behind[:20])} did not apply it within {timeout / 60:.0f} min "
                           "(check `hpcc status` and the nodes' log); nothing is broken: both CAs are trusted until "
                           "retire. Run `hpcc rotate-keys --resume` to carry on")
        sleep(poll)


def rotate(aws: Aws, cluster: str, resume: bool, timeout: float, say: Callable[[str], None],
           clock: Clock = time.time, sleep: Callable[[float], None] = time.sleep) -> str:
    """Run (or with resume, carry on) one rotation to its end; returns its id."""
    running = current(aws, cluster)
    if running and running.phase == "retire" and not lagging(aws, cluster, "retire"):
        running = None  # the last rotation is over
    if running and not resume:
        raise OpsError(f"rotation {running.id} is still at phase {running.phase}: run `hpcc rotate-keys --cluster "
                       f"{cluster} --resume` to carry it on; one rotation at a time")
    if running is None and resume:
        say("no rotation is running: nothing to resume")
        return ""
    if running is None:
        running = certstore.Rotation(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock())), "add")
        put(aws, cluster, running, create=current(aws, cluster) is None)
        say(f"rotation {running.id} started")
    for phase in certstore.PHASES[certstore.PHASES.index(running.phase):]:
        if phase != running.phase:
            running = certstore.Rotation(running.id, phase)
            put(aws, cluster, running, create=False)
        wait_phase(aws, cluster, phase, timeout, say, clock, sleep)
    say(f"rotation {running.id} done: every node trusts and serves the new host CA only")
    return running.id
