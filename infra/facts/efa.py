"""The network-interface layout a node is launched with, read from its instance type's network cards.

AWS's guidance for types with several network cards (EC2 User Guide, "Maximize network bandwidth on
Amazon EC2 instances with multiple network cards",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html):
- card 0 device 0 (the primary, the only interface with an IP here) is an ENA `interface`;
- "if the network card index 0 supports EFA", card 0 device 1 is `efa-only`;
- each further card takes an `efa-only` interface on device 0.
So a p5.48xlarge gets 32 EFA devices on one subnet IP (the page's run-instances example: "32 EFA devices
and one ENA device"; aws-parallelcluster PR #7262 made it ParallelCluster's default), and a
p6-b300.48xlarge, whose card 0 lists only `interface` (aws-parallelcluster issue #7143), gets 16, none on
card 0. EFA devices stop at the type's MaximumEfaInterfaces. Two cases the guidance leaves open, decided from the card
data:
- one network card: a single `efa` (ENA + EFA) on card 0 device 0, as EC2's single-EFA examples launch;
- card 0 takes only one interface (hpc6id.32xlarge): the primary itself is `efa` (ENA + EFA), which AWS's
  EFA-only announcement allows ("the primary interface being either EFA coupled with ENA or just ENA",
  https://amazonaws.cn/en/new/2024/amazon-ec2-announces-efa-updates-for-scalability-with-aiml-applications).
No EFA (the type lacks it, or it is turned off): one ENA `interface`.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.facts.instance_types import InstanceType, NetworkCard

_EFA_KINDS = ("efa", "efa-only")


@dataclass(frozen=True)
class InterfaceSpec:
    network_card_index: int
    device_index: int
    interface_type: str  # "interface" | "efa" | "efa-only"

    @property
    def is_efa(self) -> bool:
        return self.interface_type in _EFA_KINDS

    @property
    def is_primary(self) -> bool:
        return self.network_card_index == 0 and self.device_index == 0


def _cards(itype) -> tuple[NetworkCard, ...]:
    """The type's cards; a type without per-card data (the old catalog row) has uniform, EFA-capable cards."""
    cards = getattr(itype, "cards", ())
    if cards:
        return cards
    kinds = ("interface", "efa", "efa-only") if itype.efa_supported else ("interface",)
    return tuple(NetworkCard(i, itype.interfaces_per_card, kinds) for i in range(itype.network_cards))


def interface_layout(itype: InstanceType, efa_enabled: bool) -> list[InterfaceSpec]:
    primary = [InterfaceSpec(0, 0, "interface")]
    if not (efa_enabled and itype.efa_supported):
        return primary
    cards = _cards(itype)
    card0, budget = cards[0], itype.efa_max_interfaces
    if len(cards) == 1 or card0.max_interfaces < 2:
        layout = [InterfaceSpec(0, 0, "efa")] if card0.supports("efa") else primary
    else:
        layout = primary + ([InterfaceSpec(0, 1, "efa-only")] if card0.supports("efa-only") else [])
    for card in cards[1:]:
        if efa_device_count(layout) >= budget:
            break
        if card.supports("efa-only"):
            layout.append(InterfaceSpec(card.index, 0, "efa-only"))
    return layout


def efa_device_count(layout: list[InterfaceSpec]) -> int:
    return sum(1 for i in layout if i.is_efa)
