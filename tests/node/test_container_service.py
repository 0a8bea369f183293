"""The node's image service (hpcc_node/containers/service.py) and pyxis' importer (importer.py) over real Unix sockets
with the kernel's SO_PEERCRED (this test process's own uid and pid): a path for a good reference, a malformed one
refused by name, a caller with no job refused, an oversized, malformed or silent request answered in one line with
no traceback, one import for two callers of one image; the importer speaks pyxis' protocol (importer.c: `get URI`
prints the squashfs path on stdout, else a non-zero exit with stderr; `release` does nothing), executed as pyxis
executes it; root's enroot children alone see the credentials' directory."""

from __future__ import annotations

import io
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from hpcc_contract import containers as c
from hpcc_node.containers import importer, service
from hpcc_node.containers.cache import ImageCache
from infra.render.containers import render_importer_entry

ROOT_DIR = Path(__file__).resolve().parents[2]
DIGEST = f"sha256:{'d' * 64}"
URI = "docker://nvcr.io#nvidia/pytorch:24.07-py3"  # as pyxis passes it: always docker:// (enroot_container_create)
JOB = "42"


class Fakes:
    def __init__(self, cache_root: str, import_s: float = 0.0) -> None:
        self.imports, self.peers, self.records = 0, [], []
        self.lock = threading.Lock()
        self.import_s = import_s
        self.cache = ImageCache(cache_root, lambda ref: DIGEST, self.import_, node="n1", log=lambda line: None)

    def import_(self, ref: c.ImageRef, digest: str, dest: str) -> None:
        with self.lock:
            self.imports += 1
        time.sleep(self.import_s)  # long enough for a second caller to arrive while this import runs
        Path(dest).write_bytes(b"hsqs" + b"\0" * 60)

    def job_check(self, peer: service.Peer, job: str) -> bool:
        self.peers.append(peer)
        return peer.uid == os.getuid() and job == JOB


@pytest.fixture
def sock_dir():
    path = tempfile.mkdtemp(prefix="hpcc-img-", dir="/tmp")  # a Unix socket's path is at most 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(sock_dir: str, fakes: Fakes, **kw) -> service.ImageService:
    svc = service.ImageService(
        os.path.join(sock_dir, "run", "images.sock"),
        lambda reference, job: fakes.cache.ensure(reference),
        fakes.job_check,
        fakes.records.append,
        "n1",
        **kw,
    )
    svc.start()
    return svc


@pytest.fixture
def running(sock_dir, tmp_path):
    fakes = Fakes(str(tmp_path / "images"), import_s=0.3)
    svc = _start(sock_dir, fakes, timeout_s=0.5)
    yield svc, fakes
    svc.close()


def _raw(path: str, payload: bytes, shut: bool = True) -> c.ImageAnswer:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(path)
        if payload:
            s.sendall(payload)
        if shut:
            s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return c.loads_answer(data)


def test_a_good_reference_is_answered_with_the_cached_squashfs_and_recorded_once(running):
    svc, fakes = running
    assert stat.S_IMODE(os.stat(svc.path).st_mode) == 0o666  # every job may connect
    answer = importer.ask(svc.path, c.ImageRequest(URI, JOB))
    assert answer.error is None and answer.path == os.path.join(fakes.cache.root, c.image_name(DIGEST))
    assert os.path.isfile(answer.path)
    assert fakes.peers == [service.Peer(os.getpid(), os.getuid(), os.getgid())]  # the kernel's word, not the request's
    assert importer.ask(svc.path, c.ImageRequest(URI, JOB)).path == answer.path
    assert fakes.imports == 1
    canonical = "nvcr.io/nvidia/pytorch:24.07-py3"
    assert fakes.records == [c.UsageRecord(JOB, canonical, DIGEST, "n1", fakes.records[0].time)]


@pytest.mark.parametrize(
    "reference,says",
    [
        ("docker://nvcr.io#nvidia/PyTorch:1", "the image name is not lowercase"),
        ("dockerd://ubuntu", "scheme 'dockerd'"),
        ("docker://ubuntu:22.04; rm -rf /", "holds a space"),
        ("docker://" + "a" * 600, "longer than 512"),
    ],
)
def test_a_malformed_reference_is_refused_by_name_and_never_imported(running, reference, says):
    svc, fakes = running
    answer = importer.ask(svc.path, c.ImageRequest(reference, JOB))
    assert answer.path is None and says in str(answer.error) and "image reference" in str(answer.error)
    assert fakes.imports == 0 and fakes.records == []


def test_a_caller_without_that_job_on_this_node_is_refused(running):
    svc, fakes = running
    answer = importer.ask(svc.path, c.ImageRequest(URI, "43"))
    assert answer.error == f"uid {os.getuid()} runs no Slurm job 43 on this node"
    assert fakes.imports == 0


def test_an_oversized_malformed_or_silent_request_gets_one_line_and_no_traceback(running, caplog):
    svc, fakes = running
    caplog.set_level("INFO", logger="hpcc.containers.service")
    said = [
        _raw(svc.path, b"x" * (c.MAX_REQUEST + 100)).error,
        _raw(svc.path, b"{not json\n").error,
        _raw(svc.path, b'{"format": 9, "reference": "ubuntu", "job": "42"}\n').error,
        _raw(svc.path, b"").error,
        _raw(svc.path, b'{"reference": "ubuntu"', shut=False).error,  # then silent: the service's timeout
    ]
    assert said[0] == f"request over {c.MAX_REQUEST} bytes"
    assert said[1] is not None and said[1].startswith("image request: not JSON")
    assert said[2] is not None and "format 9 is newer" in said[2]
    assert said[3] == "empty request" and said[4] == "no whole request line in time"
    assert "Traceback" not in caplog.text and fakes.imports == 0
    assert importer.ask(svc.path, c.ImageRequest(URI, JOB)).path  # still serving


def test_an_unexpected_failure_is_logged_here_and_answered_in_one_line(sock_dir, tmp_path, caplog):
    fakes = Fakes(str(tmp_path / "images"))
    svc = service.ImageService(os.path.join(sock_dir, "s"), lambda ref, job: 1 / 0, fakes.job_check, list.append, "n1")
    svc.start()
    try:
        answer = importer.ask(svc.path, c.ImageRequest(URI, JOB))
    finally:
        svc.close()
    assert answer.error == "the image service failed (its log on this node says why)"
    assert "ZeroDivisionError" in caplog.text  # the traceback stays in the node's log


def test_two_callers_of_one_image_share_one_import(running):
    svc, fakes = running
    answers: list = []

    def ask() -> None:
        answers.append(importer.ask(svc.path, c.ImageRequest(URI, JOB)))

    callers = [threading.Thread(target=ask) for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(10)
    assert len(answers) == 2 and answers[0].path and answers[0] == answers[1]
    assert fakes.imports == 1 and len(fakes.records) == 1


def test_a_full_service_says_it_is_busy(sock_dir, tmp_path):
    fakes = Fakes(str(tmp_path / "images"), import_s=1.0)
    svc = _start(sock_dir, fakes, max_clients=1)
    try:
        first = threading.Thread(target=importer.ask, args=(svc.path, c.ImageRequest(URI, JOB)))
        first.start()
        time.sleep(0.3)
        assert _raw(svc.path, b"").error == "the image service is busy: try again"
        first.join(10)
    finally:
        svc.close()


# -- pyxis' side: the importer's protocol ---------------------------------------------------------------------------


def _run(argv, env):
    out, err = io.StringIO(), io.StringIO()
    return importer.main(argv, env, out, err), out.getvalue(), err.getvalue()


def test_get_prints_the_path_on_stdout_and_exits_0(running):
    svc, _ = running
    code, out, err = _run(["get", URI], {"SLURM_JOB_ID": JOB, importer.SOCKET_ENV: svc.path})
    assert (code, err) == (0, "") and out.endswith(".sqsh\n") and out.count("\n") == 1  # pyxis reads one line


@pytest.mark.parametrize(
    "argv,env,code,says",
    [
        (["get", "docker://Bad"], {"SLURM_JOB_ID": JOB}, 1, "the image name is not lowercase"),
        (["get", URI], {"SLURM_JOB_ID": "43"}, 1, "runs no Slurm job 43"),
        (["get", URI], {}, 2, "SLURM_JOB_ID '' is not a Slurm job id"),
        (["get"], {"SLURM_JOB_ID": JOB}, 2, "usage: get IMAGE_URI | release"),
        (["put", URI], {"SLURM_JOB_ID": JOB}, 2, "usage"),
    ],
)
def test_a_failed_get_exits_non_zero_with_one_line_on_stderr_and_nothing_on_stdout(running, argv, env, code, says):
    svc, _ = running
    got, out, err = _run(argv, {**env, importer.SOCKET_ENV: svc.path})
    assert (got, out) == (code, "") and says in err and err.count("\n") == 1


def test_get_without_a_service_says_so(sock_dir):
    code, out, err = _run(["get", URI], {"SLURM_JOB_ID": JOB, importer.SOCKET_ENV: os.path.join(sock_dir, "none")})
    assert (code, out) == (1, "") and "no image service at" in err


def test_release_does_nothing_and_succeeds_every_time():
    assert [_run(["release"], {}) for _ in range(2)] == [(0, "", "")] * 2  # called twice per job (README)


def test_the_rendered_entry_runs_as_pyxis_execs_it(running, tmp_path):
    """importer.c: execve(importer_path, {path, "get", uri}) with the job's environment, stdin /dev/null; the first
    stdout line is the path. Here the entry's bundle is this checkout."""
    svc, _ = running
    entry = tmp_path / "pyxis-importer"
    entry.write_text(render_importer_entry(str(ROOT_DIR)))
    entry.chmod(0o755)
    env = {"SLURM_JOB_ID": JOB, importer.SOCKET_ENV: svc.path, "PATH": "/usr/bin:/bin", "PYTHONPATH": "/nonexistent"}
    got = subprocess.run(
        [str(entry), "get", URI], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
    )
    assert (got.returncode, got.stderr) == (0, "") and got.stdout.startswith("/") and got.stdout.endswith(".sqsh\n")
    done = subprocess.run([str(entry), "release"], env=env, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "")


# -- root's enroot ----------------------------------------------------------------------------------------------------

FAKE_ENROOT = """#!/bin/sh
echo "$1 $ENROOT_CONFIG_PATH" >> "$LOG"
case "$1" in
  digest) echo "sha256:{hex}" ;;
  import) (umask 077 && printf hsqs > "$3") ;;
esac
"""


def test_only_the_services_enroot_children_see_roots_credentials_directory(tmp_path):
    bin_dir, creds = tmp_path / "bin", tmp_path / "creds"
    bin_dir.mkdir()
    (bin_dir / "enroot").write_text(FAKE_ENROOT.replace("{hex}", "e" * 64))
    (bin_dir / "enroot").chmod(0o755)
    creds.mkdir(mode=0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(tmp_path / "log")}
    with pytest.raises(OSError, match="mode 0700: credentials not used"):
        service.root_enroot(str(creds), env)
    creds.chmod(0o700)
    resolve, import_ = service.root_enroot(str(creds), env)
    ref = c.parse_reference(URI)
    assert resolve(ref) == f"sha256:{'e' * 64}"
    import_(ref, DIGEST, str(tmp_path / "out.sqsh"))
    assert stat.S_IMODE(os.stat(tmp_path / "out.sqsh").st_mode) == 0o644  # users' `enroot create` reads it
    assert (tmp_path / "log").read_text().splitlines() == [f"digest {creds}", f"import {creds}"]
    assert "ENROOT_CONFIG_PATH" not in os.environ


def test_the_usage_appender_writes_one_line_a_record(tmp_path):
    record = service.usage_appender(str(tmp_path), "n1")
    record(c.UsageRecord(JOB, "ubuntu", None, "n1", 5.0))
    lines = (tmp_path / ".hpcc" / "image-usage" / "n1.jsonl").read_text().splitlines()
    assert [c.loads_usage(line).reference for line in lines] == ["registry-1.docker.io/library/ubuntu:latest"]
