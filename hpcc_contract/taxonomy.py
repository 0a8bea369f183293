"""One failure taxonomy for the controller, the node agent and the health checks: what went wrong is classified
once, where it is seen, and the class alone decides what the controller may do about it.

The classes follow what aws/aws-parallelcluster-node's clustermgtd learned the hard way (failures are classified
before they are counted; insufficient capacity spends no replacement budget; repeated bootstrap failures put a
group in protected mode; a failure of many nodes at once is the cluster's, not theirs).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class FailureClass(str, Enum):
    LAUNCH = "launch"  # insufficient capacity, quota, Capacity Block not active: EC2 gave no instance
    BOOTSTRAP = "bootstrap"  # boot timeout, a failed boot step, slurmd never registered
    BUNDLE = "bundle"  # the bundle unreachable, refused (hash) or failing its self-check: not the node's fault
    HOOK = "hook"  # a user's hook script failed: the user's to fix, no reason to replace the node
    INSTANCE = "instance"  # EC2 status check failed, scheduled retirement/reboot, terminated, stopped, unreachable
    HEALTH = "health"  # a health check found a fault on a running node (GPU, ECC, EFA, mount, heartbeat)
    SYSTEMIC = "systemic"  # many nodes failing the same way in a short window


class Policy(NamedTuple):
    replace: bool  # may the controller replace the node for it
    spends_budget: bool  # does it count toward the group's consecutive failures and the circuit breaker
    why: str


POLICIES = {
    FailureClass.LAUNCH: Policy(False, False, "back off and retry the launch; EC2's capacity is not the node's fault"),
    FailureClass.BOOTSTRAP: Policy(True, True, "replace; repeated failures stop the group's replacements (protected)"),
    FailureClass.BUNDLE: Policy(False, False, "report once for the cluster; a bad bundle is not a bad node"),
    FailureClass.HOOK: Policy(False, False, "report with the hook's name and log; the user's script is theirs to fix"),
    FailureClass.INSTANCE: Policy(True, True, "drain (soft) or set DOWN (hard), then replace"),
    FailureClass.HEALTH: Policy(True, True, "take the node out; try what is cheaper first where the check says so"),
    FailureClass.SYSTEMIC: Policy(False, False, "alert in hpcc status and touch no node"),
}


def policy(kind: FailureClass | str) -> Policy:
    return POLICIES[FailureClass(kind)]
