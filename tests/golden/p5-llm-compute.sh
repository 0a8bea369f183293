#!/bin/bash
# hpcc node script: cluster llm, compute node (p5.48xlarge). Run with no argument it is the
# bootstrap (safe to run again); it installs itself as /usr/local/sbin/hpcc-node, whose `sync` is the membership agent.
# Log: /var/log/hpcc-bootstrap.log. Status: SSM parameter /hpcc/llm/nodes/<node>. Run-time settings: /hpcc/llm/settings.
# Outside EC2 (docs/bootstrap-contract.md): HPCC_NODE_NAME, HPCC_INSTANCE_ID, HPCC_NODE_IP, HPCC_SKIP_STEPS=lustre,mount, AWS_ENDPOINT_URL.
set -Eeuo pipefail
umask 022
export PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
export AWS_DEFAULT_REGION="us-east-1" AWS_PAGER="" AWS_MAX_ATTEMPTS=1  # one request per call: the script paces and retries
HPCC_START=$(date +%s)
HPCC_DEADLINE=$(( HPCC_START + 240 * 60 ))  # until the settings give the cluster's own
HPCC_STEP=start
HPCC_OS=""
mkdir -p /etc/hpcc /var/log /run

# --- log: every line to /var/log/hpcc-bootstrap.log, stamped with the time and the step that printed it ---------
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
HPCC_PACE_FILE=/run/hpcc-aws.last-call

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
  local now last=0 wait interval=$HPCC_API_INTERVAL_MS lock
  exec {lock}>>"$HPCC_PACE_FILE.lock"
  flock "$lock"
  now=$(date +%s%3N)
  [ ! -s "$HPCC_PACE_FILE" ] || read -r last <"$HPCC_PACE_FILE" || true
  [[ $last =~ ^[0-9]+$ ]] || last=0
  if [ "$last" -eq 0 ]; then  # the node's first call: at a random point of one interval
    wait=$(( RANDOM * interval / 32768 ))
  else
    wait=$(( last + interval + RANDOM * interval / 131072 - now ))
  fi
  [ "$wait" -le $(( 2 * interval )) ] || wait=$interval  # a clock step
  if [ "$wait" -gt 0 ]; then
    sleep "$(( wait / 1000 )).$(printf '%03d' $(( wait % 1000 )))"
    now=$(date +%s%3N)
  fi
  echo "$now" >"$HPCC_PACE_FILE"
  exec {lock}>&-
}

aws_retry() {
  local attempt=1 delay=$HPCC_API_BACKOFF_SECONDS out
  while :; do
    pace
    if out=$(within 120 aws "$@" 2>&1); then printf '%s\n' "$out"; return 0; fi
    case "$out" in
      *ParameterNotFound* | *ResourceNotFoundException*) return 3 ;;
    esac
    if [ "$attempt" -ge "$HPCC_API_ATTEMPTS" ] || [ "$(time_left)" -le "$delay" ]; then
      printf 'aws %s %s: %s\n' "$1" "$2" "$out" >&2; return 1
    fi
    sleep $(( delay + RANDOM % (delay + 1) ))
    attempt=$(( attempt + 1 )); delay=$(( delay * 2 > 60 ? 60 : delay * 2 ))
  done
}

poll_pause() { sleep $(( HPCC_POLL_SECONDS + RANDOM % HPCC_POLL_SECONDS )); }  # between two looks, with jitter

# aws_wait SECONDS WHAT ARGS...: poll an AWS value that may not exist yet; prints it once it does.
aws_wait() {
  local limit=$1 what=$2 until rc=0; shift 2
  until=$(( $(date +%s) + limit ))
  while :; do
    aws_retry "$@" && return 0 || rc=$?
    [ "$rc" -eq 3 ] || return 1
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then return 1; fi
    log "waiting for $what" >&2
    poll_pause
  done
}

# wait_for SECONDS WHAT COMMAND...: poll a local check with jitter until it passes or SECONDS pass.
wait_for() {
  local limit=$1 what=$2 until; shift 2
  until=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then return 1; fi
    log "waiting for $what"
    poll_pause
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
# --- settings: what changes over the cluster's life, from /hpcc/llm/settings; parsed, never sourced ---
# Until the settings are read: the pacing of the largest cluster the config allows (infra/bootstrap_pacing.py).
HPCC_API_INTERVAL_MS=17100
HPCC_POLL_SECONDS=18
HPCC_API_BACKOFF_SECONDS=2
HPCC_API_ATTEMPTS=6
HPCC_TIMEOUT_MINUTES=240
HPCC_NODE_COUNT=""
HPCC_SLOTS=""
HPCC_JOIN_TIMEOUT_MINUTES=""
HPCC_SYNC_SECONDS=""
HPCC_MASTER_PORT=""
HPCC_LOGIN_USER=""
HPCC_MOUNT_POINT=""
HPCC_MPIRUN_OPTIONS=""
HPCC_SCHEDULER=""
HPCC_FABRIC=()
HPCC_AUTHORIZED_KEY=()
HPCC_SETTINGS_TEXT=""

setting_pattern() {  # setting_pattern KEY: the pattern a value of KEY must match in full (infra/node_settings.py)
  case "$1" in
    NODE_COUNT) echo '^([1-9][0-9]{0,5})$' ;;
    SLOTS) echo '^([1-9][0-9]{0,5})$' ;;
    TIMEOUT_MINUTES) echo '^([1-9][0-9]{0,5})$' ;;
    JOIN_TIMEOUT_MINUTES) echo '^([1-9][0-9]{0,5})$' ;;
    API_INTERVAL_MS) echo '^([1-9][0-9]{0,5})$' ;;
    POLL_SECONDS) echo '^([1-9][0-9]{0,5})$' ;;
    API_BACKOFF_SECONDS) echo '^([1-9][0-9]{0,5})$' ;;
    API_ATTEMPTS) echo '^([1-9][0-9]{0,5})$' ;;
    SYNC_SECONDS) echo '^([1-9][0-9]{0,5})$' ;;
    MASTER_PORT) echo '^([1-9][0-9]{0,5})$' ;;
    LOGIN_USER) echo '^([a-z_][a-z0-9_-]{0,31})$' ;;
    MOUNT_POINT) echo '^(/[A-Za-z0-9._/-]*)$' ;;
    MPIRUN_OPTIONS) echo '^([A-Za-z0-9_.,:^/=+ -]*)$' ;;
    FABRIC) echo '^([A-Z][A-Z0-9_]*=[A-Za-z0-9_.,:^/+@-]*)$' ;;
    AUTHORIZED_KEY) echo '^((ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{40,1400}={0,3}( [A-Za-z0-9@._+-]{1,100})?)$' ;;
    SCHEDULER) echo '^(none|slurm)$' ;;
    SLURM_NODE) echo '^([A-Za-z]+=[A-Za-z0-9:]+( [A-Za-z]+=[A-Za-z0-9:]+)*)$' ;;
    SLURM_GPUS) echo '^(0|[1-9][0-9]{0,2})$' ;;
    *) return 1 ;;
  esac
}

apply_settings() {
  local line key value pattern fabric=() keys=()
  local -A seen=()
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    if [[ ! $line =~ ^([A-Z][A-Z0-9_]*)=(.*)$ ]]; then echo "settings: '${line:0:80}' is not KEY=VALUE" >&2; return 1; fi
    key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
    pattern=$(setting_pattern "$key") || { echo "settings: unknown key $key" >&2; return 1; }
    [[ $value =~ $pattern ]] || { echo "settings: $key='${value:0:80}' does not match $pattern" >&2; return 1; }
    if [ "$key" = FABRIC ]; then fabric+=("$value"); continue; fi
    if [ "$key" = AUTHORIZED_KEY ]; then keys+=("$value"); continue; fi
    [ -z "${seen[$key]+set}" ] || { echo "settings: $key is given twice" >&2; return 1; }
    seen[$key]=$value
  done <<<"$1"
  for key in NODE_COUNT SLOTS TIMEOUT_MINUTES JOIN_TIMEOUT_MINUTES API_INTERVAL_MS POLL_SECONDS API_BACKOFF_SECONDS API_ATTEMPTS SYNC_SECONDS MASTER_PORT LOGIN_USER MOUNT_POINT MPIRUN_OPTIONS SCHEDULER; do
    [ -n "${seen[$key]+set}" ] || { echo "settings: $key is missing" >&2; return 1; }
  done
  for key in "${!seen[@]}"; do printf -v "HPCC_$key" '%s' "${seen[$key]}"; done
  HPCC_FABRIC=(${fabric[@]+"${fabric[@]}"})
  HPCC_AUTHORIZED_KEY=(${keys[@]+"${keys[@]}"})
  HPCC_SETTINGS_TEXT=$1
}
# --- status: this node's progress as JSON in /hpcc/llm/nodes/<node> (docs/bootstrap-contract.md) ------
# json_lines WIDTH: stdin lines as JSON strings joined by commas, each cut to its last WIDTH bytes.
json_lines() {
  LC_ALL=C sed -e "s/^.*\(.\{$1\}\)\$/\1/" -e 's/^[\x80-\xbf]*//' -e 's/\\/\\\\/g' -e 's/"/\\"/g' \
    -e 's/\t/\\t/g' -e 's/[[:cntrl:]]//g' -e 's/.*/"&"/' | paste -sd, -
}

# status_json PHASE OK MESSAGE: the status (which instance wrote it, which hosts version it has applied), with as many of the log's last 15 lines as fit in 4000 bytes.
status_json() {
  local LC_ALL=C lines=15 json message
  message=$(printf '%s' "${3:0:500}" | tr '\n' ' ' | json_lines 500)
  while :; do
    json=$(printf '{"node": "%s", "ip": "%s", "instanceId": "%s", "hostsVersion": %s, "phase": "%s", "step": "%s", "ok": %s, "message": %s, "updated": "%s", "logTail": [%s]}' \
      "$HPCC_NODE" "$HPCC_IP" "${HPCC_INSTANCE_ID:-}" "$HPCC_APPLIED_VERSION" "$1" "$HPCC_STEP" "$2" "${message:-\"\"}" "$(date -u +%FT%TZ)" \
      "$(tail -n "$lines" "/var/log/hpcc-bootstrap.log" 2>/dev/null | json_lines 200)")
    if [ "${#json}" -le 4000 ] || [ "$lines" -eq 0 ]; then break; fi
    lines=$(( lines - 1 ))
  done
  printf '%s\n' "$json"
}

report() {  # report PHASE OK MESSAGE
  [ "$HPCC_NODE" != unknown ] || return 0
  flush_log
  aws_retry ssm put-parameter --name "/hpcc/llm/nodes/$HPCC_NODE" --type String --overwrite \
    --value "$(status_json "$@")" >/dev/null || log "warning: could not report status ($1)"
}

fail() {  # fail MESSAGE: report the failing step and stop; the instance is kept so its log can be read
  trap - ERR
  if [ -n "${HPCC_AGENT:-}" ]; then log "error: $*"; exit 1; fi  # the agent retries next tick, never fails the node
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
  if [ "$1" -eq 124 ] && [ "$(time_left)" -le 0 ]; then fail "the bootstrap's $HPCC_TIMEOUT_MINUTES minutes ran out ($3)"; fi
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
# --- identify: this node's name and instance from its own instance; membership from /hpcc/llm/hosts ---
HPCC_NODE=unknown
HPCC_IP=""
HPCC_HOSTS=()
HPCC_HOSTS_VERSION=0  # the Version of /hpcc/llm/hosts HPCC_HOSTS came from
HPCC_APPLIED_VERSION=0  # the Version whose membership this node's files hold (in the status as hostsVersion)
HPCC_READ_HOSTS="" HPCC_READ_VERSION=0 HPCC_READ_SETTINGS=""

node_name() {  # node_name INDEX: the name of the node at INDEX of the hosts list
  if [ "$1" -eq 0 ]; then echo head; else printf 'compute-%03d\n' $(( $1 - 1 )); fi
}

node_index() {  # node_index NAME: the index of NAME's line in the hosts list (head 0, compute-NNN NNN + 1)
  if [ "$1" = head ]; then echo 0; return 0; fi
  [[ $1 =~ ^compute-([0-9]{3,4})$ ]] || return 1
  echo $(( 10#${BASH_REMATCH[1]} + 1 ))
}

valid_ip() { [[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; }

imds() {  # imds PATH: an instance metadata value over IMDSv2; fails outside EC2 or when there is none
  local token
  token=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) || return 1
  curl -sf -m 2 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

primary_ip() {  # IMDSv2 on EC2; elsewhere the address of the default route, then the first address
  local ip=""
  ip=$(imds local-ipv4) || ip=""
  [ -n "$ip" ] || ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')
  [ -n "$ip" ] || ip=$(hostname -I 2>/dev/null | awk '{print $1}')
  echo "$ip"
}

parameter_fields() { grep -oE '"([^"\\]|\\.)*"|[0-9]+' | sed -e 's/^"//' -e 's/"$//' | paste - - -; }

read_cluster() {
  local out name version value found=0
  out=$(aws_retry ssm get-parameters --names "/hpcc/llm/hosts" "/hpcc/llm/settings" \
    --query 'Parameters[].[Name,Version,Value]' --output json) || return 1
  while IFS=$'\t' read -r name version value; do
    value=${value//\\n/$'\n'}
    [[ $version =~ ^[0-9]+$ ]] || { echo "/hpcc/llm/hosts: no Version in the answer" >&2; return 1; }
    case "$name" in
      "/hpcc/llm/hosts") HPCC_READ_HOSTS=$value HPCC_READ_VERSION=$version; found=$(( found + 1 )) ;;
      "/hpcc/llm/settings") HPCC_READ_SETTINGS=$value; found=$(( found + 1 )) ;;
    esac
  done < <(parameter_fields <<<"$out")
  [ "$found" -eq 2 ] || return 3
}

parse_hosts() {  # parse_hosts TEXT: its lines into HPCC_HOSTS; fails on a line that is not an IPv4 address
  local hosts=() ip
  mapfile -t hosts < <(awk 'NF {print $1}' <<<"$1")
  for ip in ${hosts[@]+"${hosts[@]}"}; do valid_ip "$ip" || { echo "/hpcc/llm/hosts: '${ip:0:40}' is not an IPv4 address" >&2; return 1; }; done
  [ "${#hosts[@]}" -gt 0 ] || { echo "/hpcc/llm/hosts is empty" >&2; return 1; }
  HPCC_HOSTS=("${hosts[@]}")
}

wait_membership() {
  local index rc until="" at
  index=$(node_index "$HPCC_NODE")
  while :; do
    rc=0
    read_cluster || rc=$?
    if [ "$rc" -eq 0 ]; then
      apply_settings "$HPCC_READ_SETTINGS" || fail "/hpcc/llm/settings is refused (see above); correct it with pulumi up"
      HPCC_DEADLINE=$(( HPCC_START + HPCC_TIMEOUT_MINUTES * 60 ))
      parse_hosts "$HPCC_READ_HOSTS" || fail "/hpcc/llm/hosts is refused (see above)"
      HPCC_HOSTS_VERSION=$HPCC_READ_VERSION
      at=${HPCC_HOSTS[$index]:-nothing}
      [ "$at" != "$HPCC_IP" ] || return 0
      [ -n "$until" ] || until=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))
      if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
        fail "this node is $HPCC_NODE ($HPCC_IP), but after $HPCC_JOIN_TIMEOUT_MINUTES min line $(( index + 1 )) of /hpcc/llm/hosts (version $HPCC_HOSTS_VERSION) holds $at"
      fi
      log "waiting for /hpcc/llm/hosts to list $HPCC_NODE at $HPCC_IP (line $(( index + 1 )) holds $at, version $HPCC_HOSTS_VERSION)"
    elif [ "$rc" -eq 3 ]; then
      [ "$(time_left)" -gt 0 ] || fail "/hpcc/llm/hosts or /hpcc/llm/settings never appeared"
      log "waiting for /hpcc/llm/hosts and /hpcc/llm/settings (written once every instance exists)"
    else
      fail "/hpcc/llm/hosts and /hpcc/llm/settings could not be read (see above)"
    fi
    poll_pause
  done
}

identify_node() {
  local name
  if [ -n "${HPCC_NODE_NAME:-}" ]; then name=$HPCC_NODE_NAME; log "HPCC_NODE_NAME: this node is $name"
  else name=$(imds tags/instance/hpcc:node) || name=""; fi
  node_index "$name" >/dev/null ||
    fail "this node's name '${name:0:40}' is not head or compute-NNN: launch it with the hpcc:node tag and instance metadata tags on, or set HPCC_NODE_NAME"
  HPCC_NODE=$name
  if [ -z "${HPCC_INSTANCE_ID:-}" ]; then HPCC_INSTANCE_ID=$(imds instance-id) || HPCC_INSTANCE_ID=""; fi
  [[ $HPCC_INSTANCE_ID =~ ^[A-Za-z0-9-]{1,64}$ ]] || fail "cannot tell this node's instance id; set HPCC_INSTANCE_ID"
  if [ -n "${HPCC_NODE_IP:-}" ]; then HPCC_IP=$HPCC_NODE_IP; log "HPCC_NODE_IP: this node is $HPCC_IP"; else HPCC_IP=$(primary_ip); fi
  valid_ip "$HPCC_IP" || fail "cannot tell this node's IP address ('${HPCC_IP:0:40}'); set HPCC_NODE_IP"
  wait_membership
  log "this is $HPCC_NODE ($HPCC_IP, $HPCC_INSTANCE_ID), one of $(( HPCC_NODE_COUNT + 1 )) nodes of llm (hosts version $HPCC_HOSTS_VERSION); at most $HPCC_TIMEOUT_MINUTES min"
}
# --- os: which distribution this is, which decides the Lustre client and package tools ------------
os_id() {
  local ID="" VERSION_ID=""
  # shellcheck disable=SC1090,SC1091
  . "${1:-/etc/os-release}"
  case "$ID-$VERSION_ID" in
    ubuntu-20.04 | ubuntu-22.04 | ubuntu-24.04 | amzn-2 | amzn-2023 | debian-11 | debian-12) echo "$ID-$VERSION_ID" ;;
    *) return 1 ;;
  esac
}

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
# --- mount: FSx for Lustre at the settings' MOUNT_POINT once it exists and answers; persisted in fstab ---
json_field() { sed -n "s/.*\"$1\" *: *\"\([^\"]*\)\".*/\1/p"; }  # json_field NAME: a string field of stdin's JSON

# lnet_reachable HOST: the host is an argument of the inner shell, never part of its code.
# shellcheck disable=SC2016  # $1 belongs to the inner bash
lnet_reachable() { timeout 3 bash -c ': <"/dev/tcp/$1/988"' lnet "$1"; }

# fsx_endpoint_ok DNS MOUNT_NAME: a host name (RFC 1123 labels, at most 253 characters) and an FSx mount name
# (`fsx` for SCRATCH_1, else 8 letters and digits): the parameter is data, and anything else is refused.
fsx_endpoint_ok() {
  [ "${#1}" -le 253 ] && [[ $1 =~ ^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$ ]] &&
    [[ $2 =~ ^[A-Za-z0-9]{1,16}$ ]]
}

# The mount's options, the same now and at boot (FSx for Lustre User Guide, "Mounting from an Amazon EC2 instance"
# and "Mounting Amazon FSx file systems automatically"); in fstab, _netdev or boot can hang on the network.
LUSTRE_OPTIONS=relatime,flock
fstab_line() {  # fstab_line SOURCE: the fstab entry
  echo "$1 $HPCC_MOUNT_POINT lustre defaults,$LUSTRE_OPTIONS,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"
}

HPCC_FSTAB=/etc/fstab  # a variable for the tests only

persist_mount() {  # persist_mount SOURCE: exactly one fstab entry for the mount point, this one
  local kept
  if ! grep -qxF "$(fstab_line "$1")" "$HPCC_FSTAB" || [ "$(grep -cF " $HPCC_MOUNT_POINT lustre " "$HPCC_FSTAB" || true)" -ne 1 ]; then
    kept=$(grep -vF " $HPCC_MOUNT_POINT lustre " "$HPCC_FSTAB" || true)  # less any older entry for this mount point
    { [ -z "$kept" ] || printf '%s\n' "$kept"; fstab_line "$1"; } >"$HPCC_FSTAB.hpcc"
    cat "$HPCC_FSTAB.hpcc" >"$HPCC_FSTAB"  # the same file, its owner and mode kept
    rm -f "$HPCC_FSTAB.hpcc"
    log "added $HPCC_MOUNT_POINT to $HPCC_FSTAB"
  fi
}

step_mount() {
  local fsx dns mount_name source n
  fsx=$(aws_wait $(( HPCC_TIMEOUT_MINUTES * 60 )) "the file system (/hpcc/llm/fsx; it may still be creating)" \
    ssm get-parameter --name "/hpcc/llm/fsx" --query Parameter.Value --output text) ||
    fail "/hpcc/llm/fsx could not be read (see above) or never appeared: is the file system still creating?"
  dns=$(json_field dnsName <<<"$fsx"); mount_name=$(json_field mountName <<<"$fsx")
  if [ -z "$dns" ] || [ -z "$mount_name" ]; then fail "/hpcc/llm/fsx lacks dnsName or mountName"; fi
  fsx_endpoint_ok "$dns" "$mount_name" ||
    fail "/hpcc/llm/fsx holds a dnsName or mountName that is not a host name and an FSx mount name; refused"
  source="$dns@tcp:/$mount_name"
  wait_for 1800 "Lustre on $dns:988" lnet_reachable "$dns" ||
    fail "$dns does not answer on TCP 988: check the Lustre security group rules (988, 1018-1023)"
  mkdir -p "$HPCC_MOUNT_POINT"
  persist_mount "$source"
  if mountpoint -q "$HPCC_MOUNT_POINT"; then
    log "$HPCC_MOUNT_POINT already mounted"
  else
    for n in 1 2 3 4 5 6 7 8 9 10; do
      within 120 mount -t lustre -o "$LUSTRE_OPTIONS" "$source" "$HPCC_MOUNT_POINT" && break
      [ "$n" -lt 10 ] || fail "mount $source $HPCC_MOUNT_POINT failed 10 times"
      log "mount try $n failed; again in 6 s"
      sleep 6
    done
  fi
  mkdir -p "$HPCC_MOUNT_POINT/scratch" "$HPCC_MOUNT_POINT/hpcc"
  chmod 1777 "$HPCC_MOUNT_POINT/scratch"
  log "mounted $source at $HPCC_MOUNT_POINT; shared scratch: $HPCC_MOUNT_POINT/scratch"
}
# --- efa: the fabric this node was launched with actually works --------------------------------------
# efa_device_count: EFA devices libfabric sees (one RDM domain each, e.g. efa_0-rdm).
efa_device_count() { { fi_info -p efa -t FI_EP_RDM 2>/dev/null || true; } | awk '$1 == "domain:" {print $2}' | sort -u | wc -l; }

step_efa() {
  local found
  if ! within 60 fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1; then
    log "fi_info -p efa found no EFA device; loading ib_uverbs and retrying"
    modprobe ib_uverbs || log "modprobe ib_uverbs failed"
    within 60 fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1 ||
      fail "no EFA device: fi_info -p efa fails even after modprobe ib_uverbs; p5.48xlarge was launched with 32 EFA interface(s) - check the launch template, the security group (all traffic to itself) and the EFA driver"
  fi
  found=$(efa_device_count)
  log "EFA devices: $found by fi_info, $(find /sys/class/infiniband -mindepth 1 -maxdepth 1 2>/dev/null | wc -l) in /sys/class/infiniband"
  [ "$found" -eq 32 ] || fail "found $found EFA device(s); p5.48xlarge was launched with 32"
  log "$(grep -h 'EFA installer version' /opt/amazon/efa_installed_packages 2>/dev/null || echo 'EFA installer version: unknown (/opt/amazon/efa_installed_packages missing)')"
  case "$HPCC_OS" in
    ubuntu-*)  # libfabric's shared-memory transport needs ptrace between ranks
      echo "kernel.yama.ptrace_scope = 0" | write_file /etc/sysctl.d/99-hpcc-efa.conf 0644
      sysctl -q -w kernel.yama.ptrace_scope=0 ;;
  esac
}
# --- ssh: one cluster key from hpcc/llm/ssh-key, trusted between every pair of nodes ----------------
# The private key goes from the secret to the key file only: never into the log, the status or user data.
HPCC_KEY=""
HPCC_VPC_CIDR=${HPCC_VPC_CIDR:-10.0.0.0/16}  # where the cluster key is accepted from (override: outside EC2)

read_key() {  # read_key: the key into HPCC_KEY; returns 3 while the secret has no value
  HPCC_KEY=$(aws_retry secretsmanager get-secret-value --secret-id "hpcc/llm/ssh-key" --query SecretString --output text)
}

# install_key HOME OWNER: the cluster key, accepted only from inside the VPC (`from=`, sshd(8)): a public head
# node's sshd faces the internet, and the cluster key is root on every node. Other lines are left as they are.
install_key() {
  local home=$1 owner=$2 blob allowed=$1/.ssh/authorized_keys
  [[ $HPCC_VPC_CIDR =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$ ]] || fail "HPCC_VPC_CIDR '$HPCC_VPC_CIDR' is not an IPv4 CIDR"
  install -d -m 0700 "$home/.ssh"
  printf '%s\n' "$HPCC_KEY" | write_file "$home/.ssh/id_hpcc" 0600
  ssh-keygen -y -f "$home/.ssh/id_hpcc" | write_file "$home/.ssh/id_hpcc.pub" 0644
  blob=$(cut -d' ' -f2 "$home/.ssh/id_hpcc.pub")
  [ -e "$allowed" ] || install -m 0600 /dev/null "$allowed"
  { grep -vF "$blob" "$allowed" || true; echo "from=\"$HPCC_VPC_CIDR\" $(cat "$home/.ssh/id_hpcc.pub")"; } | write_file "$allowed" 0600
  chown -R "$owner:" "$home/.ssh"
}

# user_keys: the users' own keys (cluster.ssh.authorizedKeys) for the login user, in a file sshd also reads
# (AuthorizedKeysFile below); the membership agent rewrites it when the settings change.
user_keys() {
  install -d -m 0755 /etc/hpcc/authorized_keys
  { [ "${#HPCC_AUTHORIZED_KEY[@]}" -eq 0 ] || printf '%s\n' "${HPCC_AUTHORIZED_KEY[@]}"; } |
    write_file "/etc/hpcc/authorized_keys/$HPCC_LOGIN_USER" 0644
}

client_config() {
  echo "# hpcc llm: the cluster's nodes, trusted without prompts"
  printf '%s\n' "$@" | xargs -n 32 echo | while read -r hosts; do
    echo "Host $hosts"
    printf '  %s\n' "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "IdentityFile ~/.ssh/id_hpcc" "LogLevel ERROR"
  done
}

sshd_hardening() {  # keys only, as the classic guide does; first in sshd_config.d, so no later file overrides it
  printf '%s\n' "# hpcc: keys only" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
    "ChallengeResponseAuthentication no" "PermitRootLogin prohibit-password" "PubkeyAuthentication yes" \
    "AuthorizedKeysFile .ssh/authorized_keys /etc/hpcc/authorized_keys/%u" \
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

head_key() {
  local rc=0 tmp
  read_key || rc=$?
  [ "$rc" -eq 3 ] || return "$rc"
  tmp=$(mktemp -d)
  ssh-keygen -q -t ed25519 -N "" -C "hpcc-llm" -f "$tmp/key"
  rc=0
  aws_retry secretsmanager put-secret-value --secret-id "hpcc/llm/ssh-key" --secret-string "file://$tmp/key" >/dev/null || rc=$?
  rm -rf "$tmp"
  [ "$rc" -eq 0 ] || return "$rc"
  log "generated the cluster key and stored it in hpcc/llm/ssh-key"
  read_key
}

# compute_key: the cluster key, once the head node has stored it (bounded by the join timeout).
compute_key() {
  local rc until=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))
  until read_key; do
    rc=$?
    [ "$rc" -eq 3 ] || return "$rc"
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
      fail "hpcc/llm/ssh-key stayed empty for $HPCC_JOIN_TIMEOUT_MINUTES min: the head node has not reached its ssh step (see its status)"
    fi
    log "waiting for the cluster key from the head node (hpcc/llm/ssh-key)"
    poll_pause
  done
}

step_ssh() {
  local home
  compute_key || fail "could not read or store hpcc/llm/ssh-key (see above)"
  install_key /root root
  if id "$HPCC_LOGIN_USER" >/dev/null 2>&1; then
    home=$(getent passwd "$HPCC_LOGIN_USER" | cut -d: -f6)
    install_key "$home" "$HPCC_LOGIN_USER"
  else
    log "no user $HPCC_LOGIN_USER on this image: the key is installed for root only"
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
  local deadline=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 )) pending=() ip
  for ip in "${HPCC_HOSTS[@]}"; do [ "$ip" = "$HPCC_IP" ] || pending+=("$ip"); done
  while [ "${#pending[@]}" -gt 0 ]; do
    mapfile -t pending <<<"$(unjoined "${pending[@]}" | sort -t. -k1,1n -k2,2n -k3,3n -k4,4n)"
    [ -n "${pending[0]:-}" ] || break
    if [ "$(date +%s)" -ge "$deadline" ] || [ "$(time_left)" -le 0 ]; then
      fail "${#pending[@]} node(s) never joined within $HPCC_JOIN_TIMEOUT_MINUTES min: $(node_names "${pending[@]}")"
    fi
    log "waiting for ${#pending[@]} node(s) to accept SSH: $(node_names "${pending[@]}")"
    poll_pause
  done
  log "all ${#HPCC_HOSTS[@]} nodes accept SSH"
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

# cluster_env: the same on every node (rendezvous, and the compute type's fabric variables from the settings).
cluster_env() {
  local ofi pair names=""
  ofi=$(ofi_nccl_dir)
  echo "HPCC_CLUSTER=llm"
  echo "MASTER_ADDR=${HPCC_HOSTS[1]:-}"
  echo "MASTER_PORT=$HPCC_MASTER_PORT"
  echo "NNODES=$(( ${#HPCC_HOSTS[@]} - 1 ))"
  echo "NPROC_PER_NODE=$HPCC_SLOTS"
  echo "HPCC_HOSTS=$(hostfile horovod "$HPCC_SLOTS")"
  echo "HPCC_HOSTFILE=/etc/hpcc/hostfile"
  for pair in ${HPCC_FABRIC[@]+"${HPCC_FABRIC[@]}"}; do echo "$pair"; names+="${names:+,}${pair%%=*}"; done
  echo "HPCC_FABRIC_VARS=$names"  # what hpcc-mpirun passes on with -x
  if [ -n "$ofi" ]; then
    echo "HPCC_OFI_NCCL_LIB=$ofi"
    echo "LD_LIBRARY_PATH=$ofi:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  fi
}

# node_env: this node's own part (its name, rank, and the interface gloo should use).
node_env() {
  local i ifname
  echo "HPCC_NODE=$HPCC_NODE"
  i=$(node_index "$HPCC_NODE")
  if [ "$i" -gt 0 ]; then echo "NODE_RANK=$(( i - 1 ))"; fi
  # gloo (torch.distributed on CPU) takes one interface by name: this node's primary one.
  ifname=$(ip -o -4 addr show 2>/dev/null | awk -v ip="$HPCC_IP" 'index($4, ip "/") == 1 {print $2; exit}')
  [ -z "$ifname" ] || echo "GLOO_SOCKET_IFNAME=$ifname"
}


write_membership() {
  local f
  hostfile openmpi "$HPCC_SLOTS" | write_file /etc/hpcc/hostfile 0644
  hostfile mpich "$HPCC_SLOTS" | write_file /etc/hpcc/hostfile.mpich 0644
  hostfile hosts "$HPCC_SLOTS" | write_file /etc/hpcc/hosts 0644
  { echo "# hpcc llm: rendezvous and fabric settings for $HPCC_NODE"; node_env; cluster_env; } |
    write_file /etc/hpcc/env 0644
  printf '%s\n' "$HPCC_MPIRUN_OPTIONS" | write_file /etc/hpcc/mpirun-options 0644
  mkdir -p /etc/ssh/ssh_config.d
  client_config "${HPCC_HOSTS[@]}" | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  user_keys
  if mountpoint -q "$HPCC_MOUNT_POINT"; then  # for jobs that read them from the shared file system
    mkdir -p "$HPCC_MOUNT_POINT/hpcc"
    for f in hostfile hostfile.mpich hosts; do write_file "$HPCC_MOUNT_POINT/hpcc/$f" 0644 </etc/hpcc/$f; done
    { echo "# hpcc llm: rendezvous and fabric settings (each node adds HPCC_NODE and NODE_RANK)"; cluster_env; } |
      write_file "$HPCC_MOUNT_POINT/hpcc/env" 0644
  fi
}

step_launch_env() {
  write_membership
  printf '%s\n' "# hpcc: the cluster's launch environment in every login shell" "set -a" ". /etc/hpcc/env" "set +a" |
    write_file /etc/profile.d/hpcc.sh 0644
  HPCC_APPLIED_VERSION=$HPCC_HOSTS_VERSION
  write_state
  log "launch environment: /etc/hpcc/env, $(wc -l </etc/hpcc/hostfile) compute node(s) in /etc/hpcc/hostfile (hosts version $HPCC_APPLIED_VERSION)"
}
# --- sync: the membership agent (`/usr/local/sbin/hpcc-node sync`) keeps this node's files on the cluster's membership ---
# Each tick: ONE paced GetParameters of /hpcc/llm/hosts and /hpcc/llm/settings; when the hosts'
HPCC_STATE=/etc/hpcc/node  # this node's identity and the hosts version it applied
HPCC_APPLIED_SETTINGS=/etc/hpcc/settings  # the settings text it applied
HPCC_AGENT_LOCK=/run/hpcc-sync.lock  # held by the running agent for its whole life
HPCC_AGENT_PID=/run/hpcc-sync.pid

write_state() {
  printf '%s\n' "HPCC_NODE=$HPCC_NODE" "HPCC_INSTANCE_ID=$HPCC_INSTANCE_ID" "HPCC_IP=$HPCC_IP" \
    "HOSTS_VERSION=$HPCC_APPLIED_VERSION" | write_file "$HPCC_STATE" 0644
  printf '%s\n' "$HPCC_SETTINGS_TEXT" | write_file "$HPCC_APPLIED_SETTINGS" 0644
}

load_state() {  # read back what write_state wrote, checked line by line (never sourced)
  local line
  while IFS= read -r line; do
    case "$line" in
      HPCC_NODE=*) HPCC_NODE=${line#*=}; node_index "$HPCC_NODE" >/dev/null || return 1 ;;
      HPCC_INSTANCE_ID=*) HPCC_INSTANCE_ID=${line#*=}; [[ $HPCC_INSTANCE_ID =~ ^[A-Za-z0-9-]{1,64}$ ]] || return 1 ;;
      HPCC_IP=*) HPCC_IP=${line#*=}; valid_ip "$HPCC_IP" || return 1 ;;
      HOSTS_VERSION=*) HPCC_APPLIED_VERSION=${line#*=}; [[ $HPCC_APPLIED_VERSION =~ ^[0-9]+$ ]] || return 1 ;;
      *) return 1 ;;
    esac
  done <"$HPCC_STATE"
  [ "$HPCC_NODE" != unknown ] && [ -n "$HPCC_IP" ]
}

settings_changed() { [ "$(printf '%s' "$HPCC_READ_SETTINGS")" != "$(cat "$HPCC_APPLIED_SETTINGS" 2>/dev/null)" ]; }

sync_once() {  # one tick of the agent (in a subshell: its state is in files); status 1 on an error, retried next tick
  local index at
  HPCC_DEADLINE=$(( $(date +%s) + 600 ))
  load_state || { echo "$HPCC_STATE is malformed" >&2; return 1; }  # what the last tick applied
  read_cluster || { echo "could not read /hpcc/llm/hosts and /hpcc/llm/settings; next tick" >&2; return 1; }
  if [ "$HPCC_READ_VERSION" = "$HPCC_APPLIED_VERSION" ] && ! settings_changed; then return 0; fi
  apply_settings "$HPCC_READ_SETTINGS" || { echo "/hpcc/llm/settings refused (see above): the applied settings stay" >&2; return 1; }
  parse_hosts "$HPCC_READ_HOSTS" || return 1
  index=$(node_index "$HPCC_NODE")
  at=${HPCC_HOSTS[$index]:-nothing}
  if [ "$at" != "$HPCC_IP" ]; then
    echo "hosts version $HPCC_READ_VERSION holds $at at $HPCC_NODE's line, not this node's $HPCC_IP: not applied" >&2
    return 1
  fi
  HPCC_HOSTS_VERSION=$HPCC_READ_VERSION
  write_membership
  HPCC_APPLIED_VERSION=$HPCC_HOSTS_VERSION
  write_state
  log "applied hosts version $HPCC_APPLIED_VERSION: $(( ${#HPCC_HOSTS[@]} - 1 )) compute node(s)"
  report ready true "membership of hosts version $HPCC_APPLIED_VERSION applied"
}

sync_main() {  # the agent: one per node (the lock), forever
  local lock
  HPCC_AGENT=1
  exec {lock}>>"$HPCC_AGENT_LOCK"
  flock -n "$lock" || { echo "hpcc-node sync: already running (pid $(cat "$HPCC_AGENT_PID" 2>/dev/null))" >&2; exit 0; }
  echo "$$" >"$HPCC_AGENT_PID"
  use_step sync
  load_state || fail "$HPCC_STATE is missing or malformed: run the bootstrap first"
  apply_settings "$(cat "$HPCC_APPLIED_SETTINGS")" || fail "$HPCC_APPLIED_SETTINGS is malformed: run the bootstrap again"
  trap - ERR
  set +e
  while :; do
    apply_settings "$(cat "$HPCC_APPLIED_SETTINGS")" 2>/dev/null  # the last applied pacing and tick
    HPCC_API_ATTEMPTS=1  # a failed call is retried next tick
    sleep $(( HPCC_SYNC_SECONDS + RANDOM % (HPCC_SYNC_SECONDS / 4 + 1) ))
    (set -e; sync_once)
  done
}

agent_unit() {
  printf '%s\n' "[Unit]" "Description=hpcc membership agent: follows /hpcc/llm/hosts and /hpcc/llm/settings" \
    "After=network-online.target" "Wants=network-online.target" "" "[Service]" "ExecStart=/usr/local/sbin/hpcc-node sync" \
    "EnvironmentFile=-/etc/hpcc/agent.env" "Restart=always" "RestartSec=10" "" "[Install]" "WantedBy=multi-user.target"
}

# step_sync: install this very script as /usr/local/sbin/hpcc-node and start its agent once: a systemd unit where
# systemd runs, else a daemon holding $HPCC_AGENT_LOCK. A rerun changes nothing and starts no second agent.
step_sync() {
  local self=${BASH_SOURCE[0]} n
  [ -f "$self" ] || fail "cannot install the agent: this script was not run from a file"
  write_file /usr/local/sbin/hpcc-node 0755 <"$self"
  if [[ ${AWS_ENDPOINT_URL:-} =~ ^https?://[A-Za-z0-9.:/-]+$ ]]; then echo "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"; fi |
    write_file /etc/hpcc/agent.env 0644
  if [ -d /run/systemd/system ]; then
    agent_unit | write_file /etc/systemd/system/hpcc-sync.service 0644
    within 60 systemctl daemon-reload
    within 60 systemctl enable --now hpcc-sync.service
    log "membership agent: hpcc-sync.service $(systemctl is-active hpcc-sync.service || true)"
    return 0
  fi
  if ! flock -n "$HPCC_AGENT_LOCK" true; then
    log "membership agent already running (pid $(cat "$HPCC_AGENT_PID" 2>/dev/null || echo '?'))"
    return 0
  fi
  rm -f "$HPCC_AGENT_PID"
  setsid /usr/local/sbin/hpcc-node sync </dev/null >/dev/null 2>&1 &
  for n in $(seq 50); do [ ! -s "$HPCC_AGENT_PID" ] || break; sleep 0.1; done
  [ -s "$HPCC_AGENT_PID" ] || fail "the membership agent did not start (/usr/local/sbin/hpcc-node sync)"
  log "started the membership agent: /usr/local/sbin/hpcc-node sync, pid $(cat "$HPCC_AGENT_PID") (no systemd here)"
}

main() {
  use_step identify
  trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
  log "hpcc bootstrap of llm: compute node, p5.48xlarge"
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
  run_step sync step_sync
  use_step ready
  report ready true "bootstrap finished"
  log "ready"
  flush_log
}

case "${1:-}" in
  "") main ;;
  sync) sync_main ;;
  *) echo "usage: ${0##*/} [sync]: no argument runs the bootstrap, sync the membership agent" >&2; exit 2 ;;
esac
