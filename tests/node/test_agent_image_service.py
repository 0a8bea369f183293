"""A compute node's agent runs the image service (hpcc_node/agent_image_service.py): only where jobs run with
containers on, in a thread that makes the service again whenever it stops (its reason logged, the pause doubling while
it keeps failing), once however often the agent looks, and stopped when the node no longer runs containers."""

from __future__ import annotations

import os
import socket
import time
from types import SimpleNamespace

import pytest

from hpcc_contract import containers as c
from hpcc_node.agent_image_service import RESTART_MAX_S, RESTART_S, ImagesServing, ServiceRunner, images_wanted
from hpcc_node.containers.service import ImageService

ACCOUNT = "123456789012"


def wait(predicate, timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while not predicate() and time.time() < deadline:
        time.sleep(0.02)
    return predicate()


def service_at(path: str) -> ImageService:
    return ImageService(path, lambda ref, job: "/never", lambda peer, job: False, lambda record: None, "compute-001")


def answer_from(path: str) -> c.ImageAnswer:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(path)
    sock.sendall(c.dumps_request(c.ImageRequest("ubuntu:22.04", "42")))
    line = sock.makefile("rb").readline().rstrip(b"\n")
    sock.close()
    return c.loads_answer(line)


@pytest.mark.parametrize(
    "role, scheduler, bundle_has_it, mount, wanted",
    [
        ("compute", "slurm", True, "/fsx", True),
        ("head", "slurm", True, "/fsx", False),  # no slurmd, no job
        ("compute", "none", True, "/fsx", False),
        ("compute", "slurm", False, "/fsx", False),  # containers off: the bundle has no containers/
        ("compute", "slurm", True, "", False),
    ],
)
def test_the_service_runs_where_jobs_run_with_containers_on(tmp_path, role, scheduler, bundle_has_it, mount, wanted):
    if bundle_has_it:
        (tmp_path / "containers").mkdir()
    assert images_wanted(role, scheduler, str(tmp_path), mount) is wanted


def test_a_service_that_cannot_start_or_stops_is_made_again_its_reason_logged(tmp_path):
    path = str(tmp_path / "images.sock")
    made: list[ImageService] = []
    lines: list[str] = []
    pauses: list[float] = []

    def factory() -> ImageService:
        if len(lines) < 2:  # the first two tries fail at once
            raise OSError("/fsx is not mounted")
        made.append(service_at(path))
        return made[-1]

    runner = ServiceRunner(factory, lines.append, sleep=pauses.append)
    runner.start()
    try:
        assert wait(lambda: len(made) == 1 and made[0]._sock is not None)
        assert answer_from(path).path is None  # served: the (fake) job check refuses
        made[0].close()  # its socket stops accepting: the runner makes another
        assert wait(lambda: len(made) == 2 and made[1]._sock is not None)
        assert answer_from(path).path is None
    finally:
        runner.stop()
    assert (
        lines[0]
        == f"image service stopped (could not start: OSError: /fsx is not mounted); restarting in {RESTART_S:.0f} s"
    )
    assert lines[1].endswith(f"restarting in {2 * RESTART_S:.0f} s")  # failing at once: the pause doubles
    assert f"image service listening on {path}" in lines
    assert any("image service stopped (its socket stopped accepting)" in line for line in lines)
    assert pauses[:2] == [RESTART_S, 2 * RESTART_S] and max(pauses) <= RESTART_MAX_S
    assert wait(lambda: not runner.alive())


class FakeAgent(ImagesServing):
    def __init__(self, tmp_path, role="compute", scheduler="slurm"):
        self.c = SimpleNamespace(role=role, status_key=f"status/arn:aws:ec2:us-east-1:{ACCOUNT}:instance/i-0abc.json")
        self.credentials_dir = str(tmp_path / "enroot-root")
        os.mkdir(self.credentials_dir, 0o700)
        self.now = 1000.0
        self.clock = lambda: self.now
        self.calls: list[list[str]] = []
        self.settings = {"SCHEDULER": scheduler, "MOUNT_POINT": str(tmp_path / "fsx")}
        self.node = SimpleNamespace(node="compute-001")
        self.lines: list[str] = []
        self.bundle = tmp_path / "current"
        (self.bundle / "containers").mkdir(parents=True)
        self.sock = str(tmp_path / "images.sock")
        self.made = 0

    def log(self, line: str) -> None:
        self.lines.append(line)

    def run(self, argv, **kwargs):
        self.calls.append(argv)
        return SimpleNamespace(returncode=0, stdout=f"token{len(self.calls)}=\n", stderr="")

    def current_dir(self) -> str:
        return str(self.bundle)

    def images_factory(self, mount_point):
        def make():
            self.made += 1
            return service_at(self.sock)

        return make


def test_the_agent_starts_one_service_however_often_it_looks_and_stops_it_when_containers_go(tmp_path):
    agent = FakeAgent(tmp_path)
    agent.serve_images()
    agent.serve_images()
    runner = agent.images
    assert runner is not None and wait(lambda: runner.service is not None and runner.service._sock is not None)
    agent.serve_images()
    assert agent.made == 1 and agent.images is runner
    assert answer_from(agent.sock).path is None
    agent.settings["SCHEDULER"] = "none"
    agent.serve_images()
    assert agent.images is None and wait(lambda: not runner.alive())
    assert agent.lines[-1] == "image service stopped: this node no longer runs containers (scheduler or bundle)"
    assert sum("image service started" in line for line in agent.lines) == 1


def test_the_head_runs_no_service(tmp_path):
    agent = FakeAgent(tmp_path, role="head")
    agent.serve_images()
    assert agent.images is None and agent.made == 0


def test_the_real_factory_uses_the_shared_cache_and_the_cgroup_job_check(tmp_path, monkeypatch):
    from hpcc_node import agent_image_service as agent_images

    seen = {}

    def make_service(mount, node, job_check, path):
        seen.update(mount=mount, node=node, check=job_check, path=path)
        return "service"

    monkeypatch.setattr(agent_images, "make_service", make_service)
    agent = FakeAgent(tmp_path)
    assert ImagesServing.images_factory(agent, "/fsx")() == "service"
    assert seen["mount"] == "/fsx" and seen["node"] == "compute-001" and seen["path"] == c.SERVICE_SOCKET
    from hpcc_node.containers.service import Peer

    assert seen["check"](Peer(-1, 1000, 1000), "42") is False  # the cgroup check: no such process, refused


def test_the_agent_keeps_roots_ecr_and_ngc_credentials_refreshing_the_token_at_half_its_life(tmp_path):
    agent = FakeAgent(tmp_path)
    (agent.bundle / "containers" / "registries").write_text("ecr\nngc team/ngc\n")
    key = os.path.join(agent.credentials_dir, "ngc.key")
    with open(key, "w") as f:
        f.write("nvapi-abc\n")
    os.utime(key, (1, 1))
    creds = os.path.join(agent.credentials_dir, ".credentials")
    try:
        agent.serve_images()
        registry = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
        with open(creds) as f:
            assert f.read().splitlines() == [
                f"machine {registry} login AWS password token1=",
                "machine nvcr.io login $oauthtoken password nvapi-abc",
                "machine authn.nvidia.com login $oauthtoken password nvapi-abc",
            ]
        assert os.stat(creds).st_mode & 0o777 == 0o600
        assert agent.calls == [["aws", "ecr", "get-login-password", "--region", "us-east-1"]]
        agent.now += 5.9 * 3600
        agent.serve_images()
        assert len(agent.calls) == 1  # not due yet
        agent.now += 0.2 * 3600
        agent.serve_images()
        assert len(agent.calls) == 2  # six hours: a new token
        with open(creds) as f:
            assert "password token2=" in f.read()
        assert not any("token1" in line or "token2" in line or "nvapi" in line for line in agent.lines)  # never logged
        assert agent.lines[-1] == "registry credentials written (the ECR token is due): ECR, NGC"
    finally:
        if agent.images:
            agent.images.stop()


def test_credentials_that_cannot_be_written_are_logged_and_tried_again_later(tmp_path):
    agent = FakeAgent(tmp_path)
    (agent.bundle / "containers" / "registries").write_text("ecr\n")
    os.chmod(agent.credentials_dir, 0o755)  # not root's private directory: nothing written there
    try:
        agent.serve_images()
        agent.serve_images()
        failed = [line for line in agent.lines if line.startswith("registry credentials not written")]
        assert len(failed) == 1 and "mode 0700" in failed[0] and failed[0].endswith("again in 300 s")
        assert not os.path.exists(os.path.join(agent.credentials_dir, ".credentials"))
    finally:
        if agent.images:
            agent.images.stop()
