"""`hpcc images [STACK_FILE]` (the shared image cache: each image's references, digest, size, last use, and the total
against the cap) and `hpcc images pull IMAGE [STACK_FILE]` (the cache warmed ahead of a job), through the head
(infra/ops/images.py). A bad IMAGE exits 2 naming it, a failure on the head 1 with the head's own last line, never a
traceback. Registered on the app by infra/ops/cli.py."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from hpcc_contract.image_list import dumps_listing
from infra.ops import OpsError
from infra.ops import cli_support as support
from infra.ops.cli_report import fail
from infra.ops.cli_support import ClusterName, HeadUser, Region, StackFile, StackName, Via


class _ListByDefault(TyperGroup):
    """`hpcc images [STACK_FILE] [OPTIONS]` is `hpcc images list ...`: anything but a subcommand's name lists."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["list", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    add_completion=False,
    cls=_ListByDefault,
    help="The cluster's shared image cache: what it holds (`hpcc images`), warmed ahead of a job (`hpcc images pull`).",
)


def head_runner(config, cluster, stack, region, via: str | None, user: str):
    """The runner that reaches the cluster's head (the one seam the tests replace)."""
    from infra.ops.images import head_via, stream_runner  # lazy: boto3 for the head's address

    name, where = support.target_of(config, cluster, stack, region)
    if via:
        return name, stream_runner(shlex.split(via))
    aws = support.aws_for(where)
    return name, stream_runner(support.ops(lambda: head_via(aws, name, aws.region, user)))


def _progress(console: Console) -> Callable[[str], None]:
    return lambda line: console.print(line, markup=False, highlight=False, style="dim")


@app.command("list")
def list_images(
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    via: Via = None,
    user: HeadUser = "ubuntu",
    as_json: bool = typer.Option(False, "--json", help="the head's listing as JSON (hpcc_contract/image_list.py)"),
):
    """What the shared image cache holds: references, digest, size, last use, who imported it; the total vs the cap."""
    from infra.ops import images  # lazy: its runner

    name, runner = head_runner(config, cluster, stack, region, via, user)
    found = support.ops(lambda: images.listing(runner, _progress(Console(stderr=True))))
    if as_json:
        print(dumps_listing(found), end="")
        return
    out = Console()
    table = Table("image", "digest", "size", "last use", "imported by", title=f"{name}: images cached in {found.root}")
    for row in images.rows(found, time.time()):
        table.add_row(*map(escape, row))
    out.print(table)
    out.print(images.total_line(found), markup=False, highlight=False)


@app.command()
def pull(
    image: str = typer.Argument(
        ..., metavar="IMAGE", help="as --container-image takes it: nvcr.io#nvidia/pytorch:24.07-py3"
    ),
    config: StackFile = None,
    cluster: ClusterName = None,
    stack: StackName = None,
    region: Region = None,
    via: Via = None,
    user: HeadUser = "ubuntu",
    timeout_minutes: float = typer.Option(
        None, "--timeout-minutes", help="give up after this long (default 90: a 20 GB image takes minutes)"
    ),
    refresh: bool = typer.Option(
        False, "--refresh", help="ask the registry again even if the cache holds the reference (a tag that moved)"
    ),
    as_json: bool = typer.Option(False, "--json", help="the cached image's entry and path as JSON"),
):
    """Import IMAGE into the shared cache once, from the head with the image service's credentials, ahead of a job:
    every node then starts it from the cache. An image already cached is said to be, and no registry is asked."""
    from infra.ops import images  # lazy: its runner

    try:
        images.check_reference(image)  # before anything reaches AWS or the head
    except OpsError as e:
        raise fail(str(e), 2) from None
    if timeout_minutes is not None and timeout_minutes <= 0:
        raise fail(f"--timeout-minutes must be above 0; got {timeout_minutes}")
    name, runner = head_runner(config, cluster, stack, region, via, user)
    err = Console(stderr=True)
    if not as_json:
        err.print(f"pulling {escape(image)} into {escape(name)}'s image cache, from its head", highlight=False)
    minutes = timeout_minutes or images.PULL_TIMEOUT_MIN
    done = support.ops(lambda: images.pull(runner, image, _progress(err), minutes * 60, refresh))
    e = done.entry
    if as_json:
        print(json.dumps({"already": done.already, "path": done.path, "digest": e.digest, "size": e.size,
                          "references": e.references}, indent=1))  # fmt: skip
        return
    how = "already cached: no registry asked (--refresh to resolve the tag again)" if done.already else "imported"
    out = Console()
    out.print(f"{image}: {how}", markup=False, highlight=False)
    out.print(f"  {done.path}\n  {e.digest}, {images.human_size(e.size)}", markup=False, highlight=False)
    out.print(images.total_line(done.listing), markup=False, highlight=False)
