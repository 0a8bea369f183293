"""Grafana OSS on the head (issue 34): where it comes from and what it listens on, pinned here and nowhere else.

Installed from Grafana's own signed APT repository as its installation page says ("Install Grafana on Debian or
Ubuntu": https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/): the repository's key into
/etc/apt/keyrings and the repository `signed-by` it. The head checks the downloaded key's primary fingerprint against
KEY_FINGERPRINT before apt trusts it, and installs exactly VERSION: a new Grafana, or a new key (Grafana rotated theirs
in 2023; https://apt.grafana.com/ says which key signs the repository), is a change made here and reviewed, never one
a boot picks up. The Debian and Ubuntu archives carry no Grafana."""

from __future__ import annotations

APT_REPOSITORY = "https://apt.grafana.com"
APT_SUITE = "stable main"
# The ASCII-armoured key the installation page points apt at (gpg-full.key: the key with all its current
# signatures; the older gpg.key lacks the renewed ones, and modern apt refuses it).
KEY_URL = "https://apt.grafana.com/gpg-full.key"
# The primary key's fingerprint since 2023-08-24 (Grafana's "GPG signing key rotation" note on apt.grafana.com).
KEY_FINGERPRINT = "B53AE77BADB630A683046005963FA27710458545"
KEYRING = "/etc/apt/keyrings/grafana.asc"
PACKAGE = "grafana"  # OSS; grafana-enterprise is the other build
VERSION = "11.6.14"  # the 11.6 line: the dashboards' schemaVersion (infra/render/grafana.py SCHEMA_VERSION) is 11's
SCHEMA_VERSION = 39  # the dashboard JSON model's version Grafana 11.0 writes; later versions migrate it on load
PORT = 3000  # Grafana's default http_port; bound to 127.0.0.1 on the head, reached through a port forward
