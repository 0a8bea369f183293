#!/bin/bash
# hpcc bootstrap: cluster cpu-oneccl, head node (c6i.xlarge). Safe to run again.
# Log: /var/log/hpcc-bootstrap.log. Status: SSM parameter /hpcc/cpu-oneccl/nodes/<node>. Contract: docs/bootstrap-contract.md.
# Outside EC2 (docs/bootstrap-contract.md): HPCC_NODE_IP, HPCC_SKIP_STEPS=lustre,mount, AWS_ENDPOINT_URL.
set -Eeuo pipefail
umask 022
export PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
export AWS_DEFAULT_REGION="us-east-1" AWS_PAGER="" AWS_MAX_ATTEMPTS=1  # one request per call: the script paces and retries
HPCC_DEADLINE=$(( $(date +%s) + 60 * 60 ))
HPCC_STEP=start
HPCC_OS=""
mkdir -p /etc/hpcc /var/log /run

# --- log: every line to /var/log/hpcc-bootstrap.log, stamped with the time and the step that printed it ---------
# The step is fixed per labeller: each step gets its own, started after the previous one has written
# everything, so a line can never carry a later step's name.
HPCC_LABELLER=""

label() {  # label STEP: stdin to the log, each line as "<UTC time> [STEP] <line>"
  trap - ERR
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s [%s] %s\n' "$(date -u +%FT%TZ)" "$1" "$line"
  done >>"/var/log/hpcc-bootstrap.log"
}

use_step() {  # use_step STEP: from now on, output is labelled STEP
  HPCC_STEP=$1
  exec >>"/var/log/hpcc-bootstrap.log" 2>&1  # the current labeller sees its end of input
  if [ -n "$HPCC_LABELLER" ]; then
    local n=0
    wait "$HPCC_LABELLER" 2>/dev/null ||  # bash < 4.4 cannot wait for a process substitution: poll, bounded
      while kill -0 "$HPCC_LABELLER" 2>/dev/null && [ "$n" -lt 30 ]; do sleep 0.1; n=$(( n + 1 )); done
  fi
  exec > >(label "$1") 2>&1
  HPCC_LABELLER=${!:-}
}

flush_log() { use_step "$HPCC_STEP"; }  # everything printed so far is in the log file

log() { echo "$*"; }
# --- retry: deadlines, bounded commands, paced AWS calls with jittered backoff -------------------------
# Pacing (infra/bootstrap_pacing.py): two AWS calls of this node are at least 167 ms apart,
# so the 5 nodes together stay within the cluster's share of SSM's 40 requests/s.
HPCC_PACE_FILE=/run/hpcc-bootstrap.next-call  # a file: calls made in $(...) subshells count too

time_left() {  # seconds left of the whole run; a failing node gets 60 s to report
  if [ -n "${HPCC_FAILING:-}" ]; then echo 60; else echo $(( HPCC_DEADLINE - $(date +%s) )); fi
}

within() {  # within SECONDS COMMAND...: COMMAND, stopped (exit 124) after SECONDS or when the run's time is up
  local limit=$1 left; shift
  left=$(time_left)
  [ "$left" -gt 0 ] || return 124
  [ "$limit" -le "$left" ] || limit=$left
  timeout "$limit" "$@"
}

pace() {  # wait for this node's next turn to call AWS
  local now next=0 wait
  now=$(date +%s%3N)
  [ -s "$HPCC_PACE_FILE" ] && read -r next <"$HPCC_PACE_FILE"
  if [ "$next" -eq 0 ]; then  # the first call: at a random point of one interval
    next=$(( now + RANDOM * 167 / 32768 ))
  fi
  wait=$(( next - now ))
  [ "$wait" -le $(( 2 * 167 )) ] || wait=167  # a stale file, a clock step
  if [ "$wait" -gt 0 ]; then
    sleep "$(( wait / 1000 )).$(printf '%03d' $(( wait % 1000 )))"
    now=$(date +%s%3N)
  fi
  echo $(( now + 167 + RANDOM * 167 / 131072 )) >"$HPCC_PACE_FILE"
}

# aws_retry ARGS...: one paced AWS CLI call, retried with jittered exponential backoff. Prints the
# output; returns 0, 3 when the thing asked for does not exist (yet), 1 on any other error.
aws_retry() {
  local attempt=1 delay=2 out
  while :; do
    pace
    if out=$(within 120 aws "$@" 2>&1); then printf '%s\n' "$out"; return 0; fi
    case "$out" in
      *ParameterNotFound* | *ResourceNotFoundException*) return 3 ;;
    esac
    if [ "$attempt" -ge 6 ] || [ "$(time_left)" -le "$delay" ]; then
      printf 'aws %s %s: %s\n' "$1" "$2" "$out" >&2; return 1
    fi
    sleep $(( delay + RANDOM % (delay + 1) ))
    attempt=$(( attempt + 1 )); delay=$(( delay * 2 > 60 ? 60 : delay * 2 ))
  done
}

# aws_wait SECONDS WHAT ARGS...: poll an AWS value that may not exist yet; prints it once it does.
aws_wait() {
  local limit=$1 what=$2 until rc=0; shift 2
  until=$(( $(date +%s) + limit ))
  while :; do
    aws_retry "$@" && return 0 || rc=$?
    [ "$rc" -eq 3 ] || return 1
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then return 1; fi
    log "waiting for $what" >&2
    sleep $(( 5 + RANDOM % 5 ))
  done
}

# wait_for SECONDS WHAT COMMAND...: poll a local check with jitter until it passes or SECONDS pass.
wait_for() {
  local limit=$1 what=$2 until; shift 2
  until=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then return 1; fi
    log "waiting for $what"
    sleep $(( 5 + RANDOM % 5 ))
  done
}

retry_cmd() {  # retry_cmd COMMAND...: 5 tries, each bounded to 15 min, backing off 5, 10, 15 ... s plus jitter
  local n
  for n in 1 2 3 4 5; do
    within 900 "$@" && return 0
    log "try $n failed: $*"
    sleep $(( n * 5 + RANDOM % 5 ))
  done
  return 1
}
# --- status: this node's progress as JSON in /hpcc/cpu-oneccl/nodes/<node> (docs/bootstrap-contract.md) ------
# json_lines WIDTH: stdin lines as JSON strings joined by commas, each cut to its last WIDTH bytes.
json_lines() {
  LC_ALL=C sed -e "s/^.*\(.\{$1\}\)\$/\1/" -e 's/^[\x80-\xbf]*//' -e 's/\\/\\\\/g' -e 's/"/\\"/g' \
    -e 's/\t/\\t/g' -e 's/[[:cntrl:]]//g' -e 's/.*/"&"/' | paste -sd, -
}

# status_json PHASE OK MESSAGE: the status, with as many of the log's last 15 lines as fit in 4000 bytes.
status_json() {
  local LC_ALL=C lines=15 json message
  message=$(printf '%s' "${3:0:500}" | tr '\n' ' ' | json_lines 500)
  while :; do
    json=$(printf '{"node": "%s", "ip": "%s", "phase": "%s", "step": "%s", "ok": %s, "message": %s, "updated": "%s", "logTail": [%s]}' \
      "$HPCC_NODE" "$HPCC_IP" "$1" "$HPCC_STEP" "$2" "${message:-\"\"}" "$(date -u +%FT%TZ)" \
      "$(tail -n "$lines" "/var/log/hpcc-bootstrap.log" 2>/dev/null | json_lines 200)")
    if [ "${#json}" -le 4000 ] || [ "$lines" -eq 0 ]; then break; fi
    lines=$(( lines - 1 ))
  done
  printf '%s\n' "$json"
}

report() {  # report PHASE OK MESSAGE
  [ "$HPCC_NODE" != unknown ] || return 0
  flush_log
  aws_retry ssm put-parameter --name "/hpcc/cpu-oneccl/nodes/$HPCC_NODE" --type String --overwrite \
    --value "$(status_json "$@")" >/dev/null || log "warning: could not report status ($1)"
}

fail() {  # fail MESSAGE: report the failing step and stop; the instance is kept so its log can be read
  trap - ERR
  HPCC_FAILING=1
  log "FAILED at step $HPCC_STEP: $*"
  report failed false "$*"
  flush_log
  exit 1
}

on_error() {
  if [ "$BASH_SUBSHELL" -gt 0 ]; then  # in $(...): only the shell that runs the step reports and stops
    echo "error (exit $1) at line $2: $3" >&2
    exit "$1"
  fi
  if [ "$1" -eq 124 ] && [ "$(time_left)" -le 0 ]; then fail "the bootstrap's 60 minutes ran out ($3)"; fi
  fail "command failed (exit $1) at line $2: $3"
}

skipped() { case ",${HPCC_SKIP_STEPS:-}," in *",$1,"*) return 0 ;; esac; return 1; }

run_step() {  # run_step STEP FUNCTION
  use_step "$1"
  if skipped "$1"; then log "skipped: HPCC_SKIP_STEPS names $1"; return 0; fi
  report "$1" true "running"
  log "start"
  "$2"
  log "done"
}
# --- files: written only when their content changes, so a rerun changes nothing ---------------------
write_file() {  # write_file PATH MODE: stdin to PATH
  local path=$1 mode=$2 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; else mv -f "$tmp" "$path"; log "wrote $path"; fi
}
# --- identify: this node's name from its IP's place in /hpcc/cpu-oneccl/hosts (head, then compute-000 ...) -----
HPCC_NODE=unknown
HPCC_IP=""
HPCC_HOSTS=()

node_name() {  # node_name INDEX: the name of the node at INDEX of the hosts list
  if [ "$1" -eq 0 ]; then echo head; else printf 'compute-%03d\n' $(( $1 - 1 )); fi
}

primary_ip() {  # IMDSv2 on EC2; elsewhere the address of the default route, then the first address
  local token ip=""
  if token=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token \
      -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null); then
    ip=$(curl -sf -m 2 -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/local-ipv4 || true)
  fi
  [ -n "$ip" ] || ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')
  [ -n "$ip" ] || ip=$(hostname -I 2>/dev/null | awk '{print $1}')
  echo "$ip"
}

identify_node() {
  local hosts i
  if [ -n "${HPCC_NODE_IP:-}" ]; then HPCC_IP=$HPCC_NODE_IP; log "HPCC_NODE_IP: this node is $HPCC_IP"; else HPCC_IP=$(primary_ip); fi
  [ -n "$HPCC_IP" ] || fail "cannot tell this node's IP address; set HPCC_NODE_IP"
  hosts=$(aws_wait $(( 60 * 60 )) "/hpcc/cpu-oneccl/hosts (written once every instance exists)" \
    ssm get-parameter --name "/hpcc/cpu-oneccl/hosts" --query Parameter.Value --output text) ||
    fail "/hpcc/cpu-oneccl/hosts could not be read (see above) or never appeared"
  mapfile -t HPCC_HOSTS <<<"$(awk 'NF {print $1}' <<<"$hosts")"
  for i in "${!HPCC_HOSTS[@]}"; do
    if [ "${HPCC_HOSTS[$i]}" = "$HPCC_IP" ]; then HPCC_NODE=$(node_name "$i"); fi
  done
  [ "$HPCC_NODE" != unknown ] || fail "this node's IP $HPCC_IP is not in /hpcc/cpu-oneccl/hosts"
  log "this is $HPCC_NODE ($HPCC_IP), one of 5 nodes of cpu-oneccl"
}
# --- os: which distribution this is, which decides the Lustre client and package tools ------------
# os_id [OS_RELEASE_FILE]: ubuntu-22.04, amzn-2, amzn-2023 ...; fails for anything else. Debian is
# accepted for the local box (no FSx client exists for it: the lustre step then fails unless skipped).
os_id() {
  local ID="" VERSION_ID=""
  # shellcheck disable=SC1090,SC1091
  . "${1:-/etc/os-release}"
  case "$ID-$VERSION_ID" in
    ubuntu-20.04 | ubuntu-22.04 | ubuntu-24.04 | amzn-2 | amzn-2023 | debian-11 | debian-12) echo "$ID-$VERSION_ID" ;;
    *) return 1 ;;
  esac
}

# os_codename [OS_RELEASE_FILE]: jammy, noble ...; empty where the release names none (Amazon Linux).
# From os-release, not lsb_release: minimal images do not always ship lsb-release.
os_codename() (
  VERSION_CODENAME="" UBUNTU_CODENAME=""
  # shellcheck disable=SC1090,SC1091
  . "${1:-/etc/os-release}"
  echo "${VERSION_CODENAME:-$UBUNTU_CODENAME}"
)

step_os() {
  HPCC_OS=$(os_id /etc/os-release) ||
    fail "unsupported OS ($(grep -h '^PRETTY_NAME=' /etc/os-release | cut -d= -f2- || echo unknown)); hpcc supports Ubuntu 20.04/22.04/24.04, Amazon Linux 2 and Amazon Linux 2023"
  HPCC_OS_CODENAME=$(os_codename /etc/os-release)
  log "OS: $HPCC_OS${HPCC_OS_CODENAME:+ ($HPCC_OS_CODENAME)}, kernel $(uname -r)"
}
# --- lustre: the FSx for Lustre client for this OS and the running kernel ----------------------------
# lustre_package OS KERNEL: "<installer> <package>" for that OS and kernel.
lustre_package() {
  case "$1" in
    ubuntu-*) echo "apt lustre-client-modules-$2" ;;
    amzn-2) echo "amazon-linux-extras lustre" ;;
    amzn-2023) echo "dnf lustre-client" ;;
    *) return 1 ;;
  esac
}

# nearest_versions KERNEL: of the kernel versions on stdin, up to two either side of KERNEL.
nearest_versions() {
  { cat; echo "$1"; } | sort -V -u | awk -v k="$1" '{v[NR] = $0; if ($0 == k) at = NR}
    END {for (i = at - 2; i <= at + 2; i++) if (i > 0 && i <= NR && i != at) printf "%s%s", (n++ ? " " : ""), v[i]; print ""}'
}

install_lustre_ubuntu() {  # install_lustre_ubuntu PACKAGE
  local pkg=$1 key=/usr/share/keyrings/fsx-ubuntu-public-key.gpg held
  if [ ! -s "$key" ]; then
    retry_cmd curl -fsSL -m 60 -o /run/fsx-ubuntu-public-key.asc \
      https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc
    gpg --batch --yes --dearmor -o "$key" /run/fsx-ubuntu-public-key.asc
  fi
  local codename=${HPCC_OS_CODENAME:-}
  [ -n "$codename" ] || codename=$(lsb_release -cs)
  echo "deb [signed-by=$key] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" |
    write_file /etc/apt/sources.list.d/fsxlustreclientrepo.list 0644
  # first boot: cloud-init or unattended-upgrades may hold the dpkg lock for minutes; wait for it (apt >= 1.9.11)
  retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    fail "FSx publishes no Lustre client for the running kernel $(uname -r) ($pkg); nearest kernels with one: $(apt-cache search --names-only '^lustre-client-modules-[0-9]' | awk '{sub(/^lustre-client-modules-/, "", $1); print $1}' | nearest_versions "$(uname -r)") - boot an image with one of those kernels"
  fi
  retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "$pkg"
  # Unattended upgrades must not install a kernel the module does not match: hold it and its meta-packages.
  held=$({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "$pkg" "linux-image-$(uname -r)" linux-aws \
    linux-image-aws linux-headers-aws 2>/dev/null || true; } | awk '$1 ~ /^ii/ {print $2}')
  # shellcheck disable=SC2086  # one package a word
  apt-mark hold $held >/dev/null
  log "held: $(echo "$held" | tr '\n' ' ')"
}

step_lustre() {
  if modinfo lustre >/dev/null 2>&1; then log "Lustre client already installed"; return 0; fi
  local plan
  plan=$(lustre_package "$HPCC_OS" "$(uname -r)") || fail "FSx publishes no Lustre client for $HPCC_OS; use an Ubuntu or Amazon Linux image"
  case "$plan" in
    apt\ *) install_lustre_ubuntu "${plan#apt }" ;;
    amazon-linux-extras\ *) retry_cmd amazon-linux-extras install -y lustre ;;
    dnf\ *) retry_cmd dnf install -y lustre-client ;;
  esac
  modinfo lustre >/dev/null 2>&1 ||
    fail "the Lustre client is installed but has no module for the running kernel $(uname -r); kernels with one: $(find /lib/modules -name 'lustre.ko*' 2>/dev/null | cut -d/ -f4 | nearest_versions "$(uname -r)")"
  log "Lustre client: $(modinfo -F version lustre 2>/dev/null || echo '?')"
}
# --- mount: FSx for Lustre at /fsx once it exists and answers; persisted in fstab ---------
json_field() { sed -n "s/.*\"$1\" *: *\"\([^\"]*\)\".*/\1/p"; }  # json_field NAME: a string field of stdin's JSON

lnet_reachable() { timeout 3 bash -c "</dev/tcp/$1/988"; }

# fstab_line SOURCE: the fstab entry (options from the reference facts; _netdev or boot can hang).
fstab_line() {
  echo "$1 /fsx lustre defaults,noatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"
}

HPCC_FSTAB=/etc/fstab  # a variable for the tests only

persist_mount() {  # persist_mount SOURCE: exactly one fstab entry for the mount point, this one
  if ! grep -qxF "$(fstab_line "$1")" "$HPCC_FSTAB" || [ "$(grep -cF " /fsx lustre " "$HPCC_FSTAB" || true)" -ne 1 ]; then
    sed -i "\\# /fsx lustre #d" "$HPCC_FSTAB"  # an older entry for this mount point
    fstab_line "$1" >>"$HPCC_FSTAB"
    log "added /fsx to $HPCC_FSTAB"
  fi
}

step_mount() {
  local fsx dns mount_name source n
  fsx=$(aws_wait $(( 60 * 60 )) "the file system (/hpcc/cpu-oneccl/fsx; it may still be creating)" \
    ssm get-parameter --name "/hpcc/cpu-oneccl/fsx" --query Parameter.Value --output text) ||
    fail "/hpcc/cpu-oneccl/fsx could not be read (see above) or never appeared: is the file system still creating?"
  dns=$(json_field dnsName <<<"$fsx"); mount_name=$(json_field mountName <<<"$fsx")
  if [ -z "$dns" ] || [ -z "$mount_name" ]; then fail "/hpcc/cpu-oneccl/fsx lacks dnsName or mountName: $fsx"; fi
  source="$dns@tcp:/$mount_name"
  wait_for 1800 "Lustre on $dns:988" lnet_reachable "$dns" ||
    fail "$dns does not answer on TCP 988: check the Lustre security group rules (988, 1018-1023)"
  mkdir -p "/fsx"
  persist_mount "$source"
  if mountpoint -q "/fsx"; then
    log "/fsx already mounted"
  else
    for n in 1 2 3 4 5 6 7 8 9 10; do
      within 120 mount -t lustre -o relatime,flock "$source" "/fsx" && break
      [ "$n" -lt 10 ] || fail "mount $source /fsx failed 10 times"
      log "mount try $n failed; again in 6 s"
      sleep 6
    done
  fi
  mkdir -p "/fsx/scratch" "/fsx/hpcc"
  chmod 1777 "/fsx/scratch"
  log "mounted $source at /fsx; shared scratch: /fsx/scratch"
}
# --- efa: the fabric this node was launched with actually works --------------------------------------
step_efa() {
  within 60 fi_info -p tcp >/dev/null 2>&1 || fail "libfabric's TCP provider does not work (fi_info -p tcp)"
  log "EFA is not in use on c6i.xlarge: collectives run over TCP"
}
# --- ssh: one cluster key from hpcc/cpu-oneccl/ssh-key, trusted between every pair of nodes ----------------
# The private key goes from the secret to the key file only: never into the log, the status or user data.
HPCC_KEY=""

read_key() {  # read_key: the key into HPCC_KEY; returns 3 while the secret has no value
  HPCC_KEY=$(aws_retry secretsmanager get-secret-value --secret-id "hpcc/cpu-oneccl/ssh-key" --query SecretString --output text)
}

install_key() {  # install_key HOME OWNER
  local home=$1 owner=$2
  install -d -m 0700 "$home/.ssh"
  printf '%s\n' "$HPCC_KEY" | write_file "$home/.ssh/id_hpcc" 0600
  ssh-keygen -y -f "$home/.ssh/id_hpcc" | write_file "$home/.ssh/id_hpcc.pub" 0644
  [ -e "$home/.ssh/authorized_keys" ] || install -m 0600 /dev/null "$home/.ssh/authorized_keys"
  grep -qxF "$(cat "$home/.ssh/id_hpcc.pub")" "$home/.ssh/authorized_keys" || cat "$home/.ssh/id_hpcc.pub" >>"$home/.ssh/authorized_keys"
  chmod 0600 "$home/.ssh/authorized_keys"
  chown -R "$owner:" "$home/.ssh"
}

# client_config IP...: trust exactly these hosts, with no prompt (their host keys are new at every launch).
client_config() {
  echo "# hpcc cpu-oneccl: the cluster's nodes, trusted without prompts"
  printf '%s\n' "$@" | xargs -n 32 echo | while read -r hosts; do
    echo "Host $hosts"
    printf '  %s\n' "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "IdentityFile ~/.ssh/id_hpcc" "LogLevel ERROR"
  done
}

sshd_hardening() {  # keys only, as the classic guide does; first in sshd_config.d, so no later file overrides it
  printf '%s\n' "# hpcc: keys only" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
    "ChallengeResponseAuthentication no" "PermitRootLogin prohibit-password" "PubkeyAuthentication yes" \
    "# every node connects to every other at join, and mpirun fans out: do not drop them (default 10:30:100)" \
    "MaxStartups 256:30:1024"
}

reload_sshd() {
  local unit pid=""
  within 30 sshd -t || fail "sshd rejects its configuration (sshd -t)"
  if [ -d /run/systemd/system ]; then
    for unit in ssh sshd; do
      if systemctl is-active --quiet "$unit"; then within 60 systemctl reload "$unit"; log "reloaded $unit"; return 0; fi
    done
    log "sshd is not running (socket activation?): it reads the new configuration when it starts"
    return 0
  fi
  for _ in 1 2 3 4 5; do  # a HUP'd sshd re-executes and rewrites its pid file: read it once it is there
    pid=$(cat /run/sshd.pid 2>/dev/null || true)
    [ -z "$pid" ] || break
    sleep 1
  done
  if [ -n "$pid" ] && kill -HUP "$pid"; then log "sent HUP to sshd ($pid)"; else log "warning: no systemd and no sshd in /run/sshd.pid: sshd not reloaded"; fi
}

# head_key: the cluster key, generated and stored when the secret has no value yet. Any other error
# stops here: it must never replace a key the compute nodes may already hold.
head_key() {
  local rc=0 tmp
  read_key || rc=$?
  [ "$rc" -eq 3 ] || return "$rc"
  tmp=$(mktemp -d)
  ssh-keygen -q -t ed25519 -N "" -C "hpcc-cpu-oneccl" -f "$tmp/key"
  rc=0
  aws_retry secretsmanager put-secret-value --secret-id "hpcc/cpu-oneccl/ssh-key" --secret-string "file://$tmp/key" >/dev/null || rc=$?
  rm -rf "$tmp"
  [ "$rc" -eq 0 ] || return "$rc"
  log "generated the cluster key and stored it in hpcc/cpu-oneccl/ssh-key"
  read_key
}

# compute_key: the cluster key, once the head node has stored it (bounded by the join timeout).
compute_key() {
  local rc until=$(( $(date +%s) + 1200 ))
  until read_key; do
    rc=$?
    [ "$rc" -eq 3 ] || return "$rc"
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
      fail "hpcc/cpu-oneccl/ssh-key stayed empty for 20 min: the head node has not reached its ssh step (see its status)"
    fi
    log "waiting for the cluster key from the head node (hpcc/cpu-oneccl/ssh-key)"
    sleep $(( 5 + RANDOM % 5 ))
  done
}

step_ssh() {
  local home
  head_key || fail "could not read or store hpcc/cpu-oneccl/ssh-key (see above)"
  install_key /root root
  if id "ubuntu" >/dev/null 2>&1; then
    home=$(getent passwd "ubuntu" | cut -d: -f6)
    install_key "$home" "ubuntu"
  else
    log "no user ubuntu on this image: the key is installed for root only"
  fi
  HPCC_KEY=""
  grep -q '^Include /etc/ssh/ssh_config.d/' /etc/ssh/ssh_config 2>/dev/null ||
    sed -i '1i Include /etc/ssh/ssh_config.d/*.conf' /etc/ssh/ssh_config
  grep -q '^Include /etc/ssh/sshd_config.d/' /etc/ssh/sshd_config ||
    sed -i '1i Include /etc/ssh/sshd_config.d/*.conf' /etc/ssh/sshd_config
  mkdir -p /etc/ssh/ssh_config.d /etc/ssh/sshd_config.d
  client_config "${HPCC_HOSTS[@]}" | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  sshd_hardening | write_file /etc/ssh/sshd_config.d/01-hpcc.conf 0644
  reload_sshd
}
# --- join: every other node accepts this node's SSH (Open MPI spawns along a tree) -----------------
peer_ok() { timeout 20 ssh -o BatchMode=yes -o ConnectTimeout=5 "root@$1" true </dev/null >/dev/null 2>&1; }

# unjoined IP...: those of the IPs that do not accept SSH yet, 32 checked at a time, in a random order so
# that 512 nodes do not all knock on the same sshd first.
unjoined() {
  export -f peer_ok
  # shellcheck disable=SC2016  # $1 belongs to the inner bash
  printf '%s\n' "$@" | shuf | xargs -r -P 32 -I{} bash -c 'peer_ok "$1" || echo "$1"' _ {}
}

# node_names IP...: "name (ip)" for each, at most 10 then how many more.
node_names() {
  local ip i n=0 out=""
  for ip in "$@"; do
    n=$(( n + 1 ))
    [ "$n" -le 10 ] || continue
    for i in "${!HPCC_HOSTS[@]}"; do [ "${HPCC_HOSTS[$i]}" != "$ip" ] || out+="$(node_name "$i") ($ip), "; done
  done
  [ "$n" -le 10 ] || out+="and $(( n - 10 )) more, "
  echo "${out%, }"
}

step_join() {
  local deadline=$(( $(date +%s) + 1200 )) pending=() ip
  for ip in "${HPCC_HOSTS[@]}"; do [ "$ip" = "$HPCC_IP" ] || pending+=("$ip"); done
  while [ "${#pending[@]}" -gt 0 ]; do
    mapfile -t pending <<<"$(unjoined "${pending[@]}" | sort -t. -k1,1n -k2,2n -k3,3n -k4,4n)"
    [ -n "${pending[0]:-}" ] || break
    if [ "$(date +%s)" -ge "$deadline" ] || [ "$(time_left)" -le 0 ]; then
      fail "${#pending[@]} node(s) never joined within 20 min: $(node_names "${pending[@]}")"
    fi
    log "waiting for ${#pending[@]} node(s) to accept SSH: $(node_names "${pending[@]}")"
    sleep $(( 5 + RANDOM % 5 ))
  done
  log "all 5 nodes accept SSH"
}
# --- launch-env: hostfiles, the launch environment and the launch helpers ---------------------------
# hostfile FORMAT SLOTS: the compute nodes (HPCC_HOSTS after the head) in infra/hostfile.py's formats.
hostfile() {
  printf '%s\n' "${HPCC_HOSTS[@]:1}" | case "$1" in
    openmpi) awk -v s="$2" '{print $1 " slots=" s}' ;;
    mpich) awk -v s="$2" '{print $1 ":" s}' ;;
    hosts) awk '{print $1}' ;;
    horovod) awk -v s="$2" '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, s} END {print ""}' ;;
  esac
}

ofi_nccl_dir() {  # where this image keeps aws-ofi-nccl, if anywhere
  local d
  for d in /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib; do if [ -d "$d" ]; then echo "$d"; return 0; fi; done
}

# cluster_env: the same on every node (rendezvous, fabric for FI_PROVIDER, CCL_ATL_TRANSPORT, CCL_WORKER_COUNT, I_MPI_OFI_LIBRARY_INTERNAL, I_MPI_OFI_PROVIDER).
cluster_env() {
  local ofi
  ofi=$(ofi_nccl_dir)
  echo "HPCC_CLUSTER=cpu-oneccl"
  echo "MASTER_ADDR=${HPCC_HOSTS[1]}"
  echo "MASTER_PORT=29500"
  echo "NNODES=4"
  echo "NPROC_PER_NODE=32"
  echo "HPCC_HOSTS=$(hostfile horovod 32)"
  echo "HPCC_HOSTFILE=/etc/hpcc/hostfile"
  echo "FI_PROVIDER=tcp"
  echo "CCL_ATL_TRANSPORT=ofi"
  echo "CCL_WORKER_COUNT=1"
  echo "I_MPI_OFI_LIBRARY_INTERNAL=0"
  echo "I_MPI_OFI_PROVIDER=tcp"
  if [ -n "$ofi" ]; then
    echo "HPCC_OFI_NCCL_LIB=$ofi"
    echo "LD_LIBRARY_PATH=$ofi:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  fi
}

# node_env: this node's own part (its name, rank, and the interface gloo should use).
node_env() {
  local i ifname
  echo "HPCC_NODE=$HPCC_NODE"
  for i in "${!HPCC_HOSTS[@]}"; do
    if [ "$i" -gt 0 ] && [ "${HPCC_HOSTS[$i]}" = "$HPCC_IP" ]; then echo "NODE_RANK=$(( i - 1 ))"; fi
  done
  # gloo (torch.distributed on CPU) takes one interface by name: this node's primary one.
  ifname=$(ip -o -4 addr show 2>/dev/null | awk -v ip="$HPCC_IP" 'index($4, ip "/") == 1 {print $2; exit}')
  [ -z "$ifname" ] || echo "GLOO_SOCKET_IFNAME=$ifname"
}

launch_helpers() {
  write_file /usr/local/bin/hpcc-mpirun 0755 <<'SH'
#!/bin/bash
# hpcc-mpirun ARGS...: mpirun on every compute node (/etc/hpcc/hostfile) with the cluster's fabric settings.
set -euo pipefail
set -a; . /etc/hpcc/env; set +a
root=(); [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
exports=()
for name in PATH LD_LIBRARY_PATH FI_PROVIDER CCL_ATL_TRANSPORT CCL_WORKER_COUNT I_MPI_OFI_LIBRARY_INTERNAL I_MPI_OFI_PROVIDER; do
  [ -z "${!name+set}" ] || exports+=(-x "$name")  # only what is set: mpirun warns about the others
done
exec mpirun "${root[@]}" --hostfile /etc/hpcc/hostfile "${exports[@]}" --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0 --bind-to none "$@"
SH
  write_file /usr/local/bin/hpcc-torchrun 0755 <<'SH'
#!/bin/bash
# hpcc-torchrun [torchrun options] SCRIPT [ARGS]: torchrun on every compute node with its own NODE_RANK,
# over ssh; waits for all and fails if any fails. The launcher is this shell's torchrun by full path (ssh
# gives the nodes sshd's default PATH, without the venv or conda env); TORCHRUN names another one.
set -euo pipefail
if [ -n "${TORCHRUN:-}" ]; then
  launcher=$TORCHRUN  # a command line, e.g. "python -m torch.distributed.run"
elif found=$(command -v torchrun); then
  launcher=$(printf '%q' "$found")  # same image on every node, so the same path
else
  echo "hpcc-torchrun: no torchrun on PATH; activate the Python environment that has PyTorch, or set TORCHRUN" >&2
  exit 2
fi
quoted=$(printf '%q ' "$@")
pids=()
while read -r ip _; do
  # shellcheck disable=SC2029  # expanded here on purpose: the same command runs on every node
  ssh -o BatchMode=yes "$ip" "set -a; . /etc/hpcc/env; set +a; cd $(printf '%q' "$PWD") 2>/dev/null || cd; exec $launcher --nnodes \$NNODES --nproc-per-node \$NPROC_PER_NODE --node-rank \$NODE_RANK --master-addr \$MASTER_ADDR --master-port \$MASTER_PORT $quoted" </dev/null &
  pids+=("$!")
done </etc/hpcc/hostfile
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit "$status"
SH
}

step_launch_env() {
  local f
  hostfile openmpi 32 | write_file /etc/hpcc/hostfile 0644
  hostfile mpich 32 | write_file /etc/hpcc/hostfile.mpich 0644
  hostfile hosts 32 | write_file /etc/hpcc/hosts 0644
  { echo "# hpcc cpu-oneccl: rendezvous and fabric settings for $HPCC_NODE"; node_env; cluster_env; } |
    write_file /etc/hpcc/env 0644
  printf '%s\n' "# hpcc: the cluster's launch environment in every login shell" "set -a" ". /etc/hpcc/env" "set +a" |
    write_file /etc/profile.d/hpcc.sh 0644
  if mountpoint -q "/fsx"; then  # for jobs that read them from the shared file system
    mkdir -p "/fsx/hpcc"
    for f in hostfile hostfile.mpich hosts; do write_file "/fsx/hpcc/$f" 0644 </etc/hpcc/$f; done
    { echo "# hpcc cpu-oneccl: rendezvous and fabric settings (each node adds HPCC_NODE and NODE_RANK)"; cluster_env; } |
      write_file "/fsx/hpcc/env" 0644
  fi
  launch_helpers
  log "launch environment: /etc/hpcc/env, $(wc -l </etc/hpcc/hostfile) compute node(s) in /etc/hpcc/hostfile"
}

main() {
  use_step identify
  trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
  log "hpcc bootstrap of cpu-oneccl: head node, c6i.xlarge, at most 60 min"
  [ -z "${HPCC_SKIP_STEPS:-}" ] || log "HPCC_SKIP_STEPS=$HPCC_SKIP_STEPS"
  [ -z "${AWS_ENDPOINT_URL:-}" ] || log "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
  identify_node
  run_step os step_os
  run_step lustre step_lustre
  run_step mount step_mount
  run_step efa step_efa
  run_step ssh step_ssh
  run_step join step_join
  run_step launch-env step_launch_env
  use_step ready
  report ready true "bootstrap finished"
  log "ready"
  flush_log
}

main "$@"
