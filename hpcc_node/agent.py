"""The node agent: `python3 -m hpcc_node.agent` (PYTHONPATH=/opt/hpcc/current), one per node, started by the
bootstrap's sync step (templates/steps/sync.sh.j2). It keeps the node on the cluster's membership and settings,
follows Slurm on the head, and moves the node to the bundle the pointer names (hpcc_node/agent_bundle.py).

Each tick (the settings' SYNC_SECONDS plus up to a quarter of it of jitter): ONE HeadObject of the state
bucket's membership.json, and on a change its deltas or the object itself (hpcc_node/controller/membership.py
poll), which carries the bundle pointer and the settings' sha256; ONE paced GetParameters of the settings only
when that sha256 changed (every tick when the membership carries none); plus the canaries' statuses while a
rollout is on. A newer membership generation (or a lower one whose bytes are the controller's: a reset of its
count) or changed settings are applied by the role script's `apply-membership` with the hosts text
hpcc_node/hosts.py renders (the one writer of the membership files: hostfiles, env, SSH config, Slurm;
hpcc_node/agent_membership.py); nothing is restarted, so running jobs do not notice. One status write per
change, to status/<instance ARN>.json. An error is logged and retried next tick; the agent never fails its node.

`--self-check`: what a new bundle's agent runs before the node switches to it (exit 0: it can run here)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from hpcc_contract.metrics import TEXTFILE_DIR
from hpcc_contract.names import STATUS_PREFIX
from hpcc_contract.settings import SettingsError
from hpcc_contract.version import AGENT_VERSION
from hpcc_node import certs_agent as host_certs
from hpcc_node import cluster_keys, rollout, s3rest, slurm, state, status, upgrade
from hpcc_node.agent_bundle import BundleFollowing
from hpcc_node.agent_dcgm import DcgmFollowing
from hpcc_node.agent_evict import ImageCacheEvicting
from hpcc_node.agent_image_service import ImagesServing
from hpcc_node.agent_images import ImagesFollowing
from hpcc_node.agent_membership import MembershipFollowing, membership_due
from hpcc_node.agent_metrics import MetricsFollowing
from hpcc_node.agent_status import StatusReporting
from hpcc_node.aws import Aws, AwsError
from hpcc_node.controller import membership
from hpcc_node.health import service as health
from hpcc_node.metrics import textfile_dir
from hpcc_node.settings import Settings, pacing, parse


class Config(NamedTuple):
    """What the sync step gives the agent (/etc/hpcc/agent.env), and where the node keeps its files."""

    role: str
    state_bucket: str  # membership.json and the statuses (identify.sh.j2's state_bucket)
    status_key: str  # status/<this instance's ARN>.json
    settings_parameter: str
    bundle_parameter: str
    vpc_cidr: str = "10.0.0.0/16"  # every hosts address lies in it (infra/facts/subnets.py VPC_CIDR)
    etc: str = "/etc/hpcc"
    run: str = "/run"
    opt: str = upgrade.OPT
    log: str = "/var/log/hpcc-bootstrap.log"
    heartbeat_seconds: int = status.HEARTBEAT_SECONDS
    metrics: str = (
        TEXTFILE_DIR  # node_exporter's textfile directory: the agent's and the health thread's series ("": none)
    )

    @classmethod
    def from_env(cls, env: Dict[str, str]) -> Config:
        return cls(
            env["HPCC_ROLE"],
            env["HPCC_STATE_BUCKET"],
            env["HPCC_STATUS_KEY"],
            env["HPCC_SETTINGS_PARAMETER"],
            env["HPCC_BUNDLE_PARAMETER"],
            vpc_cidr=env.get("HPCC_VPC_CIDR", cls._field_defaults["vpc_cidr"]),
            etc=env.get("HPCC_ETC", cls._field_defaults["etc"]),
            log=env.get("HPCC_LOG", cls._field_defaults["log"]),
            heartbeat_seconds=status.heartbeat_seconds(env.get("HPCC_HEARTBEAT_SECONDS", "")),
            metrics=textfile_dir(env),
        )

    def path(self, name: str) -> str:
        return os.path.join(self.etc, name)


def arn_prefix(status_key: str) -> str:
    """status/arn:<partition>:ec2:<region>:<account>:instance/ of this node's own key: every node's ARN but its id."""
    return status_key[len(STATUS_PREFIX) :].rsplit("/", 1)[0] + "/"


def tick_seconds(sync_seconds: int, rand: float) -> float:
    return sync_seconds + rand * (sync_seconds / 4)


def self_check(config: Config, here: str) -> None:
    """Raise if this bundle's agent cannot run on this node: its manifest and this node's own script (its group's,
    or the head's), the applied settings and state parse with this bundle's rules."""
    node = state.parse_state(state.read_text(config.path("node")) or "")
    script = upgrade.boot_script(here, config.role, node.node)
    if not os.path.isfile(script):
        raise RuntimeError(f"the bundle has no {os.path.relpath(script, here)}")
    parse(state.read_text(config.path("settings")) or "")


ROLE_COMMAND_TIMEOUT_S = 900


class RoleRun(NamedTuple):
    code: int
    said: str  # its stdout and stderr, one line, the last 300 characters


class Agent(
    MembershipFollowing,
    BundleFollowing,
    StatusReporting,
    MetricsFollowing,
    DcgmFollowing,
    ImagesFollowing,
    ImageCacheEvicting,
    ImagesServing,
):
    def __init__(
        self,
        config: Config,
        aws: Aws,
        clock: Callable[[], float] = time.time,
        run: Callable = subprocess.run,
        rand: Callable[[], float] = random.random,
        s3: Any = None,
    ):
        self.c, self.aws, self.clock, self.run, self.rand = config, aws, clock, run, rand
        # S3 is not paced as SSM is (infra/render/pacing.py: S3 takes thousands of requests a second per prefix, and
        # the agent makes one or two a tick): its membership read and heartbeat never wait a pacer's turn. In
        # process, not the CLI's ~0.9 CPU-s a call (hpcc_node/s3rest.py)
        self.s3 = s3 if s3 is not None else s3rest.client(os.environ)
        self.doc: Optional[Dict[str, Any]] = None  # the membership last read, its ETag, whether its bytes are whole
        self.etag, self.intact = "", False
        self.cached: Dict[str, Any] = {}  # the settings and the pointer as last read from SSM
        self.settings_digest = ""  # the membership's settings_sha256 when they were read
        self.node = state.parse_state(state.read_text(config.path("node")) or "")
        self.settings: Settings = parse(state.read_text(config.path("settings")) or "")
        self.record = state.read_record(config.path("agent.json"))
        self.running = upgrade.current_sha(config.opt)
        digest = upgrade.boot_digest(self.current_dir(), config.role, self.node.node)
        if not self.record.boot_digest:  # the first agent of this node: the boot steps it booted with
            self.record = self.record._replace(boot_digest=digest)
            state.write_record(config.path("agent.json"), self.record)
        elif rollout.drift(self.record.boot_digest, digest, self.running) != self.record.drifted:
            # what the agent that switched here said, said again by this bundle's reader of its own manifest (an
            # agent older than its format finds no digest in it: hpcc_contract/formats.py BUNDLE_MANIFEST)
            self.record = self.record._replace(drifted=rollout.drift(self.record.boot_digest, digest, self.running))
            state.write_record(config.path("agent.json"), self.record)
        self.written: Optional[tuple] = None  # what the last status write said, its bytes, and when
        self.written_body, self.written_at, self.written_version = b"", 0.0, -1
        self.status_lock = threading.RLock()  # the tick's status writes and the heartbeat thread's, in order
        self.pointer_sha = ""  # the pointer's sha last tick
        self.verdict: Optional[rollout.Verdict] = None
        self.done_since: Dict[str, float] = {}
        self.rollout_note: Optional[str] = None  # the head's report of a halted rollout
        self.slurm_states: Optional[Dict[str, str]] = None
        self.message = "membership agent running"
        self.refused = -1  # the last membership generation not applied because it does not list this node
        self.newer: Dict[str, str] = {}  # document kind -> why it was refused as newer than this bundle reads
        self.certs: Optional[host_certs.Certs] = None  # the host certificates' part (main() sets it)
        self.series_written: Optional[Tuple[str, int]] = None  # the (bundle, generation) the series file says

    def refuse_newer(self, kind: str, why: str) -> None:
        """A document of a newer format (hpcc_contract/formats.py): the applied one stays, the refusal is logged once
        and stays in this node's status (`newer`, shown by hpcc status) until a document of a known format comes."""
        if self.newer.get(kind) != why:
            self.newer[kind] = why
            self.log(f"{why}: refused, the applied {kind} stays")

    def current_dir(self) -> str:
        return os.path.join(self.c.opt, "current")

    def own_script(self) -> str:
        """This node's script in the bundle it runs (its group's, or the head's): apply-membership, apply-metrics
        and apply-dcgm run it (ValueError when the manifest names none: logged, tried again next tick)."""
        return upgrade.boot_script(self.current_dir(), self.c.role, self.node.node)

    def run_role(self, command: str, **extra_env: str) -> RoleRun:
        """`bash <this node's script> COMMAND` (apply-membership, apply-metrics, apply-dcgm) with HPCC_BUNDLE the
        bundle it runs (the loader's export) and `extra_env`, 15 minutes at most; not starting or running out of
        time is exit -1 with why. Its output comes back as one line, its last 300 characters."""
        env = dict(os.environ, HPCC_BUNDLE=self.running, **extra_env)
        try:
            out = self.run(
                ["bash", self.own_script(), command],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=ROLE_COMMAND_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return RoleRun(-1, f"{type(e).__name__}: {e}"[-300:])
        return RoleRun(out.returncode, " ".join(((out.stdout or "") + (out.stderr or "")).split())[-300:])

    def log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        with open(self.c.log, "a") as f:
            f.write(f"{stamp} [sync] {line}\n")

    # -- what to read -------------------------------------------------------------------------------
    def rollout_on(self) -> bool:
        return bool(self.pointer_sha) and (
            self.pointer_sha != self.running
            or (
                rollout.is_canary(self.node.node, self.canary_names())
                and (self.verdict is None or self.verdict.state != "done")
            )
        )

    def canary_names(self) -> Tuple[str, ...]:
        """The head and the membership's first compute node (rollout.canaries_of)."""
        doc = self.doc or {}
        return rollout.canaries_of([str(n.get("name")) for n in doc.get("nodes", []) if n.get("name")])

    def members(self) -> int:
        """The membership's size (the rollout's waves: rollout.wave_window); unknown before one is read: the most."""
        nodes = (self.doc or {}).get("nodes")
        return len(nodes) if isinstance(nodes, list) and nodes else rollout.WAVE_FULL_AT

    def canaries(self) -> List[str]:
        """The canaries whose statuses this node reads (itself excepted)."""
        return [n for n in self.canary_names() if n != self.node.node]

    def names(self) -> List[str]:
        return [self.c.settings_parameter, self.c.bundle_parameter]

    def node_status(self, name: str) -> Optional[Dict[str, Any]]:
        """Another node's status, by its instance in the membership (None: unlisted, unread or unreadable)."""
        instance = (
            ((self.doc or {}).get("head") or {}).get("instance")
            if name == "head"
            else next((n.get("instance") for n in (self.doc or {}).get("nodes", []) if n.get("name") == name), None)
        )
        if not instance:
            return None
        key = membership.status_key(arn_prefix(self.c.status_key) + str(instance))
        try:
            return status.read(self.s3.get_object(Bucket=self.c.state_bucket, Key=key)["Body"].read().decode())
        except Exception:  # noqa: BLE001 - not there yet, or this role may not read it: no verdict
            return None

    # -- one tick -----------------------------------------------------------------------------------
    def read_parameters(self) -> Dict[str, Any]:
        """The settings and the bundle pointer. The membership carries the pointer and the settings' sha256
        (hpcc_node/controller/__main__.py follow_reader): SSM is read only when that sha256 changed, so settled
        agents make no SSM request; without them (no controller yet) every tick reads both, as before."""
        follow = (self.doc or {}).get("bundle") or {}
        digest = str(follow.get("settings_sha256", ""))
        if not digest or digest != self.settings_digest or self.c.settings_parameter not in self.cached:
            self.cached = self.aws.get_parameters(self.names())
            self.settings_digest = digest if self.c.settings_parameter in self.cached else ""
        read = dict(self.cached)
        if follow.get("sha256"):
            read[self.c.bundle_parameter] = (0, json.dumps({k: follow.get(k) for k in ("sha256", "bucket", "key")}))
        return read

    def tick(self) -> Optional[str]:
        """One look at the cluster; returns a bundle directory to re-execute from, if the node switched."""
        self.read_membership()
        read = self.read_parameters()
        if self.c.settings_parameter not in read:
            raise AwsError(f"{self.c.settings_parameter} is missing; next tick")
        settings_text = read[self.c.settings_parameter][1]
        if membership_due(
            self.node.hosts_version,
            state.read_text(self.c.path("settings")) or "",
            self.doc,
            settings_text,
            self.intact,
        ):
            self.apply_doc(self.doc, settings_text)
        self.report_series()  # a generation applied: said now, whatever S3 answers below
        if self.certs:
            self.certs.tick(self.doc, self.clock())
        if self.c.role == "head" and self.settings.get("SCHEDULER") == "slurm":
            self.slurm_watch()
        self.follow_metrics()  # the head's Prometheus on this bundle's metrics files
        self.follow_dcgm()  # a GPU compute node's dcgm-exporter on this bundle's pairing and counters
        self.follow_images()  # a held spare copies its group's images (prewarm.json) to its own disk
        self.evict_images()  # the head keeps the shared image cache within the settings' cap
        self.serve_images()  # a compute node's image service, for pyxis' importer (containers on)
        switched = self.follow_bundle(read)
        if switched:
            return switched
        self.report()
        return None

    def slurm_watch(self) -> None:
        def cmd(*args: str) -> str:
            out = self.run(list(args), capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise AwsError(f"{args[0]}: {out.stderr.strip()[-200:]}")
            return out.stdout

        # Slurm's node states are the controller's to write (hpcc_node/controller/act.py); the agent only reports them.
        states = slurm.summary(cmd(*slurm.SUMMARY))
        if states != self.slurm_states:
            with open(os.path.join(self.c.run, "hpcc-slurm.json"), "w") as f:
                f.write(slurm.states_file_text(states))
            self.slurm_states = states


def heartbeat(agent: Agent, sleep: Callable[[float], None] = time.sleep) -> None:
    """The heartbeat thread: Agent.beat every half beat, for as long as the agent runs."""
    while True:
        sleep(max(1.0, agent.c.heartbeat_seconds / 2))
        try:
            agent.beat()
        except AwsError as e:
            agent.log(f"heartbeat: {e}; again in {agent.c.heartbeat_seconds // 2} s")


def main(argv: List[str]) -> int:
    config = Config.from_env(dict(os.environ))
    if argv[1:] == ["--self-check"]:
        try:
            self_check(config, os.getcwd())
        except Exception as e:  # whatever stops this bundle from running here
            print(f"self-check failed: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        print(f"self-check passed: agent {AGENT_VERSION}")
        return 0
    if argv[1:]:
        print("usage: python3 -m hpcc_node.agent [--self-check]", file=sys.stderr)
        return 2
    os.environ.update({"AWS_PAGER": "", "AWS_MAX_ATTEMPTS": "1"})
    lock = state.lock_or_exit(config.run)
    try:
        agent = Agent(config, Aws())
    except (state.StateError, SettingsError) as e:
        print(f"hpcc node agent: the applied state is malformed ({e}): run the bootstrap again", file=sys.stderr)
        return 1
    agent.certs = host_certs.Certs(
        agent.aws,
        # unpaced: the head signs every node's certificates, PARALLEL requests at once (hpcc_node/certs.py), in
        # process where it has boto3; a compute node's is the agent's own
        host_certs.signer_s3(config.role, agent.s3, os.environ, agent.log)[0],
        config.state_bucket,
        config.settings_parameter.split("/")[2],
        config.role,
        agent.node.node,
        agent.node.ip,
        config.status_key[len(STATUS_PREFIX) : -len(".json")],
        log=agent.log,
        keys=cluster_keys.Keys(
            agent.aws,
            config.settings_parameter.split("/")[2],
            config.vpc_cidr,
            lambda: str(agent.settings.get("LOGIN_USER", "")),
        ),
    )
    agent.log(f"agent {AGENT_VERSION} running bundle {agent.running[:12] or 'none'} (pid {os.getpid()})")
    verdict_changed = threading.Event()  # a changed health verdict is written at once, not at the next tick
    agent.report_series()  # the bundle this agent runs, before its first tick
    # every verdict.INTERVAL_S (15 s)
    health.start(agent.node.node, log=agent.log, on_change=verdict_changed.set, metrics_dir=config.metrics)
    threading.Thread(target=heartbeat, args=(agent,), name="hpcc-heartbeat", daemon=True).start()
    agent.serve_images()  # at once, not at the first tick: jobs may already ask
    while True:
        p = pacing(agent.settings)
        agent.aws.interval_ms, agent.aws.backoff_seconds, agent.aws.attempts = p.interval_ms, p.backoff_seconds, 1
        woken = verdict_changed.wait(tick_seconds(p.sync_seconds, random.random()))
        verdict_changed.clear()
        try:
            if woken:
                agent.report()  # the status alone, with the new verdict; the tick comes at its time
                continue
            directory = agent.tick()
        except (AwsError, state.StateError, OSError, ValueError, subprocess.TimeoutExpired) as e:
            agent.log(f"error: {e}; next tick")
            continue
        if directory:
            lock.close()
            os.environ["PYTHONPATH"] = agent.current_dir()
            os.chdir("/")
            os.execv(sys.executable, [sys.executable, "-m", "hpcc_node.agent"])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
