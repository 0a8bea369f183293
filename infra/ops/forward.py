"""A Session Manager port forward from localhost to a port on or beside the cluster's head, as a child process
(AWS-StartPortForwardingSessionToRemoteHost: the Session Manager agent on the head connects to host:port, its own
address for Prometheus, 127.0.0.1 for Grafana; opened and closed here:
https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html#sessions-remote-port-forwarding).
`hpcc top` reaches the head's Prometheus through it, `hpcc dashboard` the head's Grafana."""

from __future__ import annotations

import socket
import subprocess
import time

from infra.ops import OpsError

DOCUMENT = "AWS-StartPortForwardingSessionToRemoteHost"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forward_argv(region: str, head_instance: str, host: str, port: int, local_port: int) -> list[str]:
    """Session Manager's port forward from localhost:`local_port` to `host`:`port` as the head reaches it."""
    params = f"host={host},portNumber={port},localPortNumber={local_port}"
    return [
        "aws", "ssm", "start-session", "--region", region, "--target", head_instance,
        "--document-name", DOCUMENT, "--parameters", params,
    ]  # fmt: skip


class Forward:
    """The port forward as a child process, closed on exit; waits (with a deadline) until the port answers.
    `what` names the far end in its messages (the head's Prometheus, the head's Grafana)."""

    def __init__(self, argv: list[str], port: int, deadline_seconds: float = 60.0, what: str = "the head's Prometheus"):
        self.argv, self.port, self.deadline, self.what = argv, port, deadline_seconds, what
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> str:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        until = time.monotonic() + self.deadline
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                said = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace")[-500:]
                raise OpsError(f"the port forward to {self.what} ended: {said.strip() or 'no output'}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return f"http://127.0.0.1:{self.port}"
            time.sleep(0.5)
        self.__exit__()
        raise OpsError(f"the port forward to {self.what} did not open within {self.deadline:.0f} s")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __exit__(self, *_) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def running_head(aws, cluster: str, region: str) -> dict:
    """`cluster`'s running head instance (with its private address), else OpsError."""
    from infra.ops.status.cluster import head_instance  # lazy: boto3
    from infra.ops.store import cluster_instances  # lazy: boto3

    running = [i for i in cluster_instances(aws, cluster) if i.get("State", {}).get("Name") == "running"]
    head = head_instance(running)
    if head is None or not head.get("PrivateIpAddress"):
        raise OpsError(f"no running head node for hpcc:cluster={cluster} in {region}: check the name and the region")
    return head


def head_forward(
    aws,
    cluster: str,
    region: str,
    port: int,
    what: str,
    on_head_ip: bool = True,
    local_port: int | None = None,
    otherwise: str = "",
) -> Forward:
    """The port forward to `port` on `cluster`'s running head, ready to enter: at the head's private address
    (`on_head_ip`, where Prometheus listens) or at 127.0.0.1 as the head sees it (Grafana's). `otherwise`: what the
    operator can do without the Session Manager plugin, said when it is missing."""
    from infra.ops.ssh import missing_tools  # lazy: boto3, only for the forward

    head = running_head(aws, cluster, region)
    missing = missing_tools("Session Manager")
    host = head["PrivateIpAddress"] if on_head_ip else "127.0.0.1"
    local = local_port or free_port()
    argv = forward_argv(region, head["InstanceId"], host, port, local)
    if missing:
        raise OpsError(f"{missing}{otherwise}. The forward: {' '.join(argv)}")
    return Forward(argv, local, what=what)
