#!/bin/bash
# hpcc node script: cluster llm, compute node (p5.48xlarge). Run with no argument it is the
# bootstrap (safe to run again; it installs itself as /usr/local/sbin/hpcc-node); `apply-membership` is the node agent's.
# Log: /var/log/hpcc-bootstrap.log. Status: status/<instance ARN>.json in the state bucket. Run-time settings: /hpcc/llm/settings.
# Outside EC2 (docs/bootstrap-contract.md): HPCC_INSTANCE_ID (the name: its hpcc:node tag), HPCC_NODE_IP, HPCC_ACCOUNT, HPCC_SKIP_STEPS=lustre,mount, AWS_ENDPOINT_URL.
set -Eeuo pipefail
umask 022
export PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:/opt/aws/neuron/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
export AWS_DEFAULT_REGION="us-east-1" AWS_PAGER="" AWS_MAX_ATTEMPTS=1  # one request per call: the script paces and retries
HPCC_START=$(date +%s)
HPCC_DEADLINE=$(( HPCC_START + 240 * 60 ))  # until the settings give the cluster's own
HPCC_STEP=start
HPCC_OS=""
mkdir -p /etc/hpcc /var/log /run

# --- log
HPCC_LABELLER=""

label() {
  trap - ERR
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    printf '%s [%s] %s\n' "$(date -u +%FT%TZ)" "$1" "$line"
  done >>"/var/log/hpcc-bootstrap.log"
}

use_step() {
  HPCC_STEP=$1
  exec >>"/var/log/hpcc-bootstrap.log" 2>&1
  if [ -n "$HPCC_LABELLER" ]; then
    local n=0
    wait "$HPCC_LABELLER" 2>/dev/null ||
      while kill -0 "$HPCC_LABELLER" 2>/dev/null && [ "$n" -lt 30 ]; do sleep 0.1; n=$(( n + 1 )); done
  fi
  exec > >(label "$1") 2>&1
  HPCC_LABELLER=${!:-}
}

flush_log() { use_step "$HPCC_STEP"; }

log() { echo "$*"; }
# --- retry
HPCC_PACE_FILE=/run/hpcc-aws.last-call

time_left() {
  if [ -n "${HPCC_FAILING:-}" ]; then echo 60; else echo $(( HPCC_DEADLINE - $(date +%s) )); fi
}

within() {
  local limit=$1 left; shift
  left=$(time_left)
  [ "$left" -gt 0 ] || return 124
  [ "$limit" -le "$left" ] || limit=$left
  timeout "$limit" "$@"
}

pace() {
  local now last=0 wait interval=$HPCC_API_INTERVAL_MS lock
  exec {lock}>>"$HPCC_PACE_FILE.lock"
  flock "$lock"
  now=$(date +%s%3N)
  [ ! -s "$HPCC_PACE_FILE" ] || read -r last <"$HPCC_PACE_FILE" || true
  [[ $last =~ ^[0-9]+$ ]] || last=0
  if [ "$last" -eq 0 ]; then
    wait=$(( RANDOM * interval / 32768 ))
  else
    wait=$(( last + interval + RANDOM * interval / 131072 - now ))
  fi
  [ "$wait" -le $(( 2 * interval )) ] || wait=$interval
  if [ "$wait" -gt 0 ]; then
    sleep "$(( wait / 1000 )).$(printf '%03d' $(( wait % 1000 )))"
    now=$(date +%s%3N)
  fi
  echo "$now" >"$HPCC_PACE_FILE"
  exec {lock}>&-
}

aws_retry() {
  local attempt=1 delay=$HPCC_API_BACKOFF_SECONDS out run=(aws "$@")
  if [ "$1" = s3api ] && { [ "$2" = get-object ] || [ "$2" = put-object ]; } && [ "${HPCC_AWS_CLIENTS:-}" != cli ] &&
    [ -f "${HPCC_PY_PATH:-/nonexistent}/hpcc_node/s3rest.py" ]; then
    run=(env "PYTHONPATH=$HPCC_PY_PATH" python3 -m hpcc_node.s3rest "${@:2}")
  fi
  while :; do
    [ "$1" = s3api ] || [ "$1" = s3 ] || pace
    if out=$(within 120 "${run[@]}" 2>&1); then printf '%s\n' "$out"; return 0; fi
    case "$out" in
      *ParameterNotFound* | *ResourceNotFoundException* | *NoSuchKey*) return 3 ;;
    esac
    if [ "$attempt" -ge "$HPCC_API_ATTEMPTS" ] || [ "$(time_left)" -le "$delay" ]; then
      printf 'aws %s %s: %s\n' "$1" "$2" "$out" >&2; return 1
    fi
    sleep $(( delay + RANDOM % (delay + 1) ))
    attempt=$(( attempt + 1 )); delay=$(( delay * 2 > 60 ? 60 : delay * 2 ))
  done
}

poll_pause() {
  ! declare -F report_pending >/dev/null || report_pending
  sleep $(( HPCC_POLL_SECONDS + RANDOM % HPCC_POLL_SECONDS ))
}

from_head() {
  local secret=$1 step=$2 what=$3 rc until=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))
  shift 3
  until "$@"; do
    rc=$?
    [ "$rc" -eq 3 ] || return "$rc"
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
      fail "$secret stayed empty for $HPCC_JOIN_TIMEOUT_MINUTES min: the head node has not reached its $step step (see its status)"
    fi
    log "waiting for the $what from the head node ($secret)"
    poll_pause
  done
}

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

wait_for() {
  local limit=$1 what=$2 until; shift 2
  until=$(( $(date +%s) + limit ))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then return 1; fi
    log "waiting for $what"
    poll_pause
  done
}

retry_cmd() {
  local n
  for n in 1 2 3 4 5; do
    within 900 "$@" && return 0
    log "try $n failed: $*"
    sleep $(( n * 5 + RANDOM % 5 ))
  done
  return 1
}
# --- settings
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
HPCC_SCHEDULER="none"
HPCC_SLURM_NODE=""
HPCC_SLURM_GPUS=""
HPCC_HEALTH_DIAG_LEVEL="2"
HPCC_IMAGE_CACHE_GIB=""
HPCC_STATE_BUCKET=""
HPCC_LEDGER_TABLE=""
export HPCC_STATE_BUCKET HPCC_LEDGER_TABLE
: "$HPCC_IMAGE_CACHE_GIB"
HPCC_FABRIC=()
HPCC_AUTHORIZED_KEY=()
HPCC_IMDS_USER=()
HPCC_SETTINGS_TEXT=""

setting_pattern() {
  case "$1" in
    NODE_COUNT|SLOTS|TIMEOUT_MINUTES|JOIN_TIMEOUT_MINUTES|API_INTERVAL_MS|POLL_SECONDS|API_BACKOFF_SECONDS|API_ATTEMPTS|SYNC_SECONDS|MASTER_PORT|IMAGE_CACHE_GIB|FORMAT) echo '[1-9][0-9]{0,5}' ;;
    LOGIN_USER|IMDS_USER) echo '[a-z_][a-z0-9_-]{0,31}' ;;
    MOUNT_POINT) echo '/[A-Za-z0-9._/-]{0,127}' ;;
    MPIRUN_OPTIONS) echo '((--mca (pml|btl|mtl|btl_tcp_if_(in|ex)clude|mtl_ofi_provider_(in|ex)clude) [A-Za-z0-9_.,:^+-]+|--(bind-to|map-by|rank-by) [A-Za-z0-9:=,]+|--report-bindings|--tag-output)( |$))*' ;;
    FABRIC) echo '((FI|NCCL|CCL)_[A-Z0-9_]+|I_MPI_OFI_PROVIDER|I_MPI_OFI_LIBRARY_INTERNAL)=[A-Za-z0-9_.,:^+@-]*' ;;
    AUTHORIZED_KEY) echo '(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com) [A-Za-z0-9+/]{40,1400}={0,3}( [A-Za-z0-9@._+-]{1,100})?' ;;
    SCHEDULER) echo 'none|slurm' ;;
    SLURM_NODE) echo '[A-Za-z]+=[A-Za-z0-9:]+( [A-Za-z]+=[A-Za-z0-9:]+)*' ;;
    SLURM_GPUS) echo '0|[1-9][0-9]{0,2}' ;;
    HEALTH_DIAG_LEVEL) echo '[0-4]' ;;
    STATE_BUCKET) echo '[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]' ;;
    LEDGER_TABLE) echo '[A-Za-z0-9_.-]{3,255}' ;;
    *) return 1 ;;
  esac
}

setting_denied() {
  case "$1" in
    LOGIN_USER|IMDS_USER) echo '_apt|adm|backup|bin|daemon|dbus|ec2-instance-connect|games|gnats|irc|list|lp|mail|man|messagebus|munge|news|nobody|proxy|root|slurm|sshd|sync|sys|syslog|systemd-network|systemd-resolve|systemd-timesync|uucp|www-data' ;;
    MOUNT_POINT) echo '(/bin|/boot|/dev|/etc|/home|/lib|/lib32|/lib64|/libx32|/lost\+found|/proc|/root|/run|/sbin|/snap|/sys|/tmp|/usr|/var|/opt/amazon|/opt/aws|/opt/aws-ofi-nccl|/opt/conda|/opt/dlami|/opt/nvidia)(/.*)?|/|/mnt|/media|/opt|/srv|.*//.*|.*/\.\.?(/.*)?|.+/' ;;
    FABRIC) echo '([A-Z0-9_]*(PATH|PLUGIN|FILE|EXEC|AGENT|PRELOAD)[A-Z0-9_]*|[A-Z0-9_]*_LIBRARY)=.*' ;;
    *) return 1 ;;
  esac
}

regular_user() {
  local uid
  ! uid=$(id -u -- "$1" 2>/dev/null) || { [ "$uid" -ge 1000 ] && [ "$uid" -le 60000 ]; }
}

apply_settings() {
  local line key value pattern denied fabric=() keys=() imds_users=() format_line=$'(^|\n)FORMAT=([1-9][0-9]{0,5})(\n|$)'
  local -A seen=()
  if [[ $1 =~ $format_line ]] && [ "${BASH_REMATCH[2]}" -gt 1 ]; then
    echo "settings: settings format ${BASH_REMATCH[2]} is newer than this hpcc reads (1): it was written by a newer hpcc" >&2; return 1
  fi
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    if [[ ! $line =~ ^([A-Z][A-Z0-9_]*)=(.*)$ ]]; then echo "settings: '${line:0:80}' is not KEY=VALUE" >&2; return 1; fi
    key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
    pattern=$(setting_pattern "$key") || { echo "settings: unknown key $key" >&2; return 1; }
    [[ $value =~ ^($pattern)$ ]] || { echo "settings: $key='${value:0:80}' does not match $pattern" >&2; return 1; }
    ! denied=$(setting_denied "$key") || [[ ! $value =~ ^($denied)$ ]] || { echo "settings: $key: '${value:0:80}' is refused" >&2; return 1; }
    if [ "$key" = FABRIC ]; then fabric+=("$value"); continue; fi
    if [ "$key" = AUTHORIZED_KEY ]; then keys+=("$value"); continue; fi
    if [ "$key" = IMDS_USER ]; then imds_users+=("$value"); continue; fi
    [ -z "${seen[$key]+set}" ] || { echo "settings: $key is given twice" >&2; return 1; }
    seen[$key]=$value
  done <<<"$1"
  for key in NODE_COUNT SLOTS TIMEOUT_MINUTES JOIN_TIMEOUT_MINUTES API_INTERVAL_MS POLL_SECONDS API_BACKOFF_SECONDS API_ATTEMPTS SYNC_SECONDS MASTER_PORT LOGIN_USER MOUNT_POINT MPIRUN_OPTIONS STATE_BUCKET LEDGER_TABLE; do
    [ -n "${seen[$key]+set}" ] || { echo "settings: $key is missing" >&2; return 1; }
  done
  HPCC_SCHEDULER="none"
  HPCC_SLURM_NODE=""
  HPCC_SLURM_GPUS=""
  HPCC_HEALTH_DIAG_LEVEL="2"
  HPCC_IMAGE_CACHE_GIB=""
  for key in "${!seen[@]}"; do printf -v "HPCC_$key" '%s' "${seen[$key]}"; done
  HPCC_FABRIC=(${fabric[@]+"${fabric[@]}"})
  HPCC_AUTHORIZED_KEY=(${keys[@]+"${keys[@]}"})
  HPCC_IMDS_USER=(${imds_users[@]+"${imds_users[@]}"})
  HPCC_SETTINGS_TEXT=$1
}
# --- status
HPCC_STATUS_KEY=""
HPCC_ACCOUNT=${HPCC_ACCOUNT:-}
HPCC_PARTITION=aws

state_bucket() { echo "${HPCC_STATE_BUCKET:-hpcc-llm-state-$HPCC_ACCOUNT}"; }

status_key() { echo "status/arn:$HPCC_PARTITION:ec2:us-east-1:$HPCC_ACCOUNT:instance/$HPCC_INSTANCE_ID.json"; }

json_lines() {
  LC_ALL=C sed -e "s/^.*\(.\{$1\}\)\$/\1/" -e 's/^[\x80-\xbf]*//' -e 's/\\/\\\\/g' -e 's/"/\\"/g' \
    -e 's/\t/\\t/g' -e 's/[[:cntrl:]]//g' -e 's/.*/"&"/' | paste -sd, -
}

slurm_field() { :; }

HPCC_FAIL_CLASS=bootstrap
HPCC_BUNDLE=${HPCC_BUNDLE:-$(basename "$(readlink -f /opt/hpcc/current 2>/dev/null || true)")}
[[ $HPCC_BUNDLE =~ ^[0-9a-f]{64}$ ]] || HPCC_BUNDLE=""

status_json() {
  local LC_ALL=C lines=15 json message
  message=$(printf '%s' "${3:0:500}" | tr '\n' ' ' | json_lines 500)
  while :; do
    json=$(printf '{"format": 1, "name": "%s", "node": "%s", "ip": "%s", "instance_id": "%s", "instanceId": "%s", "hostsVersion": %s, "phase": "%s", "step": "%s", "ok": %s, "failure": "%s", "bundle": "%s"%s, "evidence": %s, "message": %s, "at": %s, "updated": "%s", "logTail": [%s]%s}' \
      "$HPCC_NODE" "$HPCC_NODE" "$HPCC_IP" "${HPCC_INSTANCE_ID:-}" "${HPCC_INSTANCE_ID:-}" "$HPCC_APPLIED_VERSION" "$1" "$HPCC_STEP" "$2" \
      "$([ "$1" != failed ] || echo "$HPCC_FAIL_CLASS")" "$HPCC_BUNDLE" \
      "$([ "$1" != failed ] || printf ', "class": "%s"' "$HPCC_FAIL_CLASS")" "${message:-\"\"}" "${message:-\"\"}" "$(date +%s)" "$(date -u +%FT%TZ)" \
      "$(tail -n "$lines" "/var/log/hpcc-bootstrap.log" 2>/dev/null | json_lines 200)" \
      "$(slurm_field)")
    if [ "${#json}" -le 4000 ] || [ "$lines" -eq 0 ]; then break; fi
    lines=$(( lines - 1 ))
  done
  printf '%s\n' "$json"
}

HPCC_REPORTED_AT=0
HPCC_REPORTED_STEP=""

report() {
  local body
  [ "$HPCC_NODE" != unknown ] && [ -n "$HPCC_STATUS_KEY" ] || return 0
  flush_log
  body=$(mktemp)
  status_json "$@" >"$body"
  if aws_retry s3api put-object --bucket "$(state_bucket)" --key "$HPCC_STATUS_KEY" --content-type application/json \
    --body "$body" >/dev/null; then
    HPCC_REPORTED_AT=$(date +%s) HPCC_REPORTED_STEP=${HPCC_STEP:-}
  else
    log "warning: could not report status ($1)"
  fi
  rm -f "$body"
}

report_pending() {
  [ "$BASHPID" = "$$" ] && [ -n "${HPCC_STEP:-}" ] && [ "$HPCC_REPORTED_STEP" != "$HPCC_STEP" ] || return 0
  [ $(( $(date +%s) - HPCC_REPORTED_AT )) -ge 10 ] || return 0
  report "$HPCC_STEP" true "running"
}

fail() {
  trap - ERR
  if [ -n "${HPCC_AGENT:-}" ]; then log "error: $*"; exit 1; fi
  HPCC_FAILING=1
  log "FAILED at step $HPCC_STEP: $*"
  report failed false "$*"
  flush_log
  exit 1
}

on_error() {
  if [ "$BASH_SUBSHELL" -gt 0 ]; then
    echo "error (exit $1) at line $2: $3" >&2
    exit "$1"
  fi
  if [ "$1" -eq 124 ] && [ "$(time_left)" -le 0 ]; then fail "the bootstrap's $HPCC_TIMEOUT_MINUTES minutes ran out ($3)"; fi
  fail "command failed (exit $1) at line $2: $3"
}

skipped() { case ",${HPCC_SKIP_STEPS:-}," in *",$1,"*) return 0 ;; esac; return 1; }

run_step() {
  use_step "$1"
  if skipped "$1"; then log "skipped: HPCC_SKIP_STEPS names $1"; return 0; fi
  report_pending
  log "start"
  "$2"
  log "done"
}
# --- files
write_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; else mv -f "$tmp" "$path"; log "wrote $path"; fi
}
# --- identify
HPCC_NODE=unknown
HPCC_IP=""
HPCC_NAMES=()
HPCC_HOSTS=()
HPCC_HOSTS_VERSION=0
HPCC_APPLIED_VERSION=0
HPCC_READ_HOSTS="" HPCC_READ_VERSION=0 HPCC_READ_SETTINGS=""
HPCC_PY_PATH=${HPCC_PY_PATH:-/opt/hpcc/current}

valid_name() { [[ $1 =~ ^(head|[a-z][a-z0-9]{0,11}-([0-9]{3}|[1-9][0-9]{3}))$ ]]; }

group_of() { [ "$1" = head ] || echo "${1%-*}"; }

node_name() { echo "${HPCC_NAMES[$1]}"; }

node_index() {
  local i
  for i in "${!HPCC_NAMES[@]}"; do [ "${HPCC_NAMES[$i]}" != "$1" ] || { echo "$i"; return 0; }; done
  return 1
}

valid_ip() { [[ $1 =~ ^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$ ]]; }

HPCC_VPC_CIDR=${HPCC_VPC_CIDR:-10.0.0.0/16}

address_problem() {
  local a b c d base m=$(( (0xFFFFFFFF << (32 - ${HPCC_VPC_CIDR#*/})) & 0xFFFFFFFF ))
  valid_ip "$1" || { echo "'${1:0:40}' is not an IPv4 address"; return 0; }
  IFS=. read -r a b c d <<<"${HPCC_VPC_CIDR%/*}"; base=$(( (a << 24 | b << 16 | c << 8 | d) & m ))
  IFS=. read -r a b c d <<<"$1"
  [ $(( (a << 24 | b << 16 | c << 8 | d) & m )) -eq "$base" ] || echo "$1 is outside the cluster's VPC $HPCC_VPC_CIDR"
}

imds() {
  local token
  token=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) || return 1
  curl -sf -m 2 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}

primary_ip() {
  local ip=""
  ip=$(imds local-ipv4) || ip=""
  [ -n "$ip" ] || ip=$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") print $(i + 1)}')
  [ -n "$ip" ] || ip=$(hostname -I 2>/dev/null | awk '{print $1}')
  echo "$ip"
}

parameter_fields() { grep -oE '"([^"\\]|\\.)*"|[0-9]+' | sed -e 's/^"//' -e 's/"$//' | paste - - -; }

read_settings() {
  local out name value found=0
  out=$(aws_retry ssm get-parameters --names "/hpcc/llm/settings" \
    --query 'Parameters[].[Name,Version,Value]' --output json) || return 1
  while IFS=$'\t' read -r name _ value; do
    [ "$name" = "/hpcc/llm/settings" ] || continue
    HPCC_READ_SETTINGS=${value//\\n/$'\n'}; found=1
  done < <(parameter_fields <<<"$out")
  [ "$found" -eq 1 ] || return 3
}

parse_hosts() {
  local lines=() line name ip problem n=0 listed_names=() listed_ips=()
  local -A seen=()
  mapfile -t lines < <(grep -v '^[[:space:]]*$' <<<"$1" || true)
  [ "${#lines[@]}" -gt 0 ] || { echo "the hosts text is empty" >&2; return 1; }
  for line in "${lines[@]}"; do
    n=$(( n + 1 )) problem=""
    name=${line%% *} ip=${line#* }
    if [ "$name" = "$line" ] || ! valid_name "$name"; then problem="'${line:0:60}' is not \`<node name> <ip>\`"
    elif [ "$n" -eq 1 ] && [ "$name" != head ]; then problem="$name is not the head"
    elif [ "$n" -gt 1 ] && [ "$name" = head ]; then problem="$name is a second head"
    else problem=$(address_problem "$ip"); fi
    [ -n "$problem" ] || [ -z "${seen[n$name]+set}" ] || problem="$name is listed twice (line ${seen[n$name]})"
    [ -n "$problem" ] || [ -z "${seen[a$ip]+set}" ] || problem="$ip is listed twice (line ${seen[a$ip]})"
    [ -z "$problem" ] || { echo "hosts line $n: $problem" >&2; return 1; }
    seen[n$name]=$n seen[a$ip]=$n
    listed_names+=("$name") listed_ips+=("$ip")
  done
  HPCC_NAMES=("${listed_names[@]}") HPCC_HOSTS=("${listed_ips[@]}")
}

node_account() {
  local info=""
  [ -z "${HPCC_ACCOUNT:-}" ] || { echo "$HPCC_ACCOUNT"; return 0; }
  info=$(imds identity-credentials/ec2/info 2>/dev/null) || info=""
  if [[ $info =~ \"AccountId\"[[:space:]]*:[[:space:]]*\"([0-9]{12})\" ]]; then echo "${BASH_REMATCH[1]}"; return 0; fi
  aws_retry sts get-caller-identity --query Account --output text
}

read_membership() {
  aws_retry s3api get-object --bucket "$(state_bucket)" --key membership.json "$1" >/dev/null
}

render_hosts() {
  local out rc=0
  out=$(PYTHONPATH=$HPCC_PY_PATH python3 -m hpcc_node.hosts "$1" "$HPCC_NODE" "$HPCC_INSTANCE_ID") || rc=$?
  [ "$rc" -eq 0 ] || return "$rc"
  HPCC_READ_VERSION=${out%%$'\n'*} HPCC_READ_HOSTS=${out#*$'\n'}
  [[ $HPCC_READ_VERSION =~ ^[0-9]+$ ]] || { echo "membership: no generation" >&2; return 1; }
}

wait_settings() {
  local rc
  while :; do
    rc=0
    read_settings || rc=$?
    if [ "$rc" -eq 0 ]; then
      apply_settings "$HPCC_READ_SETTINGS" || fail "/hpcc/llm/settings is refused (see above); correct it with pulumi up"
      HPCC_DEADLINE=$(( HPCC_START + HPCC_TIMEOUT_MINUTES * 60 ))
      return 0
    fi
    [ "$rc" -eq 3 ] || fail "/hpcc/llm/settings could not be read (see above)"
    [ "$(time_left)" -gt 0 ] || fail "/hpcc/llm/settings never appeared"
    log "waiting for /hpcc/llm/settings"
    poll_pause
  done
}

read_hosts() {
  local rc=0 tmp
  tmp=$(mktemp)
  read_membership "$tmp" || rc=$?
  [ "$rc" -ne 0 ] || render_hosts "$tmp" || rc=$?
  rm -f "$tmp"
  return "$rc"
}

wait_membership() {
  local rc until=""
  if [ "$HPCC_NODE" = head ]; then
    rc=0
    read_hosts || rc=$?
    if [ "$rc" -eq 0 ] && parse_hosts "$HPCC_READ_HOSTS" && [ "${HPCC_HOSTS[0]}" = "$HPCC_IP" ]; then
      HPCC_HOSTS_VERSION=$HPCC_READ_VERSION
      return 0
    fi
    [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || log "warning: the membership in s3://$(state_bucket)/membership.json could not be used (see above); the head starts alone"
    parse_hosts "head $HPCC_IP" || fail "this head's own address is refused (see above)"
    HPCC_HOSTS_VERSION=0
    return 0
  fi
  until=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))
  while :; do
    rc=0
    read_hosts || rc=$?
    if [ "$rc" -eq 0 ]; then
      parse_hosts "$HPCC_READ_HOSTS" || fail "membership generation $HPCC_READ_VERSION is refused (see above)"
      HPCC_HOSTS_VERSION=$HPCC_READ_VERSION
      [ "${HPCC_HOSTS[$(node_index "$HPCC_NODE")]}" = "$HPCC_IP" ] && return 0
      fail "membership generation $HPCC_HOSTS_VERSION lists $HPCC_NODE at ${HPCC_HOSTS[$(node_index "$HPCC_NODE")]}, not at this node's $HPCC_IP"
    fi
    [ "$rc" -eq 3 ] || fail "the membership in s3://$(state_bucket)/membership.json could not be read (see above)"
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
      fail "after $HPCC_JOIN_TIMEOUT_MINUTES min the membership still does not list $HPCC_NODE as $HPCC_INSTANCE_ID"
    fi
    log "waiting for the membership to list $HPCC_NODE as $HPCC_INSTANCE_ID ($HPCC_IP)"
    poll_pause
  done
}

tag_name() {
  local name
  if name=$(imds tags/instance/hpcc:node); then echo "$name"; return 0; fi
  imds instance-id >/dev/null && return 0
  name=$(aws_retry ec2 describe-tags --filters "Name=resource-id,Values=$HPCC_INSTANCE_ID" "Name=key,Values=hpcc:node" \
    --query 'Tags[0].Value' --output text) || return 0
  [ "$name" = None ] || echo "$name"
}

identify_node() {
  local name="" until
  if [ -z "${HPCC_INSTANCE_ID:-}" ]; then HPCC_INSTANCE_ID=$(imds instance-id) || HPCC_INSTANCE_ID=""; fi
  [[ $HPCC_INSTANCE_ID =~ ^i-[0-9a-f]{1,40}$ ]] || fail "cannot tell this node's instance id ('${HPCC_INSTANCE_ID:0:40}'); set HPCC_INSTANCE_ID"
  if [ -n "${HPCC_NODE_IP:-}" ]; then HPCC_IP=$HPCC_NODE_IP; log "HPCC_NODE_IP: this node is $HPCC_IP"; else HPCC_IP=$(primary_ip); fi
  valid_ip "$HPCC_IP" || fail "cannot tell this node's IP address ('${HPCC_IP:0:40}'); set HPCC_NODE_IP"
  wait_settings
  HPCC_ACCOUNT=$(node_account) || fail "cannot tell this node's AWS account (instance metadata, sts get-caller-identity)"
  [[ $HPCC_ACCOUNT =~ ^[0-9]{12}$ ]] || fail "'${HPCC_ACCOUNT:0:20}' is not an AWS account id; set HPCC_ACCOUNT"
  if [ -n "${HPCC_NODE_NAME:-}" ]; then name=$HPCC_NODE_NAME; log "HPCC_NODE_NAME: this node is $name"; fi
  until=$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))
  while [ -z "$name" ]; do
    name=$(tag_name)
    [ -z "$name" ] || break
    if [ "$(date +%s)" -ge "$until" ] || [ "$(time_left)" -le 0 ]; then
      fail "$HPCC_INSTANCE_ID has no hpcc:node tag after $HPCC_JOIN_TIMEOUT_MINUTES min: the controller on the head names it (see hpcc status); instance metadata tags must be on"
    fi
    log "waiting for the controller to name $HPCC_INSTANCE_ID (its hpcc:node tag)"
    poll_pause
  done
  valid_name "$name" ||
    fail "this node's name '${name:0:40}' is not head or <group>-NNN: launch it with the hpcc:node tag and instance metadata tags on, or set HPCC_NODE_NAME"
  HPCC_NODE=$name
  HPCC_STATUS_KEY=$(status_key)
  wait_membership
  log "this is $HPCC_NODE ($HPCC_IP, $HPCC_INSTANCE_ID) of llm: ${#HPCC_HOSTS[@]} node(s) listed of $(( HPCC_NODE_COUNT + 1 )) asked (membership generation $HPCC_HOSTS_VERSION); at most $HPCC_TIMEOUT_MINUTES min"
}
# --- os
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
# --- imds: only root (and the settings' IMDS_USER users) reaches the instance metadata service ---------
imds_rules() {
  local user uid
  printf '%s\n' '*filter' ':HPCC-IMDS - [0:0]' '-A HPCC-IMDS -m owner --uid-owner 0 -j RETURN'
  for user in "$@"; do
    if ! uid=$(id -u -- "$user" 2>/dev/null); then echo "imds: no user $user here: not let through" >&2
    elif ! regular_user "$user"; then echo "imds: $user is a system account (uid $uid): not let through" >&2
    else echo "-A HPCC-IMDS -m owner --uid-owner $uid -j RETURN"; fi
  done
  printf '%s\n' '-A HPCC-IMDS -j REJECT' COMMIT
}

imds_apply() {
  local rules
  rules=$(imds_rules "$@")
  iptables-restore -w 30 --noflush <<<"$rules"
  iptables -w 30 -C OUTPUT -d 169.254.169.254/32 -j HPCC-IMDS 2>/dev/null ||
    iptables -w 30 -I OUTPUT 1 -d 169.254.169.254/32 -j HPCC-IMDS
}

imds_firewall() {
  { printf '%s\n' '#!/bin/bash' "# hpcc: only root${*:+ and $*} reach IMDS (docs/security.md)" 'set -euo pipefail' \
      'PATH=/usr/sbin:/usr/bin:/sbin:/bin'; declare -f regular_user imds_rules imds_apply; echo "imds_apply${*:+ $*}"; } |
    write_file /usr/local/sbin/hpcc-imds 0755
  /usr/local/sbin/hpcc-imds
  [ -d /run/systemd/system ] || return 0
  printf '%s\n' "[Unit]" "Description=hpcc: only root reaches IMDS" "DefaultDependencies=no" \
    "Wants=network-pre.target" "Before=network-pre.target shutdown.target" "After=local-fs.target" \
    "Conflicts=shutdown.target" "[Service]" "Type=oneshot" "RemainAfterExit=yes" \
    "ExecStart=/usr/local/sbin/hpcc-imds" "[Install]" "WantedBy=multi-user.target" |
    write_file /etc/systemd/system/hpcc-imds.service 0644
  within 60 systemctl daemon-reload
  within 60 systemctl enable --now -q hpcc-imds.service
}

step_imds() {
  if ! command -v iptables-restore >/dev/null; then
    case "$HPCC_OS" in
      amzn-2023) retry_cmd dnf install -y iptables-nft ;;
      amzn-2) retry_cmd yum install -y iptables ;;
      *) retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
        retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q iptables ;;
    esac
  fi
  imds_firewall ${HPCC_IMDS_USER[@]+"${HPCC_IMDS_USER[@]}"}
  log "instance metadata: root${HPCC_IMDS_USER[*]+ and ${HPCC_IMDS_USER[*]}} only"
}
# --- lustre
lustre_package() {
  case "$1" in
    ubuntu-*) echo "apt lustre-client-modules-$2" ;;
    amzn-2) echo "amazon-linux-extras lustre" ;;
    amzn-2023) echo "dnf lustre-client" ;;
    *) return 1 ;;
  esac
}

nearest_versions() {
  { cat; echo "$1"; } | sort -V -u | awk -v k="$1" '{v[NR] = $0; if ($0 == k) at = NR}
    END {for (i = at - 2; i <= at + 2; i++) if (i > 0 && i <= NR && i != at) printf "%s%s", (n++ ? " " : ""), v[i]; print ""}'
}

install_lustre_ubuntu() {
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
  retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    fail "FSx publishes no Lustre client for the running kernel $(uname -r) ($pkg); nearest kernels with one: $(apt-cache search --names-only '^lustre-client-modules-[0-9]' | awk '{sub(/^lustre-client-modules-/, "", $1); print $1}' | nearest_versions "$(uname -r)") - boot an image with one of those kernels"
  fi
  retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "$pkg"
  held=$({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "$pkg" "linux-image-$(uname -r)" linux-aws \
    linux-image-aws linux-headers-aws 2>/dev/null || true; } | awk '$1 ~ /^ii/ {print $2}')
  # shellcheck disable=SC2086
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
# --- mount
json_field() { sed -n "s/.*\"$1\" *: *\"\([^\"]*\)\".*/\1/p"; }

# shellcheck disable=SC2016
lnet_reachable() { timeout 3 bash -c ': <"/dev/tcp/$1/988"' lnet "$1"; }

fsx_endpoint_ok() {
  [ "${#1}" -le 253 ] && [[ $1 =~ ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.fsx\.us-east-1\.amazonaws\.com$ ]] &&
    [[ $2 =~ ^[A-Za-z0-9]{1,16}$ ]]
}

LUSTRE_OPTIONS=relatime,flock,nosuid,nodev
fstab_line() {
  echo "$1 $HPCC_MOUNT_POINT lustre defaults,$LUSTRE_OPTIONS,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0"
}

HPCC_FSTAB=/etc/fstab

persist_mount() {
  local kept
  if ! grep -qxF "$(fstab_line "$1")" "$HPCC_FSTAB" || [ "$(grep -cF " $HPCC_MOUNT_POINT lustre " "$HPCC_FSTAB" || true)" -ne 1 ]; then
    kept=$(grep -vF " $HPCC_MOUNT_POINT lustre " "$HPCC_FSTAB" || true)
    { [ -z "$kept" ] || printf '%s\n' "$kept"; fstab_line "$1"; } >"$HPCC_FSTAB.hpcc"
    cat "$HPCC_FSTAB.hpcc" >"$HPCC_FSTAB"
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
    fail "/hpcc/llm/fsx holds a dnsName or mountName that is not an FSx file system of us-east-1; refused"
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
# --- efa
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
    ubuntu-*)
      echo "kernel.yama.ptrace_scope = 0" | write_file /etc/sysctl.d/99-hpcc-efa.conf 0644
      sysctl -q -w kernel.yama.ptrace_scope=0 ;;
  esac
}
# --- health
health_facts() {
  local mount="" disk=${HPCC_HEALTH_DISK_MIN_FREE_GIB:-20} standin=${HPCC_XID_STANDIN:-} gpus=${HPCC_HEALTH_GPUS:-8}
  [[ $gpus =~ ^[0-9]{1,2}$ ]] || fail "HPCC_HEALTH_GPUS='${gpus:0:20}' is not a number of GPUs"
  [[ $disk =~ ^[0-9]{1,4}$ ]] || fail "HPCC_HEALTH_DISK_MIN_FREE_GIB='${disk:0:20}' is not a number of GiB"
  [[ -z $standin || $standin =~ ^/[A-Za-z0-9._/-]+$ ]] ||
    fail "HPCC_XID_STANDIN='${standin:0:80}' is not an absolute path"
  ! mountpoint -q "$HPCC_MOUNT_POINT" || mount=$HPCC_MOUNT_POINT
  printf '%s\n' "GPUS=$gpus" "EFA_DEVICES=32" "DCGM_LEVEL=$HPCC_HEALTH_DIAG_LEVEL" \
    "DISK_MIN_FREE_GIB=$disk" ${standin:+"XID_STANDIN=$standin"} "SHARED_MOUNT=$mount"
}

step_health() {
  local out rc=0 line facts=${HPCC_HEALTH_ENV:-/etc/hpcc/health.env}
  health_facts | write_file "$facts" 0644
  if [ -n "${HPCC_XID_STANDIN:-}" ] && [ ! -e "$HPCC_XID_STANDIN" ]; then
    install -m 0644 /dev/null "$HPCC_XID_STANDIN"
  fi
  out=$(cd / && HPCC_HEALTH_ENV=$facts PYTHONPATH=${HPCC_CURRENT:-/opt/hpcc/current} within $(( HPCC_TIMEOUT_MINUTES * 60 )) python3 -m hpcc_node.health boot 2>&1) || rc=$?
  while IFS= read -r line; do log "$line"; done <<<"$out"
  if [ "$rc" -ne 0 ]; then
    HPCC_FAIL_CLASS=health
    fail "$(tail -n 1 <<<"$out")"
  fi
}

HPCC_SLURM_HEALTH_INTERVAL=30
HPCC_HEALTH_PATH=/opt/amazon/efa/bin:/opt/aws/neuron/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
slurm_health_scripts() {
  local kind
  for kind in healthcheck prolog epilog deep; do
    printf '%s\n' "#!/bin/sh" "# hpcc: Slurm runs it (python3 -m hpcc_node.health ${kind}, from the cluster's bundle)" \
      "export PATH=$HPCC_HEALTH_PATH" \
      "cd / && PYTHONPATH=${HPCC_CURRENT:-/opt/hpcc/current} exec python3 -m hpcc_node.health ${kind}" |
      write_file "/usr/local/sbin/hpcc-${kind}" 0755
  done
  if imds instance-id >/dev/null 2>&1; then
    printf '%s\n' "#!/bin/sh" "# hpcc: Slurm's RebootProgram (scontrol reboot, the controller's remedy)" "exec systemctl reboot"
  else
    printf '%s\n' "#!/bin/sh" "echo 'hpcc-reboot: not on EC2, not rebooting' >&2" "exit 1"
  fi | write_file /usr/local/sbin/hpcc-reboot 0755
}

slurm_health_conf() {
  printf '%s\n' "HealthCheckProgram=/usr/local/sbin/hpcc-healthcheck" "HealthCheckInterval=$HPCC_SLURM_HEALTH_INTERVAL" \
    "HealthCheckNodeState=ANY,CYCLE" "Prolog=/usr/local/sbin/hpcc-prolog" "Epilog=/usr/local/sbin/hpcc-epilog" \
    "PrologFlags=Alloc" "RebootProgram=/usr/local/sbin/hpcc-reboot" "JobRequeue=1" \
    "SchedulerParameters=nohold_on_prolog_fail"
}
# --- ssh
HPCC_KEY=""
HPCC_VPC_CIDR=${HPCC_VPC_CIDR:-10.0.0.0/16}
HPCC_KNOWN_HOSTS=/etc/ssh/ssh_known_hosts.hpcc
HPCC_HOST_CERT_ALGORITHMS=ssh-ed25519-cert-v01@openssh.com,ecdsa-sha2-nistp256-cert-v01@openssh.com,ecdsa-sha2-nistp384-cert-v01@openssh.com,ecdsa-sha2-nistp521-cert-v01@openssh.com,rsa-sha2-512-cert-v01@openssh.com,rsa-sha2-256-cert-v01@openssh.com

read_key() {
  HPCC_KEY=$(aws_retry secretsmanager get-secret-value --secret-id "$1" --query SecretString --output text)
}

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

user_keys() {
  install -d -m 0755 /etc/hpcc/authorized_keys
  regular_user "$HPCC_LOGIN_USER" || return 0
  { [ "${#HPCC_AUTHORIZED_KEY[@]}" -eq 0 ] || printf '%s\n' "${HPCC_AUTHORIZED_KEY[@]}"; } |
    write_file "/etc/hpcc/authorized_keys/$HPCC_LOGIN_USER" 0644
}

client_config() {
  echo "# hpcc llm: the cluster's nodes, verified by the host certificates the host CA signed"
  printf '%s\n' "$@" | xargs -n 32 echo | while read -r hosts; do
    echo "Host $hosts"
    printf '  %s\n' "StrictHostKeyChecking yes" "UserKnownHostsFile $HPCC_KNOWN_HOSTS" \
      "GlobalKnownHostsFile $HPCC_KNOWN_HOSTS" "HostKeyAlgorithms $HPCC_HOST_CERT_ALGORITHMS" \
      "IdentityFile ~/.ssh/id_hpcc_a" "IdentityFile ~/.ssh/id_hpcc_b" "IdentityFile ~/.ssh/id_hpcc" \
      "ConnectionAttempts 3"
  done
}

host_keys() { within 30 sshd -T | awk '$1 == "hostkey" {print $2}'; }

certs_boot() { (cd / && PYTHONPATH=$HPCC_CURRENT python3 -m hpcc_node.certs_boot "$@"); }
host_certs() {
  local out rc=0
  out=$(certs_boot node "llm" "$(state_bucket)" "$HPCC_STATUS_KEY" "$HPCC_NODE" "$HPCC_IP" "$(( $(date +%s) + HPCC_JOIN_TIMEOUT_MINUTES * 60 ))") || rc=$?
  [ -n "$out" ] || rc=1
  [ "$rc" -eq 0 ] || fail "no host certificate from the cluster's host CA (sshd -T: $(host_keys | paste -sd' ' -); see above)"
  mapfile -t HPCC_HOST_CERTS <<<"$out"
  log "host certificates: ${HPCC_HOST_CERTS[*]}"
}

sshd_hardening() {
  printf '%s\n' "# hpcc: keys only" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
    "ChallengeResponseAuthentication no" "PermitRootLogin prohibit-password" "PubkeyAuthentication yes" \
    "AuthorizedKeysFile .ssh/authorized_keys /etc/hpcc/authorized_keys/%u" \
    "# every node connects to every other at join, and mpirun fans out: do not drop them (default 10:30:100)" \
    "MaxStartups 256:30:1024"
  [ "$#" -eq 0 ] || printf 'HostCertificate %s\n' "$@"
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
  for _ in 1 2 3 4 5; do
    pid=$(cat /run/sshd.pid 2>/dev/null || true)
    [ -z "$pid" ] || break
    sleep 1
  done
  if [ -n "$pid" ] && kill -HUP "$pid"; then log "sent HUP to sshd ($pid)"; else log "warning: no systemd and no sshd in /run/sshd.pid: sshd not reloaded"; fi
}

head_key() {
  local rc=0 tmp
  read_key "$1" || rc=$?
  [ "$rc" -eq 3 ] || return "$rc"
  tmp=$(mktemp -d)
  ssh-keygen -q -t ed25519 -N "" -C "hpcc-llm" -f "$tmp/key"
  rc=0
  aws_retry secretsmanager put-secret-value --secret-id "$1" --secret-string "file://$tmp/key" >/dev/null || rc=$?
  rm -rf "$tmp"
  [ "$rc" -eq 0 ] || return "$rc"
  log "generated the $2 and stored it in $1"
  read_key "$1"
}

compute_key() { from_head "$1" ssh "$2" read_key "$1"; }

cluster_keys() {
  local out
  out=$(cd / && PYTHONPATH=$HPCC_CURRENT python3 -m hpcc_node.cluster_keys "llm" "$HPCC_VPC_CIDR" "$HPCC_LOGIN_USER") ||
    fail "could not install the cluster keys from the secrets' labels (see above)"
  log "cluster keys installed for $out"
}

step_ssh() {
  local home
  compute_key "hpcc/llm/ssh-key" "cluster key" || fail "could not read or store hpcc/llm/ssh-key (see above)"
  install_key /root root
  HPCC_KEY=""
  if ! regular_user "$HPCC_LOGIN_USER"; then
    log "$HPCC_LOGIN_USER is a system account here: no login key is installed for it"
  elif id "$HPCC_LOGIN_USER" >/dev/null 2>&1; then
    home=$(getent passwd "$HPCC_LOGIN_USER" | cut -d: -f6)
    compute_key "hpcc/llm/user-key" "login user's key" || fail "could not read or store hpcc/llm/user-key (see above)"
    install_key "$home" "$HPCC_LOGIN_USER"
    HPCC_KEY=""
  else
    log "no user $HPCC_LOGIN_USER on this image: the key is installed for root only"
  fi
  cluster_keys
  grep -q '^Include /etc/ssh/ssh_config.d/' /etc/ssh/ssh_config 2>/dev/null ||
    sed -i '1i Include /etc/ssh/ssh_config.d/*.conf' /etc/ssh/ssh_config
  grep -q '^Include /etc/ssh/sshd_config.d/' /etc/ssh/sshd_config ||
    sed -i '1i Include /etc/ssh/sshd_config.d/*.conf' /etc/ssh/sshd_config
  mkdir -p /etc/ssh/ssh_config.d /etc/ssh/sshd_config.d
  [ -d /run/sshd ] || install -d -m 0755 /run/sshd
  host_certs
  client_config "${HPCC_HOSTS[@]}" | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  sshd_hardening "${HPCC_HOST_CERTS[@]}" | write_file /etc/ssh/sshd_config.d/01-hpcc.conf 0644
  reload_sshd
}
# --- join
peer_ok() { timeout 20 ssh -o BatchMode=yes -o ConnectTimeout=5 "root@$1" true </dev/null >/dev/null 2>&1; }

step_join() {
  local head=${HPCC_HOSTS[0]}
  if [ "$HPCC_NODE" = head ]; then log "the head: the nodes join it"; return 0; fi
  wait_for $(( HPCC_JOIN_TIMEOUT_MINUTES * 60 )) "the head ($head) to accept SSH" peer_ok "$head" ||
    fail "the head ($head) did not accept SSH within $HPCC_JOIN_TIMEOUT_MINUTES min"
  log "the head ($head) accepts SSH"
}
# --- launch-env
compute_hosts() {
  local i
  for (( i = 1; i < ${#HPCC_HOSTS[@]}; i++ )); do
    [ -z "${1:-}" ] || [ "${HPCC_NAMES[$i]%-*}" = "$1" ] || continue
    echo "${HPCC_HOSTS[$i]}"
  done
}

node_groups() { printf '%s\n' "${HPCC_NAMES[@]:1}" | sed 's/-[0-9]*$//' | awk 'NF && !seen[$0]++'; }

hostfile() {
  compute_hosts "${3:-}" | case "$1" in
    openmpi) awk -v s="$2" '{print $1 " slots=" s}' ;;
    mpich) awk -v s="$2" '{print $1 ":" s}' ;;
    hosts) awk '{print $1}' ;;
    horovod) awk -v s="$2" '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, s} END {print ""}' ;;
  esac
}

ofi_nccl_dir() {
  local d
  for d in /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib; do if [ -d "$d" ]; then echo "$d"; return 0; fi; done
}

cluster_env() {
  local ofi pair names="" first
  ofi=$(ofi_nccl_dir)
  first=$(compute_hosts "${1:-}" | awk 'NR == 1')
  echo "HPCC_CLUSTER=llm"
  echo "MASTER_ADDR=$first"
  echo "MASTER_PORT=$HPCC_MASTER_PORT"
  echo "NNODES=$(compute_hosts "${1:-}" | wc -l)"
  echo "NPROC_PER_NODE=$HPCC_SLOTS"
  echo "HPCC_HOSTS=$(hostfile horovod "$HPCC_SLOTS" "${1:-}")"
  echo "HPCC_HOSTFILE=/etc/hpcc/${1:+groups/$1/}hostfile"
  for pair in ${HPCC_FABRIC[@]+"${HPCC_FABRIC[@]}"}; do echo "$pair"; names+="${names:+,}${pair%%=*}"; done
  echo "HPCC_FABRIC_VARS=$names"
  if [ -n "$ofi" ]; then
    echo "HPCC_OFI_NCCL_LIB=$ofi"
    echo "LD_LIBRARY_PATH=$ofi:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  fi
}

node_env() {
  local i ifname
  echo "HPCC_NODE=$HPCC_NODE"
  echo "HPCC_GROUP=$(group_of "$HPCC_NODE")"
  i=$(node_index "$HPCC_NODE")
  if [ "$i" -gt 0 ]; then echo "NODE_RANK=$(( i - 1 ))"; fi
  ifname=$(ip -o -4 addr show 2>/dev/null | awk -v ip="$HPCC_IP" '!found && index($4, ip "/") == 1 {print $2; found = 1}')
  [ -z "$ifname" ] || echo "GLOO_SOCKET_IFNAME=$ifname"
}


write_membership() {
  local f g d groups=()
  hostfile openmpi "$HPCC_SLOTS" | write_file /etc/hpcc/hostfile 0644
  hostfile mpich "$HPCC_SLOTS" | write_file /etc/hpcc/hostfile.mpich 0644
  hostfile hosts "$HPCC_SLOTS" | write_file /etc/hpcc/hosts 0644
  { echo "# hpcc llm: rendezvous and fabric settings for $HPCC_NODE"; node_env; cluster_env; } |
    write_file /etc/hpcc/env 0644
  mapfile -t groups < <(node_groups)
  mkdir -p /etc/hpcc/groups
  for g in ${groups[@]+"${groups[@]}"}; do
    mkdir -p "/etc/hpcc/groups/$g"
    hostfile openmpi "$HPCC_SLOTS" "$g" | write_file "/etc/hpcc/groups/$g/hostfile" 0644
    hostfile mpich "$HPCC_SLOTS" "$g" | write_file "/etc/hpcc/groups/$g/hostfile.mpich" 0644
    hostfile hosts "$HPCC_SLOTS" "$g" | write_file "/etc/hpcc/groups/$g/hosts" 0644
    { echo "# hpcc llm: rendezvous and fabric settings of group $g"; cluster_env "$g"; } |
      write_file "/etc/hpcc/groups/$g/env" 0644
  done
  for d in /etc/hpcc/groups/*/; do
    [ -d "$d" ] || continue
    g=${d%/}; g=${g##*/}
    printf '%s\n' ${groups[@]+"${groups[@]}"} | grep -xF -- "$g" >/dev/null || rm -rf -- "$d"
  done
  printf '%s\n' "$HPCC_MPIRUN_OPTIONS" | write_file /etc/hpcc/mpirun-options 0644
  mkdir -p /etc/ssh/ssh_config.d
  client_config "${HPCC_HOSTS[@]}" | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  user_keys
  skipped imds || imds_firewall ${HPCC_IMDS_USER[@]+"${HPCC_IMDS_USER[@]}"}
  if mountpoint -q "$HPCC_MOUNT_POINT"; then
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
  log "launch environment: /etc/hpcc/env, $(wc -l </etc/hpcc/hostfile) compute node(s) in /etc/hpcc/hostfile, per group in /etc/hpcc/groups/ (membership generation $HPCC_APPLIED_VERSION)"
}
# --- containers
# --- pyxis
PYXIS_BUILD_WAIT_SECONDS=1800

slurm_version() {
  local out
  out=$(slurmd -V 2>/dev/null || true)
  if [[ $out =~ ([0-9]{2}\.[0-9]{2}\.[0-9]{1,3}) ]]; then echo "${BASH_REMATCH[1]}"; fi
}

pyxis_build_deps() {
  local version
  [ -f /usr/include/slurm/spank.h ] && type -P git make cc >/dev/null && return 0
  version=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null) || fail "pyxis: no slurm-client package to build against"
  retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
  retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q git make gcc "libslurm-dev=$version"
}

pyxis_build() {
  local dest=$1 tmp src
  tmp=$(mktemp -d)
  if [ -n "${HPCC_PYXIS_SO:-}" ]; then
    if ! [[ $HPCC_PYXIS_SO =~ ^/[A-Za-z0-9._/-]+$ ]] || [ ! -f "$HPCC_PYXIS_SO" ]; then
      fail "HPCC_PYXIS_SO='${HPCC_PYXIS_SO:0:80}' is not an absolute path to a file"
    fi
    cp "$HPCC_PYXIS_SO" "$tmp/spank_pyxis.so"
    log "pyxis: the stand-in $HPCC_PYXIS_SO (HPCC_PYXIS_SO), no build"
  else
    src=${HPCC_PYXIS_GIT:-https://github.com/NVIDIA/pyxis.git}
    [[ $src =~ ^[A-Za-z0-9/] ]] || fail "HPCC_PYXIS_GIT='${src:0:80}' is not a repository's path or URL"
    pyxis_build_deps
    git init -q "$tmp/src"
    retry_cmd git -C "$tmp/src" fetch -q --depth 1 "$src" 107519944221822ea1dace4db8e7234b2eaa4cd5 || fail "pyxis: cannot fetch commit 107519944221822ea1dace4db8e7234b2eaa4cd5 from ${src:0:120}"
    git -C "$tmp/src" checkout -q FETCH_HEAD || fail "pyxis: cannot check out the commit fetched from ${src:0:120}"
    [ "$(git -C "$tmp/src" rev-parse HEAD)" = 107519944221822ea1dace4db8e7234b2eaa4cd5 ] || fail "pyxis' source from ${src:0:120} is not the pinned commit 107519944221822ea1dace4db8e7234b2eaa4cd5: refused"
    within 900 make -C "$tmp/src" -j "$(nproc)" >"$tmp/make.log" 2>&1 || { tail -n 20 "$tmp/make.log"; fail "pyxis did not build against Slurm $(slurm_version) (its output above)"; }
    [ -f "$tmp/src/spank_pyxis.so" ] || fail "pyxis' build made no spank_pyxis.so"
    cp "$tmp/src/spank_pyxis.so" "$tmp/spank_pyxis.so"
    log "pyxis 0.24.0: built against Slurm $(slurm_version)"
  fi
  install -m 0644 "$tmp/spank_pyxis.so" "$dest.$HPCC_NODE.tmp"
  mv -f "$dest.$HPCC_NODE.tmp" "$dest"
  rm -rf "$tmp"
}

pyxis_install() {
  local version arch dir shared lock
  version=$(slurm_version)
  [ -n "$version" ] || fail "pyxis: no Slurm version from slurmd -V"
  arch=$(dpkg --print-architecture)
  [[ $arch =~ ^[a-z0-9]+$ ]] || fail "pyxis: dpkg names no architecture"
  dir="$HPCC_MOUNT_POINT/.hpcc/pyxis/0.24.0/slurm-$version/$arch"
  shared="$dir/spank_pyxis.so"
  if [ ! -s "$shared" ]; then
    install -d -m 0755 "$dir"
    exec {lock}>>"$dir/.lock"
    if ! flock -n "$lock"; then
      log "pyxis for Slurm $version ($arch) is being built by $(head -c 64 "$dir/.builder" 2>/dev/null || echo 'another node'): waiting up to $PYXIS_BUILD_WAIT_SECONDS s"
      flock -w "$PYXIS_BUILD_WAIT_SECONDS" "$lock" || fail "pyxis for Slurm $version ($arch): the build by $(head -c 64 "$dir/.builder" 2>/dev/null || echo 'another node') did not finish in $PYXIS_BUILD_WAIT_SECONDS s (see that node's bootstrap log)"
    fi
    if [ ! -s "$shared" ]; then
      echo "$HPCC_NODE" >"$dir/.builder"
      pyxis_build "$shared"
    fi
    exec {lock}>&-
  fi
  if ! cmp -s "$shared" "/usr/local/lib/slurm/spank_pyxis.so"; then
    install -D -m 0644 "$shared" "/usr/local/lib/slurm/spank_pyxis.so"
    log "pyxis 0.24.0 for Slurm $version ($arch) installed from $shared"
  fi
}

enroot_install() {
  local tmp entry name url sum debs
  if [ -n "${HPCC_ENROOT:-}" ]; then
    if ! [[ $HPCC_ENROOT =~ ^/[A-Za-z0-9._/-]+$ ]] || [ ! -x "$HPCC_ENROOT" ]; then
      fail "HPCC_ENROOT='${HPCC_ENROOT:0:80}' is not an absolute path to an executable"
    fi
    [ "$(readlink /usr/local/bin/enroot 2>/dev/null)" = "$HPCC_ENROOT" ] && return 0
    install -d -m 0755 /usr/local/bin
    ln -sfn "$HPCC_ENROOT" /usr/local/bin/enroot
    log "enroot: the stand-in $HPCC_ENROOT (HPCC_ENROOT), no package"
    return 0
  fi
  case "$HPCC_OS" in
    ubuntu-* | debian-*) ;;
    *) fail "containers need an Ubuntu image ($HPCC_OS: hpcc installs enroot's .deb); or set containers.enabled: false" ;;
  esac
  if [ "$(dpkg-query -W -f='${Version}' enroot 2>/dev/null || true)" = "4.1.2-1" ] &&
    [ "$(dpkg-query -W -f='${Version}' enroot+caps 2>/dev/null || true)" = "4.1.2-1" ]; then
    return 0
  fi
  case "$(dpkg --print-architecture)" in
    amd64) debs=("enroot_4.1.2-1_amd64.deb https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot_4.1.2-1_amd64.deb unpinned" "enroot+caps_4.1.2-1_amd64.deb https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot%2Bcaps_4.1.2-1_amd64.deb unpinned") ;;
    arm64) debs=("enroot_4.1.2-1_arm64.deb https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot_4.1.2-1_arm64.deb unpinned" "enroot+caps_4.1.2-1_arm64.deb https://github.com/NVIDIA/enroot/releases/download/v4.1.2/enroot%2Bcaps_4.1.2-1_arm64.deb unpinned") ;;
    *) fail "enroot has no package for $(dpkg --print-architecture)" ;;
  esac
  tmp=$(mktemp -d)
  for entry in "${debs[@]}"; do
    read -r name url sum <<<"$entry"
    [[ $sum =~ ^[0-9a-f]{64}$ ]] || fail "enroot's $name has no pinned sha256: run \`hpcc pin containers\` and paste its output into the stack file (cluster.containers.releaseDigests)"
    retry_cmd curl -fsSL -m 300 -o "$tmp/$name" "$url"
    echo "$sum  $tmp/$name" | sha256sum -c --quiet - >/dev/null 2>&1 || fail "enroot's $name is not the sha256 pinned for it: refused"
  done
  retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
  retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q squashfuse fuse-overlayfs "$tmp"/*.deb
  rm -rf "$tmp"
  log "enroot 4.1.2 installed"
}

enroot_configure() {
  local bundle="$HPCC_CURRENT/containers" store=root-volume kind=cpu gpus=${HPCC_HEALTH_GPUS:-8} d verb name fstab
  [[ $gpus =~ ^[0-9]{1,2}$ ]] || fail "HPCC_HEALTH_GPUS='${gpus:0:20}' is not a number of GPUs"
  [ "$gpus" -eq 0 ] || kind=gpu
  ! mountpoint -q /opt/dlami/nvme || store=instance-store
  [ -f "$bundle/enroot.conf.$store" ] || fail "the bundle has no containers/enroot.conf.$store"
  install -d -m 0755 "$(dirname /etc/enroot/enroot.conf)" /etc/enroot/hooks.d "$(dirname /usr/local/libexec/hpcc/pyxis-importer)"
  write_file /etc/enroot/enroot.conf 0644 <"$bundle/enroot.conf.$store"
  while read -r d; do
    [[ $d =~ ^/[A-Za-z0-9._/-]+$ ]] || fail "the bundle's enroot directory '${d:0:80}' is not a plain path"
    install -d -m 1777 "$d"
  done <"$bundle/directories.$store"
  while read -r verb name; do
    [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || fail "the bundle's enroot hook '${name:0:80}' is not a plain name"
    case "$verb" in
      link)
        if [ -e "/usr/share/enroot/hooks.d/$name" ]; then ln -sfn "/usr/share/enroot/hooks.d/$name" "/etc/enroot/hooks.d/$name"
        else log "enroot has no hook /usr/share/enroot/hooks.d/$name: not linked"; fi ;;
      remove) rm -f "/etc/enroot/hooks.d/$name" ;;
      *) fail "the bundle's hooks.$kind has a line '${verb:0:20}' that is neither link nor remove" ;;
    esac
  done <"$bundle/hooks.$kind"
  [ "$kind" = cpu ] || type -P nvidia-container-cli >/dev/null ||
    log "enroot: no nvidia-container-cli here: images that ask for GPUs (NVIDIA_VISIBLE_DEVICES) fail to start until libnvidia-container-tools is installed"
  install -d -o root -g root -m 0700 /etc/hpcc/enroot-root
  write_file /usr/local/libexec/hpcc/pyxis-importer 0755 <"$bundle/pyxis-importer"
  fstab=$(cd / && PYTHONPATH=$HPCC_CURRENT python3 -m hpcc_node.containers.mounts "$HPCC_MOUNT_POINT" 2>&1) ||
    fail "enroot's mounts: $fstab"
  install -d -m 0755 "$(dirname /etc/enroot/mounts.d/90-hpcc.fstab)"
  printf '%s\n' "$fstab" | write_file /etc/enroot/mounts.d/90-hpcc.fstab 0644
  log "enroot: /etc/enroot/enroot.conf for the $store, the $kind node's hooks, /etc/enroot/mounts.d/90-hpcc.fstab; pyxis' importer /usr/local/libexec/hpcc/pyxis-importer"
}

ngc_key() {
  local secret tmp key=/etc/hpcc/enroot-root/ngc.key
  secret=$(sed -n 's/^ngc //p' "$HPCC_CURRENT/containers/registries" 2>/dev/null || true)
  if [ -z "$secret" ]; then rm -f "$key"; return 0; fi
  [[ $secret =~ ^[A-Za-z0-9/_+=.@:-]{1,2048}$ ]] || fail "the bundle's NGC secret is not a secret's name or ARN"
  tmp=$(umask 077; mktemp "/etc/hpcc/enroot-root/.ngc.XXXXXX")
  aws_retry secretsmanager get-secret-value --secret-id "$secret" --query SecretString --output text >"$tmp" ||
    { rm -f "$tmp"; fail "could not read the NGC secret $secret (see above): does it exist, and in this Region?"; }
  [ -s "$tmp" ] || { rm -f "$tmp"; fail "the NGC secret $secret holds no key"; }
  if cmp -s "$tmp" "$key"; then rm -f "$tmp"; else chmod 0600 "$tmp"; mv -f "$tmp" "$key"; log "NGC key of $secret stored for root's enroot"; fi
}

images_prewarm() {
  local rc=0
  (cd / && PYTHONPATH=$HPCC_CURRENT within 86400 python3 -m hpcc_node.containers.prewarm --fsx "$HPCC_MOUNT_POINT" --node "$HPCC_NODE" >/dev/null) || rc=$?
  [ "$rc" = 0 ] || log "prewarm: exit $rc: this node starts its group's images from the shared cache"
}

step_containers() {
  if [ "$HPCC_SCHEDULER" != slurm ]; then log "SCHEDULER=$HPCC_SCHEDULER: no pyxis (a Slurm plugin), no containers"; return 0; fi
  slurm_install
  enroot_install
  enroot_configure
  ngc_key
  images_prewarm
  pyxis_install
}
# --- slurm
HPCC_MUNGE_KEY=/etc/munge/munge.key

has_systemd() { [ -d /run/systemd/system ]; }
running() { kill -0 "$(cat "$1" 2>/dev/null || echo x)" 2>/dev/null; }

slurm_install() {
  local pkgs="munge slurm-client slurmd"
  if type -P munged sinfo slurmd >/dev/null; then return 0; fi
  case "$HPCC_OS" in
    ubuntu-* | debian-*)
      retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
      # shellcheck disable=SC2086
      retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q $pkgs ;;
    *) fail "scheduler: slurm needs an Ubuntu image ($HPCC_OS has no Slurm packages here); or use scheduler: none" ;;
  esac
}

read_munge() {
  aws_retry secretsmanager get-secret-value --secret-id "hpcc/llm/munge-key" --query SecretString --output text |
    base64 -d >"$1"
}

munge_key() {
  local tmp rc=0
  if [ "${HPCC_AGENT:-0}" = 1 ] && [ -s "$HPCC_MUNGE_KEY" ]; then return 0; fi
  tmp=$(mktemp -d)
  from_head "hpcc/llm/munge-key" slurm "munge key" read_munge "$tmp/key" || fail "could not read hpcc/llm/munge-key (see above)"
  [ -s "$tmp/key" ] || fail "hpcc/llm/munge-key holds no key"
  install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
  rc=0
  cmp -s "$tmp/key" "$HPCC_MUNGE_KEY" || { install -o munge -g munge -m 0400 "$tmp/key" "$HPCC_MUNGE_KEY"; rc=1; }
  rm -rf "$tmp"
  return "$rc"
}

daemon() {
  local name=$1 pidfile=$2 restart=$3; shift 3
  if has_systemd; then
    within 60 systemctl enable -q "$name"
    if [ "$restart" = 1 ]; then within 120 systemctl restart "$name"; else within 120 systemctl start "$name"; fi
    return 0
  fi
  if running "$pidfile"; then
    [ "$restart" = 1 ] || return 0
    kill "$(cat "$pidfile")"
    for _ in $(seq 50); do running "$pidfile" || break; sleep 0.2; done
  fi
  within 60 "$@"
  log "started $name (no systemd here)"
}

slurm_stop() {
  local name=slurmd
  if has_systemd; then within 120 systemctl disable -q --now "$name" 2>/dev/null || true
  elif running "/run/$name.pid"; then kill "$(cat "/run/$name.pid")"; else return 0; fi
  log "SCHEDULER=none: stopped $name"
}

tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

slurm_daemons() {
  local server="${HPCC_HOSTS[0]}:6817"
  install -d -o slurm -g slurm -m 0755 /var/log/slurm
  install -d -m 0755 /var/lib/slurm/slurmd
  install -d -m 1777 /var/lib/slurm/slurmd/pmix
  wait_for $(( HPCC_JOIN_TIMEOUT_MINUTES * 60 )) "slurmctld on the head ($server)" tcp_open "${HPCC_HOSTS[0]}" 6817 ||
    fail "slurmctld on the head ($server) never answered: see the head's slurm step"
  if has_systemd; then
    printf '%s\n' "[Unit]" "ConditionPathExists=" "[Service]" "ExecStart=" \
      "ExecStart=/usr/sbin/slurmd -D -s --conf-server $server -N $HPCC_NODE" |
      write_file /etc/systemd/system/slurmd.service.d/hpcc.conf 0644
    within 60 systemctl daemon-reload
  fi
  daemon slurmd /run/slurmd.pid 0 slurmd --conf-server "$server" -N "$HPCC_NODE"
  wait_for 60 "slurmd" running /run/slurmd.pid || fail "slurmd did not start (/var/log/slurm/slurmd.log)"
}

step_slurm() {
  if [ "$HPCC_SCHEDULER" != slurm ]; then slurm_stop; log "SCHEDULER=$HPCC_SCHEDULER: no Slurm"; return 0; fi
  slurm_install
  slurm_health_scripts
  local changed=0
  munge_key || changed=1
  install -d -o munge -g munge -m 0755 /run/munge
  daemon munge /run/munge/munged.pid "$changed" runuser -u munge -- munged
  slurm_daemons
  log "Slurm node running: $(sinfo --version 2>/dev/null || echo '?'); the settings' node definition: ${HPCC_SLURM_NODE:-none}, ${HPCC_SLURM_GPUS:-0} GPU(s)"
}
# --- metrics
metrics_install() {
  local missing=()
  type -P prometheus-node-exporter >/dev/null || missing+=(prometheus-node-exporter)
  [ "${#missing[@]}" -eq 0 ] && return 0
  case "$HPCC_OS" in
    ubuntu-* | debian-*)
      retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
      retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "${missing[@]}" ;;
    *) fail "observability needs an Ubuntu image ($HPCC_OS has no Prometheus packages); or set observability.enabled: false" ;;
  esac
}

metrics_service() {
  local name=$1 args=$2 command=$3 pid
  if [ -d /run/systemd/system ]; then
    printf 'ARGS="%s"\n' "$(paste -sd' ' "$args")" | write_file "/etc/default/$name" 0644
    within 60 systemctl enable -q "$name"
    if [ "${HPCC_METRICS_CHANGED:-0}" = 1 ]; then within 120 systemctl restart "$name"; else within 120 systemctl start "$name"; fi
    return 0
  fi
  if ! flock -n "/run/hpcc-$name.lock" true; then
    pid=$(cat "/run/hpcc-$name.pid" 2>/dev/null || true)
    if [ "${HPCC_METRICS_CHANGED:-0}" = 1 ] && [[ $pid =~ ^[0-9]+$ ]]; then kill "$pid" 2>/dev/null || true; fi
    return 0
  fi
  # shellcheck disable=SC2016
  (cd /; setsid flock -n "/run/hpcc-$name.lock" bash -c \
    'while :; do mapfile -t a <"$1"; "$2" "${a[@]}" & echo $! >"/run/hpcc-$3.pid"; wait $!; sleep 2; done' \
    _ "$args" "$command" "$name" </dev/null >>"/var/log/hpcc/$name.log" 2>&1 &)
  log "started $name (no systemd here), log /var/log/hpcc/$name.log"
}

write_changed() {
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  cmp -s "$tmp" "$1" || HPCC_METRICS_CHANGED=1
  write_file "$1" "$2" <"$tmp"
  rm -f "$tmp"
}

dcgm_ask() { (cd / && PYTHONPATH=${HPCC_CURRENT:-/opt/hpcc/current} python3 -m hpcc_node.dcgm "$@"); }

dcgm_applied() {
  local record
  record=$(dcgm_ask applied "$1") || fail "no dcgm record from the bundle: $record"
  write_file /etc/hpcc/dcgm.applied 0644 <<<"$record"
}

metrics_dcgm() {
  local gpus=${HPCC_HEALTH_GPUS:-8} exporter=${HPCC_DCGM_EXPORTER:-} installed version have counters
  local args=/etc/hpcc/dcgm-exporter.args
  local unit=/etc/systemd/system/nvidia-dcgm-exporter.service.d/hpcc.conf
  [[ $gpus =~ ^[0-9]{1,2}$ ]] || fail "HPCC_HEALTH_GPUS='${gpus:0:20}' is not a number of GPUs"
  [ "$gpus" -gt 0 ] || return 0
  if [ -n "$exporter" ]; then
    [[ $exporter =~ ^/[A-Za-z0-9._/-]+$ ]] || fail "HPCC_DCGM_EXPORTER='${exporter:0:80}' is not an absolute path"
  elif [[ $HPCC_OS != ubuntu-* && $HPCC_OS != debian-* ]]; then
    log "no dcgm-exporter on $HPCC_OS (hpcc installs NVIDIA's Debian package): no GPU metrics on this node"
    dcgm_applied none
    return 0
  else
    installed=$(dpkg-query -W -f='${Version}' datacenter-gpu-manager-4-core 2>/dev/null || true)
    if ! version=$(dcgm_ask exporter-version "${installed:-none}"); then
      log "$version"
      dcgm_applied "${installed:-none}"
      return 0
    fi
    have=$(dpkg-query -W -f='${Version}' datacenter-gpu-manager-exporter 2>/dev/null || true)
    if [[ -z $have || $have != "$version"* ]]; then
      retry_cmd apt-get -o DPkg::Lock::Timeout=600 update -q
      retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q \
        --allow-change-held-packages "datacenter-gpu-manager-exporter=$version*"
      HPCC_METRICS_CHANGED=1
    fi
    within 60 apt-mark hold datacenter-gpu-manager-exporter >/dev/null
    exporter=/usr/bin/dcgm-exporter
    log "dcgm-exporter $version for DCGM $installed"
  fi
  counters=$(dcgm_ask counters) || fail "no dcgm-exporter counters from the bundle: $counters"
  install -d -m 0755 "$(dirname /etc/dcgm-exporter/hpcc-counters.csv)" "/run/hpcc/dcgm-job-map"
  write_changed /etc/dcgm-exporter/hpcc-counters.csv 0644 <<<"$counters"
  write_changed "$args" 0644 < <(printf '%s\n' "NODE_NAME=$HPCC_NODE" "$exporter" -f /etc/dcgm-exporter/hpcc-counters.csv \
    -r localhost:5555 -a "$HPCC_IP:9400" --hpc-job-mapping-dir /run/hpcc/dcgm-job-map)
  if [ ! -d /run/systemd/system ]; then
    metrics_service dcgm-exporter "$args" "$(type -P env)"
    dcgm_applied "${installed:-none}"
    return 0
  fi
  printf 'd %s 0755 root root -\n' /run/hpcc/dcgm-job-map | write_file /etc/tmpfiles.d/hpcc-dcgm.conf 0644
  install -d -m 0755 "$(dirname "$unit")"
  write_changed "$unit" 0644 < <(printf '%s\n' "[Unit]" "Wants=nvidia-dcgm.service" \
    "After=nvidia-dcgm.service" "[Service]" "Environment=NODE_NAME=$HPCC_NODE" "ExecStart=" \
    "ExecStart=$(tail -n +2 "$args" | paste -sd' ')" "StandardOutput=journal" "StandardError=journal")
  within 60 systemctl daemon-reload
  within 60 systemctl enable -q nvidia-dcgm nvidia-dcgm-exporter
  within 120 systemctl start nvidia-dcgm
  if [ "$HPCC_METRICS_CHANGED" = 1 ]; then within 120 systemctl restart nvidia-dcgm-exporter; else within 120 systemctl start nvidia-dcgm-exporter; fi
  dcgm_applied "${installed:-none}"
}

step_metrics() {
  metrics_install
  install -d -m 0755 /var/log/hpcc /etc/hpcc "/var/lib/hpcc/metrics"
  HPCC_METRICS_CHANGED=0
  write_changed /etc/hpcc/node-exporter.args 0644 < <(printf '%s\n' "--web.listen-address=$HPCC_IP:9100" \
 "--collector.disable-defaults" "--collector.loadavg" "--collector.pressure" "--collector.stat" "--collector.meminfo" "--collector.vmstat" "--collector.filefd" "--collector.filesystem" "--collector.diskstats" "--collector.netdev" "--collector.netstat" "--collector.sockstat" "--collector.time" "--collector.timex" "--collector.uname" "--collector.os" "--collector.textfile" "--collector.textfile.directory=/var/lib/hpcc/metrics" "--web.disable-exporter-metrics" "--collector.netdev.device-exclude=^(lo|docker[0-9]+|veth.+|br-.+)$" "--collector.filesystem.mount-points-exclude=^/(dev|proc|run|sys|mnt|media|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)")
  metrics_service prometheus-node-exporter /etc/hpcc/node-exporter.args "$(type -P prometheus-node-exporter)"
  HPCC_METRICS_CHANGED=0
  metrics_dcgm
}

apply_dcgm() {
  HPCC_AGENT=1
  use_step metrics
  trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
  HPCC_DEADLINE=$(( $(date +%s) + 600 ))
  load_state || fail "$HPCC_STATE is missing or malformed: run the bootstrap first"
  HPCC_OS=$(os_id /etc/os-release) || fail "unsupported OS ($(grep -h '^PRETTY_NAME=' /etc/os-release | cut -d= -f2- || echo unknown))"
  HPCC_METRICS_CHANGED=0
  metrics_dcgm
  log "applied the dcgm-exporter part of bundle $(basename "$(readlink -f "$HPCC_CURRENT")" | cut -c1-12): $(cat /etc/hpcc/dcgm.applied 2>/dev/null || echo 'a CPU node: nothing')"
  flush_log
}
# --- sync
# --- controller
start_controller() { :; }

HPCC_CURRENT=/opt/hpcc/current
HPCC_STATE=/etc/hpcc/node
HPCC_APPLIED_SETTINGS=/etc/hpcc/settings
HPCC_AGENT_LOCK=/run/hpcc-sync.lock
HPCC_AGENT_PID=/run/hpcc-sync.pid
HPCC_AGENT_PYTHON=python3

write_state() {
  printf '%s\n' "HPCC_NODE=$HPCC_NODE" "HPCC_INSTANCE_ID=$HPCC_INSTANCE_ID" "HPCC_IP=$HPCC_IP" \
    "HOSTS_VERSION=$HPCC_APPLIED_VERSION" | write_file "$HPCC_STATE" 0644
  printf '%s\n' "$HPCC_SETTINGS_TEXT" | write_file "$HPCC_APPLIED_SETTINGS" 0644
}

load_state() {
  local line
  while IFS= read -r line; do
    case "$line" in
      HPCC_NODE=*) HPCC_NODE=${line#*=}; valid_name "$HPCC_NODE" || return 1 ;;
      HPCC_INSTANCE_ID=*) HPCC_INSTANCE_ID=${line#*=}; [[ $HPCC_INSTANCE_ID =~ ^i-[0-9a-f]{1,40}$ ]] || return 1 ;;
      HPCC_IP=*) HPCC_IP=${line#*=}; valid_ip "$HPCC_IP" || return 1 ;;
      HOSTS_VERSION=*) HPCC_APPLIED_VERSION=${line#*=}; [[ $HPCC_APPLIED_VERSION =~ ^[0-9]+$ ]] || return 1 ;;
      *) return 1 ;;
    esac
  done <"$HPCC_STATE"
  [ "$HPCC_NODE" != unknown ] && [ -n "$HPCC_IP" ]
}

settings_changed() { [ "$(printf '%s' "$HPCC_READ_SETTINGS")" != "$(cat "$HPCC_APPLIED_SETTINGS" 2>/dev/null)" ]; }

apply_membership() {
  HPCC_AGENT=1
  use_step sync
  trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
  HPCC_DEADLINE=$(( $(date +%s) + 600 ))
  load_state || fail "$HPCC_STATE is missing or malformed: run the bootstrap first"
  HPCC_READ_VERSION=${HPCC_APPLY_VERSION:-} HPCC_READ_HOSTS="" HPCC_READ_SETTINGS=${HPCC_APPLY_SETTINGS:-}
  if [ -n "${HPCC_APPLY_HOSTS_FILE:-}" ]; then
    [ -f "$HPCC_APPLY_HOSTS_FILE" ] || fail "HPCC_APPLY_HOSTS_FILE '${HPCC_APPLY_HOSTS_FILE:0:80}' is not a file"
    HPCC_READ_HOSTS=$(<"$HPCC_APPLY_HOSTS_FILE")
  else      HPCC_READ_HOSTS=${HPCC_APPLY_HOSTS:-}
  fi
  [[ $HPCC_READ_VERSION =~ ^[0-9]+$ ]] || fail "HPCC_READ_VERSION '${HPCC_READ_VERSION:0:20}' is not a version"
  sync_membership || fail "membership generation $HPCC_READ_VERSION not applied (see above)"
  flush_log
}

sync_membership() {
  local index at=nothing
  apply_settings "$HPCC_READ_SETTINGS" || { echo "/hpcc/llm/settings refused (see above): the applied settings stay" >&2; return 1; }
  parse_hosts "$HPCC_READ_HOSTS" || return 1
  if index=$(node_index "$HPCC_NODE"); then at=${HPCC_HOSTS[$index]}; fi
  if [ "$at" != "$HPCC_IP" ]; then
    echo "membership generation $HPCC_READ_VERSION lists $at as $HPCC_NODE, not this node's $HPCC_IP: not applied" >&2
    return 1
  fi
  HPCC_HOSTS_VERSION=$HPCC_READ_VERSION
  write_membership
  HPCC_APPLIED_VERSION=$HPCC_HOSTS_VERSION
  write_state
  step_slurm
  log "applied membership generation $HPCC_APPLIED_VERSION: $(( ${#HPCC_HOSTS[@]} - 1 )) compute node(s)"
}

agent_env() {
  printf '%s\n' "HPCC_ROLE=compute" "HPCC_STATE_BUCKET=$(state_bucket)" "HPCC_STATUS_KEY=$HPCC_STATUS_KEY" \
    "HPCC_SETTINGS_PARAMETER=/hpcc/llm/settings" \
    "HPCC_BUNDLE_PARAMETER=/hpcc/llm/bundle" "HPCC_VPC_CIDR=$HPCC_VPC_CIDR" "HPCC_LOG=/var/log/hpcc-bootstrap.log" "PYTHONPATH=$HPCC_CURRENT" \
    "AWS_DEFAULT_REGION=us-east-1" "AWS_PAGER=" "AWS_MAX_ATTEMPTS=1"
  if [[ ${AWS_ENDPOINT_URL:-} =~ ^https?://[A-Za-z0-9.:/-]+$ ]]; then echo "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"; fi
  if [ -n "${HPCC_SKIP_STEPS:-}" ] && [[ $HPCC_SKIP_STEPS =~ ^[a-z_,-]+$ ]]; then echo "HPCC_SKIP_STEPS=$HPCC_SKIP_STEPS"; fi
  env | grep -E '^(HPCC_SLURM_(CGROUP|CONFIG_OVERRIDES)=[01]|HPCC_(SLURMD_TIMEOUT|HEARTBEAT_SECONDS)=[0-9]{1,4})$' || true
}

agent_unit() {
  printf '%s\n' "[Unit]" "Description=hpcc node agent: follows membership.json, /hpcc/llm/settings and /hpcc/llm/bundle" \
    "After=network-online.target" "Wants=network-online.target" "" "[Service]" "ExecStart=/usr/bin/env $HPCC_AGENT_PYTHON -m hpcc_node.agent" \
    "WorkingDirectory=/" "EnvironmentFile=/etc/hpcc/agent.env" "Restart=always" "RestartSec=10" "" "[Install]" "WantedBy=multi-user.target"
}

step_sync() {
  local self=${BASH_SOURCE[0]} n envs=()
  [ -f "$self" ] || fail "cannot install the agent: this script was not run from a file"
  [ -f "$HPCC_CURRENT/hpcc_node/agent.py" ] ||
    fail "no node agent in $HPCC_CURRENT: this script runs from the cluster's bundle, which the user data's loader unpacks there"
  write_file /usr/local/sbin/hpcc-node 0755 <"$self"
  agent_env | write_file /etc/hpcc/agent.env 0644
  start_controller
  if [ -d /run/systemd/system ]; then
    agent_unit | write_file /etc/systemd/system/hpcc-sync.service 0644
    within 60 systemctl daemon-reload
    within 60 systemctl enable --now hpcc-sync.service
    log "node agent: hpcc-sync.service $(systemctl is-active hpcc-sync.service || true), a tick every ${HPCC_SYNC_SECONDS}+ s"
    return 0
  fi
  if ! flock -n "$HPCC_AGENT_LOCK" true; then
    log "node agent already running (pid $(cat "$HPCC_AGENT_PID" 2>/dev/null || echo '?'))"
    return 0
  fi
  rm -f "$HPCC_AGENT_PID"
  mapfile -t envs </etc/hpcc/agent.env
  (cd /; setsid env "${envs[@]}" "$HPCC_AGENT_PYTHON" -m hpcc_node.agent </dev/null >>"/var/log/hpcc-bootstrap.log" 2>&1 &)
  for n in $(seq 50); do [ ! -s "$HPCC_AGENT_PID" ] || break; sleep 0.1; done
  [ -s "$HPCC_AGENT_PID" ] || fail "the node agent did not start ($HPCC_AGENT_PYTHON -m hpcc_node.agent, PYTHONPATH=$HPCC_CURRENT)"
  log "started the node agent: $HPCC_AGENT_PYTHON -m hpcc_node.agent, pid $(cat "$HPCC_AGENT_PID") (no systemd here), a tick every ${HPCC_SYNC_SECONDS}+ s"
}
# --- hooks
HPCC_HOOK_SECONDS=$(( 10 * 60 ))
HPCC_HOOKS_DIR=${HPCC_HOOKS_DIR:-$(dirname "$(readlink -f "${BASH_SOURCE[0]:-$0}")")/../hooks}

run_hooks() {
  local point=$1 name rc
  shift
  for name in "$@"; do
    use_step "hook:$name"
    log "$point hook $name: start"
    rc=0
    # shellcheck disable=SC2016
    within "$HPCC_HOOK_SECONDS" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      LANG=C.UTF-8 HPCC_CLUSTER="llm" HPCC_ROLE="compute" HPCC_NODE="$HPCC_NODE" HPCC_NODE_IP="$HPCC_IP" \
      HPCC_HOOK="$point" bash -c 'set -a; [ ! -r /etc/hpcc/env ] || . /etc/hpcc/env; set +a; exec "$0"' "$HPCC_HOOKS_DIR/$name" \
      </dev/null || rc=$?
    if [ "$rc" -ne 0 ]; then
      HPCC_FAIL_CLASS=hook
      if [ "$rc" -eq 124 ]; then fail "$point hook $name timed out after $HPCC_HOOK_SECONDS s (hooks.timeoutMinutes)"; fi
      fail "$point hook $name failed (exit $rc); its output is in the log"
    fi
    log "$point hook $name: done"
  done
}

main() {
  use_step identify
  trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
  log "hpcc bootstrap of llm: compute node, p5.48xlarge"
  [ -z "${HPCC_SKIP_STEPS:-}" ] || log "HPCC_SKIP_STEPS=$HPCC_SKIP_STEPS"
  [ -z "${AWS_ENDPOINT_URL:-}" ] || log "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
  identify_node
  run_step os step_os
  run_step imds step_imds
  run_step lustre step_lustre
  run_step mount step_mount
  run_step efa step_efa
  run_step health step_health
  run_step ssh step_ssh
  run_step join step_join
  run_step launch-env step_launch_env
  run_step containers step_containers
  run_step slurm step_slurm
  run_step metrics step_metrics
  run_step sync step_sync
  use_step ready
  report ready true "bootstrap finished"
  log "ready"
  flush_log
}

case "${1:-}" in
  "") main ;;
  apply-membership) apply_membership ;;
  apply-dcgm) apply_dcgm ;;
  *) echo "usage: ${0##*/} [apply-membership|apply-dcgm]: no argument runs the bootstrap; the others are the node agent's (hpcc_node/agent.py)" >&2; exit 2 ;;
esac
