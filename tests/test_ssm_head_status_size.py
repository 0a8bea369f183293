"""The head's status parameter with Slurm's states (templates/steps/status.sh.j2 status_json, filled by slurm.sh.j2
slurm_watch from `sinfo -h -o '%T %N'`). The node writes it with no tier, so it is a Standard parameter (4 KB);
its log tail shrinks to fit, its Slurm states do not. Sized here by the real bash, with Slurm's worst case: states
alternating node by node, so that no host list compresses."""

from __future__ import annotations

import json

import hostlist

from infra.bootstrap_pacing import MAX_COMPUTE_NODES
from infra.naming import compute_node_name
from infra.plan.aws_rules import SSM_STANDARD_LIMIT
from tests.bootstrap_shell import run
from tests.test_bootstrap_slurm import head_ctx
from tests.test_bootstrap_steps import COMMON, preamble


def alternating_states(nodes: int) -> str:
    """What slurm_watch keeps (its awk's format) when every other node is allocated."""
    groups: dict[str, list[str]] = {}
    for i in range(nodes):
        groups.setdefault(("idle", "allocated")[i % 2], []).append(compute_node_name(i))
    return ", ".join(f'"{state}": "{hostlist.collect_hostlist(names)}"' for state, names in groups.items())


def head_status(tmp_path, nodes: int) -> str:
    (tmp_path / "states").write_text(alternating_states(nodes) + "\n")
    (tmp_path / "bootstrap.log").write_text("".join(f"2026-01-01T00:00:00Z [sync] {'x' * 180}\n" for _ in range(20)))
    script = preamble(tmp_path) + (f"HPCC_NODE=head\nHPCC_STEP=sync\nHPCC_SLURM_STATES={tmp_path}/states\n"
                                   'states=$(cat "$HPCC_SLURM_STATES")\nstatus_json ready true "slurm: {$states}"\n')
    out = run(COMMON + ["identify", "slurm"], script, head_ctx(tmp_path))
    assert out.returncode == 0, out.stderr
    return out.stdout.rstrip("\n")


def test_the_heads_status_with_slurm_states_fits_a_standard_parameter_at_the_node_cap(tmp_path):
    status = head_status(tmp_path, MAX_COMPUTE_NODES)
    assert len(status.encode()) <= SSM_STANDARD_LIMIT, len(status.encode())
    assert len(json.loads(status)["slurm"]["allocated"]) > 1000  # the worst case was measured, not all idle
