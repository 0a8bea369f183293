"""`python3 -m hpcc_node.containers [--root DIR | --fsx DIR] COMMAND` (PYTHONPATH=/opt/hpcc/current): the shared
image cache (cache.py) on a node. Each command prints one JSON document on stdout; progress and the log go to stderr;
a bad reference or argument exits 2 with one line saying why, a failure exits 1 the same way (never a traceback).

  ensure REFERENCE   the cached squashfs's path ({"reference", "digest", "path"}), importing it first if no node has
  evict --cap SIZE   least recently used images removed until the cache holds at most SIZE (bytes, or K/M/G/T: 1024s)
  list               every cached image: references, digest, size, created, last used, importing node; with --json
                     (and --cap SIZE) the versioned listing `hpcc images` reads (hpcc_contract/image_list.py)

The cache is `<fsx>/.hpcc/images` (--fsx, else $HPCC_FSX_MOUNT, else /fsx), or --root. The digest and the import are
enroot's (enroot.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
from typing import Callable, List, NoReturn, Optional, TextIO, Tuple

from hpcc_contract import containers as c
from hpcc_contract import image_list
from hpcc_node.containers import locks
from hpcc_node.containers.cache import ImageCache, Importer, ImportFailed, Resolver
from hpcc_node.containers.enroot import enroot_digest, enroot_import

_SIZE = re.compile(r"([0-9]{1,20})([KMGT]?)(?:i?B)?")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class UsageError(ValueError):
    """A bad argument: exit 2."""


def parse_size(text: str) -> int:
    found = _SIZE.fullmatch(text.strip())
    if not found:
        raise UsageError(f"size {text[:40]!r} is not a number of bytes with an optional K, M, G or T")
    return int(found.group(1)) * _UNITS[found.group(2)]


def _entry_json(e: c.CacheEntry) -> dict:
    return {
        "references": e.references,
        "digest": e.digest,
        "size": e.size,
        "created": e.created,
        "lastUsed": e.last_used,
        "importedBy": e.imported_by,
    }


class _Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class _Parser(argparse.ArgumentParser):
    """argparse's, whose errors (its subcommands' too: they are made of the same class) raise instead of exiting."""

    def exit(self, status: int = 0, message: Optional[str] = None) -> NoReturn:
        raise _Exit(status, message or "")

    def error(self, message: str) -> NoReturn:
        raise _Exit(2, f"hpcc containers: {message} (--help for the commands)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python3 -m hpcc_node.containers", description="hpcc's shared image cache")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--root", help="the cache directory itself")
    where.add_argument("--fsx", help="the cluster file system's mount point (the cache is <fsx>/.hpcc/images)")
    p.add_argument("--node", help="this node's name (default: $HPCC_NODE, else the host name)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("ensure").add_argument("reference")
    sub.add_parser("evict").add_argument("--cap", required=True)
    listing = sub.add_parser("list")
    listing.add_argument("--json", action="store_true", help="the versioned listing `hpcc images` reads")
    listing.add_argument("--cap", help="with --json: the cache's cap, said in the listing")
    return p


def main(
    argv: Optional[List[str]] = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    enroot: Optional[Tuple[Resolver, Importer]] = None,
) -> int:
    """The command line; `enroot` the digest and import to use (default: enroot with this process's environment;
    warm.py gives the image service's)."""
    try:
        args = _parser().parse_args(argv)
        root = args.root or c.cache_root(args.fsx or os.environ.get("HPCC_FSX_MOUNT") or "/fsx")
        node = args.node or os.environ.get("HPCC_NODE") or None
        say = _say(err)
        resolve, import_ = enroot or (enroot_digest, enroot_import)
        cache = ImageCache(root, resolve, import_, node=node, log=say, progress=say)
        if args.command == "ensure":
            path = cache.ensure(args.reference)
            ref = c.parse_reference(args.reference)
            doc: object = {"reference": ref.canonical, "digest": c.digest_of(os.path.basename(path)), "path": path}
        elif args.command == "evict":
            evictions = cache.evict(parse_size(args.cap))
            doc = {"evictions": [e._asdict() for e in evictions], "images": [_entry_json(e) for e in cache.list()]}
        elif args.json:
            cap = parse_size(args.cap) if args.cap else None
            out.write(image_list.dumps_listing(image_list.Listing(root, cap, cache.list())))
            return 0
        else:
            doc = {"images": [_entry_json(e) for e in cache.list()]}
    except _Exit as e:
        if e.message:
            err.write(e.message.rstrip("\n") + "\n")
        return e.code
    except (UsageError, c.BadReference, c.BadRecord) as e:
        err.write(f"hpcc containers: {e}\n")
        return 2
    except (ImportFailed, locks.LockTimeout, OSError, subprocess.SubprocessError) as e:
        err.write(f"hpcc containers: {e}\n")
        return 1
    out.write(json.dumps(doc, indent=1) + "\n")
    return 0


def _say(err: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        err.write(line + "\n")
        err.flush()

    return say


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sys.exit(main())
