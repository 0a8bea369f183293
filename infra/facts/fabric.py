"""Fabric settings per instance type: what libfabric, NCCL, the Neuron runtime, Open MPI and oneCCL need.

Sources: the AWS EFA docs and awsome-distributed-training's 1.architectures/efa-cheatsheet.md (NVIDIA,
CPU); the AWS Neuron guide "How to prepare trn1.32xlarge for multi-node execution"
(https://awsdocs-neuron.readthedocs-hosted.com/en/latest/frameworks/torch/torch-neuronx/setup-trn1-multi-node-execution.html),
whose application environment is FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1, FI_EFA_FORK_SAFE=1. Neuron
collectives reach EFA through their own bundled OFI plugin, so NCCL's variables do not apply there.
"""

from __future__ import annotations

from infra.facts.instance_types import InstanceType

EFA_MPIRUN = "--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none"
TCP_MPIRUN = "--mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none"


def accelerator_of(itype: InstanceType) -> str:
    """ "nvidia" | "neuron" | "none"; a row without the field (the old catalog) is read from its GPU count."""
    return getattr(itype, "accelerator", None) or ("nvidia" if itype.gpus else "none")


def fabric_env(itype: InstanceType, efa_enabled: bool) -> tuple[tuple[str, str], ...]:
    """(name, value) pairs for /etc/hpcc/env, in a stable order."""
    env: list[tuple[str, str]] = []
    if efa_enabled:
        env += [("FI_PROVIDER", "efa"), ("FI_EFA_FORK_SAFE", "1")]
        if itype.gpudirect_rdma:
            env.append(("FI_EFA_USE_DEVICE_RDMA", "1"))  # GPUDirect RDMA / Trainium types only; never p3dn
    else:
        env.append(("FI_PROVIDER", "tcp"))
    accelerator = accelerator_of(itype)  # "neuron": the libfabric settings above are all Neuron's guide sets
    if accelerator == "nvidia":
        env += [("NCCL_SOCKET_IFNAME", "^lo,docker"), ("NCCL_DEBUG", "WARN")]
    elif accelerator == "none":  # CPU clusters: oneCCL over libfabric, with Intel MPI pointed at the same provider
        env += [
            ("CCL_ATL_TRANSPORT", "ofi"),
            ("CCL_WORKER_COUNT", "1"),
            ("I_MPI_OFI_LIBRARY_INTERNAL", "0"),
            ("I_MPI_OFI_PROVIDER", "efa" if efa_enabled else "tcp"),
        ]
    return tuple(env)


def mpirun_options(efa_enabled: bool) -> str:
    return EFA_MPIRUN if efa_enabled else TCP_MPIRUN
