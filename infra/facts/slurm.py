"""Slurm's description of a compute node, from EC2's facts about its instance type (infra/facts/instance_types.py).

The head writes `NodeName=<group>-[000-<limit-1>] State=CLOUD Feature=<group> <attributes>` into slurm.conf for each
node group, and gres.conf per GPU group (configless: slurmctld serves both to every slurmd: hpcc_node/slurm.py); it
reads each group's attributes from the groups parameter (group_fields), else from the settings (SLURM_NODE,
SLURM_GPUS: infra/render/node_settings.py), so a change of type reaches them without new user data.
Attribute names are slurm.conf(5)'s node parameters (https://slurm.schedmd.com/slurm.conf.html#SECTION_NODE-CONFIGURATION).
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.facts.instance_types import COMPUTE_FIELD, InstanceType

# RealMemory is 95% of EC2's MemoryInfo.SizeInMiB, rounded down: ParallelCluster's rule (aws-parallelcluster-cookbook,
# attribute `realmemory_to_ec2memory_ratio` = 0.95, applied by its Slurm config generator's `_get_real_memory`).
# The rest is for the kernel, firmware reservations and the daemons: the kernel's MemTotal is already below EC2's
# figure, and slurmd registering less memory than RealMemory would leave the node unusable.
REAL_MEMORY_PERCENT = 95

# slurm.conf's SlurmdTimeout: slurmctld pings every slurmd each SlurmdTimeout/3 and marks one that does not answer
# NOT_RESPONDING, which is how the controller sees a dead node (hpcc_node/controller/assess.py). Slurm's 300 s
# default leaves a dead node unseen for up to 100 s; ParallelCluster writes 180; 120 pings every 40 s
# (https://slurm.schedmd.com/slurm.conf.html#OPT_SlurmdTimeout). There is no tree fan-out to make that cheap:
# slurm.conf's TreeWidth=65533 (templates/steps/slurm.sh.j2) has slurmctld message every slurmd itself, as Slurm's
# Cloud Scheduling Guide asks where nodes' addresses change (a slurmd does not know its peers' new NodeAddr to
# forward to them: https://slurm.schedmd.com/elastic_computing.html). At 4,096 nodes a ping round is 4,096 RPCs
# from slurmctld every 40 s, about 100 a second, each a small message its agent threads send in parallel.
SLURMD_TIMEOUT_SECONDS = 120


class SlurmFactsError(ValueError):
    """EC2's facts for the type lack what a Slurm node definition needs; `field` names the config field."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class SlurmNode:
    cpus: int
    sockets_per_board: int
    cores_per_socket: int
    threads_per_core: int
    real_memory_mib: int
    gpus: int  # NVIDIA GPUs, as Gres=gpu:N; 0 for every other type

    def attributes(self) -> str:
        """The node's slurm.conf attributes, space-separated (the SLURM_NODE setting)."""
        words = [
            f"CPUs={self.cpus}",
            "Boards=1",
            f"SocketsPerBoard={self.sockets_per_board}",
            f"CoresPerSocket={self.cores_per_socket}",
            f"ThreadsPerCore={self.threads_per_core}",
            f"RealMemory={self.real_memory_mib}",
        ]
        return " ".join(words + ([f"Gres=gpu:{self.gpus}"] if self.gpus else []))

    def group_fields(self) -> dict:
        """The group's "slurm" object in /hpcc/<cluster>/groups, which the head renders back into these attributes
        (hpcc_node/slurm.py node_attributes; a test holds the two to the same words)."""
        return {
            "cpus": self.cpus,
            "boards": 1,
            "sockets_per_board": self.sockets_per_board,
            "cores_per_socket": self.cores_per_socket,
            "threads_per_core": self.threads_per_core,
            "real_memory": self.real_memory_mib,
            "gres": f"gpu:{self.gpus}" if self.gpus else "",
        }


def real_memory_mib(memory_mib: int) -> int:
    return memory_mib * REAL_MEMORY_PERCENT // 100


def gres_gpus(itype: InstanceType) -> int:
    """GPUs as a Slurm GRES: NVIDIA's only, since the nodes' gres.conf names /dev/nvidia<i>. Neuron devices
    (trn1, trn2, inf2) are not a GRES here: Slurm has no plugin that knows /dev/neuron<i>, and a Neuron job takes
    whole nodes (`--exclusive`) with the Neuron runtime choosing its cores (NEURON_RT_VISIBLE_CORES)."""
    return itype.gpus if itype.accelerator == "nvidia" else 0


def slurm_node(itype: InstanceType, field: str = COMPUTE_FIELD) -> SlurmNode:
    """The node definition of a type. EC2 publishes no socket count (VCpuInfo has vCPUs, cores and threads per
    core), so every core is declared on one socket: slurmctld checks a registering node's total
    sockets x cores x threads and its CPUs against the definition, not how they are split."""
    fix = "choose a compute type whose DescribeInstanceTypes entry has it, or set cluster.scheduler: none"
    memory_mib = round(itype.memory_gib * 1024)
    if itype.vcpus <= 0 or itype.cores <= 0 or itype.threads_per_core <= 0:
        raise SlurmFactsError(
            field,
            f"EC2's facts for {itype.name} give no vCPU, core or thread count "
            f"(VCpuInfo), which Slurm's node definition needs; {fix}",
        )
    if itype.cores * itype.threads_per_core != itype.vcpus:
        raise SlurmFactsError(
            field,
            f"EC2's facts for {itype.name} do not add up: {itype.cores} cores x "
            f"{itype.threads_per_core} threads is not {itype.vcpus} vCPUs; {fix}",
        )
    if memory_mib <= 0:
        raise SlurmFactsError(
            field,
            f"EC2's facts for {itype.name} give no memory size (MemoryInfo.SizeInMiB), "
            f"which Slurm's RealMemory needs; {fix}",
        )
    return SlurmNode(
        cpus=itype.vcpus,
        sockets_per_board=1,
        cores_per_socket=itype.cores,
        threads_per_core=itype.threads_per_core,
        real_memory_mib=real_memory_mib(memory_mib),
        gpus=gres_gpus(itype),
    )
