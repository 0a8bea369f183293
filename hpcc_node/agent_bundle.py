"""The node agent's part that follows the bundle pointer (hpcc_node/agent.py's Agent inherits it): each tick, the
pointer read from SSM, the canaries' statuses while a rollout is on, and the move hpcc_node/rollout.py decides
(switch, roll back, or stay), carried out by hpcc_node/upgrade.py (fetch, hash check, self-check, switch)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from hpcc_node import rollout, state, upgrade

ROLLED_BACK = "rolled back: "  # a canary that ran the bundle fine; another canary refused it (not this node's report)


class BundleFollowing:
    """Agent's bundle methods. What they use of the agent: its config `c`, `aws`, `clock`, `run`, `log`, `node`,
    `record` (the agent's state file), `running` (the bundle it runs) and the rollout fields set in Agent.__init__."""

    def follow_bundle(self, read: Dict[str, Any]) -> Optional[str]:
        pointer = None
        if self.c.bundle_parameter in read:
            try:
                pointer = rollout.parse_pointer(read[self.c.bundle_parameter][1])
            except ValueError as e:
                self.log(f"{self.c.bundle_parameter} refused: {e}")
        self.pointer_sha = pointer.sha256 if pointer else ""
        seen = {n: self.node_status(n) for n in self.canaries()} if pointer and self.rollout_on() else {}
        if pointer and any(v is not None for v in seen.values()):
            if rollout.is_canary(
                self.node.node, self.canary_names()
            ):  # its own part: it runs the target, or refused it
                seen[self.node.node] = {
                    "bundle": self.running,
                    "phase": "ready",
                    "ok": True,
                    "refused": self.refused_field(),
                }
            self.verdict = rollout.canary_verdict(pointer.sha256, seen)
            if self.verdict.state == "done":
                self.done_since.setdefault(pointer.sha256, self.clock())
        elif not self.rollout_on():
            self.verdict = None
        move = rollout.next_move(
            self.node.node,
            self.running,
            pointer,
            self.record.refused,
            self.verdict,
            self.done_since.get(pointer.sha256) if pointer else None,
            self.clock(),
            self.record.previous,
            self.canary_names(),
            self.members(),
        )
        self.rollout_note = move.reason if move.action == "halted" and self.node.node == "head" else None
        if move.action == "switch" and pointer:
            return self.switch(pointer)
        if move.action == "rollback" and pointer:
            return self.roll_back(pointer.sha256, move.reason)
        return None

    def refused_field(self) -> Optional[Dict[str, str]]:
        if self.pointer_sha in self.record.refused and not self.record.refused[self.pointer_sha].startswith(
            ROLLED_BACK
        ):
            return {"sha256": self.pointer_sha, "reason": self.record.refused[self.pointer_sha]}
        return None

    def switch(self, pointer: rollout.Pointer) -> Optional[str]:
        try:
            directory = upgrade.fetch(self.aws.get_object, pointer.bucket, pointer.key, pointer.sha256, self.c.opt)
            upgrade.self_check(directory, self.run)
        except upgrade.BundleError as e:
            self.log(f"bundle {pointer.sha256[:12]} refused, staying on {self.running[:12]}: {e}")
            self.record = self.record._replace(refused={**self.record.refused, pointer.sha256: str(e)[:300]})
            state.write_record(self.c.path("agent.json"), self.record)
            return None
        return self.move_to(pointer.sha256, directory, "switched")

    def roll_back(self, sha: str, reason: str) -> Optional[str]:
        directory = upgrade.bundle_dir(self.record.previous, self.c.opt)
        self.record = self.record._replace(refused={**self.record.refused, sha: f"{ROLLED_BACK}{reason}"[:300]})
        return self.move_to(self.record.previous, directory, "rolled back")

    def move_to(self, sha: str, directory: str, verb: str) -> str:
        drifted = rollout.drift(
            self.record.boot_digest, upgrade.boot_digest(directory, self.c.role, self.node.node), sha
        )
        self.record = self.record._replace(drifted=drifted, previous=self.running)
        state.write_record(self.c.path("agent.json"), self.record)
        upgrade.switch(sha, self.c.opt)
        upgrade.prune({sha, self.running}, self.c.opt)
        self.log(
            f"{verb} to bundle {sha[:12]} from {self.running[:12] or 'none'}; "
            + (f"drifted: {drifted}" if drifted else "boot steps unchanged")
            + "; nothing restarted"
        )
        return directory
