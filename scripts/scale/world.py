"""The simulated cluster: the model's parameters (each measured or assumed value named, with where it came from),
the fakes, N nodes, the head's signer and the real controller (hpcc_node/controller/loop.py `build_step` and
`forever`) on an actor, its clients charging every call on the virtual clock."""

from __future__ import annotations

import json
import logging
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

from hpcc_contract import formats
from hpcc_contract.names import (
    CERTS_PREFIX,
    MEMBERSHIP_KEY,
    STATUS_HOSTS_VERSION_META,
    TAG_CLUSTER,
    TAG_GROUP,
    TAG_NODE,
    TAG_ROLE,
    certs_key,
    hostkeys_key,
)
from hpcc_node import certstore, hosts
from hpcc_node.controller import clients, membership, slurm_records
from hpcc_node.controller import observe as observe_mod
from hpcc_node.controller.calls import Costs
from hpcc_node.controller.decide import digest, membership_body
from hpcc_node.controller.loop import build_step, forever
from hpcc_node.controller.model import Group, Slot
from hpcc_node.controller.model import Instance as Seen
from hpcc_node.controller.timers import DEFAULT, Timers
from hpcc_node.status import HEARTBEAT_SECONDS
from infra.facts.slurm import SLURMD_TIMEOUT_SECONDS
from infra.render.pacing import Pacing, pacing_for, sync_seconds

from . import head as head_mod
from . import node as node_mod
from .ec2 import EC2, ClientError, EC2Params, Instance, Slurm
from .kernel import Actor, Executor, Latency, Sim
from .stores import Bucket, Table, Timed

# The controller's calls are in process with boto3 (hpcc_node/controller/clients.py). Measured on this machine
# (issue 38) against a local moto server: in process, median 4.5 ms (s3.get_object), 3.9 ms (dynamodb.put_item),
# 5.8 ms (ec2.describe_instances), p90 about 10 ms; one `aws` CLI process 624 ms median on the same run (0.4-1.5 s).
# AWS itself is farther than a local server: ASSUMED in-region, median 20 ms, 5-100 ms, for every controller call.
# `scontrol update` ~0.1 s (measured). A hung connection costs clients.READ_SECONDS per attempt, clients.ATTEMPTS
# attempts at most (botocore's read timeout and retries), not the CLI's default 60 s per attempt.
AWS = Latency(0.020, 0.005, 0.100, spread=0.5)
# The nodes' calls, and the head agent's but its signer's S3 calls where it has boto3 (head.signer_kind), are `aws`
# CLI processes (hpcc_node/awscli.py, templates/steps/); the signer's in-process calls cost AWS's latency above.
CLI = Latency(0.6, 0.4, 1.5)
SCONTROL = Latency(0.1, 0.1, 0.1)
# A batched call (act_batch.py) is one request, its items answered together: ASSUMED 1 ms more per item after the
# first (no figure is published; DynamoDB checks and writes a transaction's items on their partitions in parallel,
# TerminateInstances answers before the instances shut down), so a 100-item TransactWriteItems or a 64-id
# TerminateInstances costs 0.1 s or 63 ms more than one item; `scontrol update` of a node list is one RPC to
# slurmctld, whose per-node work is in memory: ASSUMED 0.1 ms more per node.
PER_ITEM, PER_SLURM_NODE = 0.001, 0.0001
BATCHED = {"transact_write_items": "TransactItems", "terminate_instances": "InstanceIds"}
HUNG_CALL_SECONDS = float(clients.READ_SECONDS * clients.ATTEMPTS)
S3Down = ClientError  # what the controller's S3 calls raise while S3 is down (scenarios.s3_down)
# EC2's RunInstances resource bucket: 1,000 instances, refilling 2 a second (EC2 API reference, "Request
# throttling for the Amazon EC2 API"; /work/shared/reference/aws-hpc-facts.md section 15).
LAUNCH_BUCKET, LAUNCH_REFILL = 1000, 2.0
# Assumed, as scripts/bench_ready.py: a p5's CreateFleet to running, and running to ready (its bootstrap's work).
PENDING_SECONDS, BOOTSTRAP_SECONDS = 150.0, 420.0
SHUTDOWN_SECONDS = 60.0  # assumed: shutting-down to terminated
JOIN_TIMEOUT_SECONDS = 20 * 60  # bootstrap.joinTimeoutMinutes' default (README, config reference)
CLUSTER, TABLE, BUCKET = "sim", "hpcc-sim-ledger", "hpcc-sim-state-000000000000"
ARN_PREFIX = "arn:aws:ec2:us-east-1:000000000000:instance/"
HEAD = {"ip": "10.0.0.4", "instance": "i-0000000000000head"}


@dataclass(frozen=True)
class Model:
    nodes: int
    cli: Latency = CLI  # the head agent's and the nodes' calls
    aws: Latency = AWS  # the controller's
    scontrol: Latency = SCONTROL
    hung_probability: float = 0.0  # of a controller call hanging for HUNG_CALL_SECONDS (0: none modelled)
    pending_seconds: float = PENDING_SECONDS
    bootstrap_seconds: float = BOOTSTRAP_SECONDS
    shutdown_seconds: float = SHUTDOWN_SECONDS
    launch_bucket: int = LAUNCH_BUCKET
    launch_refill: float = LAUNCH_REFILL
    capacity: int | None = None
    join_timeout_seconds: float = JOIN_TIMEOUT_SECONDS
    heartbeat_seconds: float = HEARTBEAT_SECONDS
    timers: Timers = DEFAULT
    seed: int = 0
    # As the code says (node.py reads it), unless set: the nodes' S3 calls wait for their pacer; a membership apply
    # reads the munge key again; the head's S3 calls wait for its pacer (certs: not since issue 38).
    node_s3_paced: bool = node_mod.S3_PACED
    apply_reads_munge: bool = node_mod.APPLY_READS_MUNGE
    head_s3_paced: bool = False
    # The head agent's Python has boto3 (its signer's S3 calls in process), as the templates say, unless set
    head_boto3: bool = head_mod.HEAD_BOTO3


@dataclass
class Loop:
    started: float
    seconds: float
    phases: dict[str, float]
    calls: dict[str, int]


@dataclass
class World:
    model: Model
    sim: Sim = field(init=False)
    pacing: Pacing = field(init=False)
    sync_seconds: int = field(init=False)
    bucket_name: str = BUCKET

    def __post_init__(self) -> None:
        m = self.model
        self.sim = Sim(m.seed)
        # observe.reports fetches READERS status objects at once on a ThreadPoolExecutor: on the controller's actor
        # that pool is worker actors of the virtual clock (kernel.Executor; a real pool on any other thread)
        observe_mod.ThreadPoolExecutor = Executor  # type: ignore[misc,assignment]
        random.seed(m.seed)  # the Executor's launch-backoff jitter (act.py `rand`, random.random by default)
        self.s3_down = False  # the controller's S3 calls fail (scenarios.s3_down)
        self.hang_next = False  # the controller's next call hangs (scenarios.hung_call)
        self.hang_in_next_loop = False  # ... the first call of its next loop
        self.pacing = pacing_for(m.nodes + 1)  # every node of the cluster, the head included
        self.sync_seconds = sync_seconds(self.pacing)
        params = EC2Params(m.pending_seconds, m.shutdown_seconds, m.launch_bucket, m.launch_refill, m.capacity)
        self.ec2 = EC2(self.sim, params, self._running)
        self.table, self.bucket = Table(), Bucket(self.sim.now)
        self.table.on_slot, self.bucket.on_put = self._slot, self._put
        self.slurm = Slurm(self.sim, SLURMD_TIMEOUT_SECONDS)
        self.group = Group("gpu", "p5.48xlarge", m.nodes, launch_template="hpcc-sim-gpu")
        self.nodes: dict[str, node_mod.Node] = {}
        self.node_calls: Counter = Counter()
        self.boot_failures: Counter = Counter()
        self.ready: dict[str, tuple[str, float]] = {}  # name -> (instance, since), from the ledger's writes
        self.loops: list[Loop] = []
        self.signed: list[tuple[float, str]] = []  # (when, certs/<node>.json) the head wrote
        self.head_errors: list[str] = []  # the head's ticks cut short, and why
        self.verdict_delays: list[float] = []
        self.certificate_waits: list[float] = []  # a booting node's host keys published to its certificate read
        self.published: dict[int, float] = {}
        self.seen_after: dict[int, list[float]] = defaultdict(list)
        self.applied_after: dict[int, list[float]] = defaultdict(list)
        self.stopped = False
        self.head_started = False
        self.head_s3_kind = ""  # the head's signer's S3 client: "boto3" (in process) or "cli" (start_head)
        self.docs: dict[str, Any] = {}  # membership ETag -> the parsed object (node.doc_of)
        self.listings: dict[str, set[tuple[str, str]]] = {}  # membership ETag -> (name, instance) it lists
        self.follows: dict[tuple[int, str, str], Any] = {}  # node.follow's runs of membership.follow, shared
        self.status_change_bytes = 0  # statuses written because what they say changed (not heartbeats)
        self.controller: Actor | None = None

    # -- hooks: what the fakes tell the measurements -------------------------------------------------------------
    def _slot(self, name: str, doc: dict[str, Any]) -> None:
        if doc.get("state") == "ready":
            if self.ready.get(name, ("",))[0] != doc["instance_id"]:
                self.ready[name] = (doc["instance_id"], self.sim.now())
        else:
            self.ready.pop(name, None)

    def _put(self, key: str, metadata: dict[str, str]) -> None:
        if key == MEMBERSHIP_KEY and "generation" in metadata:
            self.published[int(metadata["generation"])] = self.sim.now()
        elif key.startswith(CERTS_PREFIX) and self.head_started:  # the head signed (a node's certificate)
            self.signed.append((self.sim.now(), key))

    def listed_in(self, etag: str, doc: dict[str, Any]) -> set[tuple[str, str]]:
        """hosts.listed of the membership of one ETag, computed once: (name, instance) of each node it lists."""
        if etag not in self.listings:
            self.listings[etag] = {(str(m["name"]), str(m.get("instance"))) for m in hosts.listed(doc)}
        return self.listings[etag]

    def seen(self, n: node_mod.Node, generation: int) -> None:
        self.seen_after[generation].append(self.sim.now() - self.published.get(generation, self.sim.now()))

    def applied(self, n: node_mod.Node, generation: int) -> None:
        self.applied_after[generation].append(self.sim.now() - self.published.get(generation, self.sim.now()))

    def head_issued(self, name: str) -> Any:
        return certstore.read_issued(self.bucket.objects[certs_key(name)][0].decode())

    def alerts(self) -> list[str]:
        return [pk.partition("#")[2] for pk in self.table.items if pk.startswith("alert#")]

    def cli(self) -> float:
        return self.model.cli.draw(self.sim.rng)

    def in_process(self) -> float:
        return self.model.aws.draw(self.sim.rng)

    # -- the nodes ----------------------------------------------------------------------------------------------
    def _node(self, inst: Instance) -> node_mod.Node:
        first = head_mod.Pacer(pacing_for(513).api_interval_ms, self.sim.rng.random)  # first_call_pacing
        n = node_mod.Node(inst.iid, inst.ip, ARN_PREFIX + inst.iid, first)
        self.nodes[inst.iid] = n
        return n

    def _running(self, inst: Instance) -> None:
        self.sim.start(node_mod.boot(self, self._node(inst)))

    def kill(self, n: node_mod.Node) -> None:
        n.alive = False
        self.ec2.instances[n.iid].status_ok = False
        self.slurm.die(n.name)

    # -- the head ------------------------------------------------------------------------------------------------
    def _latency(self, service: str, operation: str, params: dict[str, Any]) -> float:
        if self.hang_next or (self.model.hung_probability and self.sim.rng.random() < self.model.hung_probability):
            self.hang_next = False
            return HUNG_CALL_SECONDS
        if service == "s3" and self.s3_down:
            raise S3Down("ServiceUnavailable", "simulated: S3 does not answer")
        items = len(params.get(BATCHED.get(operation, ""), ())) if operation in BATCHED else 1
        return self.model.aws.draw(self.sim.rng) + PER_ITEM * max(0, items - 1)

    def start_head(self) -> Any:
        """The head's signer and the controller, on actors of their own; the signer's Head, to seed its cache."""
        pacer = head_mod.Pacer(self.pacing.api_interval_ms, self.sim.rng.random)
        self.head_s3_kind = head_mod.signer_kind(self.model.head_boto3)
        s3_latency = self.in_process if self.head_s3_kind == "boto3" else self.cli
        loop, signer = head_mod.signer(
            self.sim, self.bucket, BUCKET, CLUSTER, ARN_PREFIX, pacer, self.sync_seconds, self.cli, HEAD["ip"],
            self.head_errors, self.model.head_s3_paced, s3_latency,
        )  # fmt: skip
        self.head_started = True
        Actor(self.sim, loop, "head-agent")
        self.controller = Actor(self.sim, self._controller(), "controller")
        return signer

    def _controller(self) -> Any:
        sim, lat = self.sim, self._latency
        ec2, ddb, s3 = (
            Timed(sim, c, s, lat) for c, s in ((self.ec2, "ec2"), (self.table, "dynamodb"), (self.bucket, "s3"))
        )

        def slurm_read(argv: list[str]) -> str:
            sim.sleep(self.model.scontrol.draw(sim.rng))
            return self.slurm.run(argv)

        def slurm_run(argv: list[str]) -> str:
            names = next((a.count(",") + 1 for a in argv if a.startswith("NodeName=")), 1)
            sim.sleep(self.model.scontrol.draw(sim.rng) + PER_SLURM_NODE * (names - 1))
            return self.slurm.command(argv)

        def bundle() -> dict[str, Any]:  # follow_reader: one GetParameters a loop
            sim.sleep(self.model.aws.draw(sim.rng))
            return {"sha256": "sim", "settings_sha256": "sim"}

        log = logging.getLogger("hpcc.sim.controller")
        log.propagate, log.level = False, logging.CRITICAL
        costs = Costs(sim.now)
        step = build_step(
            ec2, ddb, s3, CLUSTER, TABLE, BUCKET, lambda: [self.group], "head", sim.now, slurm_run,
            slurm_records.Reader(slurm_read, log), bundle, HEAD, self.model.timers, log, costs,
        )  # fmt: skip

        def recorded() -> Any:
            started = sim.now()
            self.hang_next, self.hang_in_next_loop = self.hang_in_next_loop or self.hang_next, False
            out = step()
            self.loops.append(Loop(started, sim.now() - started, dict(costs.phases), dict(costs.calls)))
            return out

        recorded.costs = costs  # type: ignore[attr-defined]
        recorded.due = step.due  # type: ignore[attr-defined]
        return lambda: forever(recorded, sim.now, sim.sleep, lambda: self.stopped, self.model.timers, log)

    # -- a settled cluster ---------------------------------------------------------------------------------------
    def settle(self) -> None:
        """Every node named, ready, certified, in membership generation 1 and heard from within a heartbeat."""
        tags = {TAG_CLUSTER: CLUSTER, TAG_ROLE: "compute", TAG_GROUP: self.group.name}
        slots, seen = {}, {}
        for i in range(self.model.nodes):
            name = f"{self.group.name}-{i:03d}"
            inst = self.ec2.seed({**tags, TAG_NODE: name})
            slots[name] = Slot(name, self.group.name, i, inst.iid, "ready", 0.0)
            seen[inst.iid] = Seen(inst.iid, "running", 0.0, self.group.name, inst.ip, name_tag=name)
            self._ledger(f"slot#{name}", {k: v for k, v in asdict(slots[name]).items() if k != "version"})
            self._ledger(f"iid#{inst.iid}", {"name": name, "at": 0.0})
            self.slurm.register(name, inst.ip)
            self.slurm.nodes[name].addr = inst.ip
        snap = SimpleNamespace(instances=seen, bundle={"sha256": "sim", "settings_sha256": "sim"}, head=HEAD)
        body = membership_body(slots, snap, [self.group])  # type: ignore[arg-type]
        etag = membership.publish(self.bucket, BUCKET, body, 1, "")
        self.docs[etag] = json.loads(self.bucket.objects[MEMBERSHIP_KEY][0])  # every settled node's copy
        self._ledger("membership", {"generation": 1, "digest": digest(body), "etag": etag})
        self.published[1] = 0.0
        for inst in list(self.ec2.instances.values()):
            self._settled_node(inst, slots[inst.tags[TAG_NODE]], etag)

    def _ledger(self, pk: str, doc: dict[str, Any]) -> None:
        text = json.dumps(formats.stamp(doc, formats.LEDGER_ITEM), sort_keys=True)
        self.table.items[pk] = {"pk": {"S": pk}, "v": {"N": "1"}, "doc": {"S": text}}
        if pk.startswith("slot#"):
            self.ready[pk[5:]] = (doc["instance_id"], 0.0)

    def _settled_node(self, inst: Instance, slot: Slot, etag: str) -> None:
        n = self._node(inst)
        n.pacer.interval_ms = self.pacing.api_interval_ms
        n.name, n.generation, n.etag, n.doc = slot.name, 1, etag, self.docs[etag]
        self.bucket.put(certs_key(slot.name), head_mod.seeded_issue(slot.name, inst.ip, inst.iid, 0.0).encode())
        self.bucket.put(hostkeys_key(n.arn), head_mod.published(inst.ip, inst.iid).encode())
        n.certs_etag = self.bucket.objects[certs_key(slot.name)][1]
        n.written, n.written_version = (n.message, True), 1
        n.written_body = node_mod.body(self, n, "ready")
        n.written_at = -self.sim.rng.random() * self.model.heartbeat_seconds  # heard within a heartbeat
        key = membership.status_key(n.arn)
        etag_s = self.bucket.put(key, n.written_body)
        self.bucket.objects[key] = (n.written_body, etag_s, n.written_at, {STATUS_HOSTS_VERSION_META: "1"})
        n.writes.append(n.written_at)
        self.sim.start(node_mod.agent(self, n), self.sim.rng.random() * self.sync_seconds)
        self.sim.start(node_mod.heartbeat(self, n), self.sim.rng.random() * self.model.heartbeat_seconds / 2)
