"""`hpcc images` and `hpcc images pull IMAGE` (issue 35): the cluster's shared image cache, seen and warmed from the
operator's terminal through the head, which mounts the cluster's file system (templates/steps/mount.sh.j2, a step
of every role).

On the head both run the node package's own command, `python3 -m hpcc_node.containers` from the bundle it runs
(hpcc_node/containers/__main__.py), as root (`sudo -n`), with the file system's mount point and the cache's cap read
from the head's applied settings (/etc/hpcc/settings: MOUNT_POINT, IMAGE_CACHE_GIB, values the node checked against
hpcc_contract/settings.py before applying them). The listing comes back as the versioned document
hpcc_contract/image_list.py defines, never as text to parse. A pull runs `ensure` through
hpcc_node/containers/warm.py: the import the node's image service makes (service.py root_enroot: root's private
ENROOT_CONFIG_PATH, /etc/hpcc/enroot-root), so no credential crosses to the operator or into an argument. Its
progress (the cache's lines, enroot's) streams from the head's stderr; it gives up at a deadline, saying so.

A pull first reads the listing: an image whose reference the cache already holds is said to be cached and nothing
is asked of a registry (`--refresh` resolves the tag again, for a tag that moved). The reference is checked by the
contract's parser (hpcc_contract/containers.py parse_reference) before anything runs, and reaches the head's script
quoted (shlex.quote) as one argument.

How the head is reached is `hpcc check fabric`'s: `--via` (the command that reaches it, e.g. an ssh through Session
Manager's AWS-StartSSHSession), else ssh to the head's public address; the script goes on stdin (`bash -s`)."""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from hpcc_contract import containers as c
from hpcc_contract.image_list import Listing, cached_as, loads_listing
from hpcc_contract.names import HEAD
from infra.ops import OpsError

HEAD_SETTINGS = "/etc/hpcc/settings"  # the agent's applied settings (hpcc_node/agent.py Config.path)
NODE_PACKAGE = "/opt/hpcc/current"  # the bundle the head runs (hpcc_node/upgrade.py OPT)
LIST_TIMEOUT_S = 120.0
PULL_TIMEOUT_MIN = 90.0  # a 20 GB image from a slow registry takes minutes; another node's import may come first
SSM_VIA_HINT = (
    "ssh -o ProxyCommand='aws ssm start-session --target %h --document-name AWS-StartSSHSession "
    "--parameters portNumber=%p' ubuntu@<the head's instance id>"
)


class HeadRun(NamedTuple):
    code: int
    out: str  # stdout: the listing document
    err: list[str]  # stderr's last lines


HeadRunner = Callable[[str, Callable[[str], None], float], HeadRun]  # (script, each stderr line, deadline s)


class HeadTimeout(OpsError):
    """The head did not finish within the deadline."""


def _prelude() -> str:
    """Read the head's applied settings (as root: the file is the agent's) into fsx and cap."""
    return (
        "set -euo pipefail\n"
        f"settings=$(sudo -n cat {HEAD_SETTINGS})\n"
        "fsx=$(printf '%s\\n' \"$settings\" | sed -n 's/^MOUNT_POINT=//p' | head -n 1)\n"
        "cap=$(printf '%s\\n' \"$settings\" | sed -n 's/^IMAGE_CACHE_GIB=//p' | head -n 1)\n"
        f"cache() {{ module=$1; shift; sudo -n env PYTHONPATH={NODE_PACKAGE} python3 -m \"$module\" "
        f'--fsx "${{fsx:-/fsx}}" --node {HEAD} "$@"; }}\n'
    )


_LIST = 'cache hpcc_node.containers list --json ${cap:+--cap "${cap}G"}\n'


def list_script() -> str:
    return _prelude() + _LIST


def pull_script(reference: str) -> str:
    """Import `reference` as the image service would (its progress on stderr), then the listing on stdout."""
    c.parse_reference(reference)  # the script's own guard: nothing unparsed reaches bash
    return _prelude() + f"cache hpcc_node.containers.warm ensure {shlex.quote(reference)} >/dev/null\n" + _LIST


def check_reference(text: str) -> c.ImageRef:
    """IMAGE as the contract parses it; OpsError naming the argument and what is wrong."""
    try:
        return c.parse_reference(text)
    except c.BadReference as e:
        raise OpsError(
            f"IMAGE: {e}; write it as pyxis' --container-image takes it, e.g. nvcr.io#nvidia/pytorch:24.07-py3"
        ) from None


def read_listing(run: HeadRun, what: str) -> Listing:
    """The head's answer as a listing; OpsError with the head's own last line when it failed."""
    if run.code != 0:
        said = run.err[-1] if run.err else "no output"
        hint = " (the head's bundle may predate `hpcc images`: update it with `hpcc up`)" if run.code == 2 else ""
        raise OpsError(f"{what} on the head failed (exit {run.code}): {said}{hint}")
    try:
        return loads_listing(run.out)
    except c.BadRecord as e:
        raise OpsError(f"{what}: the head's listing does not read: {e}") from None


def listing(runner: HeadRunner, say: Callable[[str], None] = lambda line: None) -> Listing:
    return read_listing(runner(list_script(), say, LIST_TIMEOUT_S), "listing the image cache")


class Pulled(NamedTuple):
    entry: c.CacheEntry
    path: str
    already: bool  # cached before this pull: nothing was asked of a registry
    listing: Listing


def pull(
    runner: HeadRunner,
    reference: str,
    say: Callable[[str], None],
    timeout_s: float = PULL_TIMEOUT_MIN * 60,
    refresh: bool = False,
) -> Pulled:
    """Warm the cache with `reference` (checked first); the entry, its path, and whether it was there already."""
    ref = check_reference(reference)
    if not refresh:
        before = listing(runner)
        found = cached_as(before, reference)
        if found is not None:
            return Pulled(found, before.path(found.digest), True, before)
    try:
        after = read_listing(runner(pull_script(reference), say, timeout_s), f"importing {ref.canonical}")
    except HeadTimeout as e:
        raise OpsError(
            f"{e}. The import may still finish on the head; `hpcc images pull` again waits for it (one import per "
            "image), or give a longer --timeout-minutes"
        ) from None
    found = cached_as(after, reference)
    if found is None:
        raise OpsError(f"{ref.canonical}: the head said it imported it, but its listing has no such image")
    return Pulled(found, after.path(found.digest), False, after)


# -- the terminal's view --------------------------------------------------------------------------------------------


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def ago(then: float, now: float) -> str:
    s = max(0.0, now - then)
    for span, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if s >= span:
            return f"{s / span:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def short(digest: str) -> str:
    return digest[: len("sha256:") + 12]


def rows(found: Listing, now: float) -> list[tuple[str, str, str, str, str]]:
    """(references, digest, size, last use, imported by) per image, most recently used first."""
    return [
        (
            "\n".join(e.references) or "(unknown: no entry document)",
            short(e.digest),
            human_size(e.size),
            ago(e.last_used, now),
            e.imported_by or "-",
        )
        for e in found.images
    ]


def total_line(found: Listing) -> str:
    total = f"{len(found.images)} image(s), {human_size(found.total)}"
    if found.cap_bytes is None:
        return f"{total}; the head's settings give no cap (containers off, or a bundle from before the cap)"
    share = found.total / found.cap_bytes if found.cap_bytes else 0.0
    over = "; over it: the head evicts the least recently used within 10 min" if found.total > found.cap_bytes else ""
    return f"{total} of a {human_size(found.cap_bytes)} cap ({share:.0%}){over}"


# -- reaching the head ------------------------------------------------------------------------------------------------


def head_via(aws, cluster: str, region: str, user: str) -> list[str]:
    """ssh to the running head's public address; OpsError saying to give --via when it has none."""
    from infra.ops.forward import running_head  # lazy: boto3

    head = running_head(aws, cluster, region)
    public = head.get("PublicIpAddress")
    if not public:
        raise OpsError(
            f"the head of {cluster} ({head['InstanceId']}) has no public address (no ssh.allowedCidrs): give --via, "
            f"the command that reaches it, e.g. --via \"{SSM_VIA_HINT}\""
        )
    return ["ssh", "-o", "BatchMode=yes", f"{user}@{public}"]


def stream_runner(via: Sequence[str], clock: Callable[[], float] = time.monotonic) -> HeadRunner:
    """Runs the script on the head through `via` (`bash -s`, the script on stdin), each stderr line passed on as it
    comes; HeadTimeout (the child killed) past the deadline."""

    def run(script: str, on_line: Callable[[str], None], timeout_s: float) -> HeadRun:
        try:
            child = subprocess.Popen(
                [*via, "bash", "-s"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as e:
            raise OpsError(f"{shlex.join(via)}: {e}") from None
        tail: list[str] = []
        out: list[str] = []

        def follow() -> None:
            assert child.stderr is not None
            for line in child.stderr:
                tail[:] = (tail + [line.rstrip("\n")])[-20:]
                on_line(line.rstrip("\n"))

        def collect() -> None:
            assert child.stdout is not None
            out.append(child.stdout.read())

        threads = [threading.Thread(target=follow, daemon=True), threading.Thread(target=collect, daemon=True)]
        for t in threads:
            t.start()
        assert child.stdin is not None
        child.stdin.write(script)
        child.stdin.close()
        try:
            code = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            last = f" (its last line: {tail[-1]})" if tail else ""
            raise HeadTimeout(f"gave up after {timeout_s / 60:.0f} min waiting for the head{last}") from None
        for t in threads:
            t.join(timeout=10)
        return HeadRun(code, "".join(out), tail)

    return run
