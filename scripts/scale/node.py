"""A compute node as generators on the virtual clock: its bootstrap (templates/steps/: settings, the name from its
tag, the membership, one status write per step of infra/render/steps.py STEPS, the ssh step's wait for its host
certificate as hpcc_node/certs_boot.py polls, the munge key, slurmd) and then its agent (hpcc_node/agent.py: a tick
every `tick_seconds`, the membership's conditional GET, the certificate's, the status written on a change; the
heartbeat thread every half beat; a changed health verdict written once the tick is done). The membership poll is
the agent's own function (membership.follow: a HeadObject, and on a change the deltas or the whole object), run
against the bucket at the tick's start and its calls then paid for one by one; a status body leaves the generation
applied to the object's metadata, as agent_status.py does. Every call costs one
`aws` CLI process's latency; the SSM and Secrets Manager calls first wait for the node's one pacer (head.Pacer:
`pace_wait_ms`). Whether S3's calls wait for it too, and whether a membership apply reads the munge key again, is
read from the code the nodes run (S3_PACED, APPLY_READS_MUNGE below), so that reverting either fix of issue 38
shows in the figures."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcc_contract.names import MEMBERSHIP_KEY, STATUS_HOSTS_VERSION_META, certs_key, hostkeys_key
from hpcc_node import certstore, hosts, status
from hpcc_node.agent import Agent, tick_seconds
from hpcc_node.controller import membership
from infra.render.steps import STEPS

from .head import Pacer, published

STEPS_DIR = Path(__file__).resolve().parents[2] / "templates" / "steps"


def _s3_paced() -> bool:
    """templates/steps/retry.sh.j2's aws_retry skips `pace` for s3api/s3, and the agent's S3 client has no pacer
    (hpcc_node/agent.py: `awscli.client("s3")`, no `before=aws.pace`): S3 is not paced. Either one reverted: it is."""
    retry = (STEPS_DIR / "retry.sh.j2").read_text()
    bootstrap = not re.search(r'\[ "\$1" = s3api \] \|\| \[ "\$1" = s3 \] \|\| pace', retry)
    return bootstrap or "before=aws.pace" in inspect.getsource(Agent.__init__)


def _apply_reads_munge() -> bool:
    """templates/steps/slurm.sh.j2's munge_key returns early in a membership apply (HPCC_AGENT=1) that has the key."""
    slurm = (STEPS_DIR / "slurm.sh.j2").read_text()
    return '[ "${HPCC_AGENT:-0}" = 1 ] && [ -s "$HPCC_MUNGE_KEY" ]; then return 0; fi' not in slurm


S3_PACED = _s3_paced()
APPLY_READS_MUNGE = _apply_reads_munge()
PACED_ALWAYS = ("ssm", "secret")  # SSM and Secrets Manager: the account-wide rates the pacer shares

if TYPE_CHECKING:
    from .world import World

Steps = Generator[float, None, None]
LOG_TAIL = [f"2026-11-29T00:00:{i:02d}Z [sync] a line of the bootstrap's log, as the status carries" for i in range(15)]


@dataclass
class Node:
    iid: str
    ip: str
    arn: str
    pacer: Pacer
    name: str = ""
    alive: bool = True
    generation: int = 0  # the membership generation applied
    etag: str = ""
    doc: Any = None  # the membership last read (membership.follow's copy)
    written_version: int = -1  # the generation the status object's metadata says
    certs_etag: str = ""
    verdict_ok: bool = True
    verdict_at: float | None = None  # when the health thread's verdict turned failed, until written
    busy: bool = False  # the agent's main thread is in a tick or a write
    message: str = "membership agent running"
    written: tuple = ()
    written_body: bytes = b""
    written_at: float = 0.0
    writes: list[float] = field(default_factory=list)  # when each status write landed (heartbeat gaps)
    keys_at: float = 0.0  # when it published its host keys (its certificate wait starts)


def paced(w: World, n: Node, op: str, **params: Any) -> Generator[float, None, Any]:
    """One AWS call of a node: its turn at the pacer (SSM's and Secrets Manager's, and S3's where S3_PACED), then
    the call; the answer (or the ClientError)."""
    if op in PACED_ALWAYS or w.model.node_s3_paced:
        yield n.pacer.reserve(w.sim.now())
    yield w.cli()
    w.node_calls[op] += 1
    if op == "ssm" or op == "secret":
        return None
    try:
        return getattr(w.bucket, op)(Bucket=w.bucket_name, **params)
    except Exception as e:  # noqa: BLE001 - the agent logs it and goes on next tick
        return e


def body(w: World, n: Node, phase: str, ok: bool = True, failure: str = "", boot: bool = False) -> bytes:
    """The bootstrap's status (`boot`) carries hostsVersion in its body; the agent's leaves it to the metadata."""
    identity = {"node": n.name or "unknown", "ip": n.ip, "instanceId": n.iid}
    if boot:
        identity["hostsVersion"] = n.generation
    extra = {"failure": failure, "evidence": n.message} if failure else {}
    return status.status(
        identity, phase, ok, n.message, bundle="sim", log_tail=LOG_TAIL, now=w.sim.now(), extra=extra
    ).encode()


def put_status(w: World, n: Node, data: bytes) -> Steps:
    meta = {STATUS_HOSTS_VERSION_META: str(n.generation)}
    yield from paced(w, n, "put_object", Key=membership.status_key(n.arn), Body=data, Metadata=meta)
    n.written_body, n.written_at, n.written_version = data, w.sim.now(), n.generation
    n.writes.append(w.sim.now())


def fail(w: World, n: Node, cause: str) -> Steps:
    w.boot_failures[cause] += 1
    n.message = f"bootstrap failed: {cause}"
    yield from put_status(w, n, body(w, n, "failed", ok=False, failure="bootstrap", boot=True))
    n.alive = False


def poll(w: World) -> float:
    """poll_pause: HPCC_POLL_SECONDS plus up to as much again (retry.sh.j2)."""
    return w.pacing.poll_seconds * (1 + w.sim.rng.random())


def listed(w: World, got: Any, n: Node) -> bool:
    """hosts.lists, its answer for every node of one object computed once (the same bytes for every reader)."""
    if not isinstance(got, dict) or "Body" not in got:
        return False
    if got["ETag"] not in w.listings:
        w.listings[got["ETag"]] = {(str(m["name"]), str(m.get("instance"))) for m in hosts.listed(doc_of(w, got))}
    return (n.name, n.iid) in w.listings[got["ETag"]]


def boot(w: World, n: Node) -> Steps:
    m = w.model
    deadline = w.sim.now() + m.join_timeout_seconds
    yield from paced(w, n, "ssm")  # wait_settings: hosts and settings, one GetParameters
    n.pacer.interval_ms = w.pacing.api_interval_ms
    while not w.ec2.name_of(n.iid):  # the controller's hpcc:node tag, read from instance metadata
        if w.sim.now() >= deadline:
            yield from fail(w, n, "no name")
            return
        yield poll(w)
    n.name = w.ec2.name_of(n.iid)
    deadline = w.sim.now() + m.join_timeout_seconds
    while True:  # wait_membership
        got = yield from paced(w, n, "get_object", Key=MEMBERSHIP_KEY)
        if listed(w, got, n):
            n.generation = int(doc_of(w, got)["generation"])
            break
        if w.sim.now() >= deadline:
            yield from fail(w, n, "not in the membership")
            return
        yield poll(w)
    yield from paced(w, n, "ssm")  # the FSx parameter
    for step in STEPS:
        n.message = f"step {step.name}"
        yield from put_status(w, n, body(w, n, step.name, boot=True))
        yield m.bootstrap_seconds / len(STEPS)
        if step.name == "ssh":
            yield from paced(w, n, "secret")  # the cluster key
            if not (yield from wait_certificate(w, n)):
                yield from fail(w, n, "no host certificate")
                return
        if step.name == "slurm":
            yield from paced(w, n, "secret")  # the munge key
            w.slurm.register(n.name, n.ip)
    n.message = "membership agent running"
    yield from report(w, n)
    w.sim.start(agent(w, n))
    w.sim.start(heartbeat(w, n), m.heartbeat_seconds / 2)


def doc_of(w: World, got: Any) -> Any:
    """The membership a GetObject answered (None: 304 or absent), parsed once per ETag: it is the same object."""
    if not isinstance(got, dict) or "Body" not in got:
        return None
    if got["ETag"] not in w.docs:
        w.docs[got["ETag"]] = json.loads(got["Body"].read())
    return w.docs[got["ETag"]]


def wait_certificate(w: World, n: Node) -> Generator[float, None, bool]:
    """certs_boot node: publish the host keys, then poll certs/<node>.json every 5-10 s (not paced: certs_boot's
    S3 client has no pacer) until it is for this address and instance, or the join timeout passes."""
    deadline = w.sim.now() + w.model.join_timeout_seconds
    yield w.cli()
    w.node_calls["put_object"] += 1
    w.bucket.put(hostkeys_key(n.arn), published(n.ip, n.iid).encode())
    n.keys_at = w.sim.now()
    while True:
        yield w.cli()
        w.node_calls["get_object"] += 1
        got = w.bucket.objects.get(certs_key(n.name))
        issued = certstore.read_issued(got[0].decode()) if got else None
        if issued and issued.ip == n.ip and issued.instance == n.iid:
            w.certificate_waits.append(w.sim.now() - n.keys_at)
            return True
        if w.sim.now() >= deadline:
            return False
        yield 5 + 5 * w.sim.rng.random()


def report(w: World, n: Node) -> Steps:
    """StatusReporting.report: the status when what it says changed, else the heartbeat's rewrite if due."""
    key = (n.message, n.verdict_ok)
    if key == n.written and n.written_version != n.generation:  # a membership applied: the same bytes, new metadata
        yield from put_status(w, n, n.written_body)
    elif key != n.written:
        failure = "" if n.verdict_ok else "health"
        data = body(w, n, "ready", ok=n.verdict_ok, failure=failure)
        yield from put_status(w, n, data)
        w.status_change_bytes += len(data)
        n.written = key
    elif w.sim.now() - n.written_at >= w.model.heartbeat_seconds:
        yield from put_status(w, n, n.written_body)


def agent(w: World, n: Node) -> Steps:
    while n.alive:
        yield tick_seconds(w.sync_seconds, w.sim.rng.random())
        while n.busy:
            yield 1.0
        if not n.alive:
            return
        n.busy = True
        doc = yield from follow(w, n)
        if doc is not None:
            if int(doc["generation"]) > n.generation and (n.name, n.iid) in w.listed_in(n.etag, doc):
                w.seen(n, int(doc["generation"]))
                if w.model.apply_reads_munge:  # apply-membership's step_slurm: munge_key (slurm.sh.j2)
                    yield from paced(w, n, "secret")
                    w.node_calls["apply_secret"] += 1
                n.generation = int(doc["generation"])
                w.applied(n, n.generation)
        got = yield from paced(w, n, "get_object", Key=certs_key(n.name), IfNoneMatch=n.certs_etag)
        if isinstance(got, dict):
            n.certs_etag = got["ETag"]
        yield from report(w, n)
        n.busy = False


def follow(w: World, n: Node) -> Generator[float, None, Any]:
    """The agent's membership poll: membership.follow run once per (copy held, published ETag) for every node that
    holds the same copy (the nodes share the parsed documents, as doc_of's), each node then paying for its calls."""
    head = w.bucket.objects.get(MEMBERSHIP_KEY)
    memo = (id(n.doc), n.etag, head[1] if head else "")
    if memo not in w.follows:
        calls: list[tuple[str, str]] = []
        found, etag = membership.follow(Recorded(w.bucket, calls), w.bucket_name, n.doc, n.etag)
        w.follows[memo] = (found, etag, calls)
    found, etag, calls = w.follows[memo]
    for op, key in calls:
        if op in PACED_ALWAYS or w.model.node_s3_paced:
            yield n.pacer.reserve(w.sim.now())
        yield w.cli()
        w.node_calls[op] += 1
        if op == "get_object":  # what S3 served this node (the recorded run served it once)
            w.bucket.bytes_out[w.bucket.prefix(key)] += len(w.bucket.objects[key][0]) if key in w.bucket.objects else 0
    if found is not None:
        n.doc, n.etag = found, etag
    elif not etag:
        n.etag = ""
    return found


class Recorded:
    """The bucket as membership.follow calls it, each call written down (the recorded run's bytes are not
    counted: each node's replay counts its own)."""

    def __init__(self, bucket: Any, calls: list[tuple[str, str]]):
        self.bucket, self.calls = bucket, calls

    def head_object(self, **params: Any) -> Any:
        self.calls.append(("head_object", params["Key"]))
        return self.bucket.head_object(**params)

    def get_object(self, **params: Any) -> Any:
        self.calls.append(("get_object", params["Key"]))
        counted = (self.bucket.bytes_out.copy(), self.bucket.gets.copy())
        try:
            return self.bucket.get_object(**params)
        finally:
            self.bucket.bytes_out, self.bucket.gets = counted


def heartbeat(w: World, n: Node) -> Steps:
    while n.alive:
        if n.written_body and w.sim.now() - n.written_at >= w.model.heartbeat_seconds:
            yield from put_status(w, n, n.written_body)
        yield w.model.heartbeat_seconds / 2


def verdict(w: World, n: Node) -> Steps:
    """The health thread's verdict turns failed: the main thread writes it once it is free."""
    n.verdict_ok, n.verdict_at = False, w.sim.now()
    while n.busy:
        yield 1.0
    n.busy = True
    yield from report(w, n)
    w.verdict_delays.append(w.sim.now() - n.verdict_at)
    n.busy = False
