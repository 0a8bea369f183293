"""Plans above the config's node cap, for tests of limits that only bind there: the cap (infra/config.py,
ComputeNodes.count) lifted for the duration, as issue 19's measurements lifted it by hand."""

from __future__ import annotations

import contextlib

from annotated_types import Le

from infra import config


@contextlib.contextmanager
def node_cap(cap: int):
    field = config.ComputeNodes.model_fields["count"]
    kept = list(field.metadata)
    field.metadata[:] = [Le(cap) if isinstance(m, Le) else m for m in kept]
    try:
        for model in (config.ComputeNodes, config.ClusterConfig, config.StackConfig):
            model.model_rebuild(force=True)
        yield
    finally:
        field.metadata[:] = kept
        for model in (config.ComputeNodes, config.ClusterConfig, config.StackConfig):
            model.model_rebuild(force=True)
