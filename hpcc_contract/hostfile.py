"""Hostfile formats for the launchers; one function each, nodes given as (name, ip, slots)."""

from __future__ import annotations

from typing import Iterable, NamedTuple


class HostEntry(NamedTuple):
    name: str
    ip: str
    slots: int


def _sorted(nodes: Iterable[HostEntry]) -> list[HostEntry]:
    return sorted(nodes, key=lambda n: n.name)


def openmpi(nodes: Iterable[HostEntry]) -> str:
    """Open MPI, DeepSpeed and `horovodrun -hostfile`: `ip slots=N`."""
    return "".join(f"{n.ip} slots={n.slots}\n" for n in _sorted(nodes))


def mpich(nodes: Iterable[HostEntry]) -> str:
    """MPICH and Intel MPI (Hydra): `ip:N`."""
    return "".join(f"{n.ip}:{n.slots}\n" for n in _sorted(nodes))


def hosts(nodes: Iterable[HostEntry]) -> str:
    """One address a line, for pdsh or clush."""
    return "".join(f"{n.ip}\n" for n in _sorted(nodes))


def horovod(nodes: Iterable[HostEntry]) -> str:
    """`horovodrun -H`: `ip:N,ip:N`."""
    return ",".join(f"{n.ip}:{n.slots}" for n in _sorted(nodes)) + "\n"


FORMATS = {"openmpi": openmpi, "mpich": mpich, "hosts": hosts, "horovod": horovod}


def hosts_parameter_value(addresses: Iterable[str]) -> str:
    """The `/hpcc/<cluster>/hosts` parameter: the head's address, then the compute nodes' in name order, one a line."""
    return "\n".join(addresses)
