"""The box's Slurm settings, until slurm-program's config has `scheduler` (then the box config sets
`scheduler: slurm` and the plan renders these keys itself)."""

from __future__ import annotations

from tests.instance_data import facts_for as lookup

MUNGE_SECRET = "hpcc/{}/munge-key"  # the bootstrap context's munge_secret_id (infra/roles.py)


def slurm_settings(settings: str, compute_type: str) -> str:
    """Stand-in until the config has `scheduler`: the planned settings with SCHEDULER=slurm and, where the plan
    left it empty, the compute type's node line from its facts."""
    facts = lookup(compute_type)
    node = (f"CPUs={facts.vcpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={facts.cores} "
            f"ThreadsPerCore={facts.threads_per_core} RealMemory={(facts.memory_gib - 4) * 1024}")
    lines = [line for line in settings.splitlines() if line]
    values = dict(line.split("=", 1) for line in lines if not line.startswith(("FABRIC=", "AUTHORIZED_KEY=")))
    if values.get("SCHEDULER") == "slurm" and values.get("SLURM_NODE"):
        return settings
    out = [("SCHEDULER=slurm" if line.startswith("SCHEDULER=") else
            f"SLURM_NODE={values.get('SLURM_NODE') or node}" if line.startswith("SLURM_NODE=") else line)
           for line in lines]
    return "\n".join(out) + "\n"
