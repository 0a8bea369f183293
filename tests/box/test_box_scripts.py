"""The box runs the user data (the loaders), the bundle and the settings of the program's own plan
(tests/box/planned.py). Check once that they are what the renderers give (infra.roles + infra.userdata,
infra.node_settings), and that a day-2 resize of a group changes neither the loaders nor the bundle, so no node is
replaced for it and no node has anything new to fetch: the groups parameter's count, and in the settings (read at run
time) only the node count and the AWS-call pacing that follows from it (infra/bootstrap_pacing.py)."""

import json

import pytest

from infra.render.node_settings import settings_value
from infra.render.roles import role_contexts
from infra.render.userdata import render, render_loader
from tests.box.cloud import ACCOUNT, FleetBox
from tests.box.node import REGION
from tests.box.planned import plan
from tests.facts.instance_data import offline_facts

pytestmark = pytest.mark.box


@pytest.mark.parametrize("profile", ["cpu", "efa"])
def test_box_scripts_are_the_renderers_output_and_survive_a_resize(profile):
    box = FleetBox(profile=profile, groups=[{"name": "compute", "count": 2}])
    cfg = box.config()
    before = box.plan()
    contexts = role_contexts(cfg, REGION, offline_facts())
    assert before["userData"] == {role: render_loader(ctx) for role, ctx in contexts.items()}
    assert before["roleScripts"] == {role: render(ctx) for role, ctx in contexts.items()}
    assert before["settings"] == settings_value(cfg, REGION, offline_facts(), ACCOUNT)
    assert [(g["name"], g["count"]) for g in json.loads(before["groups"])["groups"]] == [("compute", 2)]
    after = plan(FleetBox(profile=profile, groups=[{"name": "compute", "count": 3}]).config_map())
    assert after["userData"] == before["userData"]  # byte for byte, both roles
    assert after["bundle"] == before["bundle"] and after["bundlePointer"] == before["bundlePointer"]
    changed = {
        line.split("=", 1)[0] for line in set(after["settings"].splitlines()) ^ set(before["settings"].splitlines())
    }
    assert (
        changed
        <= {"NODE_COUNT", "API_INTERVAL_MS", "POLL_SECONDS", "API_BACKOFF_SECONDS", "API_ATTEMPTS", "SYNC_SECONDS"}
        and "NODE_COUNT" in changed
    ), changed
    assert [(g["name"], g["count"]) for g in json.loads(after["groups"])["groups"]] == [("compute", 3)]
