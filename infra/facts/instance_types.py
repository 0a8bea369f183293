"""Instance-type facts read from EC2's own DescribeInstanceTypes, not typed by hand.

One entry of DescribeInstanceTypes (API reference: InstanceTypeInfo, NetworkInfo, NetworkCardInfo,
GpuInfo, NeuronInfo) becomes one `InstanceType`. Under `pulumi up` the entries come from the account's
EC2; offline from the embedded AWS (moto's copy of the same data). What EC2 does not publish is kept by
hand, each fact in one place: GPUDirect RDMA families below, on-demand prices in infra/facts/prices.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.facts import prices

# Families whose EFA devices read and write accelerator memory directly (FI_EFA_USE_DEVICE_RDMA=1).
# EC2 has no field for it. Sources: EC2 User Guide "efa.html#efa-instance-types" (RDMA read/write
# columns), the AWS Neuron guide "setup-trn1-multi-node-execution" (Trainium sets it), and
# awsome-distributed-training's 1.architectures/efa-cheatsheet.md (p4d/p4de/p5*, never p3dn).
# A family missing here runs without the flag: slower, never broken.
GPUDIRECT_RDMA_FAMILIES = frozenset(
    {
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "p6-b200",
        "p6-b300",
        "p6e-gb200",
        "trn1",
        "trn1n",
        "trn2",
        "trn2u",
    }
)

COMPUTE_FIELD = "cluster.compute.instanceType"
HEAD_FIELD = "cluster.headNode.instanceType"


@dataclass(frozen=True)
class NetworkCard:
    """One entry of NetworkInfo.NetworkCards (API reference: NetworkCardInfo)."""

    index: int
    max_interfaces: int
    interface_types: tuple[str, ...]  # of "interface", "efa", "efa-only"

    def supports(self, interface_type: str) -> bool:
        return interface_type in self.interface_types


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    cores: int
    memory_gib: float  # an int for every type with whole GiB
    arch: str  # "x86_64" or "arm64" (the type's first architecture of the two; "i386" types are x86_64)
    gpus: int
    gpu_model: str | None
    efa_max_interfaces: int  # 0: no EFA
    network_cards: int
    interfaces_per_card: int  # card 0's maximum (what the one-card layout needs)
    gpudirect_rdma: bool  # FI_EFA_USE_DEVICE_RDMA=1 is only valid here
    hourly_usd: float | None  # None: price unknown (see infra/facts/prices.py), never a guess
    architectures: tuple[str, ...] = ()
    threads_per_core: int = 1
    neuron_cores: int = 0
    neuron_model: str | None = None
    accelerator: str = "none"  # "nvidia" | "neuron" | "none"
    cards: tuple[NetworkCard, ...] = ()
    usage_classes: tuple[str, ...] = ()  # "on-demand", "spot", "capacity-block"
    placement_strategies: tuple[str, ...] = ()  # "cluster", "partition", "spread"
    instance_store_gb: int = 0  # InstanceStorageInfo.TotalSizeInGB: local NVMe (0: none; enroot's place, issue 35)

    @property
    def efa_supported(self) -> bool:
        return self.efa_max_interfaces > 0

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def slots(self) -> int:
        """Ranks per node: one per GPU, one per NeuronCore, else one per physical core (HPC runs without SMT)."""
        if self.accelerator == "neuron":
            return self.neuron_cores
        return self.gpus if self.gpus else self.cores

    @property
    def spot_supported(self) -> bool:
        return "spot" in self.usage_classes

    @property
    def cluster_placement_supported(self) -> bool:
        return "cluster" in self.placement_strategies


class UnknownInstanceType(ValueError):
    """EC2 does not list the type in this region; `field` names the config field to fix."""

    def __init__(self, field: str, name: str, region: str):
        self.field, self.name, self.region = field, name, region
        super().__init__(
            f"{field}: EC2 in {region} has no instance type {name!r} (DescribeInstanceTypes does not list it); "
            f"set it to a type that `aws ec2 describe-instance-types --region {region}` lists"
        )


def _primary_arch(architectures: tuple[str, ...]) -> str:
    for arch in ("x86_64", "arm64"):
        if arch in architectures:
            return arch
    return architectures[0] if architectures else "unknown"


def _memory_gib(mib: int) -> float:
    return mib // 1024 if mib % 1024 == 0 else mib / 1024


def _neuron(info: dict) -> tuple[int, str | None]:
    """NeuronCores = devices x cores per device (API reference: NeuronDeviceInfo, NeuronDeviceCoreInfo)."""
    devices = info.get("NeuronDevices", [])
    cores = sum(d.get("Count", 0) * d.get("CoreInfo", {}).get("Count", 0) for d in devices)
    return cores, (devices[0].get("Name") if devices else None)


def _cards(net: dict) -> tuple[NetworkCard, ...]:
    cards = [
        NetworkCard(
            c["NetworkCardIndex"], c["MaximumNetworkInterfaces"], tuple(c.get("InterfaceTypes", ("interface",)))
        )
        for c in net.get("NetworkCards", [])
    ]
    return tuple(sorted(cards, key=lambda c: c.index))


def from_description(d: dict, price: float | None = None) -> InstanceType:
    """One DescribeInstanceTypes entry as an InstanceType (pure: no AWS call)."""
    vcpu, net = d["VCpuInfo"], d["NetworkInfo"]
    gpu_list = (d.get("GpuInfo") or {}).get("Gpus", [])
    gpus = sum(g.get("Count", 0) for g in gpu_list)
    neuron_cores, neuron_model = _neuron(d.get("NeuronInfo") or {})
    nvidia = any(g.get("Manufacturer") == "NVIDIA" for g in gpu_list)
    cards = _cards(net)
    architectures = tuple(d["ProcessorInfo"]["SupportedArchitectures"])
    name = d["InstanceType"]
    return InstanceType(
        name=name,
        vcpus=vcpu["DefaultVCpus"],
        cores=vcpu.get("DefaultCores", vcpu["DefaultVCpus"]),
        memory_gib=_memory_gib(d["MemoryInfo"]["SizeInMiB"]),
        arch=_primary_arch(architectures),
        gpus=gpus,
        gpu_model=gpu_list[0]["Name"] if gpu_list else None,
        efa_max_interfaces=(net.get("EfaInfo") or {}).get("MaximumEfaInterfaces", 0) if net.get("EfaSupported") else 0,
        network_cards=net.get("MaximumNetworkCards", len(cards) or 1),
        interfaces_per_card=cards[0].max_interfaces if cards else net.get("MaximumNetworkInterfaces", 1),
        gpudirect_rdma=name.split(".", 1)[0] in GPUDIRECT_RDMA_FAMILIES and bool(net.get("EfaSupported")),
        hourly_usd=price,
        architectures=architectures,
        threads_per_core=vcpu.get("DefaultThreadsPerCore", 1),
        neuron_cores=neuron_cores,
        neuron_model=neuron_model,
        accelerator="nvidia" if nvidia else "neuron" if neuron_cores else "none",
        cards=cards,
        usage_classes=tuple(d.get("SupportedUsageClasses", ())),
        placement_strategies=tuple((d.get("PlacementGroupInfo") or {}).get("SupportedStrategies", ())),
        instance_store_gb=(d.get("InstanceStorageInfo") or {}).get("TotalSizeInGB", 0)
        if d.get("InstanceStorageSupported")
        else 0,
    )


class InstanceFacts:
    """Asks EC2 once per instance type and keeps the answer (a plan or `up` looks a type up many times).

    `ec2` is a boto3 EC2 client (the account's, or the embedded AWS's); `price_of` maps a type name to its
    hourly price or None (default: the dated snapshot in infra/facts/prices.py).
    """

    def __init__(self, ec2, price_of: Callable[[str], float | None] = prices.snapshot_price):
        self._ec2, self._price_of = ec2, price_of
        self._cache: dict[str, InstanceType] = {}

    def get(self, name: str, field: str = COMPUTE_FIELD) -> InstanceType:
        if name not in self._cache:
            self._cache[name] = from_description(self._describe(name, field), self._price_of(name))
        return self._cache[name]

    def _describe(self, name: str, field: str) -> dict:
        from botocore.exceptions import ClientError

        region = self._ec2.meta.region_name
        try:
            pages = self._ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=[name])
            found = [t for page in pages for t in page["InstanceTypes"] if t["InstanceType"] == name]
        except ClientError as e:
            if e.response["Error"]["Code"] != "InvalidInstanceType":
                raise
            raise UnknownInstanceType(field, name, region) from None
        if not found:
            raise UnknownInstanceType(field, name, region)
        return found[0]


class DescribedFacts:
    """Facts from DescribeInstanceTypes entries already in hand (preflight's answers, tests' copy of moto's data):
    the same `.get(name, field)` as InstanceFacts, without a client. `region` only words the error."""

    def __init__(
        self,
        descriptions: dict[str, dict],
        region: str,
        price_of: Callable[[str], float | None] = prices.snapshot_price,
    ):
        self._descriptions, self._region, self._price_of = descriptions, region, price_of

    def get(self, name: str, field: str = COMPUTE_FIELD) -> InstanceType:
        if name not in self._descriptions:
            raise UnknownInstanceType(field, name, self._region)
        return from_description(self._descriptions[name], self._price_of(name))


def ec2_facts(region: str, price_of: Callable[[str], float | None] = prices.snapshot_price) -> InstanceFacts:
    """Facts from the EC2 the process reaches: the account's under `pulumi up`, the embedded AWS (moto) offline."""
    import boto3

    return InstanceFacts(boto3.client("ec2", region_name=region), price_of=price_of)
