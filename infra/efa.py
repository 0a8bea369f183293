"""The network-interface layout a node is launched with, derived from its instance type.

Layout (AWS's current guidance, EC2 User Guide "efa-acc-inst-types"):
- one network card: a single `efa` interface (ENA + EFA) on card 0, device 0;
- several cards: card 0 device 0 is a plain ENA `interface` (the only interface with an IP),
  card 0 device 1 and device 0 of every further card are `efa-only` (no IP address), so a
  p5.48xlarge gets 32 EFA devices while using one subnet IP, not 33.
- no EFA (type lacks it, or it is turned off): one ENA `interface`.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.catalog import InstanceType


@dataclass(frozen=True)
class InterfaceSpec:
    network_card_index: int
    device_index: int
    interface_type: str  # "interface" | "efa" | "efa-only"

    @property
    def is_efa(self) -> bool:
        return self.interface_type in ("efa", "efa-only")

    @property
    def is_primary(self) -> bool:
        return self.network_card_index == 0 and self.device_index == 0


def interface_layout(itype: InstanceType, efa_enabled: bool) -> list[InterfaceSpec]:
    if not (efa_enabled and itype.efa_supported):
        return [InterfaceSpec(0, 0, "interface")]
    if itype.network_cards == 1:
        return [InterfaceSpec(0, 0, "efa")]
    layout = [InterfaceSpec(0, 0, "interface"), InterfaceSpec(0, 1, "efa-only")]
    efa_cards = min(itype.network_cards, itype.efa_max_interfaces)
    layout += [InterfaceSpec(card, 0, "efa-only") for card in range(1, efa_cards)]
    return layout


def efa_device_count(layout: list[InterfaceSpec]) -> int:
    return sum(1 for i in layout if i.is_efa)
