"""The shared formats the contract defines once: the node groups' JSON (its writer, the program, and its readers,
the controller and the head's Slurm step), the ledger table, and health.bootDiagLevel's default and range as every
side reads them."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from hpcc_contract import groups, ledger
from hpcc_contract.settings import (
    BOOT_DIAG_LEVEL_DEFAULT,
    BOOT_DIAG_LEVEL_MAX,
    OPTIONAL_DEFAULTS,
    PATTERNS,
    boot_diag_level_problem,
)
from hpcc_node import slurm
from hpcc_node.controller.__main__ import ConfigError, parse_groups
from hpcc_node.controller.model import Group


def test_the_groups_format_is_one_and_its_fields_are_the_controllers_groups():
    assert groups.FORMAT == 1  # what running clusters' parameters carry
    # the block's window is EC2's; the GPUs are the Slurm definition's gres (the controller's slurm_gpus)
    controller = {f.name for f in dataclasses.fields(Group)} - {"capacity_block", "gpus"}
    assert set(groups.FIELDS) == controller
    entry = {"name": "gpu", "instance_type": "p5.48xlarge", "count": 2, "slurm": {"cpus": 192, "gres": "gpu:8"}}
    text = groups.dumps([entry])
    assert json.loads(text) == {groups.FORMAT_KEY: groups.FORMAT, groups.GROUPS_KEY: [entry]}
    assert groups.loads(text) == [entry] and parse_groups(text, "p")[0] == Group("gpu", "p5.48xlarge", 2, gpus=8)
    assert slurm.parse_groups(text) == [entry]


@pytest.mark.parametrize("text", ['{"format": 2, "groups": []}', '{"groups": []}', '[]', '{"format": 1}'])
def test_every_reader_refuses_a_groups_document_of_another_format(text):
    with pytest.raises(groups.GroupsFormatError):
        groups.loads(text)
    with pytest.raises(ConfigError, match="is not|is newer than this hpcc reads"):
        parse_groups(text, "/hpcc/c/groups")
    with pytest.raises(slurm.GroupsError):
        slurm.parse_groups(text)


def test_the_ledger_table_has_one_string_hash_key_on_demand():
    assert ledger.table_definition("t") == {
        "TableName": "t",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }


def test_the_boot_diagnostic_level_is_two_by_default_and_zero_to_four_everywhere():
    from hpcc_node.health import checks, service
    from infra.config.model import Health

    assert BOOT_DIAG_LEVEL_DEFAULT == 2 and BOOT_DIAG_LEVEL_MAX == 4  # README, health.bootDiagLevel
    assert Health().boot_diag_level == checks.NodeFacts("n").dcgm_level == BOOT_DIAG_LEVEL_DEFAULT
    assert OPTIONAL_DEFAULTS["HEALTH_DIAG_LEVEL"] == str(BOOT_DIAG_LEVEL_DEFAULT)
    assert service.parse_facts("GPUS=8\n", "n")[0].dcgm_level == BOOT_DIAG_LEVEL_DEFAULT  # health.env without it
    for level in range(-1, BOOT_DIAG_LEVEL_MAX + 2):
        valid = boot_diag_level_problem(level) is None
        assert valid == (0 <= level <= 4) == bool(re.fullmatch(PATTERNS["HEALTH_DIAG_LEVEL"], str(level)))
