"""The head node's agent as far as the cluster's scale depends on it: each tick it reads the membership and the
rotation parameter and signs host certificates with the real `hpcc_node.certs.Head.sign_pending`. Its SSM and
Secrets Manager calls go through the head's one pacer (`hpcc_node.aws.pace_wait_ms` at the cluster's interval,
infra/render/pacing.py); its S3 client is the agent's unpaced one (hpcc_node/agent.py passes `agent.s3`), and
sign_pending's `parallel` (certs.in_parallel: certs.PARALLEL at once, a thread pool) runs on worker actors of the
virtual clock (kernel.Sim.parallel), certs.PARALLEL read at each call. Its S3 calls cost what the real head agent's
signer client costs (signer_kind: hpcc_node/certs_agent.py signer_s3 asked, with boto3 in the head agent's Python
when templates/steps/ runs it under the controller's, HEAD_BOTO3): an in-process call's latency, or one `aws` CLI
process's; its SSM and Secrets Manager calls are the agent's CLI's. Only ssh-keygen is replaced: it
writes a well-formed certificate line for the key, so the real code parses what it signed. Not modelled: the
head's heartbeat thread and its Slurm watch (they share the pacer, which signing no longer waits on)."""

from __future__ import annotations

import base64
import functools
import inspect
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpcc_contract.names import MEMBERSHIP_KEY, Paths
from hpcc_node import agent, certs, certs_agent
from hpcc_node import certstore as store
from hpcc_node.agent import tick_seconds
from hpcc_node.aws import Aws, pace_wait_ms
from hpcc_node.controller import membership

from .kernel import Sim

STEPS_DIR = Path(__file__).resolve().parents[2] / "templates" / "steps"


def _head_boto3() -> bool:
    """The head's agent runs under the controller's Python (controller.sh.j2 sets HPCC_AGENT_PYTHON, sync.sh.j2
    starts the agent with it), which has boto3, and its main gives the signer signer_s3's client. Either reverted:
    the image's python3 (no boto3) or the agent's own CLI client."""
    controller = (STEPS_DIR / "controller.sh.j2").read_text()
    sync = (STEPS_DIR / "sync.sh.j2").read_text()
    return (
        "HPCC_AGENT_PYTHON=$python" in controller
        and "$HPCC_AGENT_PYTHON -m hpcc_node.agent" in sync
        and "signer_s3(" in inspect.getsource(agent.main)
    )


HEAD_BOTO3 = _head_boto3()


@functools.cache
def signer_kind(boto3: bool) -> str:
    """What the real signer_s3 gives the head's signer, "boto3" or "cli", with boto3 in its Python or without
    (HPCC_AWS_CLIENTS=cli stands for a Python without it: the same branch)."""
    env = {"AWS_DEFAULT_REGION": "us-east-1"} if boto3 else {"HPCC_AWS_CLIENTS": "cli"}
    return certs_agent.signer_s3("head", None, env, lambda _: None)[1]


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def host_key(n: int) -> str:
    """A node's Ed25519 host public key line (32 bytes from its number)."""
    raw = n.to_bytes(32, "big")
    return "ssh-ed25519 " + base64.b64encode(_string(b"ssh-ed25519") + _string(raw)).decode()


def certificate_of(key: str) -> str:
    """A certificate line of `key` in OpenSSH's layout (type, nonce, the key's fields, then the rest)."""
    raw = base64.b64decode(key.split()[1])
    field = raw[4 + len(b"ssh-ed25519") :]
    kind = b"ssh-ed25519-cert-v01@openssh.com"
    blob = _string(kind) + _string(b"\0" * 32) + field + _string(b"signature")
    return kind.decode() + " " + base64.b64encode(blob).decode()


def fake_keygen(argv: list[str], **_: Any) -> subprocess.CompletedProcess:
    """ssh-keygen -s CA ... key.pub: writes key-cert.pub beside it (no time passes: signing is local)."""
    pub = argv[-1]
    with open(pub) as f:
        key = f.read().strip()
    with open(pub[: -len(".pub")] + "-cert.pub", "w") as f:
        f.write(certificate_of(key) + "\n")
    return subprocess.CompletedProcess(argv, 0, "", "")


class Pacer:
    """One node's pacer file under flock: callers take turns, each turn `pace_wait_ms` after the last."""

    def __init__(self, interval_ms: int, rand: Callable[[], float]):
        self.interval_ms, self.rand = interval_ms, rand
        self.last_ms = 0
        self.free_at = 0.0

    def reserve(self, now: float) -> float:
        """Seconds from `now` until this caller's call goes out."""
        start = max(now, self.free_at)
        wait = pace_wait_ms(self.last_ms, int(start * 1000), self.interval_ms, self.rand()) / 1000
        self.free_at = start + wait
        self.last_ms = int(self.free_at * 1000)
        return self.free_at - now


class SimAws(Aws):
    """The real caller (retries, backoff, get_parameters) with the pacer file kept in memory."""

    def __init__(self, sim: Sim, pacer: Pacer, run: Callable[..., Any]):
        super().__init__(pacer.interval_ms, run=run, clock=sim.now, sleep=sim.sleep, rand=pacer.rand)
        self.sim, self.pacer = sim, pacer

    def pace(self) -> None:
        self.sim.sleep(self.pacer.reserve(self.sim.now()))


class Paced:
    """A boto3-shaped S3 client whose calls wait for the pacer (`before`, None: not paced), then one call's latency;
    `calls` counts the signing's (every call but the membership's read)."""

    def __init__(self, sim: Sim, client: Any, before: Callable[[], None] | None, latency: Callable[[], float]):
        self.sim, self.client, self.before, self.latency = sim, client, before, latency
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.client, name)

        def call(**params: Any) -> Any:
            if self.before is not None:
                self.before()
            self.sim.sleep(self.latency())
            self.calls += not str(params.get("Key")).startswith(("membership", MEMBERSHIP_KEY))
            return found(**params)

        return call


def signer(
    sim: Sim,
    bucket: Any,
    bucket_name: str,
    cluster: str,
    arn_prefix: str,
    pacer: Pacer,
    sync_seconds: int,
    latency: Callable[[], float],
    head_ip: str,
    errors: list[str],
    paced_s3: bool = False,
    s3_latency: Callable[[], float] | None = None,
) -> tuple[Callable[[], None], certs.Head]:
    """The head agent's loop (an actor's body: tick, read the membership, sign what is due) and its Head; a tick
    cut short by an error appends it to `errors`. `paced_s3`: its S3 calls wait for its pacer, as before issue 38
    (for a check that the figures follow that fix). `latency`: a call of the agent's CLI (the membership's read,
    SSM); `s3_latency`: one of the signer's S3 client (hpcc_node/agent.py gives it signer_s3's; default `latency`)."""

    def cli(argv: list[str], **_: Any) -> subprocess.CompletedProcess:
        sim.sleep(latency())
        return subprocess.CompletedProcess(argv, 0, '{"Parameters": []}', "")

    aws = SimAws(sim, pacer, cli)
    agent_s3 = Paced(sim, bucket, aws.pace if paced_s3 else None, latency)  # the agent's own: the membership
    s3 = Paced(sim, bucket, aws.pace if paced_s3 else None, s3_latency or latency)
    head = certs.Head(aws, s3, bucket_name, cluster, arn_prefix, run=fake_keygen)
    head.parallel = lambda fn, items: sim.parallel(fn, items, certs.PARALLEL)
    ca = host_key(0)
    head.authority = store.Authority([{"private": "simulated", "public": ca}], 0, "")
    rotation = Paths(cluster).rotation

    def loop() -> None:
        doc, etag = None, ""
        while True:
            sim.sleep(tick_seconds(sync_seconds, pacer.rand()))
            try:  # as the agent's tick and Certs.tick: an error is logged and the next tick tries again
                read, etag = membership.follow(agent_s3, bucket_name, doc, etag)
                doc = read or doc
                aws.get_parameters([rotation])
                head.sign_pending(certs.members(doc) or [certs.Member("head", head_ip, "")], sim.now())
            except Exception as e:  # noqa: BLE001 - counted: the table reports the ticks it cut short
                errors.append(f"{type(e).__name__}: {e}")

    return loop, head


def seeded_issue(name: str, ip: str, instance: str, now: float) -> str:
    """certs/<node>.json as the head would have written it for a node of a settled cluster."""
    ca = host_key(0)
    return store.issue_text(
        store.Issued(
            ip,
            [certificate_of(host_key(int(instance[2:], 16) + 1))],
            [ca],
            store.fingerprint(ca),
            int(now - certs.SKEW),
            int(now - certs.SKEW + certs.VALIDITY),
            instance,
            "",
        )
    )


def published(ip: str, instance: str) -> str:
    """hostkeys/<arn>.json as a node publishes it (its one host key)."""
    return store.publish_text(store.Published(ip, [host_key(int(instance[2:], 16) + 1)], [], "", instance))
