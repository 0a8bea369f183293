"""`python3 -m hpcc_node.controller`: the controller as a process on the head (PYTHONPATH=/opt/hpcc/current),
started by the head's role script after its bootstrap (templates/steps/controller.sh.j2: a systemd unit on EC2,
directly where there is no systemd). Its clients are boto3's in process where the head has it, else boto3-shaped
over the AWS CLI, with short timeouts either way (clients.py, HPCC_AWS_CLIENTS); the ledger table and the state
bucket come from the settings (STATE_BUCKET, LEDGER_TABLE; hpcc_node/settings.py state_names), the groups from
/hpcc/<cluster>/groups, read again each loop. Logs to /var/log/hpcc/controller.log
and stderr (journald).

Environment: HPCC_CLUSTER, AWS_DEFAULT_REGION, HPCC_INSTANCE_ID and HPCC_NODE_IP (the head's own: the lease's
owner and the membership's head), HPCC_ACCOUNT, HPCC_SCHEDULER (slurm: the controller writes Slurm's node states),
HPCC_CONTROLLER_LOG, HPCC_CONTROLLER_<TIMER> for any field of timers.Timers (the box shortens them), HPCC_METRICS_DIR
(default node_exporter's textfile directory, hpcc_contract/metrics.py TEXTFILE_DIR: the loop's series), and
HPCC_METRICS_TARGETS (the directory of the head's Prometheus scrape targets, where metrics are on: targets.py;
unset, none are written).
`--once`: one loop, then exit (0 when it held the lease)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from hpcc_contract import groups as groups_format
from hpcc_contract.names import Paths
from hpcc_node import awscli
from hpcc_node.metrics import textfile_dir
from hpcc_node.settings import state_names

from . import clients, images, loop, metric_alerts, slurm_records, targets
from .act import LOG
from .calls import Costs, Counted
from .model import Group
from .timers import Timers

LOG_PATH = "/var/log/hpcc/controller.log"


class ConfigError(ValueError):
    """What the controller needs is missing or malformed; the message names it and the fix."""


def timers_from_env(env: Mapping[str, str]) -> Timers:
    """Timers with HPCC_CONTROLLER_<FIELD> overrides (e.g. HPCC_CONTROLLER_LOOP_SECONDS=5)."""
    changes: Dict[str, Any] = {}
    for f in dataclasses.fields(Timers):
        raw = env.get(f"HPCC_CONTROLLER_{f.name.upper()}")
        if raw is None:
            continue
        try:
            value = float(raw) if f.type in (float, "float") else int(raw)
        except ValueError:
            raise ConfigError(f"HPCC_CONTROLLER_{f.name.upper()}={raw[:20]!r} is not a number") from None
        if value < 0:
            raise ConfigError(f"HPCC_CONTROLLER_{f.name.upper()} must not be negative")
        changes[f.name] = value
    return dataclasses.replace(Timers(), **changes)


def parse_groups(text: str, parameter: str, log: logging.Logger = LOG) -> List[Group]:
    """The groups parameter's JSON (hpcc_contract/groups.py): each group's FIELDS as a Group, its "slurm" left to
    hpcc_node/slurm.py."""
    try:
        raw_groups = groups_format.loads(text)
    except groups_format.NotJson as e:
        raise ConfigError(f"{parameter} {e}; run pulumi up to write it again") from None
    except groups_format.NewerGroups as e:  # the program is newer than the head's bundle: the bundle follows
        raise ConfigError(f"{parameter}: {e}") from None
    except groups_format.GroupsFormatError as e:
        raise ConfigError(f"{parameter} {e}; run pulumi up with this bundle's program") from None
    out = []
    for i, raw in enumerate(raw_groups):
        if not isinstance(raw, dict):
            raise ConfigError(f"{parameter}: groups[{i}] is not an object")
        unknown = sorted(set(raw) - set(groups_format.FIELDS) - {groups_format.SLURM})
        if unknown:
            log.debug("%s: groups[%d]: fields this controller does not use: %s", parameter, i, ", ".join(unknown))
        try:
            out.append(Group(**{k: v for k, v in raw.items() if k in groups_format.FIELDS}, gpus=slurm_gpus(raw)))
        except TypeError as e:
            raise ConfigError(f"{parameter}: groups[{i}]: {e}") from None
        if not isinstance(out[-1].count, int) or out[-1].count < 0:
            raise ConfigError(f"{parameter}: groups[{i}] ({out[-1].name}): count must be a whole number >= 0")
    return out


def slurm_gpus(raw: Mapping[str, Any]) -> int:
    """A group's GPUs per node from its Slurm node definition's `gres` (`gpu:8`; the parameter's 8 KB hold no field
    of their own for it): its nodes are dcgm-exporter targets (targets.py). 0 without Slurm or GPUs."""
    slurm = raw.get(groups_format.SLURM)
    gres = slurm.get("gres") if isinstance(slurm, Mapping) else None
    found = re.fullmatch(r"gpu:([1-9][0-9]{0,2})", gres) if isinstance(gres, str) else None
    return int(found.group(1)) if found else 0


def read_parameter(ssm: Any, name: str) -> Optional[str]:
    try:
        return ssm.get_parameter(Name=name)["Parameter"]["Value"]
    except clients.errors() as e:
        if awscli.error_code(e) == "ParameterNotFound":
            return None
        raise


def settings_text(ssm: Any, cluster: str) -> str:
    return read_parameter(ssm, Paths(cluster).settings) or ""


def groups_reader(ssm: Any, cluster: str) -> Callable[[], Sequence[Group]]:
    parameter = Paths(cluster).groups
    last: List[Group] = []

    def groups() -> Sequence[Group]:
        try:
            text = read_parameter(ssm, parameter)
        except clients.errors() as e:  # SSM down or throttled: EC2 and Slurm are reconciled on the groups last read
            if not last:
                raise
            LOG.warning("%s cannot be read (%s): this loop keeps the groups last read", parameter, str(e)[:300])
            return list(last)
        if text is None:
            raise ConfigError(f"{parameter} does not exist; the program writes it (pulumi up)")
        last[:] = parse_groups(text, parameter)
        return list(last)

    return groups


def follow(pointer_text: str, settings: str) -> Dict[str, Any]:
    """What the membership carries for the nodes to follow: the bundle pointer and the settings' sha256 (a node
    reads the settings from SSM only when it changes: hpcc_node/agent.py read_parameters)."""
    try:
        pointer = json.loads(pointer_text or "{}")
    except ValueError:
        pointer = {}
    out = dict(pointer) if isinstance(pointer, dict) else {}
    if settings:
        out["settings_sha256"] = hashlib.sha256(settings.encode()).hexdigest()
    return out


def follow_reader(ssm: Any, cluster: str) -> Callable[[], Mapping[str, Any]]:
    """Each loop: ONE GetParameters of the bundle pointer and the settings. A read that fails (throttled, timed
    out) gives the last one read, never an empty pointer: that would publish a new membership generation to
    every node, and another when the read works again."""
    paths = Paths(cluster)
    names = [paths.bundle, paths.settings]
    last: Dict[str, Any] = {}

    def read() -> Mapping[str, Any]:
        try:
            found = {p["Name"]: p["Value"] for p in ssm.get_parameters(Names=names).get("Parameters", [])}
        except clients.errors():
            return dict(last)
        last.clear()
        last.update(follow(found.get(names[0], ""), found.get(names[1], "")))
        return dict(last)

    return read


def same_file(stream: Any, path: str) -> bool:
    """Whether `stream` writes to `path` (the supervisor without systemd sends stderr to the log file itself)."""
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def setup_log(path: str) -> logging.Logger:
    LOG.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    fmt.converter = time.gmtime
    handlers: List[logging.Handler] = []
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handlers.append(logging.FileHandler(path))
    except OSError as e:
        sys.stderr.write(f"hpcc controller: cannot write {path} ({e}); logging to stderr only\n")
    if not handlers or not same_file(sys.stderr, path):  # journald's copy; never a second line in the same file
        handlers.insert(0, logging.StreamHandler(sys.stderr))
    for h in handlers:
        h.setFormatter(fmt)
        LOG.addHandler(h)
    return LOG


def build(env: Mapping[str, str], run: Optional[Callable[..., Any]] = None, clock: Callable[[], float] = time.time):
    """(step, timers) of the controller the environment describes."""
    for key in ("HPCC_CLUSTER", "HPCC_INSTANCE_ID", "HPCC_NODE_IP", "HPCC_ACCOUNT"):
        if not env.get(key):
            raise ConfigError(f"{key} is not set (the head's role script sets it in /etc/hpcc/controller.env)")
    cluster = env["HPCC_CLUSTER"]
    made, kind = clients.clients(env, run)
    ec2, ddb, s3, ssm = (made[s] for s in clients.SERVICES)
    settings = settings_text(ssm, cluster)
    costs = Costs()  # each loop's phases and calls, one line a loop (loop.forever)
    counted_ssm = Counted(ssm, "ssm", costs)
    bucket, table = state_names(settings, cluster, env["HPCC_ACCOUNT"])
    timers = timers_from_env(env)
    slurm = env.get("HPCC_SCHEDULER") == "slurm"
    head = {"name": "head", "ip": env["HPCC_NODE_IP"], "instance": env["HPCC_INSTANCE_ID"]}
    step = loop.build_step(
        ec2,
        ddb,
        s3,
        cluster,
        table,
        bucket,
        groups_reader(counted_ssm, cluster),
        env["HPCC_INSTANCE_ID"],
        clock,
        slurm_run=loop.slurm_command if slurm else None,
        slurm_read=slurm_records.Reader() if slurm else None,
        bundle=follow_reader(counted_ssm, cluster),
        head=head,
        timers=timers,
        costs=costs,
        targets=targets.Writer(env["HPCC_METRICS_TARGETS"], LOG) if env.get("HPCC_METRICS_TARGETS") else None,
        metrics_dir=textfile_dir(env) or None,
        # the head's Prometheus, where it runs (its targets are written here): its alerts in the heal loop
        alerts=metric_alerts.Reader(metric_alerts.alert_url(env["HPCC_NODE_IP"]), log=LOG)
        if env.get("HPCC_METRICS_TARGETS")
        else None,
        after=images.hook(settings, env, slurm, clock),  # the images each group's idle nodes keep (prewarm.json)
    )
    LOG.info(
        "controller of %s on %s (%s): ledger %s, state bucket %s, a loop every %d s%s; AWS calls %s",
        cluster,
        env["HPCC_INSTANCE_ID"],
        env["HPCC_NODE_IP"],
        table,
        bucket,
        timers.loop_seconds,
        ", Slurm node states" if slurm else "",
        "in process (boto3)" if kind == "boto3" else "through the AWS CLI (no boto3 here: slower)",
    )
    return step, timers


def main(argv: List[str], env: Mapping[str, str] = os.environ) -> int:
    setup_log(env.get("HPCC_CONTROLLER_LOG", LOG_PATH))
    try:
        step, timers = build(env)
    except (ConfigError, clients.ClientsError) + clients.errors() as e:
        LOG.error("cannot start: %s", e)
        return 2
    if "--once" in argv:
        try:
            return 0 if step()["lease"] else 1
        except Exception as e:  # one loop's failure, said in one line
            LOG.error("the loop failed: %s", e)
            return 1
    loop.forever(step, time.time, time.sleep, timers=timers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
