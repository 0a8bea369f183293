"""What `hpcc status` says beyond its rows, from the controller's own records and rules: the alerts in force, what
the controller cannot read (malformed status objects, ledger items), and a group's roll
(hpcc_node/controller/decide_rolling.py's progress over the instances' launch-spec tags)."""

from __future__ import annotations

from hpcc_contract import groups as groups_format
from hpcc_contract.names import TAG_LAUNCH_SPEC
from hpcc_node.controller import model
from hpcc_node.controller.decide_rolling import progress
from hpcc_node.controller.ledger import Loaded
from hpcc_node.controller.timers import DEFAULT as TIMERS
from infra.ops.aws import tag_dict


def int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def unread_notes(loaded: Loaded) -> list[str]:
    """What the controller cannot read, and why: the status objects it found malformed (its ledger record, written
    when they change: a node with one has no verdict), and ledger items (this read's, the same Ledger.load)."""
    found = loaded.dropped_statuses
    count = int_or_none(found.get("count")) or 0
    some = found.get("some") if isinstance(found.get("some"), dict) else {}
    out = []
    if count:
        named = "; ".join(f"{str(k)[:200]}: {str(v)[:200]}" for k, v in list(some.items())[:5])
        more = f"; and {count - len(some)} more" if count > len(some) else ""
        out.append(
            f"the controller drops {count} malformed status object(s), no verdict from them: {named}{more} "
            "(its log names each; the node writes its own again, or delete it)"
        )
    for pk, why in sorted(loaded.dropped.items()):
        out.append(f"ledger item {pk} cannot be read ({why}): the controller leaves it out; mend or delete it")
    return out


def specs(raw_instances: list[dict]) -> dict[str, model.Instance]:
    """Each instance's state and launch-spec tag, as the controller's rolling rule reads them."""
    return {
        i["InstanceId"]: model.Instance(
            i["InstanceId"], i["State"]["Name"], 0.0, launch_spec=tag_dict(i.get("Tags")).get(TAG_LAUNCH_SPEC, "")
        )
        for i in raw_instances
    }


def roll_text(group: dict, loaded: Loaded, instances: dict[str, model.Instance]) -> str:
    """A group's roll as `hpcc status` says it ("rolling to version 7: 5 of 16 on it, 2 draining, 1 booting"), from
    the controller's own rule (hpcc_node/controller/decide_rolling.py); "" when no node is stale or unknown."""
    want = model.Group(
        str(group.get("name", "")),
        "",
        0,
        lt_version=int_or_none(group.get("lt_version")) or 0,
        spec=str(group.get("spec") or ""),
    )
    if not want.spec:
        return ""
    prog = progress(want, list(loaded.slots.values()), instances)
    if not (prog.stale or prog.unknown):
        return ""
    strategy = group.get("update_strategy", groups_format.DEFAULTS["update_strategy"])
    return prog.text() + ("" if strategy != "manual" else " (updateStrategy manual: `hpcc replace` them)")


def alerts(loaded: Loaded, now: float) -> list[str]:
    """The alerts still in force (the ledger keeps one a breaker window), each with the reason its event gave."""
    recent = [
        e
        for e in loaded.events
        if e.kind == model.ALERT and e.phase == "start" and now - e.at <= TIMERS.breaker_window_seconds
    ]
    texts = list(dict.fromkeys(e.detail for e in recent if e.detail))
    return texts or [f"{key} (raised {int(now - at)} s ago)" for key, at in sorted(loaded.alerts.items())]
