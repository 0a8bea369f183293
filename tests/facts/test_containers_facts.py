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


def test_pyxis_is_its_tags_source_and_pinned_to_its_commit():
    src = f.pyxis_source()
    assert src.url == "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.24.0.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{40}", f.PYXIS_TAG_COMMIT) and re.fullmatch(r"[0-9a-f]{40}", f.ENROOT_TAG_COMMIT)
    assert f.PYXIS_PLUGIN == "/usr/local/lib/slurm/spank_pyxis.so"


def test_no_checksum_is_invented():
    """Each is a verified download's sha256 or None (unpinned): never a placeholder that looks like one."""
    assert set(f.SHA256) == {d.name for d in f.downloads(("x86_64", "arm64"))}
    for name, digest in f.SHA256.items():
        assert digest is None or re.fullmatch(r"[0-9a-f]{64}", digest), name
        assert digest is None or len(set(digest)) > 4, name  # not 000..., not abab...


def test_a_real_deploy_refuses_an_unpinned_file_by_name(monkeypatch):
    monkeypatch.setattr(f, "SHA256", dict.fromkeys(f.SHA256))
    with pytest.raises(f.UnpinnedRelease) as e:
        f.require_pinned(("x86_64",))
    assert "enroot_4.1.2-1_amd64.deb" in str(e.value) and "pyxis-0.24.0.tar.gz" in str(e.value)
    assert "arm64" not in str(e.value) and "containers.enabled: false" in str(e.value)
    monkeypatch.setattr(f, "SHA256", {name: "0123456789abcdef" * 4 for name in f.SHA256})
    f.require_pinned(("x86_64", "arm64"))
    assert f.unpinned(("arm64",)) == []


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
