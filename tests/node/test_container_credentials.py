"""Root's registry credentials (hpcc_node/containers/credentials.py): which registries the bundle names, ECR's token
from the CLI's stdout (a failure said without it), and the file written whole only into root's private directory."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from hpcc_node.containers import credentials as cr


def test_the_bundles_registries_file_names_ecr_and_ngc():
    assert cr.parse_registries("ecr\nngc team/ngc\n") == cr.Registries(True, True)
    assert cr.parse_registries("ngc x\n") == cr.Registries(False, True)
    assert cr.parse_registries("") == cr.Registries(False, False)


def test_the_ecr_token_comes_from_stdout_and_a_failure_names_the_cli_not_the_token():
    seen = []

    def run(argv, **kwargs):
        seen.append((argv, kwargs.get("capture_output")))
        return SimpleNamespace(returncode=0, stdout="eyJ0b2tlbiI=\n", stderr="")

    assert cr.ecr_token("eu-west-1", run) == "eyJ0b2tlbiI="
    assert seen == [(["aws", "ecr", "get-login-password", "--region", "eu-west-1"], True)]

    def failing(argv, **kwargs):
        return SimpleNamespace(returncode=255, stdout="", stderr="An error occurred (AccessDeniedException)\n")

    with pytest.raises(OSError, match=r"exit 255: An error occurred \(AccessDeniedException\)"):
        cr.ecr_token("eu-west-1", failing)


def test_the_file_is_written_whole_0600_only_into_a_private_directory(tmp_path):
    private = tmp_path / "root"
    private.mkdir(mode=0o700)
    cr.write_credentials("machine a.b login AWS password x\n", str(private))
    path = private / ".credentials"
    assert path.read_text() == "machine a.b login AWS password x\n" and path.stat().st_mode & 0o777 == 0o600
    assert sorted(os.listdir(private)) == [".credentials"]  # no temporary file left
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(OSError, match="mode 0700"):
        cr.write_credentials("x\n", str(shared))
    assert os.listdir(shared) == []
