#!/usr/bin/env python3
"""Break each bootstrap behaviour once and check that the test named for it fails (a mutation run).

    .venv/bin/python scripts/bootstrap_mutations.py          # every mutation
    .venv/bin/python scripts/bootstrap_mutations.py 3 17     # only these

Copies the tracked files to a temporary directory, applies one change at a time there (never in the
checkout) and runs the named tests against the copy. Prints CAUGHT or MISSED per mutation; exits 1 if any
was missed. Known equivalent mutant: the log labeller's "$1" and "$HPCC_STEP" are the same value.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
S = "tests/render/test_bootstrap_steps.py"
D = "tests/render/test_bootstrap_decisions.py"
B = "tests/render/test_bootstrap_behaviour.py"
M = "tests/render/test_bootstrap_membership.py"
R = "tests/render/test_bootstrap_render.py"
P = "tests/render/test_bootstrap_pacing.py"
L = "tests/render/test_loader.py"

# (file, text, replacement, tests that must then fail)
MUTATIONS = [
    (
        "templates/steps/join.sh.j2",
        'to accept SSH" peer_ok "$head" ||',
        'to accept SSH" true ||',
        S + "::test_join_waits_for_the_head_alone_never_for_its_peers",
    ),
    (
        "templates/steps/join.sh.j2",
        'if [ "$HPCC_NODE" = head ]; then',
        'if true; then',
        S + "::test_join_waits_for_the_head_alone_never_for_its_peers",
    ),
    ("infra/facts/fabric.py", "if itype.gpudirect_rdma:", "if True:", D + "::test_fabric_settings_per_instance_type"),
    (
        "templates/steps/lustre.sh.j2",
        'amzn-2023) echo "dnf lustre-client"',
        'amzn-2023) echo "yum lustre-client"',
        D + " -k lustre_package",
    ),
    ("templates/steps/os.sh.j2", "| amzn-2023 |", "| amzn-2023 | centos-7 |", D + " -k unsupported"),
    (
        "templates/steps/launch_env.sh.j2",
        '{print $1 " slots=" s}',
        '{print $1 " slots=" s+1}',
        D + " -k hostfile_lines",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        'awk -v s="$2" \'{print $1 ":" s}\'',
        'awk -v s="$2" \'{print $1 " " s}\'',
        D + " -k hostfile_lines",
    ),
    (
        "templates/steps/status.sh.j2",
        '"${#json}" -le 4000',
        '"${#json}" -le 40000',
        S + "::test_status_json_follows_the_contract_and_fits_in_4_kb",
    ),
    ("infra/render/pacing.py", "TARGET_SHARE = 0.75", "TARGET_SHARE = 1.5", "tests/render/test_bootstrap_pacing.py"),
    (
        "templates/steps/efa.sh.j2",
        "modprobe ib_uverbs ||",
        "true ||",
        S + "::test_efa_step_retries_after_modprobe_then_fails_naming_the_type",
    ),
    (
        "templates/steps/ssh.sh.j2",
        '"PasswordAuthentication no"',
        '"PasswordAuthentication yes"',
        S + "::test_sshd_drop_in_allows_keys_only_and_comes_first",
    ),
    (
        "templates/steps/ssh.sh.j2",
        '"StrictHostKeyChecking no"',
        '"StrictHostKeyChecking ask"',
        S + "::test_client_config_trusts_exactly_the_clusters_hosts",
    ),
    ("templates/steps/mount.sh.j2", "flock,_netdev,", "flock,", S + "::test_fsx_parameter_and_fstab_line"),
    (
        "infra/facts/fabric.py",
        '"--mca pml ^cm --mca btl',
        '"--mca btl',
        S + "::test_hpcc_mpirun_passes_hostfile_fabric_variables_and_efa_flags",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        'wait "$pid" || status=1',
        'wait "$pid" || true',
        S + "::test_hpcc_torchrun_runs_on_every_compute_node_and_propagates_failure",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        "launcher=$(printf '%q' \"$found\")",
        "launcher=torchrun",
        S + "::test_hpcc_torchrun_runs_on_every_compute_node_and_propagates_failure",
    ),
    (
        "templates/steps/os.sh.j2",
        'echo "${VERSION_CODENAME:-$UBUNTU_CODENAME}"',
        'echo "${VERSION_CODENAME:-}"',
        D + " -k os_codename",
    ),
    (
        "templates/steps/lustre.sh.j2",
        "local codename=${HPCC_OS_CODENAME:-}",
        "local codename=",
        B + "::test_the_lustre_repo_is_the_releases_codename_without_lsb_release",
    ),
    (
        "templates/steps/retry.sh.j2",
        '[ "$left" -gt 0 ] || return 124',
        'true',
        S + "::test_commands_are_cut_at_their_bound_and_at_the_runs_deadline",
    ),
    (
        "templates/steps/log.sh.j2",
        'printf \'%s [%s] %s\\n\' "$(date -u +%FT%TZ)" "$1" "$line"',
        'printf \'%s [%s] %s\\n\' "$(date -u +%FT%TZ)" "$HPCC_STEP" "$line"',
        S + "::test_every_log_line_carries_the_step_that_printed_it",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        "first=$(compute_hosts \"${1:-}\" | awk 'NR == 1')",
        'first=$(compute_hosts "${1:-}" | tail -n 1)',
        D + " -k launch_env_writes",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        '[ -z "${1:-}" ] || [ "${HPCC_NAMES[$i]%-*}" = "$1" ] || continue',
        'true',
        D + " -k each_group",
    ),
    (
        "templates/steps/launch_env.sh.j2",
        'echo "NODE_RANK=$(( i - 1 ))"',
        'echo "NODE_RANK=$i"',
        D + " -k launch_env_writes",
    ),
    (
        "infra/render/userdata.py",
        "if len(packed) > LOADER_LIMIT or not within_limit(packed):",
        "if not within_limit(packed):",
        R + " -k bound",
    ),
    (
        "templates/steps/ssh.sh.j2",
        '[ "$rc" -eq 3 ] || return "$rc"\n  tmp=',
        'tmp=',
        S + "::test_head_generates_the_key_only_when_the_secret_has_no_value",
    ),
    (
        "templates/steps/retry.sh.j2",
        "*ParameterNotFound* | *ResourceNotFoundException* | *NoSuchKey*) return 3 ;;",
        "*ParameterNotFound* | *ResourceNotFoundException*) return 3 ;;",
        M + " -k waits_for_its_name",
    ),
    ("templates/steps/efa.sh.j2", "sort -u | wc -l", "wc -l", S + "::test_efa_devices_are_counted_once_each"),
    (
        "templates/steps/status.sh.j2",
        'if [ "$BASH_SUBSHELL" -gt 0 ]; then',
        'if false; then',
        S + "::test_an_error_inside_a_command_substitution_does_not_report_the_node_failed",
    ),
    (
        "templates/steps/ssh.sh.j2",
        '"MaxStartups 256:30:1024"',
        '"MaxStartups 10:30:100"',
        B + "::test_sshd_takes_the_whole_cluster_connecting_at_once",
    ),
    ("templates/steps/mount.sh.j2", '|| [ "$(grep -cF', '|| [ "$(echo 1 || grep -cF', B + " -k mount_waits"),
    ("templates/steps/mount.sh.j2", 'grep -qxF "$(fstab_line "$1")"', 'false', B + " -k mount_waits"),
    ("templates/steps/files.sh.j2", 'if [ -f "$path" ] && cmp -s "$tmp" "$path"', 'if false', B + " -k key_twice"),
    (
        "templates/steps/ssh.sh.j2",
        'grep -qxF "$(cat "$home/.ssh/id_hpcc.pub")" "$home/.ssh/authorized_keys" ||',
        '',
        B + " -k key_twice",
    ),
    (
        "templates/steps/lustre.sh.j2",
        'if modinfo lustre >/dev/null 2>&1; then log "Lustre client already installed"; return 0; fi',
        '',
        B + " -k skipped_when",
    ),
    ("templates/steps/lustre.sh.j2", 'apt-mark hold $held', 'true $held', B + " -k signed_repo"),
    ("templates/steps/lustre.sh.j2", '[signed-by=$key] ', '', B + " -k signed_repo"),
    ("templates/steps/efa.sh.j2", 'sysctl -q -w kernel.yama.ptrace_scope=0', 'true', B + " -k ptrace"),
    ("templates/steps/efa.sh.j2", "grep -h 'EFA installer version'", "grep -h 'XX'", B + " -k ptrace"),
    ("templates/steps/efa.sh.j2", 'within 60 fi_info -p tcp >/dev/null 2>&1 ||', 'true ||', B + " -k tcp_provider"),
    ("templates/steps/ssh.sh.j2", 'if [ -n "$pid" ] && kill -HUP "$pid"', 'if [ -n "$pid" ]', B + " -k hup"),
    ("templates/steps/status.sh.j2", 'if skipped "$1"; then', 'if false; then', B + " -k skipped_step"),
    (
        "templates/steps/identify.sh.j2",
        '[ -n "$ip" ] || ip=$(ip -4 route get',
        '[ -n "$ip" ] || ip=$(false',
        B + " -k imds",
    ),
    ("templates/steps/retry.sh.j2", '[ "$limit" -le "$left" ] || limit=$left', 'true', B + " -k runs_time"),
    (
        "templates/steps/mount.sh.j2",
        'wait_for 1800 "Lustre on $dns:988" lnet_reachable "$dns" ||',
        'true ||',
        B + " -k port",
    ),
    # day 2: settings at run time, identity, the membership agent
    ("templates/steps/settings.sh.j2", '[[ $value =~ $pattern ]] ||', 'true ||', M + " -k refuses_settings"),
    (
        "templates/steps/settings.sh.j2",
        "    *) return 1 ;;\n  esac\n}",
        "    *) echo '.*' ;;\n  esac\n}",
        M + " -k REBOOT",
    ),
    ("templates/steps/settings.sh.j2", '[ -n "${seen[$key]+set}" ] ||', 'true ||', M + " -k lack_a_key"),
    ("templates/steps/settings.sh.j2", '[ -z "${seen[$key]+set}" ] ||', 'true ||', M + " -k NODE_COUNT"),
    (
        "templates/steps/identify.sh.j2",
        '[ "${HPCC_HOSTS[$(node_index "$HPCC_NODE")]}" = "$HPCC_IP" ] && return 0',
        'return 0',
        M + " -k another_address",
    ),
    (
        "templates/steps/identify.sh.j2",
        'if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then\n      fail "after',
        'if false; then\n      fail "after',
        M + " -k never_listed",
    ),
    (
        "hpcc_node/hosts.py",
        'return any(n.get("name") == name and n.get("instance") == instance_id',
        'return any(n.get("name") == name',
        M + " -k waits_for_its_name",
    ),
    (
        "templates/steps/identify.sh.j2",
        'if name=$(imds tags/instance/hpcc:node); then echo "$name"; return 0; fi',
        '',
        M + " -k instance_metadata",
    ),
    (
        "templates/steps/identify.sh.j2",
        'if [ "$HPCC_NODE" = head ]; then',
        'if false; then',
        M + " -k head_starts_alone",
    ),
    (
        "templates/steps/identify.sh.j2",
        '    read_hosts || rc=$?\n    if [ "$rc" -eq 0 ] &&',
        '    rc=3\n    if [ "$rc" -eq 0 ] &&',
        M + " -k head_starts_alone",
    ),
    (
        "templates/steps/status.sh.j2",
        'instance/$HPCC_INSTANCE_ID.json"',
        'instance/$HPCC_NODE.json"',
        M + " -k status_key",
    ),
    (
        "templates/steps/status.sh.j2",
        '"${HPCC_INSTANCE_ID:-}" "$HPCC_APPLIED_VERSION"',
        '"" "$HPCC_APPLIED_VERSION"',
        M + " -k status_names",
    ),
    (
        "templates/steps/sync.sh.j2",
        'if [ "$HPCC_READ_VERSION" = "$HPCC_APPLIED_VERSION" ] && ! settings_changed; then return 0; fi',
        '',
        M + " -k applies_a_change_once",
    ),
    (
        "templates/steps/sync.sh.j2",
        'load_state || { echo "$HPCC_STATE is malformed" >&2; return 1; }  # what the last tick applied',
        'true',
        M + " -k applies_a_change_once",
    ),
    ("templates/steps/sync.sh.j2", 'if [ "$at" != "$HPCC_IP" ]; then', 'if false; then', M + " -k never_applies"),
    (
        "templates/steps/sync.sh.j2",
        'if ! flock -n "$HPCC_AGENT_LOCK" true; then',
        'if false; then',
        M + " -k step_sync",
    ),
    ("templates/steps/sync.sh.j2", 'flock -n "$lock" || {', 'true || {', M + " -k step_sync"),
    ("templates/steps/retry.sh.j2", '  flock "$lock"\n', '', M + " -k share_one_pacer"),
    (
        "templates/steps/launch_env.sh.j2",
        '  client_config "${HPCC_HOSTS[@]}" | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644\n  if mountpoint',
        '  if mountpoint',
        M + " -k applies_a_change_once",
    ),
    (
        "infra/render/pacing.py",
        "return max(MIN_SYNC_SECONDS, math.ceil(pacing.api_interval_ms * JITTER / 1000))",
        "return MIN_SYNC_SECONDS",
        P,
    ),
    (
        "infra/render/roles.py",
        "first_poll_seconds=first.poll_seconds,",
        "first_poll_seconds=first.poll_seconds + cfg.compute.count,",
        R + " -k byte_identical",
    ),
    (
        "infra/render/node_settings.py",
        "    for key, value in settings.lines():\n        check(key, value)\n",
        "    for key, value in settings.lines():\n        pass\n",
        M + " -k program_refuses",
    ),
    # the loader, the bundle, the hooks
    ("templates/loader.sh.j2", 'if [ "$GOT" != "$SHA" ]; then', "if false; then", L + " -k hash"),
    ("templates/loader.sh.j2", '[ "$K" != "bundles/$SHA.tar.gz" ]', '[ -z "$K" ]', L + " -k malformed"),
    ("templates/loader.sh.j2", 'if [ "$n" -ge 8 ]; then', 'if [ "$n" -ge 9 ]; then', L + " -k unreachable"),
    ("templates/loader.sh.j2", '$DIR"\n  rm -rf "$TMP"\n', '$DIR"\n', L + " -k matching"),
    (
        "infra/render/bundle.py",
        "info.uid = info.gid = 0",
        "info.uid = info.gid = 1000",
        "tests/render/test_bundle.py -k deterministic",
    ),
    ("infra/render/bundle.py", "fileobj=out, mtime=0,", "fileobj=out,", "tests/render/test_bundle.py -k deterministic"),
    ("templates/steps/hooks.sh.j2", "      HPCC_FAIL_CLASS=hook\n", "", "tests/config/test_hooks.py -k failing"),
    # the host CA, the login user's key (hpcc_node/certs.py, templates/steps/ssh.sh.j2)
    (
        "templates/steps/ssh.sh.j2",
        '"{{ user_secret_id }}" "login user\'s key"',
        '"{{ ssh_secret_id }}" "login user\'s key"',
        "tests/node/test_host_keys.py -k login",
    ),
    (
        "hpcc_node/certs.py",
        "now >= (issued.valid_from + issued.valid_to) / 2",
        "now >= issued.valid_to",
        "tests/node/test_host_certs.py -k half_life",
    ),
    (
        "hpcc_node/certs.py",
        'a = store.Authority([a.signer], 0, f"{r.id}:retire")',
        'a = store.Authority(a.keys, a.signing, f"{r.id}:retire")',
        "tests/node/test_host_keys.py -k rotation",
    ),
    (
        "hpcc_node/certs.py",
        "if p is None or p.ip != m.ip or not p.keys:",
        "if p is None or not p.keys:",
        "tests/node/test_host_certs.py -k another_address",
    ),
    (
        "hpcc_node/certs.py",
        "(bool(instance) and issued.instance != instance)",
        "False",
        "tests/node/test_host_certs.py -k due_for_another_instance",
    ),
    (
        "templates/steps/hooks.sh.j2",
        "within \"$HPCC_HOOK_SECONDS\" env -i",
        "within \"$HPCC_HOOK_SECONDS\" env",
        "tests/config/test_hooks.py -k clean",
    ),
]
EQUIVALENT = {"printf '%s [%s] %s\\n' \"$(date -u +%FT%TZ)\" \"$HPCC_STEP\" \"$line\""}


def main(selected: list[str]) -> int:
    missed = 0
    with tempfile.TemporaryDirectory(prefix="hpcc-mut-") as tmp:
        files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
        for name in filter(None, files.stdout.split("\0")):
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            if (ROOT / name).is_file():
                (Path(tmp) / name).write_bytes((ROOT / name).read_bytes())
        for i, (f, old, new, tests) in enumerate(MUTATIONS):
            if selected and str(i) not in selected:
                continue
            path = Path(tmp) / f
            orig = path.read_text()
            if old not in orig:
                print(f"[{i}] STALE: {f} no longer has {old!r}")
                missed += 1
                continue
            path.write_text(orig.replace(old, new, 1))
            try:
                run = subprocess.run(
                    f"PYTHONPATH={tmp} timeout 300 {PY} -m pytest -q -x -p no:cacheprovider {tests}",
                    shell=True,
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
            finally:
                path.write_text(orig)
            caught = run.returncode != 0
            missed += not caught and new not in EQUIVALENT
            print(f"[{i}] {'CAUGHT' if caught else 'MISSED'}: {f}: {old[:60]!r} -> {new[:40]!r} ({tests})", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
