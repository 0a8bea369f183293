"""The agent's part of the host certificates (hpcc_node/certs.py), each tick: the head signs what is due and follows
`hpcc rotate-keys`' phases; every node installs what the head wrote for it and reloads sshd. Standard library only
(the head's signer takes boto3 where its Python has it: signer_s3); ssh-keygen, systemctl and sshd are run through an
injected `run`."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from hpcc_contract.names import Paths
from hpcc_node import certstore as store
from hpcc_node import cluster_keys, sshkeys
from hpcc_node.aws import Aws
from hpcc_node.certs import Head, Member, Node, Run, legacy_signer, members, utc_text
from hpcc_node.controller import clients


def signer_s3(role: str, own: Any, env: Mapping[str, str], log: Callable[[str], None]) -> Tuple[Any, str]:
    """The S3 client of the agent's certificate part and its kind. A compute node's: the agent's `own` (CLI: one or
    two calls a tick, and its python3 has no boto3). The head's signer's: in process (boto3, built as the controller's
    are, with its timeouts and retries: hpcc_node/controller/clients.py) where this Python has boto3, else the AWS
    CLI's (~0.6 s a call: 4,096 nodes due at once then take over 10 min), said in the log. The head's agent runs
    under the controller's Python (templates/steps/controller.sh.j2 HPCC_AGENT_PYTHON), which has boto3 when the
    controller step could install it."""
    if role != "head":
        return own, "cli"
    why = "HPCC_AWS_CLIENTS=cli"
    try:
        made, kind = clients.clients(env, services=("s3",))
    except clients.ClientsError as e:  # HPCC_AWS_CLIENTS asks for what is not here: the agent goes on, on the CLI
        why = str(e)
        made, kind = clients.clients({**env, "HPCC_AWS_CLIENTS": "cli"}, services=("s3",))
    if kind == "boto3":
        log("host certificates: the signer calls S3 in process (boto3)")
    else:
        why = why if env.get("HPCC_AWS_CLIENTS") else f"no boto3 in {sys.executable}"
        log(f"host certificates: {why}: the signer calls S3 through the AWS CLI (slower: ~0.6 s a call)")
    return made["s3"], kind


def reload_sshd(
    run: Run = subprocess.run, systemd: str = "/run/systemd/system", pid_file: str = "/run/sshd.pid"
) -> str:
    """sshd reads its host certificates again (templates/steps/ssh.sh.j2's reload_sshd; running sessions stay)."""
    if os.path.isdir(systemd):
        for unit in ("ssh", "sshd"):
            if run(["systemctl", "is-active", "--quiet", unit], capture_output=True, timeout=30).returncode == 0:
                sshkeys.checked(run, ["systemctl", "reload", unit])
                return f"reloaded {unit}"
    pid = sshkeys.read_text(pid_file)
    if pid.isdigit():
        os.kill(int(pid), 1)  # SIGHUP: sshd re-executes with the same listeners
        return f"sent HUP to sshd ({pid})"
    return "sshd not reloaded (no unit, no pid file): it reads the certificates when it starts"


class Certs:
    """The agent's part, each tick: the head signs what is due (following /hpcc/<c>/rotation); every node installs
    what the head wrote for it and publishes what it applied."""

    def __init__(
        self,
        aws: Aws,
        s3: Any,
        bucket: str,
        cluster: str,
        role: str,
        node: str,
        ip: str,
        arn: str,
        run: Run = subprocess.run,
        log: Callable[[str], None] = print,
        reload: Callable[[], str] = reload_sshd,
        keys: Optional[cluster_keys.Keys] = None,
    ):
        """keys: root's and the login user's cluster keys, installed again at each rotation phase (None: not here)."""
        self.aws, self.keys = aws, keys
        self.head = Head(aws, s3, bucket, cluster, arn.rsplit("/", 1)[0] + "/", run) if role == "head" else None
        self.me = Node(s3, bucket, cluster, node, ip, arn, run)
        if self.head:
            self.head.legacy = legacy_signer()
        self.warned = False
        self.names_, self.log, self.reload = Paths(cluster), log, reload

    def tick(self, doc: Optional[Dict[str, Any]], now: float) -> None:
        """One tick's part (doc: the membership applied); an error is logged, the rest of the tick goes on."""
        try:
            self._tick(doc, now)
        except Exception as e:  # noqa: BLE001 - AWS, ssh-keygen, a malformed object: the agent's tick goes on
            self.log(f"host certificates: {type(e).__name__}: {e}; next tick")

    def _tick(self, doc: Optional[Dict[str, Any]], now: float) -> None:
        if self.me.published is None:  # its keys first: the head signs its own in the same tick
            self.me.publish()
        issued = self.me.fetch() if not self.head else None
        if self.head:
            text = self.aws.get_parameters([self.names_.rotation]).get(self.names_.rotation, (0, ""))[1]
            try:
                rotation = store.read_rotation(text)
            except ValueError as e:
                self.log(f"{e}: the rotation is not followed")
                rotation = None
            nodes = members(doc) or [Member("head", self.me.ip, self.me.instance)]
            signed = self.head.sign_pending(nodes, now, rotation)
            if self.head.authority and self.head.authority.rotation == "legacy" and not self.warned:
                self.log(
                    "host certificates are signed by the cluster key (this cluster was booted before the host CA):"
                    " run `hpcc rotate-keys` once every node runs this bundle"
                )
                self.warned = True
            for did in self.head.moved:
                self.log(f"cluster keys: {did}")
            self.head.moved.clear()
            if signed:
                self.log(f"host certificates signed for {', '.join(signed[:10])}{' ...' if len(signed) > 10 else ''}")
            issued = self.head.issued.get("head")
        if issued and issued.ip == self.me.ip:
            paths, changed = self.me.install(issued)
            if changed:
                self.log(
                    f"host certificates installed ({len(paths)}, valid to {utc_text(issued.valid_to)}Z): "
                    f"{self.reload()}"
                )
            if self.keys and (users := self.keys.follow(issued.rotation)):
                self.log(f"cluster keys installed for {', '.join(users)} (rotation {issued.rotation or 'none'})")
            if self.keys:
                self.me.login = (
                    self.keys.rotation or "",
                    {u: len(k.authorized) for u, k in self.keys.installed.items()},
                )
        self.me.publish()
