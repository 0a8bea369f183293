"""Run rendered bootstrap partials in bash, with stubs, to test the functions they define."""

import dataclasses
import shlex
import subprocess
from dataclasses import dataclass, replace

from hpcc_contract.settings import REPEATED
from infra.render.node_settings import NodeSettings, parse
from infra.render.userdata import BootstrapContext, environment
from tests.render.bootstrap_cases import contexts, settings

SETTING_FIELDS = {f.name for f in dataclasses.fields(NodeSettings)}


@dataclass(frozen=True)
class ShellContext(BootstrapContext):
    """A role's user-data values plus the run-time settings the partials run with (as apply_settings sets them)."""

    settings: NodeSettings | None = None


def context(name: str = "p5-llm-compute", **changes) -> ShellContext:
    """The example's context and settings; each change goes to whichever of the two has that field."""
    base = dict(contexts())[name]
    node_settings = parse(settings()[name.rsplit("-", 1)[0]])
    setting_changes = {k: v for k, v in changes.items() if k in SETTING_FIELDS}
    ctx_changes = {k: v for k, v in changes.items() if k not in SETTING_FIELDS}
    return ShellContext(
        **dataclasses.asdict(replace(base, **ctx_changes)), settings=replace(node_settings, **setting_changes)
    )


def settings_shell(node_settings: NodeSettings) -> str:
    """Bash assignments of the settings' variables, as apply_settings would make them."""
    lines = node_settings.lines()
    out = [f"HPCC_{key}={shlex.quote(value)}" for key, value in lines if key not in REPEATED]
    for repeated in sorted(REPEATED):
        out.append(f"HPCC_{repeated}=(" + " ".join(shlex.quote(v) for k, v in lines if k == repeated) + ")")
    out.append("HPCC_SETTINGS_TEXT=" + shlex.quote("".join(f"{k}={v}\n" for k, v in lines)))
    return "\n".join(out) + "\n"


def partial(name: str, ctx: BootstrapContext | None = None) -> str:
    return environment().get_template(f"steps/{name}.sh.j2").render(**(ctx or context()).as_vars())


def run(
    partials: list[str], script: str, ctx: ShellContext | None = None, env: dict | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    """bash -c: `set -euo pipefail`, the partials, the context's settings, then SCRIPT."""
    ctx = ctx or context()
    body = "\n".join(partial(p, ctx) for p in partials)
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{body}\n{settings_shell(ctx.settings)}{script}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
