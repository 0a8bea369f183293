"""A node's local image copies and the prewarm (hpcc_node/containers/local.py, prewarm.py, hpcc_node/agent_images.py)
on real files in temp directories: a copy is atomic (no partial file under the digest's name, even when the deadline
or the source fails midway), idempotent, and within a cap that never evicts what the group wants or what was just
used; the image service's ensure answers the local copy when the node holds it and the shared cache's otherwise; the
plan copies only what the shared cache holds; the boot's CLI stops at its deadline with a warning and exit 0; the
agent copies only when the document changed and no job runs on the node."""

from __future__ import annotations

import io
import json
import os

import pytest

from hpcc_contract import containers as c
from hpcc_contract import formats
from hpcc_contract import prewarm as contract
from hpcc_node import agent_images
from hpcc_node.containers import local as local_mod
from hpcc_node.containers import prewarm
from hpcc_node.containers.local import CopyTimeout, LocalImages, prefer_local, remembered

A, B, C = (f"sha256:{x * 64}" for x in "abc")
REF = "nvcr.io/nvidia/pytorch:24.07-py3"


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def shared(tmp_path, *digests, size=1000):
    root = tmp_path / "fsx" / ".hpcc" / "images"
    root.mkdir(parents=True, exist_ok=True)
    for i, d in enumerate(digests):
        (root / c.image_name(d)).write_bytes(bytes([i + 1]) * size)
    return str(root)


def local_images(tmp_path, clock=None, lines=None):
    return LocalImages(
        str(tmp_path / "local"), clock=clock or Clock(), log=(lines.append if lines is not None else print)
    )


# -- the contract's document and directory ---------------------------------------------------------------------


def test_the_prewarm_document_round_trips_and_a_newer_one_is_refused():
    groups = {"gpu": [contract.Wanted(A, c.parse_reference(REF).canonical, ("12", "13"))], "cpu": []}
    text = contract.dumps_prewarm(groups, 5.0, {"gpu": ["gpu-009", "gpu-008"], "cpu": []})
    assert json.loads(text)[formats.FORMAT_KEY] == formats.PREWARM
    assert contract.loads_prewarm(text) == contract.Prewarm(groups, {"gpu": ("gpu-008", "gpu-009")})
    with pytest.raises(formats.NewerFormat):
        contract.loads_prewarm(json.dumps({"format": formats.PREWARM + 1, "groups": {}}))
    with pytest.raises(c.BadRecord):
        contract.loads_prewarm(json.dumps({"groups": {"gpu": [{"digest": "sha256:xyz", "reference": REF}]}}))


def test_the_local_directory_is_on_the_instance_store_when_it_is_mounted():
    assert local_mod.default_dir(lambda p: p == c.INSTANCE_STORE_MOUNT) == "/opt/dlami/nvme/hpcc-images"
    assert local_mod.default_dir(lambda p: False) == contract.ROOT_VOLUME_DIR


# -- the local copy ----------------------------------------------------------------------------------------------


def test_a_copy_is_the_shared_image_under_its_digest_and_a_second_copy_is_skipped(tmp_path):
    root = shared(tmp_path, A)
    here = local_images(tmp_path)
    assert here.copy(A, os.path.join(root, c.image_name(A))) is True
    assert open(here.path(A), "rb").read() == open(os.path.join(root, c.image_name(A)), "rb").read()
    assert oct(os.stat(here.path(A)).st_mode & 0o777) == "0o644"
    assert here.copy(A, os.path.join(root, c.image_name(A))) is False
    assert sorted(os.listdir(here.root)) == [c.image_name(A)]  # no temp file left


def test_a_copy_past_its_deadline_leaves_no_file_under_the_digest(tmp_path, monkeypatch):
    monkeypatch.setattr(local_mod, "CHUNK", 100)
    root = shared(tmp_path, A)
    clock = Clock()
    here = local_images(tmp_path, clock)

    def tick(done, total):
        clock.t += 10  # each chunk takes 10 s

    with pytest.raises(CopyTimeout):
        here.copy(A, os.path.join(root, c.image_name(A)), deadline=clock.t + 35, progress=tick)
    assert os.listdir(here.root) == []
    assert not here.has(A)


def test_a_missing_source_fails_and_leaves_nothing(tmp_path):
    here = local_images(tmp_path)
    with pytest.raises(OSError):
        here.copy(A, str(tmp_path / "gone.sqsh"))
    assert os.listdir(here.root) == []


def test_eviction_is_least_recently_used_first_and_keeps_the_wanted_and_the_recent(tmp_path):
    root = shared(tmp_path, A, B, C)
    clock = Clock(1000.0)
    lines: list = []
    here = local_images(tmp_path, clock, lines)
    for i, d in enumerate((A, B, C)):
        clock.t = 1000.0 + i * 100
        here.copy(d, os.path.join(root, c.image_name(d)))
    clock.t = 5000.0
    out = here.evict(1000, keep={A})  # 3000 bytes held: A is wanted, B the least recent of the others
    assert [(d, e) for d, e, _ in out] == [(A, False), (B, True), (C, True)]
    assert here.has(A) and not here.has(B) and not here.has(C)
    assert any("evicted" in line and B in line and "over the cap" in line for line in lines)
    here.copy(B, os.path.join(root, c.image_name(B)))  # used now
    assert [(d, e) for d, e, _ in here.evict(0, keep=())] == [(A, True), (B, False)]
    assert here.has(B)  # used within the grace: kept over the cap


def test_a_use_moves_an_image_to_the_back_of_the_eviction_order(tmp_path):
    root = shared(tmp_path, A, B)
    clock = Clock(1000.0)
    here = local_images(tmp_path, clock)
    here.copy(A, os.path.join(root, c.image_name(A)))
    clock.t = 1100.0
    here.copy(B, os.path.join(root, c.image_name(B)))
    clock.t = 3000.0
    here.touch(A)
    clock.t = 9000.0
    assert [d for d, evicted, _ in here.evict(1000) if evicted] == [B]


# -- the service's ensure ----------------------------------------------------------------------------------------


def test_the_service_answers_the_local_copy_when_the_node_holds_it(tmp_path):
    root = shared(tmp_path, A, B)
    here = local_images(tmp_path)
    here.copy(A, os.path.join(root, c.image_name(A)))
    digests = {"nvcr.io/nvidia/pytorch:24.07-py3": A, "nvcr.io/nvidia/nemo:24.07": B}
    shared_calls = []

    def shared_ensure(reference):
        shared_calls.append(reference)
        return os.path.join(root, c.image_name(digests[c.parse_reference(reference).canonical]))

    ensure = prefer_local(shared_ensure, lambda ref: digests[ref.canonical], here)
    assert ensure("docker://nvcr.io#nvidia/pytorch:24.07-py3") == here.path(A)
    assert shared_calls == []
    assert ensure("nvcr.io/nvidia/nemo:24.07") == os.path.join(root, c.image_name(B))  # a miss: no copy on its time
    assert shared_calls == ["nvcr.io/nvidia/nemo:24.07"] and not here.has(B)


def test_a_failed_resolve_leaves_the_answer_to_the_shared_cache(tmp_path):
    def fail(ref):
        raise RuntimeError("registry down")

    ensure = prefer_local(lambda reference: "/fsx/x.sqsh", fail, local_images(tmp_path))
    assert ensure(REF) == "/fsx/x.sqsh"


def test_a_requeued_job_restarts_from_the_local_copy_of_the_digest_it_ran_without_asking_the_registry(tmp_path):
    """The tag has moved to B since the job first ran A: its restart on a node holding A runs A, with no resolve; a
    job the document does not name, or a recorded digest the node does not hold, is resolved as before."""
    root = shared(tmp_path, A, B)
    here = local_images(tmp_path)
    here.copy(A, os.path.join(root, c.image_name(A)))
    fsx = tmp_path / "fsx"
    canonical = c.parse_reference(REF).canonical
    wanted = [contract.Wanted(A, canonical, ("41",)), contract.Wanted(C, "nvcr.io/nvidia/nemo:24.07", ("42",))]
    os.makedirs(os.path.dirname(contract.prewarm_path(str(fsx))), exist_ok=True)
    with open(contract.prewarm_path(str(fsx)), "w") as f:
        f.write(contract.dumps_prewarm({"gpu": wanted}, 1.0))
    asked, shared_calls = [], []

    def resolve(ref):
        asked.append(ref.canonical)
        return B

    def shared_ensure(reference):
        shared_calls.append(reference)
        return os.path.join(root, c.image_name(B))

    ensure = prefer_local(shared_ensure, resolve, here, local_mod.recorded_digests(str(fsx)))
    assert ensure(REF, "41") == here.path(A) and asked == [] and shared_calls == []
    assert ensure(REF, "77") == os.path.join(root, c.image_name(B)) and asked == [canonical]  # not a restart
    assert ensure("nvcr.io/nvidia/nemo:24.07", "42").endswith(c.image_name(B))  # C recorded, not held here
    assert len(asked) == 2
    os.unlink(contract.prewarm_path(str(fsx)))
    assert ensure(REF, "41").endswith(c.image_name(B)) and len(asked) == 3  # no document: resolved


def test_the_digest_is_asked_once_a_minute_and_for_a_pinned_reference_too():
    asked = []
    clock = Clock()
    resolve = remembered(lambda ref: asked.append(ref.canonical) or A, clock)
    ref = c.parse_reference(REF)
    assert resolve(ref) == A and resolve(ref) == A
    clock.t += 61
    resolve(ref)
    assert len(asked) == 2
    assert resolve(c.parse_reference(f"{REF}@{B}")) == A and len(asked) == 3  # B may be a manifest list's digest


# -- the plan, the run and the boot's CLI ------------------------------------------------------------------------


def wanted(*digests):
    return [contract.Wanted(d, c.parse_reference(REF).canonical, ("7",)) for d in digests]


def test_the_plan_copies_what_the_node_lacks_and_the_shared_cache_holds():
    p = prewarm.plan(wanted(A, B, C), have={A}, shared_has=lambda d: d == B)
    assert [w.digest for w in p.copy] == [B] and p.present == [A] and [w.digest for w in p.missing] == [C]


def test_a_node_wants_its_own_groups_images():
    groups = {"gpu": wanted(A), "big": wanted(B)}
    assert [w.digest for w in prewarm.wanted_for(groups, "gpu-007")] == [A]
    assert prewarm.wanted_for(groups, "cpu-001") == []


def write_document(tmp_path, groups, spares=None):
    path = contract.prewarm_path(str(tmp_path / "fsx"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(contract.dumps_prewarm(groups, 1.0, {"gpu": ["gpu-003"]} if spares is None else spares))
    os.replace(path + ".tmp", path)


def test_the_boot_prewarm_copies_its_groups_images_and_says_so(tmp_path):
    shared(tmp_path, A, B)
    write_document(tmp_path, {"gpu": wanted(A, C), "cpu": wanted(B)})
    out, err = io.StringIO(), io.StringIO()
    argv = ["--fsx", str(tmp_path / "fsx"), "--node", "gpu-003", "--local", str(tmp_path / "local"), "--cap", "1G"]
    assert prewarm.main(argv, out, err) == 0
    doc = json.loads(out.getvalue())
    assert doc["copied"] == [A] and doc["missing"] == [C] and doc["timedOut"] is False
    assert os.path.isfile(tmp_path / "local" / c.image_name(A))
    assert not os.path.exists(tmp_path / "local" / c.image_name(B))
    assert "is not in the shared cache" in err.getvalue()
    assert prewarm.main(argv, io.StringIO(), io.StringIO()) == 0  # again: present, nothing copied


def test_the_boot_prewarm_stops_at_its_deadline_with_a_warning_and_exit_0(tmp_path):
    shared(tmp_path, A, B)
    write_document(tmp_path, {"gpu": wanted(A, B)})
    out, err = io.StringIO(), io.StringIO()
    argv = ["--fsx", str(tmp_path / "fsx"), "--node", "gpu-003", "--local", str(tmp_path / "local"), "--deadline", "-1"]
    assert prewarm.main(argv, out, err) == 0
    assert json.loads(out.getvalue())["timedOut"] is True
    assert "warning: the deadline came first" in err.getvalue()
    assert [n for n in os.listdir(tmp_path / "local") if not n.startswith(".")] == []


def test_the_boot_prewarm_without_a_document_is_a_quick_0_and_a_bad_node_is_2(tmp_path):
    out = io.StringIO()
    argv = ["--fsx", str(tmp_path / "fsx"), "--node", "gpu-003", "--local", str(tmp_path / "local"), "--cap", "1G"]
    assert prewarm.main(argv, out, io.StringIO()) == 0
    assert json.loads(out.getvalue())["copied"] == []
    assert prewarm.main(["--fsx", str(tmp_path), "--node", "no/such"], io.StringIO(), io.StringIO()) == 2


def test_a_job_runs_here_when_slurmd_holds_a_step_socket_for_it(tmp_path):
    spool = tmp_path / "spool"
    spool.mkdir()
    assert prewarm.busy_job("gpu-003", [str(spool)]) is None
    (spool / "gpu-003_1234.0").write_text("")
    (spool / "gpu-004_99.0").write_text("")
    assert prewarm.busy_job("gpu-003", [str(spool)]) == "1234"


# -- the agent's decision and its thread -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seen,done,busy,running,retry,spare,due",
    [
        (None, None, None, False, None, True, (False, False)),  # no document
        ((1, 2), None, None, False, None, True, (True, False)),  # a first document
        ((1, 2), None, None, False, None, False, (False, False)),  # not a held spare
        ((1, 2), (1, 2), None, False, None, True, (False, False)),  # followed already
        ((3, 2), (1, 2), None, False, False, True, (False, False)),  # an incomplete one, not due again yet
        ((3, 2), (1, 2), None, False, True, True, (True, False)),  # an incomplete one, due again
        ((3, 2), (1, 2), "55", False, None, True, (False, True)),  # a job runs here: deferred
        ((3, 2), (1, 2), None, True, None, True, (False, False)),  # a copy runs
    ],
)
def test_a_held_spare_prewarms_when_the_document_changed_and_no_job_runs(seen, done, busy, running, retry, spare, due):
    why, not_now = agent_images.images_due(seen, done, busy, running, retry, spare)
    assert (why is not None, not_now is not None) == due


class FakeAgent(agent_images.ImagesFollowing):
    def __init__(self, tmp_path, role="compute"):
        self.c = type("C", (), {"role": role})()
        self.node = type("N", (), {"node": "gpu-003"})()
        self.settings = {"SCHEDULER": "slurm", "MOUNT_POINT": str(tmp_path / "fsx")}
        self.clock = Clock()
        self.lines: list = []
        self.images_local = LocalImages(str(tmp_path / "local"), clock=self.clock, log=self.lines.append)
        self.images_spool = (str(tmp_path / "spool"),)

    def log(self, line):
        self.lines.append(line)

    def settle(self):
        if self.images_thread is not None:
            self.images_thread.join(10)


def test_a_held_spare_copies_its_groups_images_once_and_waits_for_a_running_job(tmp_path):
    shared(tmp_path, A)
    write_document(tmp_path, {"gpu": wanted(A)})
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "gpu-003_77.0").write_text("")
    agent = FakeAgent(tmp_path)
    agent.follow_images()
    agent.follow_images()
    assert agent.images_thread is None and not agent.images_local.has(A)
    assert sum("job 77 runs on this node" in line for line in agent.lines) == 1  # said once
    os.unlink(tmp_path / "spool" / "gpu-003_77.0")
    agent.follow_images()
    agent.settle()
    assert agent.images_local.has(A)
    first = agent.images_thread
    agent.follow_images()
    assert agent.images_thread is first  # nothing changed: no second copy
    assert any(line.startswith("prewarm done") for line in agent.lines)


def test_a_node_that_is_no_held_spare_copies_nothing_until_the_document_names_it(tmp_path):
    shared(tmp_path, A)
    write_document(tmp_path, {"gpu": wanted(A)}, spares={"gpu": ["gpu-009"]})
    agent = FakeAgent(tmp_path)
    agent.follow_images()
    assert agent.images_thread is None and not agent.images_local.has(A)
    write_document(tmp_path, {"gpu": wanted(A)}, spares={"gpu": ["gpu-003", "gpu-009"]})
    os.utime(contract.prewarm_path(str(tmp_path / "fsx")), ns=(1, 1))  # a new mtime whatever the clock's grain
    agent.follow_images()
    agent.settle()
    assert agent.images_local.has(A)


def test_a_head_or_a_cluster_without_slurm_prewarms_nothing(tmp_path):
    shared(tmp_path, A)
    write_document(tmp_path, {"gpu": wanted(A)})
    agent = FakeAgent(tmp_path, role="head")
    agent.follow_images()
    assert agent.images_thread is None
    agent = FakeAgent(tmp_path)
    agent.settings["SCHEDULER"] = "none"
    agent.follow_images()
    assert agent.images_thread is None


def test_an_incomplete_prewarm_is_tried_again_after_its_pause_not_every_tick(tmp_path, monkeypatch):
    shared(tmp_path, A)
    write_document(tmp_path, {"gpu": wanted(A)})
    agent = FakeAgent(tmp_path)
    monkeypatch.setattr(agent_images, "COPY_DEADLINE_S", -1.0)  # the deadline comes before the first byte
    agent.follow_images()
    agent.settle()
    first = agent.images_thread
    assert any("incomplete" in line for line in agent.lines) and not agent.images_local.has(A)
    agent.follow_images()
    assert agent.images_thread is first  # within RETRY_S: not again
    monkeypatch.setattr(agent_images, "COPY_DEADLINE_S", 3600.0)
    agent.clock.t += agent_images.RETRY_S
    agent.follow_images()
    agent.settle()
    assert agent.images_thread is not first and agent.images_local.has(A)
    assert any("did not finish" in line for line in agent.lines)


def test_a_long_copy_says_its_progress(tmp_path, monkeypatch):
    monkeypatch.setattr(local_mod, "CHUNK", 100)
    shared(tmp_path, A)
    clock = Clock()
    lines: list = []
    here = LocalImages(str(tmp_path / "local"), clock=clock, log=lines.append)
    real_copy = here.copy

    def slow_copy(digest, source, deadline, progress):
        def tick(done, total):
            clock.t += 20  # each 100 bytes take 20 s
            progress(done, total)

        return real_copy(digest, source, deadline, tick)

    here.copy = slow_copy  # type: ignore[method-assign]
    out = prewarm.run(here, shared(tmp_path), wanted(A), float("inf"), clock, lines.append)
    assert out.copied == [A]
    assert sum(" MiB (" in line for line in lines) == 5  # 10 chunks of 20 s: at 40, 80, ... 200 s (30 s apart at least)


def test_the_service_as_a_node_runs_it_answers_the_local_copy(tmp_path, monkeypatch):
    from hpcc_node.containers import service

    root = shared(tmp_path, A)
    imports = []
    monkeypatch.setattr(service, "root_enroot", lambda: (lambda ref: A, lambda ref, d, dest: imports.append(d)))
    here = LocalImages(str(tmp_path / "local"))
    svc = service.make_service(str(tmp_path / "fsx"), "gpu-001", lambda peer, job: True, local_dir=here.root)
    assert svc.ensure(REF) == os.path.join(root, c.image_name(A))  # not local yet: the shared cache's
    here.copy(A, os.path.join(root, c.image_name(A)))
    assert svc.ensure(REF) == here.path(A)
    assert imports == []
