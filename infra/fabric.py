"""Fabric settings per instance type: what libfabric, NCCL, Open MPI and oneCCL need on the nodes.

Source: awsome-distributed-training's EFA cheatsheet and the AWS EFA docs (see the facts file).
"""

from __future__ import annotations

from infra.catalog import InstanceType

EFA_MPIRUN = "--mca pml ^cm --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none"
TCP_MPIRUN = "--mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none"


def fabric_env(itype: InstanceType, efa_enabled: bool) -> tuple[tuple[str, str], ...]:
    """(name, value) pairs for /etc/hpcc/env, in a stable order."""
    env: list[tuple[str, str]] = []
    if efa_enabled:
        env += [("FI_PROVIDER", "efa"), ("FI_EFA_FORK_SAFE", "1")]
        if itype.gpudirect_rdma:
            env.append(("FI_EFA_USE_DEVICE_RDMA", "1"))  # GPUDirect RDMA types only; never p3dn
    else:
        env.append(("FI_PROVIDER", "tcp"))
    if itype.gpus:
        env += [("NCCL_SOCKET_IFNAME", "^lo,docker"), ("NCCL_DEBUG", "WARN")]
    else:  # CPU clusters: oneCCL over libfabric, with Intel MPI pointed at the same provider
        env += [("CCL_ATL_TRANSPORT", "ofi"), ("CCL_WORKER_COUNT", "1"), ("I_MPI_OFI_LIBRARY_INTERNAL", "0"),
                ("I_MPI_OFI_PROVIDER", "efa" if efa_enabled else "tcp")]
    return tuple(env)


def mpirun_options(efa_enabled: bool) -> str:
    return EFA_MPIRUN if efa_enabled else TCP_MPIRUN
