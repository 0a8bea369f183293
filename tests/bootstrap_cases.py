"""The scripts the program renders for every example and role, for the bootstrap tests and `make golden`."""

from pathlib import Path

from infra.node_settings import settings_value
from infra.roles import role_contexts
from infra.stackfile import load
from infra.userdata import render
from tests.instance_data import offline_facts

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"


def configs():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        yield path.stem, load(path)


def contexts():
    for stem, cfg in configs():
        for role, ctx in role_contexts(cfg.cluster, cfg.region, offline_facts()).items():
            yield f"{stem}-{role}", ctx


def settings():
    """example -> the settings parameter's value the program renders for it."""
    return {stem: settings_value(cfg.cluster, cfg.region, offline_facts()) for stem, cfg in configs()}


def cases():
    for name, ctx in contexts():
        yield name, render(ctx)
