"""Host certificates by the cluster's host CA (issue 22 item 4), a key of its own that only the head can read
(`hpcc/<c>/host-ca`), not root's cluster key. Each node publishes its host public keys (its own hostkeys object,
hpcc_node/certstore.py); the head signs them (`ssh-keygen -s CA -h -I <cluster>/<node>/<instance> -n <principals> -V
from:to`, ssh-keygen(1) "CERTIFICATES") for 7 days and re-signs at half-life; each node installs what the head wrote for
it, and its known-hosts file lists one `@cert-authority` line per CA the head says is trusted (two during `hpcc
rotate-keys`).

Principals are what the head knows, never what a node says: the node's name and address from the controller's
membership and EC2's IP-based host name (ip-a-b-c-d), so a node's root cannot get a certificate for another node's
address; the keys are read at the member's own instance's key. The bootstrap runs `python3 -m hpcc_node.certs_boot`
(the ssh step); the agent calls `Certs.tick` (hpcc_node/certs_agent.py) each tick (on the head, that is where the
compute nodes get signed).
Standard library only; ssh-keygen and sshd are run through an injected `run`."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from hpcc_contract.names import Paths, certs_key, hostkeys_key, key_comment
from hpcc_node import certstore as store
from hpcc_node import cluster_keys, hosts, sshkeys
from hpcc_node.aws import Aws, NotFound

VALIDITY = 7 * 86400  # a certificate's life: a copied host key and certificate answer for a node's IP a week at most
# The head's S3 work is its own, not paced as a node's (S3 takes at least 3,500 PUTs and 5,500 GETs a second per
# prefix: S3 User Guide, "Best practices design patterns: optimizing Amazon S3 performance"): PARALLEL requests at
# once, up to BATCH nodes looked up and BATCH signed a tick, so 4,096 booting nodes are signed in one tick.
BATCH = 4096
PARALLEL = 16
SKEW = 300  # valid from 5 min before signing: the nodes' clocks (chrony, Amazon Time Sync) differ by less
KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts.hpcc"  # templates/steps/ssh.sh.j2's HPCC_KNOWN_HOSTS (a test runs both)
Run = sshkeys.Run
T = TypeVar("T")
R = TypeVar("R")


def in_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = PARALLEL) -> List[R]:
    """fn over items, `workers` at a time (the head's S3 requests and ssh-keygen runs wait on I/O), in order."""
    items = list(items)
    if len(items) <= 1 or workers <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, items))


def principals(node: str, ip: str) -> List[str]:
    """The node's name, its address, and EC2's IP-based host name (EC2 User Guide, "Amazon EC2 instance hostname
    types": ip-private-ipv4-address)."""
    return [node, ip, "ip-" + ip.replace(".", "-")]


def due(issued: Optional[store.Issued], ip: str, authority: store.Authority, now: float, instance: str = "") -> bool:
    """Sign again: none yet, another address or instance (a replacement), past half its life, or the CAs changed (a
    rotation's phase)."""
    return (
        issued is None
        or issued.ip != ip
        or (bool(instance) and issued.instance != instance)
        or now >= (issued.valid_from + issued.valid_to) / 2
        or issued.cas != authority.trusted
        or issued.ca != store.fingerprint(authority.signer["public"])
    )


def utc_text(ts: float) -> str:
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(ts))


def sign(
    ca_private: str,
    key: str,
    key_id: str,
    names: Sequence[str],
    valid_from: float,
    valid_to: float,
    run: Run = subprocess.run,
) -> str:
    """A host certificate of KEY (a public key line) by the CA, in a private scratch directory."""
    with tempfile.TemporaryDirectory() as scratch:
        ca = os.path.join(scratch, "ca")
        with open(os.open(ca, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(ca_private.rstrip("\n") + "\n")
        with open(os.path.join(scratch, "key.pub"), "w") as f:
            f.write(store.key_line(key) + "\n")
        sshkeys.checked(
            run,
            [
                "ssh-keygen",
                "-q",
                "-s",
                ca,
                "-h",
                "-I",
                key_id,
                "-n",
                ",".join(names),
                "-V",
                f"{utc_text(valid_from)}:{utc_text(valid_to)}",
                os.path.join(scratch, "key.pub"),
            ],
        )
        with open(os.path.join(scratch, "key-cert.pub")) as f:
            return store.key_line(f.read())


def new_key_pair(run: Run = subprocess.run) -> Dict[str, str]:
    private, public = sshkeys.key_pair("hpcc-host-ca", run)
    return {"private": private, "public": public}


def advance(a: store.Authority, r: Optional[store.Rotation], pair: Callable[[], Dict[str, str]]) -> store.Authority:
    """The CA set after the rotation's phases up to `r` (each once, in order): add a new CA (trusted, not signing),
    switch (the new one signs), retire (the old one is dropped)."""
    if r is None:
        return a
    done = phases_done(a.rotation, r.id)
    for phase in store.PHASES[done + 1 : store.PHASES.index(r.phase) + 1]:
        if phase == "add":
            a = store.Authority([a.signer, pair()], 0, f"{r.id}:add")
        elif phase == "switch":
            a = store.Authority(a.keys, len(a.keys) - 1, f"{r.id}:switch")
        else:
            a = store.Authority([a.signer], 0, f"{r.id}:retire")
    return a


def phases_done(applied: str, rotation_id: str) -> int:
    """The index of the last phase of this rotation applied, -1 for none."""
    rid, _, phase = applied.partition(":")
    return store.PHASES.index(phase) if rid == rotation_id and phase in store.PHASES else -1


# -- the head: signs what the nodes published ------------------------------------------------------------------
class Member(NamedTuple):
    name: str
    ip: str
    instance: str


def members(doc: Optional[Dict[str, Any]]) -> List[Member]:
    """The head, then the listed nodes, of the controller's membership.json (hpcc_node/hosts.py's order); none
    before the controller published one."""
    if not doc:
        return []
    head = doc.get("head") or {}
    out = [Member("head", str(head["ip"]), str(head.get("instance", "")))] if head.get("ip") else []
    return out + [Member(str(n["name"]), str(n["ip"]), str(n.get("instance", ""))) for n in hosts.listed(doc)]


class Head:
    def __init__(self, aws: Aws, s3: Any, bucket: str, cluster: str, arn_prefix: str, run: Run = subprocess.run):
        """arn_prefix: `arn:<partition>:ec2:<region>:<account>:instance/`, a member's instance id completes it."""
        self.aws, self.s3, self.bucket, self.cluster, self.run = aws, s3, bucket, cluster, run
        self.names, self.arn_prefix = Paths(cluster), arn_prefix
        self.issued: Dict[str, Optional[store.Issued]] = {}
        self.authority: Optional[store.Authority] = None
        self.cursor = 0  # where the next window of sign_pending starts
        self.legacy: Optional[Dict[str, str]] = None  # legacy_signer(): a cluster booted before the host CA
        self.moved: List[str] = []  # what the last follow did to the cluster keys (Certs logs it)
        self.parallel: Callable[[Callable[[str], Any], Sequence[str]], List[Any]] = in_parallel

    def read_authority(self) -> store.Authority:
        """The CA set, generated and stored at the first call (the secret is created empty, like the cluster key)."""
        try:
            text = self.aws.call(
                "secretsmanager",
                "get-secret-value",
                "--secret-id",
                self.names.host_ca_secret,
                "--query",
                "SecretString",
                "--output",
                "text",
            )
        except NotFound:
            text = ""
        if text.strip() and text.strip() != "None":
            return store.read_authority(text)
        # A cluster booted before the host CA: its nodes trust root's cluster key as their CA, and those on the old
        # bundle keep only that: it signs on (the new CA trusted beside it) until `hpcc rotate-keys` retires it.
        a = store.Authority(
            [self.legacy, new_key_pair(self.run)] if self.legacy else [new_key_pair(self.run)],
            0,
            "legacy" if self.legacy else "",
        )
        self.put_authority(a)
        return a

    def put_authority(self, a: store.Authority) -> None:
        """Through a scratch file only root reads (the CLI's `file://`), never the command line: any local user
        reads every process's argv in /proc/<pid>/cmdline."""
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "host-ca")
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(store.authority_text(a))
            self.aws.call(
                "secretsmanager",
                "put-secret-value",
                "--secret-id",
                self.names.host_ca_secret,
                "--secret-string",
                f"file://{path}",
            )

    def follow(self, rotation: Optional[store.Rotation]) -> store.Authority:
        """The CA set, moved on to the rotation's phase (stored before anything is signed with it), after the
        cluster keys' labels (hpcc_node/cluster_keys.py: each step safe to repeat, should the head stop between)."""
        a = self.authority or self.read_authority()
        moved = advance(a, rotation, lambda: new_key_pair(self.run))
        if moved != a:
            if rotation:
                for phase in store.PHASES[
                    phases_done(a.rotation, rotation.id) + 1 : store.PHASES.index(rotation.phase) + 1
                ]:
                    self.moved += [
                        did
                        for secret in (self.names.ssh_secret, self.names.user_secret)
                        if (
                            did := cluster_keys.advance(
                                self.aws, secret, phase, rotation.id, key_comment(self.cluster), self.run
                            )
                        )
                    ]
            self.put_authority(moved)
        self.authority = moved
        return moved

    def sign_pending(self, nodes: Sequence[Member], now: float, rotation: Optional[store.Rotation] = None) -> List[str]:
        """Sign each member whose certificate is due and whose published keys (at its own instance's key) are for its
        address in the membership; returns the nodes signed. At most BATCH looked up and BATCH signed a tick."""
        a = self.follow(rotation)
        by_name = {m.name: m for m in nodes if m.instance}
        lookup = [n for n in by_name if n not in self.issued][:BATCH]
        found = self.parallel(lambda n: store.read_issued(store.get(self.s3, self.bucket, certs_key(n))[0]), lookup)
        self.issued.update(zip(lookup, found))
        pending = [
            n for n in by_name if n in self.issued and due(self.issued[n], by_name[n].ip, a, now, by_name[n].instance)
        ][:BATCH]
        # Up to 10 others a tick, in turn: a node whose keys changed at the same address (a replacement that got
        # its predecessor's IP, under its own instance's key) is signed again.
        others = [n for n in by_name if n in self.issued and n not in pending]
        window = (others[self.cursor % len(others) :] + others[: self.cursor % len(others)])[:10] if others else []
        self.cursor += len(window)
        signed = self.parallel(lambda n: self._sign(n, by_name[n], a, now, n in window), pending + window)
        return [n for n in signed if n]

    def _sign(self, n: str, m: Member, a: store.Authority, now: float, renewal: bool) -> str:
        """Sign `n` from the keys it published at its own instance's key; "" when there is nothing to sign."""
        key = hostkeys_key(self.arn_prefix + m.instance)
        p = store.read_published(store.get(self.s3, self.bucket, key)[0])
        if p is None or p.ip != m.ip or not p.keys:
            return ""  # not published yet, or published for another address
        held = self.issued.get(n)
        if renewal and held is not None and set(p.keys) <= {store.certified_key(c) for c in held.certs}:
            return ""  # a window node's keys are the ones certified: nothing to do (one with none is signed)
        start, end = now - SKEW, now - SKEW + VALIDITY
        key_id = f"{self.cluster}/{n}/{m.instance}"
        certs = [sign(a.signer["private"], k, key_id, principals(n, m.ip), start, end, self.run) for k in p.keys]
        issued = store.Issued(
            m.ip, certs, a.trusted, store.fingerprint(a.signer["public"]), int(start), int(end), m.instance, a.rotation
        )
        store.put(self.s3, self.bucket, certs_key(n), store.issue_text(issued))
        self.issued[n] = issued  # one key per thread: no two threads sign the same node
        return n


def legacy_signer(known_hosts: str = KNOWN_HOSTS, key: str = "/root/.ssh/id_hpcc") -> Optional[Dict[str, str]]:
    """Root's cluster key as a CA pair, when this node's known-hosts file trusts it (its bootstrap predates the
    host CA, which ssh.sh.j2 now writes before the agent runs), else None."""
    public = sshkeys.read_text(key + ".pub")
    if not public or f"@cert-authority * {store.key_line(public)}" not in _lines(known_hosts):
        return None
    return {"private": sshkeys.read_text(key), "public": store.key_line(public)}


# -- every node: publishes its host keys, installs its certificates and the CAs ---------------------------------
class Node:
    def __init__(
        self,
        s3: Any,
        bucket: str,
        cluster: str,
        node: str,
        ip: str,
        arn: str,
        run: Run = subprocess.run,
        known_hosts: str = KNOWN_HOSTS,
        sshd: str = "sshd",
    ):
        """arn: this instance's ARN, the key it publishes at (the only one its role may write)."""
        self.s3, self.bucket, self.names, self.node, self.ip, self.run = s3, bucket, Paths(cluster), node, ip, run
        self.arn, self.instance = arn, arn.rsplit("/", 1)[-1]
        self.known_hosts, self.sshd = known_hosts, sshd
        self.published: Optional[str] = None
        self.login: Tuple[str, Dict[str, int]] = ("", {})  # the cluster keys applied: phase, user -> keys authorized
        self.etag = ""  # of certs/<node>.json as last read
        self.issued: Optional[store.Issued] = None

    def host_keys(self) -> List[Tuple[str, str]]:
        """(private key path, public key line) of each host key sshd serves (`sshd -T`'s HostKey lines)."""
        out = []
        for line in sshkeys.checked(self.run, [self.sshd, "-T"]).splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "hostkey" and os.path.isfile(parts[1] + ".pub"):
                with open(parts[1] + ".pub") as f:
                    out.append((parts[1], store.key_line(f.read())))
        return out

    def publish(self) -> None:
        """Its host keys and what it applied, written when that changed (its own parameter only)."""
        trust = [
            store.fingerprint(line.split(" ", 2)[2])
            for line in _lines(self.known_hosts)
            if line.startswith("@cert-authority ")
        ]
        served = [sshkeys.read_text(path + "-cert.pub") for path, _ in self.host_keys()]
        text = store.publish_text(
            store.Published(
                self.ip,
                [k for _, k in self.host_keys()],
                trust,
                next((self.signer_of(c) for c in served if c), ""),
                self.instance,
                *self.login,
            )
        )
        if text != self.published:
            store.put(self.s3, self.bucket, hostkeys_key(self.arn), text)
            self.published = text

    def fetch(self) -> Optional[store.Issued]:
        """What the head wrote for this node (a conditional GET: unchanged costs a 304)."""
        text, self.etag = store.get(self.s3, self.bucket, certs_key(self.node), self.etag)
        if text is not None or not self.etag:
            self.issued = store.read_issued(text)
        return self.issued

    def signer_of(self, cert: str) -> str:
        """The fingerprint of the CA that signed a certificate (ssh-keygen -L's "Signing CA")."""
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "c-cert.pub")
            with open(path, "w") as f:
                f.write(cert + "\n")
            for line in sshkeys.checked(self.run, ["ssh-keygen", "-L", "-f", path]).splitlines():
                if line.strip().startswith("Signing CA:"):
                    return line.split()[3]
        return ""

    def install(self, issued: store.Issued) -> Tuple[List[str], bool]:
        """The certificates for its own host keys and the CA lines: (the certificate paths, whether a certificate
        changed, so sshd must reload). A certificate for a key it does not serve is passed over."""
        by_key = {}
        for cert in issued.certs:
            try:
                by_key[store.certified_key(cert)] = cert
            except ValueError:
                continue
        paths, changed = [], False
        for path, key in self.host_keys():
            cert = by_key.get(key)
            if cert is None:
                continue
            if sshkeys.read_text(path + "-cert.pub") != cert:
                sshkeys.replace_file(path + "-cert.pub", cert + "\n")
                changed = True
            paths.append(path + "-cert.pub")
        lines = ["# hpcc: a node is who the cluster's host CA certified (principals: name, ip, ip-a-b-c-d)"]
        lines += [f"@cert-authority * {ca}" for ca in issued.cas]
        if _lines(self.known_hosts) != lines:
            sshkeys.replace_file(self.known_hosts, "\n".join(lines) + "\n")
        return paths, changed


def _lines(path: str) -> List[str]:
    return sshkeys.read_text(path).splitlines()
