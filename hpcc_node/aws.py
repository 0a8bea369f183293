"""The agent's AWS calls: the AWS CLI the images carry, through a subprocess, paced and retried as the bootstrap's
aws_retry is (templates/steps/retry.sh.j2), through the same pacer file, so the node's bootstrap and its agent
together keep one SSM or Secrets Manager call per interval; S3's are not paced, in both (UNPACED;
infra/render/pacing.py says why).

Why the CLI and not boto3: the bootstrap already depends on it (every image has it), it finds the instance's
IMDSv2 credentials and AWS_ENDPOINT_URL by itself, and boto3 would put ~15 MB of botocore into every bundle.
Each call is one request (AWS_MAX_ATTEMPTS=1 in the environment): this module paces and retries."""

from __future__ import annotations

import fcntl
import json
import random
import re
import subprocess
import time
from typing import Callable, Dict, Sequence, Tuple

PACE_FILE = "/run/hpcc-aws.last-call"
NOT_FOUND = ("ParameterNotFound", "ResourceNotFoundException", "NoSuchKey", "Not Found", "(404)")
UNPACED = ("s3api", "s3")  # retry.sh.j2's aws_retry skips `pace` for the same (tests/node/test_agent_aws.py runs both)
GET_PARAMETERS_MAX = 10  # SSM GetParameters takes at most 10 names a call (API reference, GetParameters: Names)


class AwsError(RuntimeError):
    pass


# A secret's value never goes on a command line (any local user reads every process's argv in /proc/<pid>/cmdline):
# Secrets Manager's values go through a scratch file (the CLI's `file://`, `fileb://`), and no argument may hold a
# private key. secret_on_command_line() is checked before every AWS CLI call of the node side (this module's and
# awscli.py's), so a call that would leak one is refused, not run.
SECRET_VALUE_OPTIONS = {"--secret-string": "file://", "--secret-binary": "fileb://"}
# A private key (PEM, OpenSSH, PGP: the header line ending in "KEY-----" or "KEY BLOCK-----") or the host CA's JSON;
# written as a pattern, so the bundle that ships this file holds no private-key header of its own.
PRIVATE_KEY = re.compile(r"PRIVATE[ ]KEY(?:[ ]BLOCK)?-----|\"private\":")


def secret_on_command_line(argv: Sequence[str]) -> str:
    """Why `argv` would put a secret on a command line ("" when it would not)."""
    for i, arg in enumerate(argv):
        prefix = SECRET_VALUE_OPTIONS.get(arg)
        if prefix and i + 1 < len(argv) and not argv[i + 1].startswith(prefix):
            return f"{arg} is given inline, not as {prefix}<path>"
        option, eq, value = arg.partition("=")
        if eq and SECRET_VALUE_OPTIONS.get(option) and not value.startswith(SECRET_VALUE_OPTIONS[option]):
            return f"{option} is given inline, not as {SECRET_VALUE_OPTIONS[option]}<path>"
        if PRIVATE_KEY.search(arg):
            return f"argument {i} holds a private key"
    return ""


class NotFound(AwsError):
    """What was asked for does not exist (yet)."""


def _ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


def pace_wait_ms(last_ms: int, now_ms: int, interval_ms: int, rand: float) -> int:
    """How long to wait before the next call: the bootstrap's pace(), so the two share one rhythm. The node's first
    call goes at a random point of one interval; a clock step never makes a wait longer than one interval."""
    if last_ms <= 0:
        wait = int(rand * interval_ms)
    else:
        wait = last_ms + interval_ms + int(rand * interval_ms / 4) - now_ms
    return interval_ms if wait > 2 * interval_ms else max(0, wait)


class Aws:
    """One node's AWS caller; the clock, sleep, randomness, subprocess and pacer file are injected for tests."""

    def __init__(
        self,
        interval_ms: int = 100,
        backoff_seconds: int = 2,
        attempts: int = 6,
        run: Callable = subprocess.run,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        pace_file: str = PACE_FILE,
    ):
        self.interval_ms, self.backoff_seconds, self.attempts = interval_ms, backoff_seconds, attempts
        self.run, self.clock, self.sleep, self.rand, self.pace_file = run, clock, sleep, rand, pace_file

    def pace(self) -> None:
        with open(self.pace_file + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            last = 0
            try:
                with open(self.pace_file) as f:
                    text = f.read().strip()
                last = int(text) if text.isdigit() else 0
            except OSError:
                pass
            wait = pace_wait_ms(last, _ms(self.clock), self.interval_ms, self.rand())
            if wait > 0:
                self.sleep(wait / 1000)
            with open(self.pace_file, "w") as f:
                f.write(f"{_ms(self.clock)}\n")

    def call(self, *args: str) -> str:
        """One paced `aws ARGS`, retried with jittered exponential backoff; its stdout. NotFound at once."""
        leak = secret_on_command_line(args)
        if leak:
            raise AwsError(f"aws {' '.join(args[:2])}: refused: {leak} (secrets go through files)")
        delay = self.backoff_seconds
        for attempt in range(1, self.attempts + 1):
            if args[0] not in UNPACED:
                self.pace()
            try:
                out = self.run(["aws", *args], capture_output=True, text=True, timeout=120)
                rc, stdout, stderr = out.returncode, out.stdout, out.stderr
            except subprocess.TimeoutExpired:
                rc, stdout, stderr = 124, "", "timed out after 120 s"
            if rc == 0:
                return stdout
            if any(marker in stderr for marker in NOT_FOUND):
                raise NotFound(stderr.strip()[-300:])
            if attempt == self.attempts:
                raise AwsError(f"aws {' '.join(args[:2])}: {stderr.strip()[-300:]}")
            self.sleep(delay + self.rand() * delay)
            delay = min(60, delay * 2)
        raise AssertionError("unreachable")

    def get_parameters(self, names: Sequence[str]) -> Dict[str, Tuple[int, str]]:
        """name -> (Version, Value) of those that exist; at most 10 names a call."""
        found: Dict[str, Tuple[int, str]] = {}
        for i in range(0, len(names), GET_PARAMETERS_MAX):
            out = self.call("ssm", "get-parameters", "--names", *names[i : i + GET_PARAMETERS_MAX], "--output", "json")
            for p in json.loads(out or "{}").get("Parameters", []):
                found[p["Name"]] = (int(p["Version"]), p["Value"])
        return found

    def put_parameter(self, name: str, value: str) -> None:
        self.call("ssm", "put-parameter", "--name", name, "--type", "String", "--overwrite", "--value", value)

    def get_object(self, bucket: str, key: str, dest: str) -> None:
        """S3 GetObject into dest (through the VPC's S3 gateway endpoint on EC2)."""
        self.call("s3api", "get-object", "--bucket", bucket, "--key", key, dest)
