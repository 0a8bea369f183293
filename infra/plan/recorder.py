"""A mock monitor that records every registration: type, name, parent, dependencies and inputs."""

from __future__ import annotations

import threading

from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor


def plain(value):
    """Inputs with Pulumi's secret envelopes removed (pulumi-aws marks every SSM parameter value secret)
    and whole numbers as ints (the wire protocol carries every number as a double)."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            return plain(value.get("value"))
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks):
        super().__init__(mocks)
        self.records: list[dict] = []
        self._lock = threading.Lock()

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            urns = set(request.dependencies)
            for deps in request.propertyDependencies.values():
                urns.update(deps.urns)
            record = {
                "type": request.type,
                "name": request.name,
                "parent": None if not request.parent or "::pulumi:pulumi:Stack::" in request.parent else _name(request.parent),
                "dependsOn": sorted({_name(u) for u in urns}),
                # The mocks already deserialized these; decoding the request again would double the cost.
                "inputs": self.mocks.inputs.pop((request.type, request.name), None)
                if hasattr(self.mocks, "inputs") else plain(rpc.deserialize_properties(request.object)),
            }
            with self._lock:
                self.records.append(record)
        return response
