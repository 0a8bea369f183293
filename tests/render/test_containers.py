"""What the nodes will get for containers (infra/render/containers.py), held to enroot's and pyxis' own documents:
enroot.conf read back the way enroot reads it (each value expanded by bash), the plugstack line with pyxis' options
only, the hooks on by node kind, and no value that could become syntax."""

import subprocess

import pytest

from hpcc_contract import enroot_credentials as ec
from infra.config.containers import Containers, Enroot, Pyxis
from infra.facts import containers as facts
from infra.render import containers as r
from tests.facts.instance_data import facts_for

# A reader modelled on enroot.in's config::load (v4.1.2): refuse a file bash cannot parse, then for each line split
# KEY from VALUE at the first space, tab or `=` and expand VALUE with `eval echo`. Prints KEY=VALUE per line.
READ_LIKE_ENROOT = r"""
set -euo pipefail
bash -n "$1"
while IFS=$' \t=' read -r key value; do
  [[ "$key" =~ ^ENROOT_[[:upper:]_]+$ ]] || continue
  printf '%s=%s\n' "$key" "$(eval echo "$value")"
done < "$1"
"""


def read_like_enroot(tmp_path, text: str) -> dict[str, str]:
    conf = tmp_path / "enroot.conf"
    conf.write_text(text)
    done = subprocess.run(
        ["bash", "-c", READ_LIKE_ENROOT, "reader", str(conf)], capture_output=True, text=True, check=True, timeout=30
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines())


def ids() -> tuple[str, str]:
    out = subprocess.run(["id", "-u"], capture_output=True, text=True, check=True).stdout.strip()
    return out, subprocess.run(["id", "-g"], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize(
    "store,base", [(True, "/opt/dlami/nvme/enroot"), (False, "/var/lib/hpcc/enroot")], ids=["nvme", "root"]
)
def test_enroot_conf_reads_back_as_enroot_reads_it(tmp_path, store, base):
    uid, gid = ids()
    got = read_like_enroot(tmp_path, r.render_enroot_conf(Enroot(), instance_store=store))
    assert got == {
        "ENROOT_RUNTIME_PATH": f"{base}/runtime/user-{uid}",
        "ENROOT_DATA_PATH": f"{base}/data/user-{uid}",
        "ENROOT_CACHE_PATH": f"{base}/cache/group-{gid}",
        "ENROOT_TEMP_PATH": f"{base}/tmp",
        "ENROOT_SQUASH_OPTIONS": "-noI -noD -noF -noX -no-duplicates",
        "ENROOT_MAX_CONNECTIONS": "10",
        "ENROOT_CONNECT_TIMEOUT": "30",
        "ENROOT_TRANSFER_TIMEOUT": "0",
        "ENROOT_TRANSFER_RETRIES": "3",
        "ENROOT_ROOTFS_WRITABLE": "yes",
        "ENROOT_REMAP_ROOT": "no",
        "ENROOT_MOUNT_HOME": "no",
        "ENROOT_RESTRICT_DEV": "no",
    }


def test_the_users_choices_reach_enroot_conf_as_values_only(tmp_path):
    enroot = Enroot(
        max_processors=16,
        max_connections=4,
        transfer_timeout_seconds=600,
        squash_compression="zstd",
        mount_home=True,
        restrict_dev=True,
        remap_root=True,
        rootfs_writable=False,
        allow_http=True,
    )
    got = read_like_enroot(tmp_path, r.render_enroot_conf(enroot, instance_store=True))
    assert got["ENROOT_SQUASH_OPTIONS"] == "-comp zstd -Xcompression-level 3 -b 1M"
    assert (got["ENROOT_MAX_PROCESSORS"], got["ENROOT_MAX_CONNECTIONS"], got["ENROOT_TRANSFER_TIMEOUT"]) == (
        "16",
        "4",
        "600",
    )
    flags = ("MOUNT_HOME", "RESTRICT_DEV", "REMAP_ROOT", "ROOTFS_WRITABLE", "ALLOW_HTTP")
    assert [got[f"ENROOT_{k}"] for k in flags] == ["yes", "yes", "yes", "no", "yes"]


def test_http_is_allowed_only_when_asked_and_processors_left_to_enroot_by_default():
    text = r.render_enroot_conf(Enroot(), instance_store=False)
    assert "ENROOT_ALLOW_HTTP" not in text and "ENROOT_MAX_PROCESSORS" not in text
    assert r.SQUASH_OPTIONS["lzo"] == "-comp lzo -noD -exit-on-error"  # enroot.in's default, verbatim


@pytest.mark.parametrize(
    "constant,value",
    [
        ("INSTANCE_STORE_MOUNT", "/opt/$(touch /tmp/x)"),
        ("ROOT_VOLUME_BASE", "/var/lib/hpcc/enroot; rm -rf /"),
        ("ROOT_VOLUME_BASE", "/var/lib/`id`"),
        ("ROOT_VOLUME_BASE", "/var/lib/hpcc/en root"),
        ("ROOT_VOLUME_BASE", '/var/lib/"x"'),
    ],
)
def test_nothing_that_is_shell_is_rendered(monkeypatch, constant, value):
    monkeypatch.setattr(r, constant, value)
    with pytest.raises(r.BadRender, match="not a line hpcc renders"):
        r.render_enroot_conf(Enroot(), instance_store=constant == "INSTANCE_STORE_MOUNT")


@pytest.mark.parametrize("store", [True, False])
def test_no_enroot_conf_names_the_credentials(store):
    """Users' enroot reads enroot.conf: it names no credentials directory, so theirs stays enroot's default; root's
    is named only in the image service's children's environment (hpcc_node/containers/service.py root_enroot)."""
    text = r.render_enroot_conf(Enroot(), instance_store=store)
    assert "ENROOT_CONFIG_PATH" not in text and "/etc/hpcc" not in text
    assert r.CREDENTIALS_FILE == "/etc/hpcc/enroot-root/.credentials"
    assert (r.ROOT_ONLY_MODE, ec.CREDENTIALS_MODE) == (0o700, 0o600)


def test_values_that_skip_the_models_checks_are_still_never_rendered():
    with pytest.raises(KeyError):
        r.render_enroot_conf(Enroot.model_construct(squash_compression="none; id"), instance_store=False)
    with pytest.raises(ValueError):
        r.render_enroot_conf(Enroot.model_construct(max_connections="10 $(id)"), instance_store=False)


def test_the_plugstack_line_uses_pyxis_options_only():
    line = r.render_plugstack(Pyxis())
    assert line == (
        "required /usr/local/lib/slurm/spank_pyxis.so runtime_path=/run/pyxis container_scope=job "
        "execute_entrypoint=0 sbatch_support=1 importer=/usr/local/libexec/hpcc/pyxis-importer\n"
    )
    words = line.split()
    assert words[0] == "required" and words[1].startswith("/")  # absolute: the same on the head and every node
    assert {w.split("=", 1)[0] for w in words[2:]} <= set(facts.PYXIS_OPTIONS)
    assert "remap_root" not in line  # no pyxis option since 0.12: ENROOT_REMAP_ROOT decides


def test_the_plugstack_line_carries_the_users_choices_and_an_importer():
    line = r.render_plugstack(
        Pyxis(container_scope="global", execute_entrypoint=True, sbatch_support=False), importer="/opt/hpcc/importer"
    )
    options = dict(w.split("=", 1) for w in line.split()[2:])
    # pyxis' parse_bool (config.c) reads 1/0; container_scope takes job or global.
    assert options == {
        "runtime_path": "/run/pyxis",
        "container_scope": "global",
        "execute_entrypoint": "1",
        "sbatch_support": "0",
        "importer": "/opt/hpcc/importer",
    }


@pytest.mark.parametrize("importer", ["/opt/hpcc/imp orter", "relative/importer", "/x\nrequired /tmp/evil.so"])
def test_an_importer_that_would_break_the_line_is_refused(importer):
    with pytest.raises(r.BadRender):
        r.render_plugstack(Pyxis(), importer=importer)


@pytest.mark.parametrize("nvidia,removed", [(True, ()), (False, ("98-nvidia.sh",))])
def test_pmix_hooks_everywhere_and_the_nvidia_hook_only_on_nvidia_nodes(nvidia, removed):
    hooks = r.enroot_hooks(nvidia=nvidia)
    assert hooks.link == ("50-slurm-pmi.sh", "50-slurm-pytorch.sh") and hooks.remove == removed


@pytest.mark.parametrize(
    "itype,store,nvidia",
    [("p5.48xlarge", True, True), ("p4d.24xlarge", True, True), ("c6i.16xlarge", False, False)],
)
def test_a_node_type_decides_where_enroot_writes_and_its_hooks(itype, store, nvidia):
    node = r.for_type(Containers(), facts_for(itype))
    base = r.enroot_base(store)
    assert f"ENROOT_DATA_PATH {base}/data/user-$(id -u)\n" in node.enroot_conf
    assert node.directories == (f"{base}/runtime", f"{base}/data", f"{base}/cache", f"{base}/tmp")
    assert node.root_only == ("/etc/hpcc/enroot-root",) and node.importer_entry == r.render_importer_entry()
    assert ("98-nvidia.sh" not in node.hooks.remove) is nvidia


def test_the_instance_store_fact_comes_from_describe_instance_types():
    assert facts_for("p5.48xlarge").instance_store_gb == 30400  # 8 x 3800 GB
    assert facts_for("c6i.16xlarge").instance_store_gb == 0


def test_credentials_lines_are_netrc_with_every_part_checked():
    host = ec.ecr_registry("123456789012", "us-east-1")
    assert host == "123456789012.dkr.ecr.us-east-1.amazonaws.com"
    assert ec.netrc_line(host, "AWS", "eyJwYXlsb2Fk+/=") == (
        "machine 123456789012.dkr.ecr.us-east-1.amazonaws.com login AWS password eyJwYXlsb2Fk+/=\n"
    )
    assert ec.netrc_line("nvcr.io", "$oauthtoken", "nvapi-Abc_1").split() == [
        "machine",
        "nvcr.io",
        "login",
        "$oauthtoken",
        "password",
        "nvapi-Abc_1",
    ]
    assert r.credential_machines(Containers(ngc_secret="ngc")) == ("nvcr.io", "authn.nvidia.com")
    assert r.credential_machines(Containers()) == ()
    both = ec.credentials_text((host, "tok="), "nvapi-k")
    assert both.splitlines() == [
        f"machine {host} login AWS password tok=",
        "machine nvcr.io login $oauthtoken password nvapi-k",
        "machine authn.nvidia.com login $oauthtoken password nvapi-k",
    ]
    assert ec.credentials_text(None, None) == ""


@pytest.mark.parametrize(
    "machine,login,password",
    [
        ("nvcr.io", "$oauthtoken", "$(curl evil)"),  # enroot's evalnetrc runs a `$` password through a shell
        ("nvcr.io", "$oauthtoken", "two words"),
        ("nvcr.io", "$oauthtoken", ""),
        ("nvcr.io x", "AWS", "token"),
        ("nvcr.io", "root", "token"),
    ],
)
def test_a_credentials_line_that_enroot_would_misread_is_refused(machine, login, password):
    with pytest.raises(ec.BadCredential) as e:
        ec.netrc_line(machine, login, password)
    assert password not in str(e.value) or not password


@pytest.mark.parametrize("account,region", [("12345", "us-east-1"), ("123456789012", "us-east-1; x")])
def test_a_malformed_ecr_registry_is_refused(account, region):
    with pytest.raises(ec.BadCredential):
        ec.ecr_registry(account, region)


def test_the_importer_entry_runs_the_bundles_importer_isolated():
    text = r.render_importer_entry()
    assert text.startswith("#!/usr/bin/python3 -I\n")  # pyxis execve(2)s it; the job's PYTHON* variables ignored
    assert "sys.path.insert(0, '/opt/hpcc/current')" in text and "hpcc_node.containers.importer import main" in text
    compile(text, "pyxis-importer", "exec")
    for bad in ("relative", "/opt/x'); import os; ('", "/opt/a b"):
        with pytest.raises(r.BadRender):
            r.render_importer_entry(bad)


def test_the_bundle_files_hold_both_stores_both_kinds_the_plugstack_line_and_the_importer():
    files = {k: v.decode() for k, v in r.bundle_files(Containers()).items()}
    assert files["containers/enroot.conf.instance-store"] == r.render_enroot_conf(Enroot(), instance_store=True)
    assert files["containers/enroot.conf.root-volume"] == r.render_enroot_conf(Enroot(), instance_store=False)
    assert files["containers/directories.root-volume"].split() == list(r.enroot_paths(False).parents)
    assert files["containers/hooks.gpu"] == "link 50-slurm-pmi.sh\nlink 50-slurm-pytorch.sh\n"
    assert files["containers/hooks.cpu"] == "link 50-slurm-pmi.sh\nlink 50-slurm-pytorch.sh\nremove 98-nvidia.sh\n"
    plug = files["containers/plugstack.conf"].splitlines()
    assert plug[0].startswith("#") and plug[1:] == [r.render_plugstack(Pyxis()).strip()]
    assert files["containers/pyxis-importer"] == r.render_importer_entry()


def test_the_registries_file_names_ecr_and_the_ngc_secret_only_when_on():
    assert r.render_registries(Containers()) == "ecr\n"
    assert r.render_registries(Containers(ecr=False)) == ""
    assert r.render_registries(Containers(ngc_secret="team/ngc-key")) == "ecr\nngc team/ngc-key\n"


def test_the_compute_script_checks_each_deb_against_the_stacks_digest():
    """containers.releaseDigests reach the containers step: each .deb's line carries the user's hex (the step's
    `sha256sum -c` takes it), the head's script none (it installs no enroot)."""
    from infra.config.stackfile import load
    from infra.render.roles import role_contexts
    from infra.render.userdata import render
    from tests.facts.instance_data import offline_facts
    from tests.render.bootstrap_cases import ROOT

    cfg = load(ROOT / "examples" / "p5-llm.yaml")
    names = facts.enroot_asset_names()
    digests = {n: f"sha256:{i:x}" + "0123456789abcdef" * 3 + f"{i:x}" * 15 for i, n in enumerate(names, 1)}
    containers = cfg.cluster.containers.model_copy(update={"release_digests": digests})
    cluster = cfg.cluster.model_copy(update={"containers": containers})
    scripts = {k: render(ctx) for k, ctx in role_contexts(cluster, cfg.region, offline_facts()).items()}
    compute = next(text for key, text in scripts.items() if key != "head")
    for arch in ("x86_64", "arm64"):
        for deb in facts.enroot_debs(arch):
            assert f'"{deb.name} {deb.url} {digests[deb.name].removeprefix("sha256:")}"' in compute
    assert not any(d.removeprefix("sha256:") in scripts["head"] for d in digests.values())
    assert "unpinned" not in compute
