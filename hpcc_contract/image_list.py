"""The head's listing of the shared image cache, as `hpcc images` reads it (issue 35): what `python3 -m
hpcc_node.containers list --json` prints on the head and the operator's `hpcc images` (infra/ops/images.py) parses.
Standard library only, like the rest of the contract; versioned IMAGE_LIST (formats.py).

The document: `{"format", "root", "capBytes", "images": [...]}`, `root` the cache directory on the head (an image's
squashfs is `<root>/sha256-<hex>.sqsh`), `capBytes` the cache's cap as the head's settings give it (null when they
give none: containers off, or settings from before the key), and each image the cache's entry (containers.py
CacheEntry: references, digest, size, created, lastUsed, importedBy), most recently used first."""

from __future__ import annotations

import json
from typing import Any, Dict, List, NamedTuple, Optional

from hpcc_contract import containers as c
from hpcc_contract import formats


class Listing(NamedTuple):
    root: str
    cap_bytes: Optional[int]
    images: List[c.CacheEntry]

    @property
    def total(self) -> int:
        return sum(e.size for e in self.images)

    def path(self, digest: str) -> str:
        return self.root.rstrip("/") + "/" + c.image_name(digest)


def entry_doc(e: c.CacheEntry) -> Dict[str, Any]:
    return {
        "references": list(e.references),
        "digest": e.digest,
        "size": int(e.size),
        "created": e.created,
        "lastUsed": e.last_used,
        "importedBy": e.imported_by,
    }


def dumps_listing(listing: Listing) -> str:
    doc = {
        "root": listing.root,
        "capBytes": None if listing.cap_bytes is None else int(listing.cap_bytes),
        "images": [entry_doc(e) for e in listing.images],
    }
    return json.dumps(formats.stamp(doc, formats.IMAGE_LIST), indent=1) + "\n"


def loads_listing(text: str) -> Listing:
    """The head's listing; NewerFormat for a newer one, BadRecord naming what is malformed."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise c.BadRecord(f"image listing: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise c.BadRecord("image listing: not a JSON object")
    formats.check_doc("image listing", doc, formats.IMAGE_LIST)
    root, cap, images = doc.get("root"), doc.get("capBytes"), doc.get("images")
    if not isinstance(root, str) or not root.startswith("/") or "\n" in root:
        raise c.BadRecord(f"image listing: root {str(root)[:40]!r} is not an absolute path")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        raise c.BadRecord(f"image listing: capBytes {str(cap)[:20]!r} is not a number of bytes")
    if not isinstance(images, list) or not all(isinstance(i, dict) for i in images):
        raise c.BadRecord("image listing: images is not a list of objects")
    # Each image is read by the entry document's own rules (its fields are the entry's, stamped as one).
    entries = [c.loads_entry(json.dumps(formats.stamp(i, formats.IMAGE_ENTRY))) for i in images]
    return Listing(root, cap, entries)


def cached_as(listing: Listing, reference: str) -> Optional[c.CacheEntry]:
    """The entry a reference (canonical, as parse_reference gives it) last resolved to, else None. A reference pinned
    to a digest is that digest's entry whatever references it was reached by."""
    ref = c.parse_reference(reference)
    for entry in listing.images:
        if ref.digest and entry.digest == ref.digest:
            return entry
        if ref.canonical in entry.references:
            return entry
    return None
