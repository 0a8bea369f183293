"""A mock monitor that records every registration: type, name, parent, dependencies, inputs, the resource
options Pulumi's engine would act on, the id and the outputs the mock returned.

With an earlier plan (`kept`), it also does what the engine does for `ignoreChanges` before any diff: the
ignored input paths take the previous inputs' values, so the mock creates the resource with them and every
resource downstream sees the kept value (pulumi/pulumi pkg/resource/deploy/step_generator.go,
`processIgnoreChanges`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pulumi.runtime import rpc

from infra.plan.internals import mock_monitor, secret_signature
from infra.plan.paths import MISSING, get_path, parse_path, set_path
from infra.plan.replacement_rules import regional

SECRET_SIG_KEY, SECRET_SIG = secret_signature()
MockMonitor = mock_monitor()


def plain(value):
    """Inputs with Pulumi's secret envelopes removed (pulumi-aws marks every SSM parameter value secret)
    and whole numbers as ints (the wire protocol carries every number as a double)."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG_KEY) == SECRET_SIG:
            return plain(value.get("value"))
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


# (type, name, ignored paths, the monitor's records so far) -> {path: previous value or MISSING}, or None
KeptInputs = Callable[[str, str, list[str], list[dict]], "dict[str, object] | None"]


def options_of(request) -> dict:
    """The resource options the engine acts on in an update, as the RegisterResource request carries them."""
    return {
        "protect": bool(request.protect),
        "ignoreChanges": list(request.ignoreChanges),
        "replaceOnChanges": list(request.replaceOnChanges),
        "deleteBeforeReplace": bool(request.deleteBeforeReplace),
        "retainOnDelete": bool(request.retainOnDelete),
    }


def keep_ignored(struct, kept: dict) -> None:
    """Set each kept path in the request's property Struct (inside a secret envelope where there is one);
    a path the previous inputs lacked is removed, as the engine does."""
    for path, value in kept.items():
        parts = parse_path(path)
        top = parts[0]
        current = plain(rpc.deserialize_property(struct[top])) if top in struct.fields else MISSING
        secret = top in struct.fields and _is_secret(struct[top])
        updated = set_path(current, parts[1:], value)
        if updated is MISSING:
            if top in struct.fields:
                del struct[top]
            continue
        struct.update({top: {SECRET_SIG_KEY: SECRET_SIG, "value": updated} if secret else updated})


def _is_secret(value) -> bool:
    return (
        hasattr(value, "fields")
        and value.fields.get(SECRET_SIG_KEY) is not None
        and value[SECRET_SIG_KEY] == SECRET_SIG
    )


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks, kept: KeptInputs | None = None):
        super().__init__(mocks)
        self.records: list[dict] = []
        self.kept = kept
        self._lock = threading.Lock()

    def RegisterResource(self, request):
        if request.type != "pulumi:pulumi:Stack" and self.kept and request.ignoreChanges:
            with self._lock:
                so_far = list(self.records)
            patch = self.kept(request.type, request.name, list(request.ignoreChanges), so_far)
            if patch:
                keep_ignored(request.object, patch)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self._record(request, response)
        return response

    def _record(self, request, response) -> None:
        urns = set(request.dependencies)
        for deps in request.propertyDependencies.values():
            urns.update(deps.urns)
        # The mocks already deserialized these; decoding the request again would double the cost.
        inputs = (
            self.mocks.inputs.pop((request.type, request.name), None)
            if hasattr(self.mocks, "inputs")
            else plain(rpc.deserialize_properties(request.object))
        )
        outputs = (
            self.mocks.outputs.pop((request.type, request.name), {})
            if hasattr(self.mocks, "outputs")
            else self._generated(request, inputs or {})
        )
        if request.custom and hasattr(self.mocks, "region") and regional(request.type) and inputs is not None:
            # pulumi-aws 7 gives every regional resource a `region` input, the provider's unless set
            # (pulumi/pulumi-aws#5521)
            inputs = {**inputs, "region": inputs.get("region") or self.mocks.region}
        record = {
            "type": request.type,
            "name": request.name,
            "parent": None
            if not request.parent or "::pulumi:pulumi:Stack::" in request.parent
            else _name(request.parent),
            "dependsOn": sorted({_name(u) for u in urns}),
            "inputs": inputs,
            "custom": bool(request.custom),
            "id": response.id or None,
            "outputs": outputs,
            "options": options_of(request),
            "propertyDependencies": {
                prop: sorted({_name(u) for u in deps.urns})
                for prop, deps in sorted(request.propertyDependencies.items())
                if deps.urns
            },
        }
        with self._lock:
            self.records.append(record)

    def _generated(self, request, inputs: dict) -> dict:
        """What other mocks returned beyond the inputs they were given."""
        registered = self.resources.get(self.make_urn(request.parent, request.type, request.name))
        state = plain(registered.state) if registered else {}
        return {k: v for k, v in state.items() if get_path(inputs, [k]) != v}
