"""`hpcc check fabric`: every compute node's link measured without N x N work (the plan: hpcc_node/health/fabric.py,
rounds of disjoint pairs, suspects bisected against a known-good node, a floor relative to the group's median),
run over SSH from the head, which reaches every node by name with the cluster key.

One pair is libfabric's own `fi_pingpong` (shipped with the EFA installer and Debian's libfabric-bin): a server on
the second node, the client on the first, `-e rdm` with `-p efa` on EFA nodes (`-p tcp` elsewhere), one large
transfer size; its `MB/sec` column (bytes per microsecond) is the pair's bandwidth. A round's pairs run at once
(disjoint: no node serves two). The output is one `PAIR a b MB/sec` line per pair, or `PAIR a b FAIL`.

Then one ring all-reduce per group of two nodes or more (hpcc_node/jobs/allreduce.py, from the bundle on every
node): torchrun on each node with a static rank, NCCL on GPUs (one rank a GPU), gloo on CPU (one rank a node). The
launcher is the head's torchrun (`--torchrun`, as hpcc-torchrun picks it: the same image on every node). The output
is one `NODE name exit-code last-line` line per node and rank 0's `ALLREDUCE ...` line.
"""

from __future__ import annotations

import ipaddress
import random
import re
import shlex
import subprocess
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from hpcc_contract.hosts import NODE_NAME
from hpcc_contract.names import HEAD, TAG_NODE, TAG_ROLE
from hpcc_node.health.fabric import Collective, FabricReport, Floor, Pair, check_fabric
from infra.ops.aws import tag_dict
from infra.ops.status.cluster import head_instance
from infra.ops.store import cluster_instances

# The check's ports sit below Linux's ephemeral range (32768-60999 by default, net.ipv4.ip_local_port_range:
# https://docs.kernel.org/networking/ip-sysctl.html), where any outbound connection of the node may hold a port a
# listener then cannot bind, and away from torchrun's defaults (29400, 29500) that a user's job listens on.
ALLREDUCE_PORT = 30000  # torchrun's rendezvous on the group's first node
PORT_BASE = 30100  # fi_pingpong's control ports: one per pair of a round, up to MAX_NODES / 2 of them
SIZE = 1 << 22  # 4 MiB transfers: past the small-message regime, where a link's bandwidth shows
ITERATIONS = 100
PAIR_TIMEOUT_S = 120
ALLREDUCE = "/opt/hpcc/current/hpcc_node/jobs/allreduce.py"  # the bundle's copy, on every node
ALLREDUCE_BYTES = 16 << 20
ALLREDUCE_TIMEOUT_S = 300
ALLREDUCE_JOIN_TIMEOUT_S = 120  # a node whose group's first node died gives up then, named, instead of waiting it out
_ALLREDUCE = re.compile(r"^ALLREDUCE ranks=(\d+) bytes=\d+ algbw=[0-9.]+ busbw=([0-9.]+)$")
_NODE = re.compile(r"^(?P<group>[a-z][a-z0-9]{0,11})-[0-9]{3,4}$")

RunOnHead = Callable[[str], str]  # a bash script run on the head -> its stdout


def name_problem(name: str) -> str:
    """Why a node name may not reach a script ("" when it may): a compute node's name as the controller gives it
    (hpcc_contract/hosts.py NODE_NAME, not the head). The names come from the instances' `hpcc:node` tags, which
    anyone allowed to tag an instance can write."""
    if name != "head" and re.fullmatch(NODE_NAME, name):
        return ""
    return f"its hpcc:node tag {name[:40]!r} is not a compute node's name (<group>-NNN)"


def address_problem(ip: str) -> str:
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        return f"its private address {ip[:40]!r} is not an IPv4 address"
    return ""


def _q(value: object) -> str:
    """Every value a script interpolates, quoted for bash (shlex.quote)."""
    return shlex.quote(str(value))


def _checked(names: Sequence[str], ips: Mapping[str, str]) -> None:
    """The scripts' own guard: a name or address that cluster_nodes would have skipped never reaches bash."""
    for n in names:
        problem = name_problem(n) or address_problem(ips[n])
        if problem:
            raise ValueError(f"refusing to script node {n[:40]!r}: {problem}")


def command_words(command: str) -> str:
    """An operator's command (`--torchrun`, e.g. `python -m torch.distributed.run`) as quoted words."""
    return " ".join(_q(w) for w in shlex.split(command))


def group_of(name: str) -> str:
    m = _NODE.match(name)
    return m.group("group") if m else "compute"


def groups(nodes: Mapping[str, str]) -> dict[str, list[str]]:
    """Node names by group (`<group>-NNN`, contract of issue 19)."""
    out: dict[str, list[str]] = defaultdict(list)
    for name in sorted(nodes):
        out[group_of(name)].append(name)
    return dict(out)


def pair_script(
    pairs: Sequence[Pair],
    ips: Mapping[str, str],
    provider: str,
    size: int = SIZE,
    iterations: int = ITERATIONS,
    ssh: str = "ssh -o BatchMode=yes",
) -> str:
    """The bash script the head runs for one round: every pair at once, one PAIR line each. Nodes are reached by
    address: node names do not resolve on the head (no DNS or /etc/hosts entry for them), and the cluster's ssh
    config trusts the nodes' addresses (templates/steps/ssh.sh.j2)."""
    _checked([n for p in pairs for n in p], ips)
    opts = f"-p {_q(provider)} -e rdm -I {int(iterations)} -S {int(size)}"
    lines = ["set -u"]
    for i, (a, b) in enumerate(pairs):
        port = PORT_BASE + i
        server = f"timeout {PAIR_TIMEOUT_S} fi_pingpong {opts} -B {port}"
        client = f"timeout {PAIR_TIMEOUT_S} fi_pingpong {opts} -P {port} {_q(ips[b])}"
        lines.append(
            f"( {ssh} {_q(ips[b])} {_q(server)} >/dev/null 2>&1 & srv=$!; sleep 2; "
            f"out=$({ssh} {_q(ips[a])} {_q(client)} 2>&1); "
            f"rate=$(printf '%s\\n' \"$out\" | awk '$1 != \"bytes\" && NF >= 8 {{print $6; exit}}'); "
            f"printf 'PAIR %s %s %s\\n' {_q(a)} {_q(b)} \"${{rate:-FAIL}}\"; wait $srv 2>/dev/null ) &"
        )
    lines.append("wait")
    return "\n".join(lines) + "\n"


def parse_round(out: str, pairs: Sequence[Pair]) -> dict[Pair, float | None]:
    """GB/s per pair (fi_pingpong's MB/sec / 1000); None for a pair that failed or printed nothing."""
    got: dict[Pair, float | None] = {p: None for p in pairs}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "PAIR":
            key = (parts[1], parts[2]) if (parts[1], parts[2]) in got else (parts[2], parts[1])
            if key in got:
                try:
                    got[key] = float(parts[3]) / 1000
                except ValueError:
                    got[key] = None
    return got


def allreduce_script(
    names: Sequence[str],
    ips: Mapping[str, str],
    torchrun: str,
    procs: int | None = None,
    nbytes: int = ALLREDUCE_BYTES,
    ssh: str = "ssh -o BatchMode=yes",
    script: str = ALLREDUCE,
    join_timeout: int = ALLREDUCE_JOIN_TIMEOUT_S,
    port: int = ALLREDUCE_PORT,
) -> str:
    """The bash script the head runs for one group's all-reduce: torchrun on every node at once, NODE_RANK its
    place in `names`. `procs` ranks a node, or (None) one a GPU and one on a node without GPUs. The static
    rendezvous' store, on `port` of the first node, gives up after `join_timeout` (torchrun's
    `--rdzv-conf timeout=`)."""
    _checked(names, ips)
    count = (
        str(int(procs)) if procs else '$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c .)'
    )
    lines = ["set -u"]
    for rank, name in enumerate(names):
        remote = (
            f"set -a; . /etc/hpcc/env; set +a; procs={count}; [ \"$procs\" -gt 0 ] || procs=1; "
            f"exec timeout {ALLREDUCE_TIMEOUT_S} {command_words(torchrun)} --nnodes {len(names)} "
            f"--node-rank {rank} --master-addr {_q(ips[names[0]])} --master-port {int(port)} "
            f"--rdzv-conf timeout={int(join_timeout)} --nproc-per-node \"$procs\" {_q(script)} "
            f"--bytes {int(nbytes)}"
        )
        lines.append(
            f"( out=$({ssh} {_q(ips[name])} {_q(remote)} </dev/null 2>&1); rc=$?; "
            f"why=$(printf '%s\\n' \"$out\" | grep -m1 '^ALLREDUCE-WRONG' || printf '%s\\n' \"$out\" | "
            f"grep -E {_q(EXCEPTION_LINE)} | tail -n 1); "
            f"[ -n \"$why\" ] || why=$(printf '%s\\n' \"$out\" | grep -v '^ALLREDUCE ' | "
            f"grep -v -E {_q(BANNER_LINE)} | tail -n 1); "
            f"printf 'NODE %s %s %s\\n' {_q(name)} \"$rc\" \"${{why:0:300}}\"; "
            f"printf '%s\\n' \"$out\" | grep '^ALLREDUCE ' ) &"
        )
    lines.append("wait")
    return "\n".join(lines) + "\n"


# A node's "why": its last Python exception line (a traceback's last line names the error), else its last line that
# is not torchrun's error summary banner (`=====`, `-----`: torch.distributed.elastic's ChildFailedError block).
EXCEPTION_LINE = r"^[A-Za-z_][A-Za-z0-9_.]*(Error|Exception|Timeout)[A-Za-z]*: "
BANNER_LINE = r"^[[:space:]=-]*$"


def parse_allreduce(out: str, group: str, names: Sequence[str]) -> Collective:
    """The group's result: ok with rank 0's bus bandwidth; failed naming every node whose part exited non-zero
    (a node that never printed its line counts as failed) and the first one's last line."""
    exits: dict[str, tuple[int, str]] = {}
    busbw, ranks = None, 0
    for line in out.splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[0] == "NODE" and parts[1] in names and parts[2].lstrip("-").isdigit():
            exits[parts[1]] = (int(parts[2]), parts[3].strip() if len(parts) > 3 else "")
        m = _ALLREDUCE.match(line.strip())
        if m:
            ranks, busbw = int(m.group(1)), float(m.group(2))
    failed = tuple(n for n in names if exits.get(n, (1, ""))[0] != 0)
    if failed:
        code, last = exits.get(failed[0], (None, "no result"))
        why = f"{failed[0]}: exit {code}: {last}" if code is not None else f"{failed[0]}: no result"
        return Collective(group, "failed", ranks, None, failed, why)
    if busbw is None:
        return Collective(group, "failed", 0, None, (), "every node exited 0 but rank 0 printed no ALLREDUCE line")
    return Collective(group, "ok", ranks, busbw)


def run_allreduce(
    group: str,
    names: Sequence[str],
    ips: Mapping[str, str],
    run_on_head: RunOnHead,
    torchrun: str | None,
    procs: int | None = None,
) -> Collective:
    if len(names) < 2:
        return Collective(group, "not run", why="one node: no ring")
    if not torchrun:
        return Collective(
            group,
            "not run",
            why="no torchrun on the head (give --torchrun, the command that runs "
            "torchrun on every node, or --no-allreduce)",
        )
    return parse_allreduce(run_on_head(allreduce_script(names, ips, torchrun, procs)), group, names)


def check(
    nodes: Mapping[str, str],
    run_on_head: RunOnHead,
    provider: str,
    rounds: int,
    floor: Floor,
    rng: random.Random,
    log: Callable[[str], None] = lambda line: None,
    allreduce: bool = False,
    torchrun: str | None = None,
    procs: int | None = None,
) -> tuple[FabricReport, list]:
    """Every group's nodes measured, then (allreduce) each group's ring; returns the report and every measured
    pair (group, a, b, GB/s)."""
    measured: list = []

    def measure(pairs: list[Pair]) -> dict[Pair, float | None]:
        got = parse_round(run_on_head(pair_script(pairs, nodes, provider)), pairs)
        for (a, b), gbps in sorted(got.items()):
            measured.append((group_of(a), a, b, gbps))
            log(f"{a} <-> {b}: {'failed' if gbps is None else f'{gbps:.2f} GB/s'}")
        return got

    by_group = groups(nodes)
    report = check_fabric(by_group, measure, rng, rounds, floor)
    for group, names in sorted(by_group.items()) if allreduce else ():
        c = run_allreduce(group, names, nodes, run_on_head, torchrun, procs)
        log(
            f"{group} all-reduce over {len(names)} node(s): "
            + (f"{c.busbw:.2f} GB/s bus bandwidth, {c.ranks} ranks" if c.status == "ok" else f"{c.status}: {c.why}")
        )
        report.collectives.append(c)
    return report, measured


def find_torchrun(run_on_head: RunOnHead) -> str | None:
    """torchrun on the head's PATH, by its full path (ssh gives the nodes sshd's default PATH); None if absent."""
    found = run_on_head("command -v torchrun || true\n").strip()
    return shlex.quote(found) if found else None


def ssh_runner(via: Sequence[str], timeout_s: float = 30 * 60) -> RunOnHead:
    """`via` is the command that reaches the head (e.g. ssh ubuntu@203.0.113.7); the script goes on stdin."""

    def run(script: str) -> str:
        out = subprocess.run([*via, "bash", "-s"], input=script, capture_output=True, text=True, timeout=timeout_s)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(via)} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
        return out.stdout

    return run


def rows(report: FabricReport, measured: list) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(the pairs' table: group, pair, GB/s; the verdicts: node, group, GB/s, why)."""
    pairs = [(g, f"{a} <-> {b}", "failed" if v is None else f"{v:.2f}") for g, a, b, v in measured]
    found = [
        (f.node, f.group, "-" if f.gbps is None else f"{f.gbps:.2f}", f.why) for f in report.slow + report.unmeasured
    ]
    return pairs, found


def cluster_nodes(aws, cluster: str) -> tuple[dict[str, str], str | None, list[str]]:
    """(compute node -> private IP, the head's address: public if it has one, the instances skipped and why), from
    the cluster's running instances and their tags (hpcc:role, hpcc:node). An instance whose name tag is not a
    compute node's name, or whose address is not IPv4, is skipped and reported: its tag is anyone's who may tag
    it, and the name goes into the scripts run on the head."""
    live = [i for i in cluster_instances(aws, cluster) if i.get("State", {}).get("Name") == "running"]
    nodes: dict[str, str] = {}
    skipped: list[str] = []
    for i in live:
        tags = tag_dict(i.get("Tags"))
        if tags.get(TAG_ROLE) != HEAD and tags.get(TAG_NODE) and i.get("PrivateIpAddress"):
            name, ip = str(tags[TAG_NODE]), str(i["PrivateIpAddress"])
            problem = name_problem(name) or address_problem(ip)
            if problem:
                skipped.append(f"{i['InstanceId']}: {problem}")
            else:
                nodes[name] = ip
    head = head_instance(live)  # the one rule for which instance is the head (status.py)
    return nodes, (head.get("PublicIpAddress") or head.get("PrivateIpAddress")) if head else None, sorted(skipped)
