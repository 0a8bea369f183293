"""Stand-ins for the node agent's tests: an AWS of parameters and objects (the state bucket's membership.json and
statuses with ETags and S3's conditional GET), a node's directories, and a `run` that plays the role script's
apply-membership, apply-metrics and apply-dcgm, the self-check and Slurm's commands."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from hpcc_contract import dcgm as dcgm_contract
from hpcc_node import agent, awscli, status, upgrade
from hpcc_node.controller import membership
from hpcc_node.dcgm import applied_record
from tests.box import bundles
from tests.render.bootstrap_cases import settings

SETTINGS = settings()["p5-llm"]
P = "/hpcc/llm"
STATE = "hpcc-llm-state-123456789012"
ARN = "arn:aws:ec2:us-east-1:123456789012:instance/"
CONFIG = dict(state_bucket=STATE, settings_parameter=f"{P}/settings", bundle_parameter=f"{P}/bundle")


def instance_of(name: str) -> str:
    return f"i-0{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def membership_doc(hosts: str, generation: int) -> dict:
    """The controller's membership.json for a list of addresses: the head's, then compute-000's ..."""
    ips = [ip for ip in hosts.split("\n") if ip]
    nodes = [
        {
            "name": f"compute-{i:03d}",
            "group": "compute",
            "ip": ip,
            "instance": instance_of(f"compute-{i:03d}"),
            "state": "ready",
        }
        for i, ip in enumerate(ips[1:])
    ]
    return {
        "format": 1,
        "generation": generation,
        "nodes": nodes,
        "groups": {"compute": len(nodes)},
        "bundle": {},
        "head": {"name": "head", "ip": ips[0], "instance": instance_of("head")},
    }


class FakeS3:
    """S3 as boto3 shows it: objects with ETags, GetObject's If-None-Match (304), errors with botocore's codes."""

    def __init__(self, calls: list):
        self.objects: dict[tuple[str, str], bytes] = {}
        self.metadata: dict[tuple[str, str], dict] = {}  # an object's user metadata, as PutObject gave it
        self.calls = calls

    def put_object(self, Bucket, Key, Body, Metadata=None, IfMatch=None, IfNoneMatch=None, **_):
        self.calls.append(("s3-put", Key))
        if (IfMatch and IfMatch != self.etag(Bucket, Key)) or (IfNoneMatch == "*" and (Bucket, Key) in self.objects):
            raise awscli.ClientError("PreconditionFailed", "At least one of the pre-conditions failed", "PutObject")
        self.objects[(Bucket, Key)] = Body if isinstance(Body, bytes) else Body.encode()
        self.metadata[(Bucket, Key)] = dict(Metadata or {})
        return {"ETag": self.etag(Bucket, Key)}

    def head_object(self, Bucket, Key):
        self.calls.append(("s3-head", Key))
        if (Bucket, Key) not in self.objects:
            raise awscli.ClientError("404", "Not Found", "HeadObject")
        return {"ETag": self.etag(Bucket, Key), "Metadata": self.metadata.get((Bucket, Key), {})}

    def etag(self, bucket, key):
        if (bucket, key) not in self.objects:
            return ""
        return '"' + hashlib.md5(self.objects[(bucket, key)]).hexdigest() + '"'

    def get_object(self, Bucket, Key, IfNoneMatch=None):
        self.calls.append(("s3-get", Key))
        if (Bucket, Key) not in self.objects:
            raise awscli.ClientError("NoSuchKey", "The specified key does not exist.", "GetObject")
        if IfNoneMatch == self.etag(Bucket, Key):
            raise awscli.ClientError("304", "Not Modified", "GetObject")

        class Body:
            def __init__(self, data):
                self.data = data

            def read(self):
                return self.data

        meta = self.metadata.get((Bucket, Key), {})
        return {"Body": Body(self.objects[(Bucket, Key)]), "ETag": self.etag(Bucket, Key), "Metadata": meta}


SCRIPTS = {"head": "#!/bin/bash\n# head boot steps\n", "compute": "#!/bin/bash\n# compute boot steps\n"}


class FakeAws:
    def __init__(self):
        self.params: dict[str, tuple[int, str]] = {}
        self.objects: dict[tuple[str, str], bytes] = {}
        self.calls: list[tuple] = []
        self.interval_ms = self.backoff_seconds = self.attempts = 0
        self.s3 = FakeS3(self.calls)
        self.generation = 0

    def pace(self) -> None:
        pass

    def members(self, hosts: str) -> None:
        """The controller publishes the next generation (its delta first, as membership.publish_next does)."""
        self.generation += 1
        body = membership.body_of(membership_doc(hosts, self.generation))
        membership.publish_next(self.s3, STATE, body, None, lambda n: None)

    def put(self, name: str, value: str) -> None:
        version = self.params.get(name, (0, ""))[0] + 1
        self.params[name] = (version, value)

    def get_parameters(self, names):
        self.calls.append(("get", tuple(names)))
        return {n: self.params[n] for n in names if n in self.params}

    def put_parameter(self, name, value):
        self.calls.append(("put", name))
        self.put(name, value)

    def get_object(self, bucket, key, dest):
        self.calls.append(("object", key))
        if (bucket, key) not in self.objects:
            raise RuntimeError("AccessDenied")
        Path(dest).write_bytes(self.objects[(bucket, key)])

    def status(self, node: str) -> dict:
        """A node's status as `hpcc status` reads it: the body, and the generation applied from its metadata."""
        key = (STATE, membership.status_key(ARN + instance_of(node)))
        return status.with_applied(json.loads(self.s3.objects[key]), self.s3.metadata.get(key))

    def publish(self, packed: bytes, sha: str, bucket: str = "hpcc-llm-bundles") -> None:
        self.objects[(bucket, f"bundles/{sha}.tar.gz")] = packed
        self.put(f"{P}/bundle", json.dumps({"sha256": sha, "bucket": bucket, "key": f"bundles/{sha}.tar.gz"}))


class FakeRun:
    """apply-membership writes the state the bash would; the self-check passes unless told; sinfo answers."""

    def __init__(self, etc: Path, fail_self_check: set[str] | None = None, sinfo: dict[str, str] | None = None):
        self.etc, self.fail, self.sinfo, self.calls = etc, fail_self_check or set(), sinfo or {}, []
        self.apply_metrics_rc = 0  # what the head's apply-metrics answers
        self.apply_dcgm_rc = 0  # what a compute node's apply-dcgm answers; on 0 it records dcgm_version's answer
        self.dcgm_version: str | None = "1:4.7.0-1"  # None: it records nothing

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        if argv[-1] == "apply-membership":
            env = kw["env"]
            old = dict(line.split("=", 1) for line in (self.etc / "node").read_text().splitlines())
            old["HOSTS_VERSION"] = env["HPCC_APPLY_VERSION"]
            (self.etc / "node").write_text("".join(f"{k}={v}\n" for k, v in old.items()))
            (self.etc / "settings").write_text(env["HPCC_APPLY_SETTINGS"].rstrip("\n") + "\n")
            return subprocess.CompletedProcess(argv, 0, "", "")
        if argv[-1] == "apply-metrics":
            rc = self.apply_metrics_rc
            return subprocess.CompletedProcess(argv, rc, "", "E: Unable to locate package prometheus" if rc else "")
        if argv[-1] == "apply-dcgm":
            rc = self.apply_dcgm_rc
            if rc == 0 and self.dcgm_version is not None:
                (self.etc / Path(dcgm_contract.APPLIED_PATH).name).write_text(applied_record(self.dcgm_version) + "\n")
            return subprocess.CompletedProcess(argv, rc, "", "E: Version '4.9.0*' was not found" if rc else "")
        if argv[-1] == "--self-check":
            sha = Path(kw["cwd"]).name
            rc = 1 if sha in self.fail else 0
            return subprocess.CompletedProcess(argv, rc, "", "self-check failed: ImportError: boom" if rc else "")
        if argv[0] in ("sinfo", "scontrol"):
            key = "nodes" if "-N" in argv else "summary" if argv[0] == "sinfo" else "scontrol"
            return subprocess.CompletedProcess(argv, 0, self.sinfo.get(key, ""), "")
        raise AssertionError(argv)


def node(
    tmp_path: Path,
    name: str = "compute-001",
    ip: str = "10.0.0.6",
    version: int = 0,
    scripts: dict[str, str] | None = None,
    settings_text: str = SETTINGS,
    patches: dict[str, str] | None = None,
):
    """A booted node's directories (its bundle installed as the loader would); its Config and the bundle's sha.
    patches: files the bundle has besides (tests/box/bundles.py build)."""
    root = tmp_path / name
    etc, run, opt = root / "etc", root / "run", root / "opt"
    for d in (etc, run):
        d.mkdir(parents=True)
    (etc / "node").write_text(
        f"HPCC_NODE={name}\nHPCC_INSTANCE_ID={instance_of(name)}\nHPCC_IP={ip}\nHOSTS_VERSION={version}\n"
    )
    (etc / "settings").write_text(settings_text)
    packed, sha = bundles.build(scripts or SCRIPTS, patches)
    bundles.install(opt, packed, sha)
    role = "head" if name == "head" else "compute"
    config = agent.Config(
        role=role,
        etc=str(etc),
        run=str(run),
        opt=str(opt),
        log=str(root / "log"),
        metrics=str(root / "metrics"),
        status_key=membership.status_key(ARN + instance_of(name)),
        **CONFIG,
    )
    return config, sha


def make_agent(tmp_path, aws, name="compute-001", clock=lambda: 1000.0, run=None, **kw):
    config, sha = node(tmp_path, name, **kw)
    return agent.Agent(config, aws, clock=clock, run=run or FakeRun(Path(config.etc)), s3=aws.s3), sha


def running(config) -> str:
    return upgrade.current_sha(config.opt)
