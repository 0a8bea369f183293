"""enroot's and pyxis' releases (infra/facts/containers.py): the URLs as NVIDIA's installation docs spell them, one
build key per Slurm version, and checksums that are pinned from a verified download or not at all."""

import re

import pytest

from infra.facts import containers as f


@pytest.mark.parametrize("arch,deb", [("x86_64", "amd64"), ("arm64", "arm64")])
def test_the_enroot_packages_follow_the_release_pattern(arch, deb):
    base = "https://github.com/NVIDIA/enroot/releases/download/v4.1.2/"
    assert [(d.name, d.url) for d in f.enroot_debs(arch)] == [
        (f"enroot_4.1.2-1_{deb}.deb", f"{base}enroot_4.1.2-1_{deb}.deb"),
        (f"enroot+caps_4.1.2-1_{deb}.deb", f"{base}enroot%2Bcaps_4.1.2-1_{deb}.deb"),
    ]


def test_an_architecture_without_packages_is_refused():
    with pytest.raises(ValueError, match="not 'i386'"):
        f.enroot_debs("i386")


def test_pyxis_is_its_repository_pinned_to_its_commit():
    assert f.PYXIS_REPOSITORY == "https://github.com/NVIDIA/pyxis.git"
    assert re.fullmatch(r"[0-9a-f]{40}", f.PYXIS_TAG_COMMIT) and re.fullmatch(r"[0-9a-f]{40}", f.ENROOT_TAG_COMMIT)
    assert f.PYXIS_PLUGIN == "/usr/local/lib/slurm/spank_pyxis.so"
    assert not [name for name in f.SHA256 if "pyxis" in name]  # pinned by its commit, not a tarball's sha256


def test_no_checksum_is_invented():
    """Each is a verified download's sha256 or None (unpinned): never a placeholder that looks like one."""
    assert set(f.SHA256) == {d.name for d in f.downloads(("x86_64", "arm64"))} == set(f.enroot_asset_names())
    for name, digest in f.SHA256.items():
        assert digest is None or re.fullmatch(r"[0-9a-f]{64}", digest), name
        assert digest is None or len(set(digest)) > 4, name  # not 000..., not abab...


def test_a_real_deploy_refuses_an_unpinned_file_by_name_and_says_how_to_pin_it(monkeypatch):
    monkeypatch.setattr(f, "SHA256", dict.fromkeys(f.SHA256))
    with pytest.raises(f.UnpinnedRelease) as e:
        f.require_pinned(("x86_64",))
    message = str(e.value)
    assert "enroot_4.1.2-1_amd64.deb" in message and "enroot+caps_4.1.2-1_amd64.deb" in message
    assert "arm64" not in message and "containers.enabled: false" in message
    assert "`hpcc pin containers STACK_FILE`" in message and "cluster.containers.releaseDigests" in message
    monkeypatch.setattr(f, "SHA256", {name: "0123456789abcdef" * 4 for name in f.SHA256})
    f.require_pinned(("x86_64", "arm64"))
    assert f.unpinned(("arm64",)) == []


def test_the_stacks_digests_pin_the_debs_and_win_over_the_projects(monkeypatch):
    monkeypatch.setattr(f, "SHA256", dict.fromkeys(f.SHA256))
    amd = {name: "sha256:" + f"{n:x}" * 64 for n, name in enumerate(f.enroot_asset_names(("x86_64",)), 1)}
    assert [d.sha256 for d in f.enroot_debs("x86_64", amd)] == ["1" * 64, "2" * 64]
    f.require_pinned(("x86_64",), amd)
    assert f.unpinned(("x86_64", "arm64"), amd) == list(f.enroot_asset_names(("arm64",)))
    monkeypatch.setattr(f, "SHA256", dict.fromkeys(f.SHA256, "f" * 64))
    assert f.enroot_debs("x86_64", {"enroot_4.1.2-1_amd64.deb": "sha256:" + "e" * 64})[0].sha256 == "e" * 64
    assert f.enroot_debs("x86_64")[0].sha256 == "f" * 64


def test_the_release_api_is_the_pinned_versions_tag():
    assert f.ENROOT_RELEASE_API.format(version=f.ENROOT_VERSION) == (
        "https://api.github.com/repos/NVIDIA/enroot/releases/tags/v4.1.2"
    )
    assert f.DIGEST.fullmatch("sha256:" + "0a" * 32) and not f.DIGEST.fullmatch("sha256:" + "0A" * 32)


@pytest.mark.parametrize(
    "version,arch,key",
    [
        ("22.05.8", "x86_64", "pyxis/0.24.0/slurm-22.05.8/amd64/spank_pyxis.so"),
        ("21.08.5", "arm64", "pyxis/0.24.0/slurm-21.08.5/arm64/spank_pyxis.so"),
    ],
)
def test_one_pyxis_build_per_slurm_version_and_architecture(version, arch, key):
    assert f.pyxis_build_key(version, arch) == key


@pytest.mark.parametrize("version", ["22.05", "slurm 22.05.8", "22.05.8/../x", "22.05.8\n"])
def test_a_slurm_version_that_is_not_one_is_refused(version):
    with pytest.raises(ValueError, match="major.minor.micro"):
        f.pyxis_build_key(version, "x86_64")
