"""`hpcc pin containers` (infra/ops/pins.py, cli_pins.py) against a fake GitHub: the snippet it prints is what the
stack file's containers.releaseDigests takes, for the stack's architectures or all; each failure (unreachable, 404,
an asset missing, a null or malformed digest) is a message and a non-zero exit; GITHUB_TOKEN is sent, never shown."""

from __future__ import annotations

import json
import urllib.error

import pytest
import yaml
from typer.testing import CliRunner

from infra.config.containers import Containers
from infra.facts import containers as facts
from infra.ops import cli_pins, pins
from infra.ops.cli import app
from tests.ops.support import EXAMPLES

URL = "https://api.github.com/repos/NVIDIA/enroot/releases/tags/v4.1.2"
NAMES = facts.enroot_asset_names()
# Test values, one per asset: no real asset's digest.
DIGESTS = {name: "sha256:" + f"{i:x}" * 64 for i, name in enumerate(NAMES, 1)}


def release(**changes) -> dict:
    assets = [{"name": n, "digest": d, "size": 1} for n, d in DIGESTS.items()]
    assets.append({"name": "enroot-check_4.1.2_x86_64.run", "digest": "sha256:" + "9" * 64})
    for name, digest in changes.items():
        assets = [a for a in assets if a["name"] != name] + (
            [] if digest == "gone" else [{"name": name, "digest": digest}]
        )
    return {"tag_name": "v4.1.2", "assets": assets}


class FakeGitHub:
    def __init__(self, status=200, body=None, error: OSError | None = None):
        self.status, self.body, self.error, self.asked = status, body, error, []

    def __call__(self, url, headers):
        self.asked.append((url, dict(headers)))
        if self.error:
            raise self.error
        return self.status, json.dumps(self.body if self.body is not None else release()).encode()


@pytest.fixture
def github(monkeypatch):
    fake = FakeGitHub()
    monkeypatch.setattr(cli_pins, "getter", lambda: fake)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    return fake


def hpcc(*argv, env=None):
    return CliRunner().invoke(app, ["pin", "containers", *argv], env={"COLUMNS": "200", **(env or {})})


def test_the_snippet_is_what_the_stack_file_takes_and_says_where_it_came_from(github):
    done = hpcc("--all")
    assert done.exit_code == 0, done.output
    assert f"({URL})" in done.output and "GitHub's record of each asset as it was uploaded" in done.output
    pasted = yaml.safe_load(done.output)["containers"]
    assert Containers.model_validate(pasted).release_digests == DIGESTS
    assert [url for url, _ in github.asked] == [URL]
    assert github.asked[0][1]["User-Agent"] and "Authorization" not in github.asked[0][1]


def test_a_stack_file_pins_its_architectures_only(github):
    done = hpcc(str(EXAMPLES / "p5-llm.yaml"))  # c5n and p5: x86_64
    assert done.exit_code == 0, done.output
    amd64 = facts.enroot_asset_names(("x86_64",))
    assert yaml.safe_load(done.output)["containers"]["releaseDigests"] == {n: DIGESTS[n] for n in amd64}


def test_json_is_the_mapping(github):
    done = hpcc("--all", "--json")
    assert done.exit_code == 0 and json.loads(done.output) == DIGESTS


def test_the_token_is_sent_as_the_authorization_header_and_never_printed(github):
    github.status = 403
    done = hpcc("--all", env={"GITHUB_TOKEN": "ghp_SeCrEt123"})
    assert done.exit_code == 1 and "HTTP 403" in done.output and "GITHUB_TOKEN" in done.output
    assert github.asked[0][1]["Authorization"] == "Bearer ghp_SeCrEt123"
    assert "SeCrEt" not in done.output


@pytest.mark.parametrize(
    "fake,words",
    [
        (FakeGitHub(status=404), "GitHub has no release v4.1.2 of NVIDIA/enroot"),
        (FakeGitHub(status=502), "GitHub answered HTTP 502"),
        (FakeGitHub(body=release(**{NAMES[1]: None})), f"reports no digest for {NAMES[1]}"),
        (FakeGitHub(body=release(**{NAMES[0]: "sha256:abc"})), f"GitHub's digest for {NAMES[0]}, 'sha256:abc'"),
        (FakeGitHub(body=release(**{NAMES[3]: "gone"})), f"the release has no asset {NAMES[3]}"),
        (FakeGitHub(body={"message": "Not Found"}), "answered no `assets` list"),
        (FakeGitHub(error=urllib.error.URLError("Name or service not known")), f"cannot reach {URL}"),
        (FakeGitHub(error=TimeoutError("timed out")), "timed out"),
    ],
)
def test_every_failure_is_a_message_and_a_non_zero_exit(monkeypatch, fake, words):
    monkeypatch.setattr(cli_pins, "getter", lambda: fake)
    done = hpcc("--all")
    assert done.exit_code == 1 and words in " ".join(done.output.split()), done.output
    assert "Traceback" not in done.output and "releaseDigests:" not in done.output


def test_without_a_stack_file_or_all_it_says_which_to_give(github):
    done = hpcc()
    assert done.exit_code == 2 and "give the stack file" in done.output and not github.asked


def test_the_default_getter_answers_an_http_error_with_its_status(monkeypatch):
    def refuse(request, timeout):
        assert request.full_url == URL and timeout == pins.TIMEOUT_SECONDS
        raise urllib.error.HTTPError(URL, 404, "Not Found", {}, None)

    monkeypatch.setattr(pins.urllib.request, "urlopen", refuse)
    assert pins.urllib_get(URL, pins.request_headers({})) == (404, b"")


def test_the_stacks_architectures_are_its_types():
    from tests.facts.instance_data import facts_for

    assert pins.stack_arches([facts_for("c5n.9xlarge"), facts_for("p5.48xlarge")]) == ("x86_64",)
    assert pins.stack_arches([facts_for("c5n.9xlarge"), facts_for("c7g.16xlarge")]) == ("x86_64", "arm64")
