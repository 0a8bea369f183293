"""up hands the stack its config without rewriting the user's own Pulumi.<stack>.yaml."""

from __future__ import annotations

import json
import shutil

from infra.ops.up import configure
from tests.ops.support import EXAMPLES


class RecordingStack:
    def __init__(self):
        self.config: dict | None = None

    def set_all_config(self, config, *, path=False):
        self.config = {k: v.value for k, v in config.items()}


def test_stack_own_file_is_left_to_pulumi(tmp_path):
    own = tmp_path / "Pulumi.dev.yaml"
    shutil.copy(EXAMPLES / "c6i-oneccl.yaml", own)
    before = own.read_text()
    stack = RecordingStack()
    assert configure(stack, own, "dev", root=tmp_path) is False
    assert stack.config is None and own.read_text() == before


def test_another_file_is_copied_into_the_stack(tmp_path):
    stack = RecordingStack()
    assert configure(stack, EXAMPLES / "c6i-oneccl.yaml", "dev", root=tmp_path) is True
    assert stack.config["aws:region"] == "us-east-1"
    assert json.loads(stack.config["hpcc:cluster"])["compute"]["instanceType"] == "c6i.16xlarge"
