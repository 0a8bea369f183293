"""An earlier plan's output directory (`hpcc plan --out DIR`), read back as the state a second `pulumi up`
would start from: its resources' inputs, ids and outputs, and the options they were registered with."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path

from infra.plan.paths import MISSING, get_path, parse_path
from infra.plan.replacement_rules import regional
from infra.plan.symbols import generated_values, translate

RECORD_KEYS = ("type", "name", "inputs", "custom", "id", "outputs", "options", "propertyDependencies")


def _outputs(path: Path) -> dict:
    """An earlier plan's outputs, or {} (an unreadable one only loses the summary in the user's terms)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


class PreviousPlanError(Exception):
    """--previous does not name an earlier plan's output: a message naming the fix, never a traceback."""


@dataclass
class PreviousPlan:
    resources: list[dict]
    where: str = ""
    replace: frozenset[str] = frozenset()  # names replaced on request (`pulumi up --replace`): nothing is kept
    outputs: dict = field(default_factory=dict)  # its outputs.json (the cluster's shape: infra/plan/shape.py)
    _by_key: dict = field(default_factory=dict, repr=False)
    _tokens: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._by_key = {(r["name"], r["type"]): r for r in self.resources}
        for r in self.resources:
            self._tokens.update(generated_values(r))
        self._lock = threading.Lock()  # registrations run on several threads
        self._new_values: dict[str, str] = {}  # symbol -> value, from the new plan's records read so far
        self._read = 0

    def replacing(self, names: list[str] | tuple[str, ...]) -> PreviousPlan:
        """The same earlier plan, with these resources replaced on request, as `pulumi up --replace` does."""
        unknown = sorted(set(names) - {r["name"] for r in self.resources})
        if unknown:
            raise PreviousPlanError(f"--previous {self.where}: no resource named {', '.join(unknown)} to replace")
        return PreviousPlan(self.resources, self.where, frozenset(names), self.outputs)

    @classmethod
    def load(cls, directory: str | Path) -> PreviousPlan:
        root = Path(directory)
        hint = "give the --out directory of an earlier `hpcc plan`"
        if not root.is_dir():
            raise PreviousPlanError(f"--previous {root}: no such directory; {hint}")
        path = root / "resources.json"
        if not path.is_file():
            raise PreviousPlanError(f"--previous {root}: no resources.json, so it is not a plan's output; {hint}")
        try:
            resources = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PreviousPlanError(f"--previous {path}: not readable as JSON ({exc}); {hint}") from None
        if (
            not isinstance(resources, list)
            or not all(isinstance(r, dict) for r in resources)
            or not all(isinstance(r.get("type"), str) and isinstance(r.get("name"), str) for r in resources)
        ):
            raise PreviousPlanError(f"--previous {path}: not a list of resources with type and name; {hint}")
        old_format = [r["name"] for r in resources if any(k not in r for k in RECORD_KEYS)]
        if old_format:
            raise PreviousPlanError(
                f"--previous {path}: {old_format[0]} has no id, outputs or options (written by an older hpcc "
                "plan); plan the old config again with this hpcc (hpcc plan OLD.yaml --out DIR) and compare with that"
            )
        no_region = [
            r["name"]
            for r in resources
            if r.get("custom", True) and regional(r["type"]) and "region" not in (r.get("inputs") or {})
        ]
        if no_region:
            raise PreviousPlanError(
                f"--previous {path}: {no_region[0]} has no region (written by an older hpcc plan, before pulumi-aws 7 "
                "gave every regional resource one); plan the old config again with this hpcc (hpcc plan OLD.yaml "
                "--out DIR) and compare with that"
            )
        return cls(resources, str(root), outputs=_outputs(root / "outputs.json"))

    def kept_inputs(self, type_token: str, name: str, ignored: list[str], so_far: list[dict]) -> dict | None:
        """What `ignoreChanges` keeps for a resource the old plan has: each ignored path's old input value
        (in the new plan's generated values), or MISSING where the old inputs had none (the engine then
        drops the new value: pulumi/pulumi step_generator.go processIgnoreChanges). None for a new resource."""
        old = self._by_key.get((name, type_token))
        if old is None or name in self.replace:
            return None
        with self._lock:  # the records only grow: read each once
            for record in so_far[self._read :]:
                for value, symbol in generated_values(record).items():
                    self._new_values[symbol] = value
            self._read = max(self._read, len(so_far))
            new_values = dict(self._new_values)
        kept = {}
        for path in ignored:
            try:
                parts = parse_path(path)
            except ValueError:
                continue  # the engine skips a path it cannot parse
            if "*" in parts:
                continue  # an offline plan keeps no wildcard paths; the diff still ignores what they cover
            value = get_path(old.get("inputs") or {}, parts)
            kept[path] = MISSING if value is MISSING else translate(value, self._tokens, new_values)
        return kept
