"""The hosts text a node applies, rendered from the controller's membership.json (hpcc_node/controller/membership.py)
in this one place: `<name> <ip>` a line, the head first, then the nodes in name order (group, then number), holes
left as they are. The bootstrap (templates/steps/identify.sh.j2, `apply-membership`) and the node agent consume it;
hpcc_contract/hosts.py judges it.

`python3 -m hpcc_node.hosts FILE NAME INSTANCE` prints the generation, then the hosts text; exit 3 when FILE does
not list NAME with INSTANCE (not named yet, or the previous membership), 2 when FILE is no membership."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional, Tuple

from hpcc_contract import formats
from hpcc_contract.hosts import HEAD

# The nodes a hosts text lists: those with an instance of their own that boot, run or drain. A booting node must
# find itself there; a failed one (kept for its log, not replaced) and one being replaced or removed are left out,
# and so is one whose health verdict took it out of service on a cluster without Slurm (its entry's `out`: the
# hostfiles are what launches read there), until its checks pass again.
LISTED = ("booting", "ready", "draining")


class MembershipError(ValueError):
    """membership.json is not what the controller writes."""


class NewerMembership(MembershipError):
    """membership.json of a newer format than this bundle reads (hpcc_contract/formats.py)."""


def name_key(name: str) -> Tuple[str, int]:
    """Name order: by group, then by number (gpu-999 before gpu-1000)."""
    group, _, number = name.rpartition("-")
    return group, int(number) if number.isdigit() else -1


def listed(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise MembershipError("membership.json has no list of nodes")
    return sorted(
        (n for n in nodes if n.get("state") in LISTED and n.get("ip") and not n.get("out")),
        key=lambda n: name_key(str(n["name"])),
    )


def hosts_text(doc: Dict[str, Any]) -> str:
    """The hosts text of a membership document (its head, then its listed nodes)."""
    head = doc.get("head")
    if not isinstance(head, dict) or not head.get("ip"):
        raise MembershipError("membership.json names no head with an address")
    lines = [f"{HEAD} {head['ip']}"] + [f"{n['name']} {n['ip']}" for n in listed(doc)]
    return "".join(line + "\n" for line in lines)


def lists(doc: Dict[str, Any], name: str, instance_id: str) -> bool:
    """Whether the membership names `name` as the node of `instance_id` (the head: its head entry)."""
    if name == HEAD:
        head = doc.get("head") or {}
        return head.get("instance") == instance_id
    return any(n.get("name") == name and n.get("instance") == instance_id for n in listed(doc))


def line_holds(pairs: List[Tuple[str, str]], node: str, ip: str) -> Optional[str]:
    """None when a hosts text's (name, ip) pairs list this node at its IP; else what they list there (then the
    agent does not apply it)."""
    at = dict(pairs).get(node, "nothing")
    return None if at == ip else at


def unlisted_why(doc: Dict[str, Any], name: str, instance_id: str) -> str:
    """Why the membership does not list `name` as `instance_id`, in the words of the node's log."""
    for n in doc.get("nodes") or ():
        if isinstance(n, dict) and n.get("name") == name and n.get("instance") == instance_id and n.get("out"):
            return f"takes {name} out of the hostfiles ({str(n['out'])[:200]})"
    return f"does not list {name} as {instance_id}"


def generation(doc: Dict[str, Any]) -> int:
    """The membership's generation, if it is a membership of a format this bundle reads (a newer one is refused by
    name: its fields may mean what this reader does not know)."""
    try:
        formats.check_doc("membership", doc, formats.MEMBERSHIP)
    except formats.NewerFormat as e:
        raise NewerMembership(f"membership.json: {e}") from None
    except formats.BadFormat as e:
        raise MembershipError(f"membership.json: {e}") from None
    gen = doc.get("generation")
    if not isinstance(gen, int) or isinstance(gen, bool) or gen < 0:
        raise MembershipError("membership.json has no generation")
    return gen


def main(argv: List[str], out: Any = sys.stdout, err: Any = sys.stderr) -> int:
    if len(argv) != 3:
        err.write("usage: python3 -m hpcc_node.hosts MEMBERSHIP_FILE NODE_NAME INSTANCE_ID\n")
        return 2
    path, name, instance_id = argv
    try:
        with open(path) as f:
            doc: Optional[Dict[str, Any]] = json.load(f)
        if not isinstance(doc, dict):
            raise MembershipError("membership.json is not an object")
        gen, text = generation(doc), hosts_text(doc)
        if not lists(doc, name, instance_id):
            err.write(f"membership generation {gen} does not list {name} as {instance_id}\n")
            return 3
    except (OSError, ValueError, MembershipError) as e:
        err.write(f"{path}: {e}\n")
        return 2
    out.write(f"{gen}\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
