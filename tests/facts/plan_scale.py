"""Plans above the config's node cap, for tests of limits that only bind there: the cap (infra/facts/limits.py
MAX_NODES, and the models' ComputeNodes.count and NodeGroup.count) lifted for the duration."""

from __future__ import annotations

import contextlib

from annotated_types import Le

from infra.config import model as config
from infra.config import nodes
from infra.facts import limits

MODELS = (nodes.ComputeNodes, nodes.NodeGroup, config.ClusterConfig, config.StackConfig)


@contextlib.contextmanager
def node_cap(cap: int):
    fields = [nodes.ComputeNodes.model_fields["count"], nodes.NodeGroup.model_fields["count"]]
    kept = [list(f.metadata) for f in fields]
    kept_cap = limits.MAX_NODES
    for field, metadata in zip(fields, kept, strict=True):
        field.metadata[:] = [Le(cap) if isinstance(m, Le) else m for m in metadata]
    limits.MAX_NODES = cap
    try:
        for model in MODELS:
            model.model_rebuild(force=True)
        yield
    finally:
        for field, metadata in zip(fields, kept, strict=True):
            field.metadata[:] = metadata
        limits.MAX_NODES = kept_cap
        for model in MODELS:
            model.model_rebuild(force=True)
