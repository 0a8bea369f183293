"""The node agent: `python3 -m hpcc_node.agent` (PYTHONPATH=/opt/hpcc/current), one per node, started by the
bootstrap's sync step (templates/steps/sync.sh.j2). It keeps the node on the cluster's membership and settings,
follows Slurm on the head, and moves the node to the bundle the pointer names (hpcc_node/rollout.py).

Each tick (the settings' SYNC_SECONDS plus up to a quarter of it of jitter): ONE paced GetParameters of the hosts,
the settings and the bundle pointer, plus the canaries' statuses while a rollout is on (at most 10 names). A newer
hosts version or changed settings are applied by the role script's `apply-membership` (the one writer of the
membership files: hostfiles, env, SSH config, Slurm); nothing is restarted, so running jobs do not notice. One
status write per change. An error is logged and retried next tick; the agent never fails its node.

`--self-check`: what a new bundle's agent runs before the node switches to it (exit 0: it can run here)."""

from __future__ import annotations

import fcntl
import os
import random
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional

from hpcc_node import certs as host_certs
from hpcc_node import rollout, slurm, state, status, upgrade
from hpcc_node.aws import Aws, AwsError
from hpcc_node.settings import Settings, SettingsError, pacing, parse
from hpcc_node.version import AGENT_VERSION

LOCK = "/run/hpcc-sync.lock"  # held by the running agent for its whole life
PID = "/run/hpcc-sync.pid"
ROLLED_BACK = "rolled back: "  # a canary that ran the bundle fine; another canary refused it (not this node's report)


class Config(NamedTuple):
    """What the sync step gives the agent (/etc/hpcc/agent.env), and where the node keeps its files."""

    role: str
    hosts_parameter: str
    settings_parameter: str
    nodes_parameter: str
    bundle_parameter: str
    vpc_cidr: str = "10.0.0.0/16"  # every hosts address lies in it (infra/components/network.py)
    etc: str = "/etc/hpcc"
    run: str = "/run"
    opt: str = upgrade.OPT
    log: str = "/var/log/hpcc-bootstrap.log"

    @classmethod
    def from_env(cls, env: Dict[str, str]) -> "Config":
        return cls(env["HPCC_ROLE"], env["HPCC_HOSTS_PARAMETER"], env["HPCC_SETTINGS_PARAMETER"],
                   env["HPCC_NODES_PARAMETER"], env["HPCC_BUNDLE_PARAMETER"],
                   vpc_cidr=env.get("HPCC_VPC_CIDR", cls._field_defaults["vpc_cidr"]), etc=env.get("HPCC_ETC", cls._field_defaults["etc"]), log=env.get("HPCC_LOG", cls._field_defaults["log"]))

    def path(self, name: str) -> str:
        return os.path.join(self.etc, name)


def membership_due(applied_version: int, applied_settings: str, read_version: int, read_settings: str) -> bool:
    """Apply when the hosts' Version or the settings text differ from what was applied (as the bash agent did)."""
    return read_version != applied_version or read_settings.rstrip("\n") != applied_settings.rstrip("\n")


def line_holds(hosts: List[str], node: str, ip: str) -> Optional[str]:
    """None when this node's line holds its IP; else what it holds (the list is not applied then)."""
    index = state.node_index(node)
    at = hosts[index] if index < len(hosts) else "nothing"
    return None if at == ip else at


def tick_seconds(sync_seconds: int, rand: float) -> float:
    return sync_seconds + rand * (sync_seconds / 4)


def self_check(config: Config, here: str) -> None:
    """Raise if this bundle's agent cannot run on this node: its manifest and role script, the applied settings
    and state parse with this bundle's rules."""
    man = upgrade.manifest(here)
    script = os.path.join(here, man["roles"][config.role]["script"])
    if not os.path.isfile(script):
        raise RuntimeError(f"the bundle has no {man['roles'][config.role]['script']}")
    parse(state.read_text(config.path("settings")) or "")
    state.parse_state(state.read_text(config.path("node")) or "")


class Agent:
    def __init__(self, config: Config, aws: Aws, clock: Callable[[], float] = time.time,
                 run: Callable = subprocess.run, rand: Callable[[], float] = random.random):
        self.c, self.aws, self.clock, self.run, self.rand = config, aws, clock, run, rand
        self.node = state.parse_state(state.read_text(config.path("node")) or "")
        self.settings: Settings = parse(state.read_text(config.path("settings")) or "")
        self.record = state.read_record(config.path("agent.json"))
        self.running = upgrade.current_sha(config.opt)
        if not self.record.boot_digest:  # the first agent of this node: the boot steps it booted with
            self.record = self.record._replace(boot_digest=upgrade.boot_digest(self.current_dir(), config.role))
            state.write_record(config.path("agent.json"), self.record)
        self.written: Optional[tuple] = None  # what the last status write said
        self.pointer_sha = ""  # the pointer's sha last tick
        self.verdict: Optional[rollout.Verdict] = None
        self.done_since: Dict[str, float] = {}
        self.rollout_note: Optional[str] = None  # the head's report of a halted rollout
        self.slurm_states: Optional[Dict[str, str]] = None
        self.message = "membership agent running"
        self.certs: Optional[host_certs.Certs] = None  # the host certificates' part (main() sets it)

    def current_dir(self) -> str:
        return os.path.join(self.c.opt, "current")

    def log(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        with open(self.c.log, "a") as f:
            f.write(f"{stamp} [sync] {line}\n")

    # -- what to read -------------------------------------------------------------------------------
    def rollout_on(self) -> bool:
        return bool(self.pointer_sha) and (self.pointer_sha != self.running or (
            rollout.is_canary(self.node.node) and (self.verdict is None or self.verdict.state != "done")))

    def canaries(self) -> List[str]:
        count = int(str(self.settings["NODE_COUNT"]))
        return [n for n in rollout.CANARIES if n != self.node.node and (n == "head" or count >= 1)]

    def names(self) -> List[str]:
        names = [self.c.hosts_parameter, self.c.settings_parameter, self.c.bundle_parameter]
        if self.rollout_on():
            names += [f"{self.c.nodes_parameter}/{n}" for n in self.canaries()]
        return names + (self.certs.names() if self.certs else [])

    # -- one tick -----------------------------------------------------------------------------------
    def tick(self) -> Optional[str]:
        """One look at the cluster; returns a bundle directory to re-execute from, if the node switched."""
        read = self.aws.get_parameters(self.names())
        if self.c.hosts_parameter not in read or self.c.settings_parameter not in read:
            raise AwsError(f"{self.c.hosts_parameter} or {self.c.settings_parameter} is missing; next tick")
        version, hosts_text = read[self.c.hosts_parameter]
        settings_text = read[self.c.settings_parameter][1]
        if membership_due(self.node.hosts_version, state.read_text(self.c.path("settings")) or "", version, settings_text):
            self.apply_membership(version, hosts_text, settings_text)
        if self.certs:
            self.certs.tick(read, hosts_text, self.c.vpc_cidr, self.clock())
        if self.c.role == "head" and self.settings.get("SCHEDULER") == "slurm":
            self.slurm_watch()
        switched = self.follow_bundle(read)
        if switched:
            return switched
        self.report()
        return None

    def apply_membership(self, version: int, hosts_text: str, settings_text: str) -> None:
        try:
            settings = parse(settings_text)
        except SettingsError as e:
            self.log(f"{e}: {self.c.settings_parameter} refused, the applied settings stay")
            return
        try:
            hosts = state.parse_hosts(hosts_text, self.c.vpc_cidr)
        except state.StateError as e:
            self.log(f"{e}: {self.c.hosts_parameter} version {version} refused, the applied membership stays")
            return
        at = line_holds(hosts, self.node.node, self.node.ip)
        if at is not None:
            self.log(f"hosts version {version} holds {at} at {self.node.node}'s line, not this node's {self.node.ip}: not applied")
            return
        script = os.path.join(self.current_dir(), "roles", f"{self.c.role}.sh")
        env = dict(os.environ, HPCC_APPLY_VERSION=str(version), HPCC_APPLY_HOSTS=hosts_text, HPCC_APPLY_SETTINGS=settings_text,
                   HPCC_BUNDLE=self.running)  # the loader's export names the bundle the node booted with
        out = self.run(["bash", script, "apply-membership"], env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            self.log(f"apply-membership of hosts version {version} failed (exit {out.returncode}); next tick")
            return
        self.node = state.parse_state(state.read_text(self.c.path("node")) or "")
        self.settings = settings
        self.message = f"membership of hosts version {self.node.hosts_version} applied"

    def slurm_watch(self) -> None:
        def cmd(*args: str) -> str:
            out = self.run(list(args), capture_output=True, text=True, timeout=30)
            if out.returncode != 0:
                raise AwsError(f"{args[0]}: {out.stderr.strip()[-200:]}")
            return out.stdout
        nodes = slurm.troubled(cmd(*slurm.NODE_STATES))
        statuses: Dict[str, Optional[dict]] = {}
        if nodes:
            read = self.aws.get_parameters([f"{self.c.nodes_parameter}/{n}" for n in sorted(nodes)])
            statuses = {name.rsplit("/", 1)[1]: status.read(value) for name, (_, value) in read.items()}
        for action in slurm.actions(nodes, statuses):
            cmd("scontrol", *action)
            self.log(f"{'drained' if 'State=DRAIN' in action else 'resumed'} {action[1].split('=', 1)[1]}"
                     + (f": {action[3].split('=', 1)[1]}" if len(action) > 3 else ": its status is ready"))
        states = slurm.summary(cmd(*slurm.SUMMARY))
        if states != self.slurm_states:
            with open(os.path.join(self.c.run, "hpcc-slurm.json"), "w") as f:
                f.write(slurm.states_file_text(states))
            self.slurm_states = states

    def follow_bundle(self, read: Dict[str, Any]) -> Optional[str]:
        pointer = None
        if self.c.bundle_parameter in read:
            try:
                pointer = rollout.parse_pointer(read[self.c.bundle_parameter][1])
            except ValueError as e:
                self.log(f"{self.c.bundle_parameter} refused: {e}")
        self.pointer_sha = pointer.sha256 if pointer else ""
        names = {f"{self.c.nodes_parameter}/{n}": n for n in self.canaries()}
        if pointer and any(name in read for name in names):
            seen = {n: status.read(read[name][1]) if name in read else None for name, n in names.items()}
            if rollout.is_canary(self.node.node):  # its own part: it runs the target, or refused it
                seen[self.node.node] = {"bundle": self.running, "phase": "ready", "ok": True,
                                        "refused": self.refused_field()}
            self.verdict = rollout.canary_verdict(pointer.sha256, seen)
            if self.verdict.state == "done":
                self.done_since.setdefault(pointer.sha256, self.clock())
        elif not self.rollout_on():
            self.verdict = None
        move = rollout.next_move(self.node.node, self.running, pointer, self.record.refused, self.verdict,
                                 self.done_since.get(pointer.sha256) if pointer else None, self.clock(),
                                 self.record.previous)
        self.rollout_note = move.reason if move.action == "halted" and self.node.node == "head" else None
        if move.action == "switch" and pointer:
            return self.switch(pointer)
        if move.action == "rollback" and pointer:
            return self.roll_back(pointer.sha256, move.reason)
        return None

    def refused_field(self) -> Optional[Dict[str, str]]:
        if self.pointer_sha in self.record.refused and not self.record.refused[self.pointer_sha].startswith(ROLLED_BACK):
            return {"sha256": self.pointer_sha, "reason": self.record.refused[self.pointer_sha]}
        return None

    def switch(self, pointer: rollout.Pointer) -> Optional[str]:
        try:
            directory = upgrade.fetch(self.aws.get_object, pointer.bucket, pointer.key, pointer.sha256, self.c.opt)
            upgrade.self_check(directory, self.run)
        except upgrade.BundleError as e:
            self.log(f"bundle {pointer.sha256[:12]} refused, staying on {self.running[:12]}: {e}")
            self.record = self.record._replace(refused={**self.record.refused, pointer.sha256: str(e)[:300]})
            state.write_record(self.c.path("agent.json"), self.record)
            return None
        return self.move_to(pointer.sha256, directory, "switched")

    def roll_back(self, sha: str, reason: str) -> Optional[str]:
        directory = upgrade.bundle_dir(self.record.previous, self.c.opt)
        self.record = self.record._replace(refused={**self.record.refused, sha: f"{ROLLED_BACK}{reason}"[:300]})
        return self.move_to(self.record.previous, directory, "rolled back")

    def move_to(self, sha: str, directory: str, verb: str) -> str:
        drifted = rollout.drift(self.record.boot_digest, upgrade.boot_digest(directory, self.c.role), sha)
        self.record = self.record._replace(drifted=drifted, previous=self.running)
        state.write_record(self.c.path("agent.json"), self.record)
        upgrade.switch(sha, self.c.opt)
        upgrade.prune({sha, self.running}, self.c.opt)
        self.log(f"{verb} to bundle {sha[:12]} from {self.running[:12] or 'none'}; "
                 + (f"drifted: {drifted}" if drifted else "boot steps unchanged") + "; nothing restarted")
        return directory

    # -- the status ---------------------------------------------------------------------------------
    def extra(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"drifted": self.record.drifted}
        refused = self.refused_field()
        if refused:
            out.update({"class": "bundle", "refused": refused})
        if self.rollout_note:
            out["rollout"] = f"halted: {self.rollout_note}"
        if self.slurm_states is not None:
            out["slurm"] = self.slurm_states
        return out

    def report(self) -> None:
        extra = self.extra()
        key = (self.node, self.message, self.running, repr(sorted(extra.items())))
        if key == self.written:
            return
        identity = {"node": self.node.node, "ip": self.node.ip, "instanceId": self.node.instance_id,
                    "hostsVersion": self.node.hosts_version}
        tail = (state.read_text(self.c.log) or "").splitlines()
        self.aws.put_parameter(f"{self.c.nodes_parameter}/{self.node.node}",
                               status.status(identity, "ready", True, self.message, bundle=self.running, log_tail=tail,
                                             now=self.clock(), extra=extra))
        self.written = key


def lock_or_exit(config: Config) -> Any:
    lock = open(os.path.join(config.run, os.path.basename(LOCK)), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        pid = state.read_text(os.path.join(config.run, os.path.basename(PID))) or "?"
        print(f"hpcc node agent: already running (pid {pid.strip()})", file=sys.stderr)
        sys.exit(0)
    with open(os.path.join(config.run, os.path.basename(PID)), "w") as f:
        f.write(f"{os.getpid()}\n")
    return lock


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
    lock = lock_or_exit(config)
    try:
        agent = Agent(config, Aws())
    except (state.StateError, SettingsError) as e:
        print(f"hpcc node agent: the applied state is malformed ({e}): run the bootstrap again", file=sys.stderr)
        return 1
    agent.certs = host_certs.Certs(agent.aws, config.hosts_parameter.split("/")[2], config.role, agent.node.node,
                                   agent.node.ip, log=agent.log, instance=agent.node.instance_id)
    agent.log(f"agent {AGENT_VERSION} running bundle {agent.running[:12] or 'none'} (pid {os.getpid()})")
    while True:
        p = pacing(agent.settings)
        agent.aws.interval_ms, agent.aws.backoff_seconds, agent.aws.attempts = p.interval_ms, p.backoff_seconds, 1
        time.sleep(tick_seconds(p.sync_seconds, random.random()))
        try:
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
