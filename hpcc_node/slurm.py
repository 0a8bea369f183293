"""The head's Slurm follow-up, each tick of its agent (SCHEDULER=slurm): compute nodes Slurm cannot use are drained
when their status says their bootstrap failed, and resumed once it says ready; Slurm's node states go into the
head's status when they change. Reasons of others (an admin's) are left alone. Decisions here are pure; the
agent runs sinfo/scontrol (https://slurm.schedmd.com/scontrol.html)."""

from __future__ import annotations

import re
from typing import Dict, List, Mapping, Optional, Tuple

USABLE = re.compile(r"idle|allocated|mixed|completing")
FAILED_PREFIX = "hpcc: bootstrap failed"
NODE_STATES = ["sinfo", "-h", "-N", "-o", "%N|%T|%E"]
SUMMARY = ["sinfo", "-h", "-o", "%T %N"]


def troubled(sinfo_nodes: str) -> Dict[str, Tuple[str, str]]:
    """node -> (state, reason) of the nodes Slurm cannot use, or that carry an hpcc reason."""
    out = {}
    for line in sinfo_nodes.splitlines():
        parts = line.split("|", 2)
        if len(parts) != 3:
            continue
        node, state, reason = parts
        if not USABLE.fullmatch(state) or reason.startswith("hpcc:"):
            out[node] = (state, reason)
    return out


def actions(nodes: Mapping[str, Tuple[str, str]], statuses: Mapping[str, Optional[dict]]) -> List[List[str]]:
    """scontrol argument lists: DRAIN a node whose status failed (once: not when drained already with that
    reason), RESUME one we drained whose status is ready again."""
    out = []
    for node in sorted(nodes):
        state, why = nodes[node]
        st = statuses.get(node) or {}
        phase = st.get("phase")
        reason = f"{FAILED_PREFIX} at {st.get('step')}" if re.fullmatch(r"[a-z-]+", str(st.get("step"))) else ""
        if phase == "failed" and "drain" not in state and why != reason:
            out.append(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        elif phase == "ready" and why.startswith(FAILED_PREFIX):
            out.append(["update", f"NodeName={node}", "State=RESUME"])
    return out


def summary(sinfo_summary: str) -> Dict[str, str]:
    """Slurm's states: state -> node list, as the head's status shows them."""
    out = {}
    for line in sinfo_summary.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def states_file_text(states: Mapping[str, str]) -> str:
    """/run/hpcc-slurm.json: the inside of the status's "slurm" object, as status.sh.j2's slurm_field reads it."""
    return ", ".join(f'"{k}": "{v}"' for k, v in states.items()) + "\n"
