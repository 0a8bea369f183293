"""Instance-type facts: the one place the program, validators and bootstrap read them from.

Figures come from EC2's DescribeInstanceTypes (tests compare every entry with moto's copy of
that data) and on-demand Linux prices in us-east-1 (used only for the cost estimate).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpus: int
    cores: int
    memory_gib: int
    arch: str  # "x86_64" or "arm64"
    gpus: int
    gpu_model: str | None
    efa_max_interfaces: int  # 0: no EFA
    network_cards: int
    interfaces_per_card: int
    gpudirect_rdma: bool  # FI_EFA_USE_DEVICE_RDMA=1 is only valid here
    hourly_usd: float

    @property
    def efa_supported(self) -> bool:
        return self.efa_max_interfaces > 0

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def slots(self) -> int:
        """MPI ranks per node: one per GPU, else one per physical core (HPC runs without SMT)."""
        return self.gpus if self.gpus else self.cores


def _t(name, vcpus, cores, mem, gpus, gpu_model, efa, cards, per_card, rdma, price, arch="x86_64"):
    return InstanceType(name, vcpus, cores, mem, arch, gpus, gpu_model, efa, cards, per_card, rdma, price)


CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in [
        # GPU training nodes
        _t("p3dn.24xlarge", 96, 48, 768, 8, "V100", 1, 1, 15, False, 31.212),
        _t("p4d.24xlarge", 96, 48, 1152, 8, "A100", 4, 4, 15, True, 32.7726),
        _t("p4de.24xlarge", 96, 48, 1152, 8, "A100", 4, 4, 15, True, 40.9657),
        _t("p5.48xlarge", 192, 96, 2048, 8, "H100", 32, 32, 2, True, 98.32),
        _t("p5e.48xlarge", 192, 96, 2048, 8, "H200", 32, 32, 2, True, 108.152),
        _t("p5en.48xlarge", 192, 96, 2048, 8, "H200", 16, 16, 4, True, 84.80),
        _t("g5.48xlarge", 192, 96, 768, 8, "A10G", 1, 1, 7, False, 16.288),
        _t("g6e.48xlarge", 192, 96, 1536, 8, "L40S", 4, 4, 10, False, 30.13118),
        _t("trn1.32xlarge", 128, 64, 512, 0, None, 8, 8, 5, True, 21.50),
        # CPU nodes with EFA
        _t("c5n.9xlarge", 36, 18, 96, 0, None, 1, 1, 8, False, 1.944),
        _t("c5n.18xlarge", 72, 36, 192, 0, None, 1, 1, 15, False, 3.888),
        _t("c6i.32xlarge", 128, 64, 256, 0, None, 1, 1, 15, False, 5.44),
        _t("c6in.32xlarge", 128, 64, 256, 0, None, 2, 2, 8, False, 7.2576),
        _t("c7i.48xlarge", 192, 96, 384, 0, None, 1, 1, 15, False, 8.568),
        _t("m7i.48xlarge", 192, 96, 768, 0, None, 1, 1, 15, False, 9.6768),
        _t("hpc6a.48xlarge", 96, 96, 384, 0, None, 1, 1, 2, False, 2.88),
        # CPU nodes without EFA (TCP only), and small head nodes
        _t("c6i.16xlarge", 64, 32, 128, 0, None, 0, 1, 15, False, 2.72),
        _t("c6i.8xlarge", 32, 16, 64, 0, None, 0, 1, 8, False, 1.36),
        _t("c6i.xlarge", 4, 2, 8, 0, None, 0, 1, 4, False, 0.17),
        _t("c5.xlarge", 4, 2, 8, 0, None, 0, 1, 4, False, 0.17),
        _t("m5.xlarge", 4, 2, 16, 0, None, 0, 1, 4, False, 0.192),
        _t("m6i.2xlarge", 8, 4, 32, 0, None, 0, 1, 4, False, 0.384),
    ]
}


def lookup(name: str) -> InstanceType | None:
    return CATALOG.get(name)


def known_types() -> list[str]:
    return sorted(CATALOG)
