"""The scripts the program renders for every example and role, for the bootstrap tests and `make golden`."""

from pathlib import Path

from infra.config.stackfile import load
from infra.render.node_settings import settings_value
from infra.render.roles import role_contexts
from infra.render.userdata import render
from tests.facts.instance_data import MOTO_ACCOUNT, offline_facts

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
GOLDEN_EXAMPLE = "p5-llm"  # one snapshot per role: the example with the most in it (EFA, GPUs, public head, S3)


def configs():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        yield path.stem, load(path)


def contexts():
    for stem, cfg in configs():
        for role, ctx in role_contexts(cfg.cluster, cfg.region, offline_facts()).items():
            yield f"{stem}-{role}", ctx


def settings():
    """example -> the settings parameter's value the program renders for it."""
    return {stem: settings_value(cfg.cluster, cfg.region, offline_facts(), MOTO_ACCOUNT) for stem, cfg in configs()}


def cases():
    for name, ctx in contexts():
        yield name, render(ctx)


def planned_scripts(example: str = GOLDEN_EXAMPLE) -> dict[str, str]:
    """role -> the script the loader runs on that role's nodes, read from the bundle the offline plan of the
    example stores (the program's own output, not a second rendering)."""
    from infra.config.stackfile import read_raw
    from infra.plan.runner import plan_config

    return plan_config(read_raw(ROOT / "examples" / f"{example}.yaml")).role_scripts()


def golden_path(role: str):
    """The compute script in full; the head's as a diff against it (the two share all but a few lines)."""
    return GOLDEN / (f"{GOLDEN_EXAMPLE}-{role}.sh" if role == "compute" else f"{GOLDEN_EXAMPLE}-{role}.diff")


def golden_texts(planned: dict[str, str]) -> dict[str, str]:
    """role -> what its golden file holds, from the planned scripts (`make golden` writes, the test compares)."""
    import difflib

    compute = planned["compute"]
    texts = {"compute": compute}
    for role in sorted(set(planned) - {"compute"}):
        texts[role] = "".join(
            difflib.unified_diff(
                compute.splitlines(keepends=True),
                planned[role].splitlines(keepends=True),
                f"{GOLDEN_EXAMPLE}-compute.sh",
                f"{GOLDEN_EXAMPLE}-{role}.sh",
                n=1,
            )
        )
    return texts
