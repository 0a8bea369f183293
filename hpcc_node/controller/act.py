"""act(): carries out decide()'s actions, thin and idempotent, one log line each with its reason.

Each step is in the ledger before it acts and after: a replacement marks the slot `replacing` (and counts the
attempt) before terminating, a launch records its ClientToken before CreateFleet and the instance ids after (the
instances carry the token as a tag: a restart records them from it instead of launching again), a name is
claimed in the ledger before the tag follows. A controller killed between any two steps finds the record on its
restart, and decide() finishes the step without repeating the counted part. Every write goes
through the lease: a controller that lost it stops at its first write (LeaseLost), before touching EC2; a slow
loop renews it between actions (Ledger.keep), so its last actions are not refused for its own slowness.
Slurm's node states, replacements, removals and terminations go in runs, each step of the run's actions in one
batch of calls, the same steps in the same order (act_batch.py).
"""

from __future__ import annotations

import logging
import random
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from hpcc_contract.names import TAG_NODE, resource_name

from . import fleet, membership
from .act_batch import BATCHED, SLURM_BATCH, BatchActs, runs
from .calls import Costs
from .decide_failures import REQUESTED
from .health.act import HealthActs
from .ledger import DROPPED, Conflict, LeaseLost, Ledger
from .model import (
    BOOTING,
    READY,
    RECORDED,
    REPLACE,
    SET_ADDR,
    Action,
    Event,
    Group,
    GroupState,
    Slot,
    SlurmJob,
    Snapshot,
)
from .timers import DEFAULT, Timers

LOG = logging.getLogger("hpcc.controller")


def set_address_args(nodes: Sequence[Tuple[str, str, str]]) -> List[str]:
    """`scontrol update` arguments giving each (name, address, hostname) its own: lists of equal length, in the same
    order (scontrol(1), NodeAddr: "they must exactly match the entries in the NodeName")."""
    return [
        f"{field}={','.join(n[i] for n in nodes)}" for i, field in enumerate(("NodeName", "NodeAddr", "NodeHostname"))
    ]


class Executor(HealthActs, BatchActs):
    def __init__(
        self,
        ec2: Any,
        ledger: Ledger,
        s3: Any,
        bucket: str,
        cluster: str,
        groups: Sequence[Group],
        clock: Callable[[], float],
        slurm: Optional[Callable[[List[str]], Any]] = None,
        timers: Timers = DEFAULT,
        log: logging.Logger = LOG,
        jobs_now: Optional[Callable[[], Sequence[SlurmJob]]] = None,
        rand: Callable[[], float] = random.random,
    ):
        """`jobs_now`: Slurm's jobs read again (slurm_records.Reader.jobs), to confirm a job's identity before a
        requeue or a start-now (health/act.py); `rand` jitters the launch backoff."""
        self.ec2, self.ledger, self.s3, self.bucket, self.cluster = ec2, ledger, s3, bucket, cluster
        self.groups = {g.name: g for g in groups}
        self.clock, self.slurm, self.timers, self.log = clock, slurm, timers, log
        self.jobs_now, self.rand = jobs_now, rand
        self.seq = 0
        self.published: Optional[membership.Published] = None  # the membership last written (its next delta's base)

    def run(self, actions: Sequence[Action], snap: Snapshot) -> List[str]:
        """Each action in order; returns the lines logged. LeaseLost stops the loop; anything else is logged and
        the next loop, reading everything again, retries."""
        self.slots = dict(snap.slots)
        self.gstates = dict(snap.group_states)
        lines = self._set_addresses([a for a in actions if a.kind == SET_ADDR])
        for run in runs([a for a in actions if a.kind != SET_ADDR]):
            if run[0].kind in BATCHED:
                lines += self._batch(run)
                continue
            a = run[0]
            line = a.line()
            self.log.info(line)
            lines.append(line)
            try:
                self.ledger.keep()
                self._record(a, "start")
                detail = getattr(self, "_" + a.kind.replace("-", "_"))(a) or ""
                self._record(a, "done", detail)
            except LeaseLost:
                self.log.error("lease lost: stopping this loop before %s", line)
                raise
            except Conflict as e:
                self.log.warning("%s: %s; read again next loop", line, e)
            except Exception as e:  # one failed action never stops the others
                self.log.error("%s: failed: %s", line, e)
                self._record(a, "failed", str(e)[:300])
        return lines

    def _event(self, a: Action, phase: str, detail: str = "") -> Optional[Event]:
        """The ledger event of an action's phase (start, done, failed); None for a kind not recorded."""
        if a.kind not in RECORDED:
            return None
        counted = a.kind != REPLACE or a.data.get("counted", True)
        requested = REQUESTED if a.kind == REPLACE and a.data.get("requested") else ""  # hpcc replace's budget
        return Event(
            self.clock(),
            a.kind,
            a.node or a.group,
            a.why.failure if counted else "",
            a.data.get("signature", "") if counted else requested,
            phase,
            detail or a.why.text(),
        )

    def _record(self, a: Action, phase: str, detail: str = "") -> None:
        event = self._event(a, phase, detail)
        if event is not None:
            self.seq += 1
            self.ledger.event(event, self.seq)

    def _set_addresses(self, batch: Sequence[Action]) -> List[str]:
        """Slurm's addresses, SLURM_BATCH nodes a command (clustermgtd's `_update_slurm_node_addrs` does the same); a
        command Slurm refuses is retried node by node, so one name it does not know holds no other back."""
        lines = []
        for start in range(0, len(batch), SLURM_BATCH):
            chunk = batch[start : start + SLURM_BATCH]
            for a in chunk:
                lines.append(a.line())
                self.log.info(lines[-1])
            try:
                self.ledger.keep()
                self._slurm(*set_address_args([(a.node, a.data["addr"], a.data["hostname"]) for a in chunk]))
                continue
            except LeaseLost:
                raise
            except Exception as e:  # noqa: BLE001 - Slurm's refusal; node by node names the one it refuses
                if len(chunk) == 1:
                    self.log.error("%s: failed: %s", chunk[0].line(), e)
                    continue
                self.log.warning("set-address of %d nodes refused (%s): node by node", len(chunk), str(e)[:200])
            for a in chunk:
                try:
                    self._set_address(a)
                except Exception as e:  # noqa: BLE001 - one node's refusal
                    self.log.error("%s: failed: %s", a.line(), e)
        return lines

    def _slurm(self, *args: str) -> None:
        if self.slurm is not None:
            self.slurm(["scontrol", "update", *args])

    def _group(self, name: str) -> GroupState:
        return self.gstates.get(name) or GroupState(name)

    def _put_group(self, name: str, **changes: Any) -> None:
        self.gstates[name] = self.ledger.put_group(self._group(name), **changes)

    def _slot(self, a: Action) -> Slot:
        return self.slots[a.node]

    # One method per action kind.
    def _launch(self, a: Action) -> str:
        group, count, token, now = self.groups[a.group], a.data["count"], a.data["token"], self.clock()
        minimum = int(a.data.get("min") or count)
        self.ledger.launch_intent(token, group.name, count, now, minimum if minimum < count else 0)
        out = fleet.launch(self.ec2, fleet.request(group, count, token, self.cluster, minimum))
        gs = self._group(group.name)
        if out.instance_ids:
            self.ledger.launch_result(token, group.name, count, now, list(out.instance_ids))
            if gs.launch_failures or gs.backoff_until:
                self._put_group(group.name, launch_failures=0, backoff_until=0.0)
            return f"launched {', '.join(out.instance_ids)}"
        n = gs.launch_failures + 1
        wait = self.timers.launch_backoff(n, self.rand())
        self._put_group(group.name, launch_failures=n, backoff_until=now + wait)
        self.ledger.drop_launch(token)
        if not out.transient:
            self.ledger.alert(f"launch:{group.name}:{out.code}", now)
        self.log.warning(
            "launch %s: %s; %s, retry in %d s; no budget spent", group.name, out.failure, out.evidence, wait
        )
        return f"{out.failure}: {out.evidence}; retry in {wait} s"

    def _adopt_launch(self, a: Action) -> str:
        """A launch whose answer a killed controller never recorded: its instances, found by their launch tag."""
        d = a.data
        self.ledger.launch_result(d["token"], a.group, d["count"], d["at"], list(d["ids"]))
        return f"recorded {', '.join(d['ids'])} from their launch tag"

    def _name(self, a: Action) -> str:
        prior = self.slots.get(a.node) or Slot(a.node, a.group, a.data["index"])
        self.slots[a.node] = self.ledger.name(prior, a.instance_id, self.clock())
        try:
            self._tag(a)
        except Exception as e:  # a missing tag is written again by a later loop (decide's TAG)
            self.log.warning("tagging %s as %s: %s (the ledger has the name)", a.instance_id, a.node, e)
        return f"{a.instance_id} is {a.node}"

    def _tag(self, a: Action) -> str:
        self.ec2.create_tags(
            Resources=[a.instance_id],
            Tags=[{"Key": TAG_NODE, "Value": a.node}, {"Key": "Name", "Value": resource_name(self.cluster, a.node)}],
        )
        return a.node

    def _mark(self, a: Action) -> str:
        slot = self._slot(a)
        booted = a.data["state"] == READY and slot.state == BOOTING  # a boot that succeeds ends a run of failures
        reason, attempts = a.data.get("reason", ""), 0 if booted else slot.attempts
        self.slots[a.node] = self.ledger.put_slot(
            slot, state=a.data["state"], reason=reason, since=self.clock(), attempts=attempts
        )
        gs = self._group(a.group)
        if booted and (gs.consecutive_failures or gs.protected):
            self._put_group(a.group, consecutive_failures=0, protected="")  # any boot that succeeds resets them
        return a.data["state"]

    def _forget(self, a: Action) -> str:
        self.ledger.forget(self._slot(a))
        del self.slots[a.node]
        return "a hole in the names"

    def _set_address(self, a: Action) -> str:
        self._slurm(*set_address_args([(a.node, a.data["addr"], a.data["hostname"])]))
        return a.data["addr"]

    def _publish_membership(self, a: Action) -> str:
        # the ledger's mark before: fenced by the lease; no digest until written
        done = membership.publish_next(
            self.s3,
            self.bucket,
            a.data["body"],
            self.published,
            lambda n: self.ledger.set_membership(n, "", ""),
            int(a.data.get("recorded") or 0),
            lambda line: self.log.warning("%s", line),
        )
        self.published = done
        self.ledger.set_membership(done.generation, a.data["digest"], done.etag)
        return f"generation {done.generation}"

    def _alert(self, a: Action) -> str:
        self.ledger.alert(a.data["key"], self.clock())
        self.log.warning("ALERT %s", a.why.text())
        return a.data["key"]

    def _protect(self, a: Action) -> str:
        self._put_group(a.group, protected=a.data["reason"])
        return "protected" if a.data["reason"] else "protection lifted"

    def _modify_metadata(self, a: Action) -> str:
        """The group's IMDS options on a running instance, in place: EC2 answers `pending`, then DescribeInstances
        shows them `applied` (EC2 API Reference, ModifyInstanceMetadataOptions,
        https://docs.aws.amazon.com/goto/WebAPI/ec2/ModifyInstanceMetadataOptions). IMDSv2 stays required."""
        hops = int(a.data["hop_limit"])
        self.ec2.modify_instance_metadata_options(
            InstanceId=a.instance_id, HttpTokens="required", HttpEndpoint="enabled", HttpPutResponseHopLimit=hops
        )
        return f"hop limit {hops}"

    def _wait_for_capacity_block(self, a: Action) -> str:
        self._put_group(a.group, status=a.data["status"])
        return a.data["status"] or "active"


def reconcile_once(
    observe: Callable[[], Any],
    decide: Callable[[Snapshot], Sequence[Action]],
    executor: Executor,
    ledger: Ledger,
    costs: Optional[Costs] = None,
) -> Mapping[str, Any]:
    """One loop: the lease, then observe -> decide -> act; a controller without the lease only watches. `costs`
    gets each phase's seconds."""
    costs = costs or Costs()
    with costs.phase("lease"):
        held = ledger.acquire()
    if not held:
        owner, until = ledger.holder()
        return {"lease": False, "holder": owner, "until": until, "lines": []}
    with costs.phase("observe"):
        snap, loaded = observe()
    with costs.phase("decide"):
        actions = decide(snap)
    with costs.phase("act"):
        lines = executor.run(actions, snap)
        record_dropped(ledger, snap.dropped, loaded.dropped_statuses, snap.now)
        ledger.prune(loaded)
    return {"lease": True, "lines": lines}


DROPPED_SHOWN = 5  # the malformed status objects `hpcc status` names (all are counted)


def dropped_record(found: Mapping[str, str]) -> Dict[str, Any]:
    """The ledger's record of the malformed status objects (key -> why): how many, and the first few."""
    return {"count": len(found), "some": {k[:200]: found[k][:200] for k in sorted(found)[:DROPPED_SHOWN]}}


def record_dropped(ledger: Ledger, found: Mapping[str, str], recorded: Mapping[str, Any], now: float) -> None:
    """The malformed status objects, in the ledger for `hpcc status` (an operator sees why a node has no verdict):
    written only when they change, not every loop."""
    doc = dropped_record(found)
    if doc == {k: v for k, v in recorded.items() if k != "at"} or not (found or recorded):
        return
    try:
        ledger.set(DROPPED, {**doc, "at": now})
    except Conflict:  # written meanwhile: the next loop compares again
        pass
