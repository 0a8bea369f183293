"""`hpcc ssh [NODE]`: a shell on the head, or on a node through the head, the way the stack is reached.

Session Manager (no `ssh.allowedCidrs`: every node private): `aws ssm start-session` to the head's instance with
AWS-StartInteractiveCommand running `sudo -iu <login user>`, because Session Manager logs in as ssm-user, who holds
no cluster key (infra/program/outputs.py ssm_login, the command `hpcc up` prints); a node is reached from there with
the login user's `ssh NODE` (the cluster's key and host certificates, inside the VPC). SSH (`ssh.allowedCidrs`):
`ssh -t <login user>@<the head's public IP>`, and `ssh NODE` from there for a node.

The command is built from EC2's answer (the running head, tagged hpcc:role=head) and run in place of hpcc
(`os.execvp`), so the terminal is the session's; `--print` prints it instead. Only a node name hpcc gives
(hpcc_contract/hosts.py NODE_NAME) is put into the remote command, never other text.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass

from hpcc_contract.hosts import valid_name
from hpcc_contract.names import HEAD
from infra.ops import OpsError
from infra.ops.aws import Aws
from infra.ops.status.cluster import head_instance
from infra.ops.store import cluster_instances

SSM_PLUGIN = "session-manager-plugin"
SSM_PLUGIN_DOCS = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-install-plugin.html"
)


@dataclass(frozen=True)
class Login:
    argv: list[str]
    how: str  # "Session Manager" | "SSH"
    head: str  # the head's instance id

    def shown(self) -> str:
        return shlex.join(self.argv)


def ssm_login(region: str, instance_id: str, user: str, then: str = "") -> list[str]:
    """Session Manager's command as argv: AWS-StartInteractiveCommand runs `sudo -iu USER [then]` as the session
    (https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-working-with-sessions-start.html)."""
    command = f"sudo -iu {user}" + (f" {then}" if then else "")
    return [
        "aws",
        "ssm",
        "start-session",
        "--region",
        region,
        "--target",
        instance_id,
        "--document-name",
        "AWS-StartInteractiveCommand",
        "--parameters",
        f"command={command}",
    ]


def login(
    aws: Aws,
    cluster: str,
    node: str | None = None,
    *,
    user: str = "ubuntu",
    via_ssh: bool | None = None,
    region: str | None = None,
) -> Login:
    """The command that opens a shell on the head (`node` None or `head`) or on `node` through the head. `via_ssh`:
    the stack's choice (ssh.allowedCidrs given); None: SSH when the head has a public IP, else Session Manager."""
    if node is not None and node != HEAD and not valid_name(node):
        raise OpsError(f"{node!r} is not a node name (head, or <group>-000 as `hpcc status` lists them)")
    running = [i for i in cluster_instances(aws, cluster) if i.get("State", {}).get("Name") == "running"]
    head = head_instance(running)
    if head is None:
        raise OpsError(
            f"no running head node for hpcc:cluster={cluster} in {aws.region}: check the name and the "
            "region, or `hpcc status`"
        )
    then = f"ssh -t {node}" if node and node != HEAD else ""
    public = head.get("PublicIpAddress")
    if via_ssh is None:
        via_ssh = bool(public)
    if via_ssh:
        if not public:
            raise OpsError(
                f"the head of {cluster} ({head['InstanceId']}) has no public IP: the stack has no "
                "ssh.allowedCidrs, so log in with Session Manager (hpcc ssh without --ssh)"
            )
        argv = ["ssh", "-t", f"{user}@{public}"] + ([then] if then else [])
        return Login(argv, "SSH", head["InstanceId"])
    return Login(ssm_login(region or aws.region, head["InstanceId"], user, then), "Session Manager", head["InstanceId"])


def missing_tools(how: str, which: Callable[[str], str | None] | None = None) -> str | None:
    """What the local machine lacks to open the session, with where to get it; None when nothing."""
    which = which or shutil.which
    if how == "SSH":
        return None if which("ssh") else "no `ssh` on PATH: install an OpenSSH client"
    if not which("aws"):
        return "no `aws` on PATH: install the AWS CLI (https://aws.amazon.com/cli/), then its Session Manager plugin"
    if not which(SSM_PLUGIN):
        return f"no `{SSM_PLUGIN}` on PATH: the AWS CLI needs it for Session Manager ({SSM_PLUGIN_DOCS})"
    return None


def run_session(argv: list[str]) -> None:
    """Become the session (the terminal is its own): never returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)
