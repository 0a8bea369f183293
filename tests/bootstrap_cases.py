"""The scripts the program renders for every example and role, for the bootstrap tests and `make golden`."""

from pathlib import Path

from infra.catalog import lookup
from infra.components.compute import bootstrap_context
from infra.efa import efa_device_count, interface_layout
from infra.stackfile import load
from infra.userdata import render

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"


def contexts():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        cfg = load(path)
        c = cfg.cluster
        compute = lookup(c.compute.instance_type)
        for role, itype, efa in (("head", lookup(c.head_node.instance_type), True),
                                 ("compute", compute, c.compute.efa is not False)):
            devices = efa_device_count(interface_layout(itype, efa))
            yield f"{path.stem}-{role}", bootstrap_context(c, cfg.region, role, itype, compute, devices)


def cases():
    for name, ctx in contexts():
        yield name, render(ctx)
