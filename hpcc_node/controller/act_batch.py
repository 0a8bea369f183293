"""act()'s batched actions (issue 38): the Slurm, ledger and EC2 work of many actions in a few calls, as
aws-parallelcluster-node's clustermgtd batches its node updates and terminations, each action still logged and
recorded on its own.

A run of consecutive batchable actions (runs()) goes through stages, each stage one batch for the run's actions that
reached it: their start events; Slurm's DOWN and RESUME; the slots' new states in the ledger; a group's failure
count, one write each; Slurm's DRAIN and a removed node's DOWN; TerminateInstances; their done or failed events.
What act.py keeps for one action holds for each: recorded before acting, a slot marked replacing or removing before
its instance is terminated, a drain's slot before Slurm's drain, and a node's DOWN (decide() emits it first) before
its slot is marked replacing. An action refused at a stage goes no further; the others go on. A batch refused whole
is made again one by one, so one bad node, instance or item holds no other back.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from hpcc_contract.taxonomy import FailureClass
from hpcc_node.awscli import error_code
from hpcc_node.health.verdict import clean_reason

from .ledger import Conflict, LeaseLost, Ledger
from .model import DOWN, DRAIN, REMOVE, REMOVING, REPLACE, REPLACING, RESUME, TERMINATE_ORPHAN, Action, Event, Slot

SLURM_BATCH = 500  # nodes per `scontrol update` (clustermgtd's batch; a few KB of arguments)
# Amazon EC2 API Reference, TerminateInstances: "Up to 1000 instance IDs. We recommend breaking up this request
# into smaller batches."
TERMINATE_BATCH = 1000

START, SLURM_FIRST, LEDGER, GROUPS, SLURM_AFTER, TERMINATE = range(6)
BATCHED = (DOWN, RESUME, DRAIN, REPLACE, REMOVE, TERMINATE_ORPHAN)


def stages(a: Action) -> Tuple[int, ...]:
    """The stages an action of a batched kind goes through after its start event, in order."""
    return {
        DOWN: (SLURM_FIRST,),
        RESUME: (SLURM_FIRST,),
        DRAIN: (LEDGER, SLURM_AFTER) if a.data.get("slot_state") else (SLURM_AFTER,),
        REPLACE: (LEDGER, GROUPS, TERMINATE),
        REMOVE: (LEDGER, SLURM_AFTER, TERMINATE),
        TERMINATE_ORPHAN: (TERMINATE,),
    }[a.kind]


def runs(actions: Sequence[Action]) -> List[List[Action]]:
    """decide()'s actions as runs: consecutive batched kinds together, unless a node's later action would go before
    an earlier one of the same node (its first stage not past the other's last); every other action alone."""
    out: List[List[Action]] = []
    for a in actions:
        last = out[-1] if out else []
        joins = (
            a.kind in BATCHED
            and bool(last)
            and last[0].kind in BATCHED
            and all(max(stages(b)) < min(stages(a)) for b in last if a.node and b.node == a.node)
        )
        if joins:
            last.append(a)
        else:
            out.append([a])
    return out


def chunks(items: Sequence[Any], size: int) -> List[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def state_args(nodes: Sequence[str], state: str, reason: str = "") -> List[str]:
    """`scontrol update` arguments setting `state` on every node: NodeName takes a comma list (scontrol(1),
    NodeName: "Multiple node names may be specified"); the reason, text users see, is one argument of its own."""
    return [f"NodeName={','.join(nodes)}", f"State={state}", *([f"Reason={clean_reason(reason)}"] if reason else [])]


def terminate_each(ec2: Any, ids: Sequence[str]) -> Dict[str, Union[str, Exception]]:
    """Each instance's outcome of TerminateInstances, TERMINATE_BATCH ids a call. EC2 refuses a whole request for
    one id it does not know ("none of the instances are terminated", API Reference, TerminateInstances), so a refused
    call is made again id by id, where an id already gone is that id's outcome, not an error."""
    out: Dict[str, Union[str, Exception]] = {}
    for chunk in chunks(list(dict.fromkeys(ids)), TERMINATE_BATCH):
        if len(chunk) > 1:
            try:
                ec2.terminate_instances(InstanceIds=list(chunk))
                out.update({iid: f"terminating {iid}" for iid in chunk})
                continue
            except Exception:  # noqa: BLE001 - refused whole: id by id names the one refused
                pass
        for iid in chunk:
            try:
                ec2.terminate_instances(InstanceIds=[iid])
                out[iid] = f"terminating {iid}"
            except Exception as e:  # noqa: BLE001 - this instance's outcome, for its action
                out[iid] = f"{iid} already gone" if error_code(e) == "InvalidInstanceID.NotFound" else e
    return out


@dataclass
class Step:
    """One action's way through a run: going on until `error`; what it did, for its done event."""

    action: Action
    detail: str = ""
    error: Optional[Exception] = None
    bootstrap: bool = False  # its slot was marked replacing for a counted bootstrap failure: the group counts it


class BatchActs:
    """A mixin of act.Executor: a run of batched actions (act.py's run() hands them here)."""

    ledger: Ledger
    ec2: Any
    slurm: Optional[Callable[[List[str]], Any]]
    log: logging.Logger
    slots: Dict[str, Slot]
    seq: int
    clock: Callable[[], float]
    _event: Callable[[Action, str, str], Optional[Event]]
    _slurm: Callable[..., None]
    _group: Callable[[str], Any]
    _put_group: Callable[..., None]

    def _batch(self, run: Sequence[Action]) -> List[str]:
        lines = [a.line() for a in run]
        for line in lines:
            self.log.info(line)
        steps = [Step(a) for a in run]
        try:
            self._events(steps, "start")
            for stage, do in (
                (SLURM_FIRST, self._slurm_states),
                (LEDGER, self._slot_states),
                (GROUPS, self._group_counts),
                (SLURM_AFTER, self._slurm_states),
                (TERMINATE, self._terminations),
            ):
                todo = [s for s in steps if s.error is None and stage in stages(s.action)]
                if todo:
                    self.ledger.keep()  # a lost lease stops the run before its next call
                    do(todo)
            self._events(steps, "end")
        except LeaseLost:
            self.log.error("lease lost: stopping this loop in a run of %d actions, from %s", len(run), lines[0])
            raise
        return lines

    def _refused(self, s: Step, e: Exception) -> None:
        s.error = e
        if isinstance(e, Conflict):
            self.log.warning("%s: %s; read again next loop", s.action.line(), e)
        else:
            self.log.error("%s: failed: %s", s.action.line(), e)

    def _events(self, steps: Sequence[Step], phase: str) -> None:
        """The steps' start events, or their done events (failed, with why, for an action a stage refused; none for
        one refused by a Conflict: it is read again next loop), in as few transactions as the ledger takes."""
        writes, whose = [], []
        for s in steps:
            if phase == "start" and s.error is None:
                ev = self._event(s.action, "start", "")
            elif s.error is None:
                ev = self._event(s.action, "done", s.detail)
            elif not isinstance(s.error, Conflict):
                ev = self._event(s.action, "failed", str(s.error)[:300])
            else:
                ev = None
            if ev is not None:
                self.seq += 1
                writes.append([self.ledger.event_write(ev, self.seq)])
                whose.append(s)
        for s, e in zip(whose, self.ledger.transact_each(writes)):
            if e is None or isinstance(e, Conflict):  # create-once: recorded by this very step before a restart
                continue
            if phase == "start":
                self._refused(s, e)
            else:
                self.log.error("%s: its record failed: %s", s.action.line(), e)

    def _slurm_states(self, steps: Sequence[Step]) -> None:
        """One `scontrol update` per state and reason, SLURM_BATCH nodes a command; a refused command node by node."""
        by: Dict[Tuple[str, str], List[Step]] = defaultdict(list)
        for s in steps:
            a = s.action
            state = {DRAIN: "DRAIN", RESUME: "RESUME"}.get(a.kind, "DOWN")
            reason = "" if a.kind == RESUME else a.data.get("reason", "hpcc: removed")
            by[(state, reason)].append(s)
        for (state, reason), group in by.items():
            for chunk in chunks(group, SLURM_BATCH):
                self._slurm_chunk(chunk, state, reason)

    def _slurm_chunk(self, chunk: Sequence[Step], state: str, reason: str) -> None:
        done = {"DOWN": "down", "DRAIN": "draining", "RESUME": "resumed"}[state]
        try:
            self._slurm(*state_args([s.action.node for s in chunk], state, reason))
            outcomes: List[Optional[Exception]] = [None] * len(chunk)
        except Exception as e:  # noqa: BLE001 - Slurm's refusal; node by node names the one it refuses
            if len(chunk) > 1:
                self.log.warning("%s of %d nodes refused (%s): node by node", state, len(chunk), str(e)[:200])
            outcomes = [e] if len(chunk) == 1 else [self._slurm_one(s.action.node, state, reason) for s in chunk]
        for s, got in zip(chunk, outcomes):
            if got is None:
                s.detail = done
            elif s.action.kind == REMOVE:  # a shrink may have taken the name out of slurm.conf: terminate all the same
                self.log.info("remove %s: Slurm no longer knows it (%s); terminating", s.action.node, str(got)[:200])
            else:
                self._refused(s, got)

    def _slurm_one(self, node: str, state: str, reason: str) -> Optional[Exception]:
        try:
            self._slurm(*state_args([node], state, reason))
            return None
        except Exception as e:  # noqa: BLE001 - this node's outcome
            return e

    def _slot_states(self, steps: Sequence[Step]) -> None:
        """Each slot's new state (replacing, removing, draining) in the ledger, one conditional item a slot."""
        writes, whose, news = [], [], []
        for s in steps:
            try:
                change = self._slot_change(s)
            except Exception as e:  # noqa: BLE001 - e.g. a slot not in the ledger: this action's failure
                self._refused(s, e)
                continue
            if change is not None:
                item, new = self.ledger.slot_write(self.slots[s.action.node], **change)
                writes.append([item])
                whose.append(s)
                news.append(new)
        for s, new, got in zip(whose, news, self.ledger.transact_each(writes)):
            if got is not None:
                self._refused(s, got)
                s.bootstrap = False
            else:
                self.slots[new.name] = new

    def _slot_change(self, s: Step) -> Optional[Dict[str, Any]]:
        a, slot, now = s.action, self.slots[s.action.node], self.clock()
        if a.kind == DRAIN:
            s.detail = "draining"
            return dict(state=a.data["slot_state"], since=now, reason=a.data.get("slot_reason", a.why.text()))
        if a.kind == REMOVE:
            return None if slot.state == REMOVING else dict(state=REMOVING, since=now, reason=a.why.text())
        if slot.state == REPLACING and slot.instance_id == a.instance_id:
            return None  # marked by an earlier loop: only its termination is left
        counted = a.data.get("counted", True) and bool(a.why.failure)
        s.bootstrap = counted and a.why.failure == FailureClass.BOOTSTRAP.value
        attempts = slot.attempts + (1 if counted else 0)
        return dict(state=REPLACING, since=now, reason=a.why.text(), replace_requested=False, attempts=attempts)

    def _group_counts(self, steps: Sequence[Step]) -> None:
        """A counted bootstrap failure's group count, one write per replacement (a group's item once a transaction)."""
        for s in steps:
            if not s.bootstrap:
                continue
            try:
                failures = self._group(s.action.group).consecutive_failures + 1
                self._put_group(s.action.group, consecutive_failures=failures)
            except LeaseLost:
                raise
            except Exception as e:  # noqa: BLE001 - this action's failure
                self._refused(s, e)

    def _terminations(self, steps: Sequence[Step]) -> None:
        outcomes = terminate_each(self.ec2, [s.action.instance_id for s in steps if s.action.instance_id])
        for s in steps:
            got = outcomes.get(s.action.instance_id, "no instance")
            if isinstance(got, Exception):
                self._refused(s, got)
            else:
                s.detail = got
