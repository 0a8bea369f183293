"""What every `hpcc` command shares: messages for bad input and failed operations (never a traceback), the cluster
a command acts on (a stack file, --cluster or --stack: infra/ops/project.py target), the question `up` and
`destroy` ask before spending money or deleting data, and hpcc's version. How a failure is reported (the message,
the exit code) is infra/ops/cli_report.py's."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Annotated

import typer

from hpcc_contract.formats import NewerFormat
from infra.config.parse import ConfigError
from infra.ops import OpsError
from infra.ops.cli_report import config_error, fail
from infra.ops.project import ProjectError, stack_name, target

STACK_FILE_HELP = "the cluster's stack file (Pulumi.<stack>.yaml): its cluster name and region"
CLUSTER_HELP = "cluster name (its hpcc:cluster tag), instead of a stack file"
STACK_HELP = "Pulumi stack name: its Pulumi.<stack>.yaml here, else the stack's outputs (needs the Pulumi CLI)"
REGION_HELP = "AWS region (default: the stack file's aws:region, else AWS_REGION or your profile's)"
# The parameters every command on a running cluster takes, the same way (infra/ops/project.py target).
StackFile = Annotated[Path | None, typer.Argument(metavar="STACK_FILE", help=STACK_FILE_HELP)]
ClusterName = Annotated[str | None, typer.Option("--cluster", help=CLUSTER_HELP)]
StackName = Annotated[str | None, typer.Option("--stack", help=STACK_HELP)]
Region = Annotated[str | None, typer.Option("--region", help=REGION_HELP)]
# The commands that run on the head (hpcc check fabric, hpcc images) reach it the same way.
VIA_HELP = "the command that reaches the head, e.g. 'ssh ubuntu@HEAD' (default: ssh USER@<the head's public address>)"
Via = Annotated[str | None, typer.Option("--via", help=VIA_HELP)]
HeadUser = Annotated[str, typer.Option("--user", help="the head's login user for the default --via")]


def version() -> str:
    """The installed distribution's version (`hpcc --version`)."""
    try:
        return installed_version("hpcc")
    except PackageNotFoundError:
        return "unknown (not installed: a checkout without `pip install -e .`)"


def ops(fn):
    """Run an operator command; known failures become a message and a non-zero exit, never a traceback."""
    from botocore.exceptions import BotoCoreError, ClientError  # lazy: boto3

    try:
        return fn()
    except ConfigError as e:
        raise config_error(e) from None
    except OpsError as e:
        raise fail(str(e), 1) from None
    except NewerFormat as e:  # the ledger or a document of the cluster's, written by a newer hpcc
        raise fail(str(e), 1) from None
    except ClientError as e:
        raise fail(f"AWS refused: {e}", 1) from None
    except BotoCoreError as e:
        raise fail(f"cannot talk to AWS: {e} (check credentials, --region and the network)", 1) from None


def stack_of(config: Path, given: str | None) -> str:
    """--stack, else the file's own stack (Pulumi.<stack>.yaml); a usage error (exit 2) when neither says."""
    try:
        return stack_name(config, given)
    except ProjectError as e:
        raise fail(str(e)) from None


def aws_for(region: str | None):
    """The AWS clients a command on a running cluster uses: the one seam the tests replace."""
    from infra.ops.aws import Aws  # lazy: boto3

    return Aws(region)


def target_of(
    config: Path | None, cluster: str | None, stack: str | None, region: str | None
) -> tuple[str, str | None]:
    """The cluster and region a command acts on (infra/ops/project.py target): a usage error (exit 2) when unclear."""
    from infra.ops.up import stack_outputs  # lazy: boto3, pulumi

    try:
        return target(config, cluster, stack, region, outputs_of=lambda s: ops(lambda: stack_outputs(s)))
    except ProjectError as e:
        raise fail(str(e)) from None


def interactive() -> bool:
    """Can hpcc ask a question (a terminal on stdin)?"""
    return sys.stdin.isatty()


def asker(yes: bool, flag_hint: str):
    """`confirm(question)` for up and destroy: None with --yes (no question); without a terminal, a refusal that
    says to pass --yes; else a y/N prompt (default no)."""
    if yes:
        return None

    def confirm(question: str) -> bool:
        if not interactive():
            raise OpsError(
                f"refusing to go on without asking: {question} needs a yes, and there is no terminal to "
                f"ask on. Run it again with --yes to go ahead{flag_hint}"
            )
        return typer.confirm(question, default=False)

    return confirm
