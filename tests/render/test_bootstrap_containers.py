"""The containers step (templates/steps/containers.sh.j2, pyxis.sh.j2) run for real in a private mount namespace with
the stand-ins the box uses (HPCC_ENROOT, HPCC_PYXIS_SO, HPCC_PYXIS_GIT): a compute node gets enroot.conf for its
store, the per-user directories, enroot's Slurm hooks (NVIDIA's removed on a CPU node), the root-only credentials
directory and pyxis' importer, and the plugin from the cluster's one shared build, built once under its lock while
another node waits; the head gets the plugin and plugstack.conf (slurmctld reconfigured when it changes while it
runs); nothing is downloaded without a pinned sha256, pyxis is built from its pinned commit alone; a rerun changes
nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hpcc_contract import prewarm
from hpcc_contract.container_mounts import MOUNTS_FILE, container_mounts, render_enroot_mounts
from hpcc_contract.containers import ROOT_ENROOT_CONFIG
from infra.config.containers import Containers, Pyxis
from infra.facts import containers as facts
from infra.render import containers as r
from tests.render.bootstrap_fixtures import tool
from tests.render.test_bootstrap_behaviour import STUB_FAIL, preamble, private_run
from tests.render.test_bootstrap_steps import COMMON, ctx_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a private mount namespace needs root")
WRITES = {"overlay": ["/etc", "/usr/local", "/usr/share", "/var/lib"], "over": ["/run"]}
SLURM = "23.11.4"


def bundle(tmp_path: Path, containers: Containers | None = None) -> Path:
    containers = containers or Containers()
    current = tmp_path / "current"
    for path, data in r.bundle_files(containers).items():
        (current / path).parent.mkdir(parents=True, exist_ok=True)
        (current / path).write_bytes(data)
    for package in ("hpcc_node", "hpcc_contract"):  # the bundle's node package, as the step runs it
        if not (current / package).exists():
            (current / package).symlink_to(REPO / package)
    return current


def stand_ins(tmp_path: Path, bin_dir: Path) -> None:
    tool(bin_dir, "fake-enroot", "exit 0\n")
    (tmp_path / "pyxis-standin.so").write_text("stand-in plugin\n")
    for daemon in ("slurmd", "slurmctld"):
        tool(bin_dir, daemon, f'[ "$1" = -V ] && echo "slurm-wlm {SLURM}"\n')
    tool(bin_dir, "dpkg", '[ "$1" = --print-architecture ] && echo amd64\n')
    tool(bin_dir, "apt-get", f'echo "apt-get $*" >>{tmp_path}/apt\n')
    tool(bin_dir, "curl", f'echo "curl $*" >>{tmp_path}/apt\nexit 1\n')
    tool(bin_dir, "scontrol", f'echo "scontrol $*" >>{tmp_path}/scontrol\n[ -e {tmp_path}/slurmctld-up ]\n')


def run_step(tmp_path, env, script: str, **ctx):
    head = (
        f"{preamble(tmp_path)}{STUB_FAIL}HPCC_CURRENT={tmp_path}/current\nHPCC_OS=ubuntu-22.04\n"
        f"HPCC_MOUNT_POINT={tmp_path}/fsx\nmkdir -p {tmp_path}/fsx\nslurm_install() {{ :; }}\n"
    )
    return private_run([*COMMON, "containers"], head + script, ctx_for(tmp_path, **ctx), env, **WRITES)


def shared_build(tmp_path: Path) -> Path:
    return Path(r.pyxis_shared_path(str(tmp_path / "fsx"), SLURM, "x86_64"))


def copy_out(tmp_path: Path, *paths: str) -> str:
    """Shell copying each path's content, mode and link target out of the namespace, to tmp_path/out/."""
    lines = [f"mkdir -p {tmp_path}/out"]
    for n, p in enumerate(paths):
        lines.append(
            f"if [ -L {p} ]; then readlink {p} >{tmp_path}/out/{n}.link; fi; "
            f"if [ -e {p} ]; then stat -c %a {p} >{tmp_path}/out/{n}.mode; "
            f"[ -d {p} ] || cat {p} >{tmp_path}/out/{n}; fi"
        )
    return "\n".join(lines) + "\n"


def out(tmp_path: Path, n: int, kind: str = "") -> str | None:
    path = tmp_path / "out" / f"{n}{'.' + kind if kind else ''}"
    return path.read_text().strip() if kind and path.exists() else path.read_text() if path.exists() else None


@pytest.mark.parametrize("gpus, kind", [("8", "gpu"), ("0", "cpu")])
def test_a_compute_node_gets_enroot_pyxis_and_the_importer_and_a_rerun_changes_nothing(fake, gpus, kind):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    current = bundle(tmp_path)
    env = {
        **env,
        "HPCC_ENROOT": str(bin_dir / "fake-enroot"),
        "HPCC_PYXIS_SO": str(tmp_path / "pyxis-standin.so"),
        "HPCC_HEALTH_GPUS": gpus,
    }
    paths = [
        r.CONF_FILE,
        f"{r.HOOKS_DIR}/50-slurm-pmi.sh",
        f"{r.HOOKS_DIR}/50-slurm-pytorch.sh",
        f"{r.HOOKS_DIR}/98-nvidia.sh",
        ROOT_ENROOT_CONFIG,
        r.IMPORTER_ENTRY,
        facts.PYXIS_PLUGIN,
        "/usr/local/bin/enroot",
        *r.enroot_paths(False).parents,
        MOUNTS_FILE,
    ]
    hooks = " ".join(f"{r.EXTRA_HOOKS_DIR}/{h}" for h in ("50-slurm-pmi.sh", "50-slurm-pytorch.sh", "98-nvidia.sh"))
    script = (
        f"mkdir -p {r.EXTRA_HOOKS_DIR} {r.HOOKS_DIR}; touch {hooks}; echo nvidia >{r.HOOKS_DIR}/98-nvidia.sh\n"
        f"step_containers >{tmp_path}/first 2>&1; step_containers >{tmp_path}/second 2>&1\n"
        + copy_out(tmp_path, *paths)
    )
    done = run_step(tmp_path, env, script)
    assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "first").read_text()
    assert out(tmp_path, 0) == (current / "containers" / "enroot.conf.root-volume").read_text()  # no instance store
    assert out(tmp_path, 1, "link") == f"{r.EXTRA_HOOKS_DIR}/50-slurm-pmi.sh"
    assert out(tmp_path, 2, "link") == f"{r.EXTRA_HOOKS_DIR}/50-slurm-pytorch.sh"
    assert (out(tmp_path, 3) == "nvidia\n") == (kind == "gpu")  # NVIDIA's hook kept on a GPU node only
    assert out(tmp_path, 4, "mode") == "700"
    assert out(tmp_path, 5, "mode") == "755" and out(tmp_path, 5) == r.render_importer_entry()
    assert out(tmp_path, 6) == "stand-in plugin\n" and out(tmp_path, 6, "mode") == "644"
    assert out(tmp_path, 7, "link") == str(bin_dir / "fake-enroot")
    assert [out(tmp_path, 8 + i, "mode") for i in range(4)] == ["1777"] * 4
    assert out(tmp_path, 12) == render_enroot_mounts(container_mounts(f"{tmp_path}/fsx"))  # its settings' mount
    assert shared_build(tmp_path).read_text() == "stand-in plugin\n"  # published for the other nodes
    first, second = (tmp_path / "first").read_text(), (tmp_path / "second").read_text()
    assert "wrote /etc/enroot/enroot.conf" in first and "installed from" in first
    assert "wrote " not in second and "installed from" not in second and "(HPCC_ENROOT)" not in second, second
    assert not (tmp_path / "apt").exists()  # nothing downloaded or installed


def test_without_a_pinned_sha256_enroot_is_not_downloaded(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    tool(bin_dir, "dpkg-query", "exit 1\n")
    done = run_step(tmp_path, env, "enroot_install\n")
    assert done.returncode == 1
    assert f"enroot's enroot_{facts.ENROOT_VERSION}-1_amd64.deb has no pinned sha256: run `hpcc pin containers`" in (
        done.stdout
    )
    assert "cluster.containers.releaseDigests" in done.stdout
    assert not (tmp_path / "apt").exists()


@pytest.mark.parametrize("right_sum", [True, False])
def test_enroot_is_installed_from_debs_matching_the_stacks_digests_and_refused_otherwise(fake, right_sum):
    """The stack's containers.releaseDigests are rendered into the compute script; each download is checked."""
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    tool(bin_dir, "dpkg-query", "exit 1\n")
    tool(
        bin_dir, "curl", 'while [ $# -gt 0 ]; do [ "$1" = -o ] && { shift; echo "deb ${1##*/}" >"$1"; }; shift; done\n'
    )
    names = facts.enroot_asset_names(("x86_64",))
    sums = {n: hashlib.sha256(f"deb {n}\n".encode()).hexdigest() if right_sum else "ab" * 32 for n in names}
    digests = tuple((n, f"sha256:{h}") for n, h in sums.items())
    done = run_step(tmp_path, env, "enroot_install\n", enroot_digests=digests)
    if right_sum:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"enroot {facts.ENROOT_VERSION} installed" in done.stdout
        assert all(n in (tmp_path / "apt").read_text() for n in names)  # apt-get install of both .debs
    else:
        assert done.returncode == 1 and f"enroot's {names[0]} is not the sha256 pinned for it: refused" in done.stdout
        assert not (tmp_path / "apt").exists()


def test_a_node_installs_the_shared_build_without_building(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    shared = shared_build(tmp_path)
    shared.parent.mkdir(parents=True)
    shared.write_text("the head's build\n")
    done = run_step(tmp_path, env, f"pyxis_install\ncat {facts.PYXIS_PLUGIN} >{tmp_path}/installed\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "installed").read_text() == "the head's build\n"


def test_a_node_waits_for_the_build_another_node_holds_the_lock_for_then_installs_it(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    shared = shared_build(tmp_path)
    shared.parent.mkdir(parents=True)
    (shared.parent / ".builder").write_text("head")
    script = (
        f"flock {shared.parent}/.lock sh -c 'touch {tmp_path}/locked; sleep 2; echo built >{shared}' &\n"
        f"while [ ! -e {tmp_path}/locked ]; do sleep 0.1; done\n"
        f"pyxis_install\ncat {facts.PYXIS_PLUGIN} >{tmp_path}/installed\n"
    )
    done = run_step(tmp_path, env, script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"pyxis for Slurm {SLURM} (amd64) is being built by head: waiting up to 1800 s" in done.stdout
    assert (tmp_path / "installed").read_text() == "built\n"


def test_a_build_that_never_finishes_fails_naming_its_builder(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    shared = shared_build(tmp_path)
    shared.parent.mkdir(parents=True)
    (shared.parent / ".builder").write_text("compute-042")
    script = (
        f"flock {shared.parent}/.lock sh -c 'touch {tmp_path}/locked; sleep 5' &\n"
        f"while [ ! -e {tmp_path}/locked ]; do sleep 0.1; done\nPYXIS_BUILD_WAIT_SECONDS=1\npyxis_install\n"
    )
    done = run_step(tmp_path, env, script)
    assert done.returncode == 1
    assert "the build by compute-042 did not finish in 1 s (see that node's bootstrap log)" in done.stdout


def source_repo(tmp_path: Path) -> tuple[Path, str]:
    """A pyxis-like git repository whose make writes spank_pyxis.so, and its commit."""
    repo = tmp_path / "pyxis.git"
    repo.mkdir()
    (repo / "Makefile").write_text("all:\n\techo built-from-source >spank_pyxis.so\n")
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "Makefile"], [*ident, "commit", "-q", "-m", "pyxis"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True, text=True)
    return repo, head.stdout.strip()


@pytest.mark.parametrize("right_commit", [True, False])
def test_pyxis_is_built_from_its_pinned_commit_and_refused_without_it(fake, monkeypatch, right_commit):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    repo, commit = source_repo(tmp_path)
    monkeypatch.setattr(facts, "PYXIS_TAG_COMMIT", commit if right_commit else "0123456789abcdef" * 2 + "01234567")
    env = {**env, "HPCC_PYXIS_GIT": str(repo)}
    no_deps_no_retries = 'pyxis_build_deps() { :; }\nretry_cmd() { "$@"; }\n'
    script = f"{no_deps_no_retries}pyxis_install\ncat {facts.PYXIS_PLUGIN} >{tmp_path}/i\n"
    done = run_step(tmp_path, env, script)
    if right_commit:
        assert done.returncode == 0, done.stdout + done.stderr
        assert (tmp_path / "i").read_text() == "built-from-source\n" == shared_build(tmp_path).read_text()
        assert f"pyxis {facts.PYXIS_VERSION}: built against Slurm {SLURM}" in done.stdout
    else:
        assert done.returncode == 1 and f"pyxis: cannot fetch commit {facts.PYXIS_TAG_COMMIT} from {repo}" in (
            done.stdout
        )
        assert not shared_build(tmp_path).exists()


def test_the_step_checks_the_head_it_built_is_the_pinned_commit():
    """git checks what it fetched against the commit asked for; the step still refuses any other HEAD."""
    text = (REPO / "templates" / "steps" / "pyxis.sh.j2").read_text()
    assert 'fetch -q --depth 1 "$src" {{ cfacts.PYXIS_TAG_COMMIT }}' in text
    assert '[ "$(git -C "$tmp/src" rev-parse HEAD)" = {{ cfacts.PYXIS_TAG_COMMIT }} ] || fail' in text


def test_the_head_gets_the_plugin_and_plugstack_conf_and_a_changed_one_reconfigures_a_running_slurmctld(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    env = {**env, "HPCC_PYXIS_SO": str(tmp_path / "pyxis-standin.so")}
    changed = r.bundle_files(Containers(pyxis=Pyxis(container_scope="global")))["containers/plugstack.conf"]
    (tmp_path / "changed").write_bytes(changed)
    script = (
        "step_containers; step_containers\n"
        f"cp /etc/slurm/plugstack.conf {tmp_path}/plugstack-1; touch {tmp_path}/slurmctld-up; step_containers\n"
        f"cp {tmp_path}/changed {tmp_path}/current/containers/plugstack.conf; step_containers\n"
        f"cp /etc/slurm/plugstack.conf {tmp_path}/plugstack-2; cat {facts.PYXIS_PLUGIN} >{tmp_path}/plugin\n"
        f"[ -e /usr/local/bin/enroot ] || touch {tmp_path}/no-enroot\n"
    )
    done = run_step(tmp_path, env, script, role="head")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "plugstack-1").read_bytes() == r.bundle_files(Containers())["containers/plugstack.conf"]
    assert f"required {facts.PYXIS_PLUGIN} " in (tmp_path / "plugstack-1").read_text()
    assert (tmp_path / "plugstack-2").read_bytes() == changed
    assert (tmp_path / "scontrol").read_text().splitlines().count("scontrol reconfigure") == 1  # the change alone
    assert (tmp_path / "plugin").read_text() == "stand-in plugin\n"
    assert (tmp_path / "no-enroot").exists()  # the head runs no job: no enroot


def test_without_slurm_or_with_containers_off_the_step_does_nothing(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    env = {**env, "HPCC_ENROOT": str(bin_dir / "fake-enroot"), "HPCC_PYXIS_SO": str(tmp_path / "pyxis-standin.so")}
    check = f"step_containers\n[ -e {r.CONF_FILE} ] || [ -e {facts.PYXIS_PLUGIN} ] || touch {tmp_path}/nothing\n"
    done = run_step(tmp_path, env, "HPCC_SCHEDULER=none\n" + check)
    assert done.returncode == 0 and (tmp_path / "nothing").exists(), done.stdout + done.stderr
    assert "SCHEDULER=none: no pyxis" in done.stdout
    (tmp_path / "nothing").unlink()
    done = run_step(tmp_path, env, check, containers=False)
    assert done.returncode == 0 and (tmp_path / "nothing").exists(), done.stdout + done.stderr


def test_the_step_renders_the_shared_builds_path_as_the_program_names_it():
    """The step's path (pyxis.sh.j2) and infra/render/containers.py pyxis_shared_path are one layout."""
    text = (Path(__file__).resolve().parents[2] / "templates" / "steps" / "pyxis.sh.j2").read_text()
    rendered = '"$HPCC_MOUNT_POINT/.hpcc/pyxis/{{ cfacts.PYXIS_VERSION }}/slurm-$version/$arch"'
    assert f"dir={rendered}" in text
    assert r.pyxis_shared_path("/fsx", SLURM, "x86_64") == (
        f"/fsx/.hpcc/pyxis/{facts.PYXIS_VERSION}/slurm-{SLURM}/amd64/spank_pyxis.so"
    )


def test_the_ngc_key_goes_from_its_secret_to_roots_private_file_never_to_the_log(fake):
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    current = bundle(tmp_path, Containers(ngc_secret="team/ngc-key"))
    (tmp_path / "answers").write_text("0|nvapi-SeCrEt123\n")
    key = f"{ROOT_ENROOT_CONFIG}/ngc.key"
    script = (
        f"install -d -m 0700 {ROOT_ENROOT_CONFIG}\nngc_key; ngc_key\n"
        f"cat {key} >{tmp_path}/key; stat -c %a {key} >{tmp_path}/mode\n"
        f"cp {tmp_path}/registries-off {current}/containers/registries; ngc_key\n"
        f"[ -e {key} ] || touch {tmp_path}/gone\n"
    )
    (tmp_path / "registries-off").write_text("ecr\n")
    done = run_step(tmp_path, env, script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "key").read_text().strip() == "nvapi-SeCrEt123"
    assert (tmp_path / "mode").read_text().strip() == "600"
    assert "SeCrEt" not in done.stdout + done.stderr
    assert done.stdout.count("NGC key of team/ngc-key stored") == 1  # the second fetch found the same key
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls == ["secretsmanager get-secret-value --secret-id team/ngc-key --query SecretString --output text"] * 2
    assert (tmp_path / "gone").exists()  # no NGC secret named any more: the key goes


def test_a_new_node_copies_its_groups_images_before_slurmd_starts(fake):
    """The controller's prewarm document says group gpu's jobs use an image the shared cache holds: the containers
    step of gpu-003 (a replacement, before its slurm step) copies it to the node's own disk; gpu-less group cpu's
    node copies nothing. A node with no document boots as before (the other tests)."""
    tmp_path, bin_dir, env = fake
    stand_ins(tmp_path, bin_dir)
    bundle(tmp_path)
    hexed = "ab" * 32
    shared = tmp_path / "fsx" / ".hpcc" / "images"
    shared.mkdir(parents=True)
    (shared / f"sha256-{hexed}.sqsh").write_bytes(b"squashfs " * 1000)
    wanted = prewarm.Wanted(f"sha256:{hexed}", "nvcr.io/nvidia/pytorch:24.07-py3", ("42",))
    (tmp_path / "fsx" / prewarm.PREWARM_SUBPATH).write_text(prewarm.dumps_prewarm({"gpu": [wanted]}, 1.0))
    local = f"{prewarm.ROOT_VOLUME_DIR}/sha256-{hexed}.sqsh"  # no instance store mounted here
    for node, copied in (("cpu-001", False), ("gpu-003", True)):  # the overlay keeps what a run wrote
        script = f"HPCC_NODE={node}\nstep_containers >{tmp_path}/first 2>&1\n" + copy_out(tmp_path, local)
        stand_in = {"HPCC_ENROOT": str(bin_dir / "fake-enroot"), "HPCC_PYXIS_SO": str(tmp_path / "pyxis-standin.so")}
        done = run_step(tmp_path, {**env, **stand_in}, script)
        assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "first").read_text()
        assert (out(tmp_path, 0) == "squashfs " * 1000) is copied, (tmp_path / "first").read_text()
        shutil.rmtree(tmp_path / "out")
