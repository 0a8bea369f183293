"""Run rendered bootstrap partials in bash, with stubs, to test the functions they define."""

import subprocess
from dataclasses import replace

from infra.userdata import BootstrapContext, environment
from tests.bootstrap_cases import contexts


def context(name: str = "p5-llm-compute", **changes) -> BootstrapContext:
    return replace(dict(contexts())[name], **changes)


def partial(name: str, ctx: BootstrapContext | None = None) -> str:
    return environment().get_template(f"steps/{name}.sh.j2").render(**(ctx or context()).as_vars())


def run(partials: list[str], script: str, ctx: BootstrapContext | None = None, env: dict | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    """bash -c: `set -euo pipefail`, the partials, then SCRIPT."""
    body = "\n".join(partial(p, ctx) for p in partials)
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{body}\n{script}"], capture_output=True, text=True,
                          env=env, timeout=timeout)
