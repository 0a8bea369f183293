"""The box runs the very scripts the program puts in user data: the harness renders them itself (no Pulumi on
the nodes' path), so check once that they are the same bytes the planned launch templates carry."""

import pytest

from infra.plan.runner import plan_config
from tests.box.harness import REGION, Box

pytestmark = pytest.mark.box


@pytest.mark.parametrize("profile", ["cpu", "efa"])
def test_box_scripts_are_the_user_data_of_the_planned_launch_templates(profile):
    box = Box(profile=profile)
    cfg = box.config()
    planned = plan_config({"aws:region": REGION,
                           "hpcc:cluster": cfg.model_dump(by_alias=True, exclude_none=True, mode="json")})
    assert planned.config.cluster == cfg  # the round trip kept the box's config
    scripts = box.scripts()
    for role in ("head", "compute"):
        assert planned.user_data[f"{cfg.name}-{role}-lt"] == scripts[role], role
