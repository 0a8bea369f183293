"""Network rules: no port open to the world or to more than a /16 (a /48 of IPv6) per group, no IPv6 source while
the VPC has none, compute nodes without public IPs, and the self-referencing EFA group every node interface is in.
"""

from __future__ import annotations

import ipaddress
from typing import Any

if __package__:  # imported as the package `policy` (the tests)
    from . import records
else:  # loaded by the Pulumi engine as a script directory (__main__.py puts it on sys.path)
    import records  # type: ignore[no-redef]

ALL_PROTOCOLS = ("-1", "all")
# The most addresses a security group may admit from, all its ingress rules together (overlaps once): a /16's worth
# of IPv4, a /48's of IPv6. Why: docs/security.md. infra/config/validators/inputs.py holds the same IPv4 number for the
# config; the pack keeps its own so it runs without hpcc installed (tests/policy/test_policy.py checks they agree).
MAX_INGRESS_ADDRESSES = {4: 2**16, 6: 2**80}
PREFIX_OF_LIMIT = {4: "/16", 6: "/48"}  # user-chosen keys: never renamed by normalise()
PREFIX_LIST = "aws:ec2/managedPrefixList:ManagedPrefixList"
PREFIX_LIST_ENTRY = "aws:ec2/managedPrefixListEntry:ManagedPrefixListEntry"


def _network(cidr: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(cidr).strip(), strict=False)
    except ValueError:
        return None


def _is_world(cidr: Any) -> bool:
    net = _network(cidr)
    return net is not None and net.prefixlen == 0


def _too_wide(cidr: Any) -> bool:
    """Wider than the limit on its own, but not the world (reported as such)."""
    net = _network(cidr)
    return net is not None and 0 < net.prefixlen and net.num_addresses > MAX_INGRESS_ADDRESSES[net.version]


def _ports(inputs: dict) -> str:
    proto = str(inputs.get("ipProtocol", inputs.get("protocol", "")))
    if proto in ALL_PROTOCOLS:
        return "every port"
    # the engine sends numbers as protobuf doubles: 22.0 is port 22
    low, high = (
        int(v) if isinstance(v, float) and v.is_integer() else v for v in (inputs.get("fromPort"), inputs.get("toPort"))
    )
    return f"{proto} {low}" if low == high else f"{proto} {low}-{high}"


def _ingress_sources(rtype: str, inputs: dict) -> list[tuple[str, Any, dict]]:
    """(how the source is written, cidr, the rule) for every address source of an ingress rule, in any of the
    three ways of writing one."""
    if rtype == records.INGRESS:
        return [(f"{key} {inputs[key]}", inputs[key], inputs) for key in ("cidrIpv4", "cidrIpv6") if inputs.get(key)]
    if rtype == records.SG_RULE and inputs.get("type") == "ingress":
        return [
            (f"ingress from {c}", c, inputs)
            for c in records.as_list(inputs.get("cidrBlocks")) + records.as_list(inputs.get("ipv6CidrBlocks"))
        ]
    if rtype == records.SG:
        return [
            (f"ingress[{i}] from {c}", c, rule)
            for i, rule in enumerate(inputs.get("ingress") or [])
            for c in records.as_list(rule.get("cidrBlocks")) + records.as_list(rule.get("ipv6CidrBlocks"))
        ]
    return []


def _prefix_lists(rtype: str, inputs: dict) -> list[tuple[str, Any, dict]]:
    """(how the source is written, prefix list id, the rule) for every managed prefix list source of an ingress rule."""
    if rtype == records.INGRESS:
        return (
            [(f"prefixListId {inputs['prefixListId']}", inputs["prefixListId"], inputs)]
            if inputs.get("prefixListId")
            else []
        )
    if rtype == records.SG_RULE and inputs.get("type") == "ingress":
        return [(f"ingress from prefix list {p}", p, inputs) for p in records.as_list(inputs.get("prefixListIds"))]
    if rtype == records.SG:
        return [
            (f"ingress[{i}] from prefix list {p}", p, rule)
            for i, rule in enumerate(inputs.get("ingress") or [])
            for p in records.as_list(rule.get("prefixListIds"))
        ]
    return []


def _source_groups(rtype: str, inputs: dict) -> list[tuple[str, str, dict]]:
    """(how the source is written, group, the rule) for every security group source of an ingress rule."""
    if rtype == records.INGRESS:
        g = inputs.get("referencedSecurityGroupId")
        return [(f"referencedSecurityGroupId {g}", str(g), inputs)] if g else []
    if rtype == records.SG_RULE and inputs.get("type") == "ingress":
        g = inputs.get("sourceSecurityGroupId")
        return [(f"ingress from group {g}", str(g), inputs)] if g else []
    if rtype == records.SG:
        return [
            (f"ingress[{i}] from group {g}", str(g), rule)
            for i, rule in enumerate(inputs.get("ingress") or [])
            for g in records.as_list(rule.get("securityGroups"))
        ]
    return []


def prefix_list_entries(resources: list[dict]) -> dict[str, list[Any]]:
    """The CIDRs of every managed prefix list the stack defines, by its id and by its name (inline `entries` and
    separate ManagedPrefixListEntry resources together)."""
    out: dict[str, list[Any]] = {}
    for r in resources:
        if r["type"] == PREFIX_LIST:
            cidrs = [e.get("cidr") for e in r["inputs"].get("entries") or []]
            for key in {r["name"], r["inputs"].get("id")} - {None}:
                out.setdefault(str(key), []).extend(cidrs)
    for r in resources:
        if r["type"] == PREFIX_LIST_ENTRY and str(r["inputs"].get("prefixListId")) in out:
            out[str(r["inputs"]["prefixListId"])].append(r["inputs"].get("cidr"))
    return out


def world_ingress_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    out = []
    for source, group, rule in _source_groups(rtype, inputs):
        if "/" in group:  # <account>/sg-...: a group of another account (a peered VPC's)
            out.append(
                f"{source} admits {_ports(rule)} from a security group of another account, whose members "
                "this stack cannot see; name your own networks"
            )
    for source, cidr, rule in _ingress_sources(rtype, inputs):
        if _network(cidr) is None:
            out.append(
                f"{source} is not an address or network the pack can judge; write it in CIDR form like 203.0.113.0/24"
            )
        elif _is_world(cidr):
            out.append(
                f"{source} opens {_ports(rule)} to the whole internet; name your own network "
                "(or use SSM Session Manager)"
            )
        elif _too_wide(cidr):
            net = _network(cidr)
            out.append(
                f"{source} opens {_ports(rule)} to {net.num_addresses:,} addresses; a group may admit at most "
                f"{MAX_INGRESS_ADDRESSES[net.version]:,} (a {PREFIX_OF_LIMIT[net.version]}) in all: name your "
                "own, narrower networks"
            )
    return out


def _group_of(r: dict) -> Any:
    return r["inputs"].get("id") or r["name"] if r["type"] == records.SG else r["inputs"].get("securityGroupId")


def _vpc_has_ipv6(resources: list[dict]) -> bool | None:
    """Whether some VPC of the stack has IPv6 addresses; None when the stack has no VPC to look at."""
    vpcs = [r for r in resources if r["type"] == records.VPC]
    if not vpcs:
        return None
    return any(r["type"] == records.VPC_IPV6 for r in resources) or any(
        r["inputs"].get("ipv6CidrBlock")
        or records.is_true(r["inputs"].get("assignGeneratedIpv6CidrBlock"))
        or r["inputs"].get("ipv6IpamPoolId")
        for r in vpcs
    )


def world_ingress_graph(resources: list[dict]) -> list[str]:
    """Every group's ingress sources together: 0.0.0.0/1 plus 128.0.0.0/1 is the whole internet in two rules. And no
    IPv6 source while the stack's VPC has no IPv6 (the rule could only be a mistake, or wait for one)."""
    by_group: dict[tuple[Any, int], tuple[list[str], list]] = {}
    out = []
    ipv6 = _vpc_has_ipv6(resources)
    lists = prefix_list_entries(resources)
    for r in resources:
        sources = list(_ingress_sources(r["type"], r["inputs"]))
        for source, pl, rule in _prefix_lists(r["type"], r["inputs"]):
            if str(pl) not in lists:
                out.append(
                    f"{r['name']}: {source} opens {_ports(rule)} to a prefix list this stack does not define, "
                    "whose entries cannot be judged; define the list in the stack or name the networks"
                )
                continue
            sources += [(f"{source} entry {c}", c, rule) for c in lists[str(pl)]]
            out += [
                f"{r['name']}: {source} entry {c!r} is not a network the pack can judge"
                for c in lists[str(pl)]
                if _network(c) is None
            ]
            out += [
                f"{r['name']}: {source} entry {c} opens {_ports(rule)} to the whole internet"
                for c in lists[str(pl)]
                if _is_world(c)
            ]
        for source, cidr, _ in sources:
            net = _network(cidr)
            if net is None or net.prefixlen == 0:
                continue  # unparsable: EC2 refuses it; the world: reported per resource
            names, nets = by_group.setdefault((_group_of(r), net.version), ([], []))
            if r["name"] not in names:
                names.append(r["name"])
            nets.append(net)
            if net.version == 6 and ipv6 is False:
                out.append(
                    f"{r['name']}: {source} is an IPv6 source, but no VPC of the stack has IPv6 "
                    "addresses; remove it, or give the VPC an IPv6 block first"
                )
    for (group, version), (names, nets) in by_group.items():
        total = sum(n.num_addresses for n in ipaddress.collapse_addresses(nets))
        if total > MAX_INGRESS_ADDRESSES[version]:
            out.append(
                f"{names[0]}: group {group}'s ingress rules ({', '.join(names)}) together admit {total:,} IPv{version} "
                f"addresses; at most {MAX_INGRESS_ADDRESSES[version]:,} (a {PREFIX_OF_LIMIT[version]}) in all: "
                "name your own, narrower networks"
            )
    return out


def _primary(nic: dict) -> bool:
    return int(nic.get("networkCardIndex") or 0) == 0 and int(nic.get("deviceIndex") or 0) == 0


def private_compute_resource(rtype: str, inputs: dict, graph: list[dict] | None = None) -> list[str]:
    """Anything not tagged as the head node is held to the compute rule, so a lost tag fails closed."""
    out = []
    if rtype == records.LT and records.role_tag(inputs) != "head":
        nics = inputs.get("networkInterfaces") or []
        for i, nic in enumerate(nics):
            if records.is_true(nic.get("associatePublicIpAddress")):
                out.append(f"networkInterfaces[{i}].associatePublicIpAddress is true: compute nodes get no public IP")
        if not any(_primary(n) and str(n.get("associatePublicIpAddress")).lower() == "false" for n in nics):
            out.append(
                "the primary interface (card 0, device 0) must set associatePublicIpAddress false, "
                "or the subnet's default decides"
            )
    elif (
        rtype == records.INSTANCE
        and records.role_tag(inputs) != "head"
        and records.is_true(inputs.get("associatePublicIpAddress"))
    ):
        out.append("associatePublicIpAddress is true: compute nodes get no public IP")
    elif rtype == records.SUBNET and records.is_true(inputs.get("mapPublicIpOnLaunch")):
        out.append("mapPublicIpOnLaunch is true: nodes launched here would get a public IP; set it false")
    return out


def private_compute_graph(resources: list[dict]) -> list[str]:
    """Under `pulumi up` the stack policy sees outputs: an instance that got a public IP anyway (a subnet default,
    a template edited outside the stack) is caught here. Offline records carry inputs only, so this finds nothing
    there unless a record says publicIp."""
    return [
        f"{r['name']}: has public IP {r['inputs']['publicIp']}; compute nodes get no public IP (launch them in "
        "the private subnet with associatePublicIpAddress false)"
        for r in resources
        if r["type"] == records.INSTANCE and records.role_tag(r["inputs"]) != "head" and r["inputs"].get("publicIp")
    ]


def _self_all_groups(resources: list[dict], direction: str) -> set[str]:
    """Groups with a rule allowing all protocols from (ingress) or to (egress) the group itself."""
    token = records.INGRESS if direction == "ingress" else records.EGRESS
    groups = set()
    for r in resources:
        i = r["inputs"]
        if (
            r["type"] == token
            and str(i.get("ipProtocol")) in ALL_PROTOCOLS
            and i.get("referencedSecurityGroupId")
            and i.get("referencedSecurityGroupId") == i.get("securityGroupId")
        ):
            groups.add(i["securityGroupId"])
        elif (
            r["type"] == records.SG_RULE
            and i.get("type") == direction
            and str(i.get("protocol")) in ALL_PROTOCOLS
            and (records.is_true(i.get("self")) or i.get("sourceSecurityGroupId") == i.get("securityGroupId"))
        ):
            groups.add(i.get("securityGroupId"))
        elif r["type"] == records.SG and i.get("id"):
            for rule in i.get(direction) or []:
                to_itself = records.is_true(rule.get("self")) or i["id"] in records.as_list(rule.get("securityGroups"))
                if str(rule.get("protocol")) in ALL_PROTOCOLS and to_itself:
                    groups.add(i["id"])
    return groups - {None}


def efa_group_graph(resources: list[dict]) -> list[str]:
    groups = _self_all_groups(resources, "ingress") & _self_all_groups(resources, "egress")
    if not groups:
        return [
            "no security group allows all traffic both from and to itself (ingress and egress, protocol -1): "
            "EFA needs both directions, and egress to 0.0.0.0/0 does not cover it"
        ]
    out = []
    for r in resources:
        if r["type"] != records.LT:
            continue
        for i, nic in enumerate(r["inputs"].get("networkInterfaces") or []):
            if not set(records.as_list(nic.get("securityGroups"))) & groups:
                out.append(
                    f"{r['name']}: networkInterfaces[{i}] is not in the self-referencing EFA group "
                    f"({', '.join(sorted(groups))})"
                )
    return out
