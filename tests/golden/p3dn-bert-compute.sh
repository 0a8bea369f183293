#!/bin/bash
# hpcc bootstrap: cluster bert, compute node (p3dn.24xlarge). Safe to run again.
# Log: /var/log/hpcc-bootstrap.log. Status: SSM parameter /hpcc/bert/nodes/<node>.
set -Eeuo pipefail
umask 022
export PATH="/opt/amazon/efa/bin:/opt/amazon/openmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}"
export AWS_DEFAULT_REGION="us-east-1" AWS_PAGER=""
HPCC_LOG=/var/log/hpcc-bootstrap.log
HPCC_DEADLINE=$(( $(date +%s) + 60 * 60 ))
HPCC_STEP=start
HPCC_NODE=unknown
HPCC_IP=""
HPCC_STEP_FILE=/run/hpcc-bootstrap.step  # the logger runs in a subshell: it reads the step from here
mkdir -p /etc/hpcc /var/log /run
echo start >"$HPCC_STEP_FILE"
exec > >(while IFS= read -r line; do
  read -r step <"$HPCC_STEP_FILE" || step="?"
  printf '%s [%s] %s\n' "$(date -u +%FT%TZ)" "$step" "$line"
done >>"$HPCC_LOG") 2>&1

# --- common: logging, status reports, retries, deadlines ------------------------------------------
log() { echo "$*"; }

remaining() { echo $(( HPCC_DEADLINE - $(date +%s) )); }

# report PHASE OK MESSAGE: this node's status, with the log's tail, to /hpcc/bert/nodes/<node>.
report() {
  [ "$HPCC_NODE" != unknown ] || return 0
  local json
  json=$(HPCC_PHASE="$1" HPCC_OK="$2" HPCC_MSG="$3" python3 - "$HPCC_LOG" <<'PY'
import json, os, sys, datetime
tail = open(sys.argv[1], errors="replace").read().splitlines()[-15:]
tail = [line[-200:] for line in tail]
print(json.dumps({"node": os.environ["HPCC_NODE"], "ip": os.environ["HPCC_IP"], "phase": os.environ["HPCC_PHASE"],
                  "step": os.environ["HPCC_STEP"], "ok": os.environ["HPCC_OK"] == "true",
                  "message": os.environ["HPCC_MSG"][:500], "logTail": tail,
                  "updated": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}))
PY
)
  aws_retry ssm put-parameter --name "/hpcc/bert/nodes/$HPCC_NODE" --type String --overwrite \
    --value "$json" >/dev/null || log "warning: could not report status ($1)"
}

fail() {
  log "FAILED at step $HPCC_STEP: $*"
  trap - ERR
  report failed false "$*"
  exit 1
}

on_error() { fail "command failed (exit $1) at line $2: $3"; }
trap 'on_error $? $LINENO "$BASH_COMMAND"' ERR
export HPCC_NODE HPCC_IP HPCC_STEP

# aws_retry ARGS...: the AWS CLI with jittered exponential backoff, so 9 nodes stay under API limits.
aws_retry() {
  local attempt=1 delay=2 out
  while :; do
    if out=$(aws "$@" 2>&1); then printf '%s\n' "$out"; return 0; fi
    if [ "$attempt" -ge 6 ] || [ "$(remaining)" -le 0 ]; then
      printf '%s\n' "$out" >&2; return 1
    fi
    sleep $(( delay + RANDOM % (delay + 1) ))
    attempt=$(( attempt + 1 )); delay=$(( delay * 2 > 60 ? 60 : delay * 2 ))
  done
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND with jitter until it succeeds or SECONDS pass.
wait_for() {
  local limit=$1 what=$2 until; shift 2
  until=$(( $(date +%s) + limit ))
  [ "$until" -le "$HPCC_DEADLINE" ] || until=$HPCC_DEADLINE
  while ! "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$until" ] || return 1
    log "waiting for $what"
    sleep $(( 5 + RANDOM % 5 ))
  done
}

# write_file PATH MODE: stdin to PATH, touched only when the content changes (a rerun changes nothing).
write_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp "${path}.XXXXXX")
  cat >"$tmp"
  chmod "$mode" "$tmp"
  if [ -f "$path" ] && cmp -s "$tmp" "$path"; then rm -f "$tmp"; else mv -f "$tmp" "$path"; log "wrote $path"; fi
}

skipped() { case ",${HPCC_SKIP_STEPS:-}," in *",$1,"*) return 0 ;; esac; return 1; }

set_step() { HPCC_STEP=$1; echo "$1" >"$HPCC_STEP_FILE"; }

run_step() {
  set_step "$1"
  if skipped "$1"; then log "skipped: HPCC_SKIP_STEPS names $1"; return 0; fi
  report "$1" true "running"
  log "start"
  "$2"
  log "done"
}

hosts_list() { aws ssm get-parameter --name "/hpcc/bert/hosts" --query Parameter.Value --output text; }

# identify_node: this node's name from its IP's position in /hpcc/bert/hosts (head first, then compute-000...).
identify_node() {
  set_step identify
  HPCC_IP=${HPCC_NODE_IP:-$(primary_ip)}
  [ -n "$HPCC_IP" ] || fail "cannot tell this node's IP address; set HPCC_NODE_IP"
  sleep $(( RANDOM % 11 ))  # spread the cluster's first API calls
  wait_for 3600 "/hpcc/bert/hosts (written once every instance exists)" hosts_list \
    || fail "/hpcc/bert/hosts never appeared"
  mapfile -t HPCC_HOSTS < <(hosts_list | awk 'NF {print $1}')
  local i
  for i in "${!HPCC_HOSTS[@]}"; do
    if [ "${HPCC_HOSTS[$i]}" = "$HPCC_IP" ]; then
      if [ "$i" -eq 0 ]; then HPCC_NODE="head"; else HPCC_NODE=$(printf 'compute-%03d' $(( i - 1 ))); fi
    fi
  done
  [ "$HPCC_NODE" != unknown ] || fail "this node's IP $HPCC_IP is not in /hpcc/bert/hosts"
  log "this is $HPCC_NODE ($HPCC_IP) of bert"
}

primary_ip() {
  local token
  token=$(curl -sf -m 2 -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null) &&
    curl -sf -m 2 -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/local-ipv4 && return 0
  hostname -I 2>/dev/null | awk '{print $1}'
}
# --- os: which distribution this is, which decides the Lustre client and package tools ------------
# os_id [OS_RELEASE_FILE]: ubuntu-22.04, amzn-2, amzn-2023, debian-12 ...; fails for anything else.
os_id() {
  local ID="" VERSION_ID=""
  # shellcheck disable=SC1090,SC1091
  . "${1:-/etc/os-release}"
  case "$ID-$VERSION_ID" in
    ubuntu-20.04 | ubuntu-22.04 | ubuntu-24.04 | amzn-2 | amzn-2023 | debian-11 | debian-12) echo "$ID-$VERSION_ID" ;;
    *) return 1 ;;
  esac
}

step_os() {
  HPCC_OS=$(os_id /etc/os-release) || fail "unsupported OS ($(grep -h '^PRETTY_NAME=' /etc/os-release | cut -d= -f2- || echo unknown)); hpcc supports Ubuntu 20.04/22.04/24.04, Amazon Linux 2 and 2023"
  log "OS: $HPCC_OS, kernel $(uname -r)"
}
# --- lustre: the FSx for Lustre client for this OS and kernel --------------------------------------
# lustre_package OS KERNEL: "<installer> <package>" for that OS.
lustre_package() {
  case "$1" in
    ubuntu-*) echo "apt lustre-client-modules-$2" ;;
    amzn-2) echo "amazon-linux-extras lustre" ;;
    amzn-2023) echo "dnf lustre-client" ;;
    *) return 1 ;;
  esac
}

install_lustre_ubuntu() {
  local pkg=$1 key=/usr/share/keyrings/fsx-ubuntu-public-key.gpg
  if [ ! -s "$key" ]; then
    curl -fsSL --retry 5 https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc | gpg --dearmor -o "$key"
  fi
  echo "deb [signed-by=$key] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $(lsb_release -cs) main" |
    write_file /etc/apt/sources.list.d/fsxlustreclientrepo.list 0644
  retry_cmd apt-get update -q
  if ! apt-cache show "$pkg" >/dev/null 2>&1; then
    fail "no Lustre client for kernel $(uname -r) ($pkg is not in the FSx repository); nearest: $(apt-cache search --names-only '^lustre-client-modules-[0-9]' | awk '{print $1}' | sort -V | tail -3 | tr '\n' ' ')- boot an image whose kernel has one, or pin the kernel"
  fi
  retry_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$pkg"
  apt-mark hold "$pkg" "linux-image-$(uname -r)" >/dev/null  # unattended upgrades must not break the mount
}

retry_cmd() {
  local n
  for n in 1 2 3 4 5; do "$@" && return 0; log "retry $n: $*"; sleep $(( n * 5 + RANDOM % 5 )); done
  return 1
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
  modinfo lustre >/dev/null 2>&1 || fail "Lustre client installed but the kernel module is missing for $(uname -r)"
}
# --- mount: FSx for Lustre at /fsx, once it exists; persisted in fstab ----------------
fsx_field() { aws ssm get-parameter --name "/hpcc/bert/fsx" --query Parameter.Value --output text | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
lnet_reachable() { timeout 3 bash -c "</dev/tcp/$1/988"; }

step_mount() {
  wait_for 3600 "the file system (/hpcc/bert/fsx)" fsx_field dnsName || fail "/hpcc/bert/fsx never appeared: is the file system still creating?"
  local dns mount_name source
  dns=$(fsx_field dnsName); mount_name=$(fsx_field mountName)
  source="$dns@tcp:/$mount_name"
  wait_for 1800 "Lustre on $dns:988" lnet_reachable "$dns" || fail "$dns does not answer on TCP 988: check the Lustre security group rules"
  mkdir -p "/fsx"
  if ! grep -qF " /fsx lustre " /etc/fstab; then
    echo "$source /fsx lustre defaults,noatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target 0 0" >>/etc/fstab
    log "added /fsx to /etc/fstab"
  fi
  if findmnt -rn -S "$source" -T "/fsx" >/dev/null 2>&1; then
    log "/fsx already mounted"
  else
    local n
    for n in $(seq 1 10); do
      mount -t lustre -o relatime,flock "$source" "/fsx" && break
      [ "$n" -lt 10 ] || fail "mount $source /fsx failed 10 times"
      sleep 6
    done
  fi
  mkdir -p "/fsx/scratch" "/fsx/hpcc"
  chmod 1777 "/fsx/scratch"
}
# --- efa: the fabric this node was launched with actually works --------------------------------------
efa_devices() { fi_info -p efa -t FI_EP_RDM 2>/dev/null | grep -c 'domain: .*-rdm' || true; }

step_efa() {
  if ! fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1; then
    log "fi_info -p efa found no EFA device; loading ib_uverbs and retrying"
    modprobe ib_uverbs || log "modprobe ib_uverbs failed"
    fi_info -p efa -t FI_EP_RDM >/dev/null 2>&1 ||
      fail "no EFA device: fi_info -p efa fails even after modprobe ib_uverbs; p3dn.24xlarge was launched with 1 EFA interface(s) - check the launch template and the EFA driver"
  fi
  local found
  found=$(efa_devices)
  [ "$found" -eq 1 ] || fail "found $found EFA device(s); p3dn.24xlarge was launched with 1"
  log "EFA: $found device(s); $(grep -h 'EFA installer version' /opt/amazon/efa_installed_packages 2>/dev/null || echo 'installer version file missing')"
  case "$HPCC_OS" in
    ubuntu-*)  # libfabric's shared-memory transport needs ptrace between ranks
      echo "kernel.yama.ptrace_scope = 0" | write_file /etc/sysctl.d/99-hpcc-efa.conf 0644
      sysctl -q -w kernel.yama.ptrace_scope=0 ;;
  esac
}
# --- ssh: one cluster key from hpcc/bert/ssh-key, trusted between every pair of nodes ----------------
cluster_key() { aws secretsmanager get-secret-value --secret-id "hpcc/bert/ssh-key" --query SecretString --output text; }

install_key() {  # install_key HOME OWNER
  local home=$1 owner=$2
  install -d -m 0700 "$home/.ssh"
  cluster_key | write_file "$home/.ssh/id_hpcc" 0600
  ssh-keygen -y -f "$home/.ssh/id_hpcc" | write_file "$home/.ssh/id_hpcc.pub" 0644
  [ -e "$home/.ssh/authorized_keys" ] || : >"$home/.ssh/authorized_keys"
  grep -qxF "$(cat "$home/.ssh/id_hpcc.pub")" "$home/.ssh/authorized_keys" || cat "$home/.ssh/id_hpcc.pub" >>"$home/.ssh/authorized_keys"
  chmod 0600 "$home/.ssh/authorized_keys"
  chown -R "$owner" "$home/.ssh"
}

reload_sshd() {
  sshd -t || fail "sshd rejects its configuration"
  if [ -d /run/systemd/system ]; then
    systemctl reload ssh 2>/dev/null || systemctl reload sshd
  elif [ -s /run/sshd.pid ]; then
    kill -HUP "$(cat /run/sshd.pid)"
  else
    log "warning: no systemd and no /run/sshd.pid; sshd not reloaded"
  fi
}

step_ssh() {
  wait_for 1200 "the cluster key from the head node (hpcc/bert/ssh-key)" cluster_key ||
    fail "hpcc/bert/ssh-key stayed empty: the head node has not finished its ssh step"
  install_key /root root
  if id "ubuntu" >/dev/null 2>&1; then
    install_key "$(getent passwd "ubuntu" | cut -d: -f6)" "ubuntu"
  fi
  grep -q '^Include /etc/ssh/ssh_config.d/' /etc/ssh/ssh_config 2>/dev/null ||
    sed -i '1i Include /etc/ssh/ssh_config.d/*.conf' /etc/ssh/ssh_config
  mkdir -p /etc/ssh/ssh_config.d /etc/ssh/sshd_config.d
  {
    echo "# hpcc: the cluster's nodes, trusted without prompts (their host keys change with every launch)"
    echo "Host ${HPCC_HOSTS[*]}"
    printf '  %s\n' "StrictHostKeyChecking no" "UserKnownHostsFile /dev/null" "IdentityFile ~/.ssh/id_hpcc" "LogLevel ERROR"
  } | write_file /etc/ssh/ssh_config.d/50-hpcc.conf 0644
  grep -q '^Include /etc/ssh/sshd_config.d/' /etc/ssh/sshd_config ||
    sed -i '1i Include /etc/ssh/sshd_config.d/*.conf' /etc/ssh/sshd_config
  printf '%s\n' "# hpcc: keys only" "PasswordAuthentication no" "KbdInteractiveAuthentication no" \
    "PermitRootLogin prohibit-password" "PubkeyAuthentication yes" | write_file /etc/ssh/sshd_config.d/50-hpcc.conf 0644
  reload_sshd
}
# --- join: every other node accepts this node's SSH (Open MPI spawns along a tree) -----------------
peer_ok() { ssh -o BatchMode=yes -o ConnectTimeout=5 "root@$1" true </dev/null >/dev/null 2>&1; }

step_join() {
  local deadline=$(( $(date +%s) + 1200 )) pending=() next=() ip i
  for i in "${!HPCC_HOSTS[@]}"; do [ "${HPCC_HOSTS[$i]}" = "$HPCC_IP" ] || pending+=("$i"); done
  while [ "${#pending[@]}" -gt 0 ]; do
    next=()
    for i in "${pending[@]}"; do peer_ok "${HPCC_HOSTS[$i]}" || next+=("$i"); done
    pending=("${next[@]+"${next[@]}"}")
    [ "${#pending[@]}" -gt 0 ] || break
    if [ "$(date +%s)" -ge "$deadline" ] || [ "$(remaining)" -le 0 ]; then
      local missing=""
      for i in "${pending[@]}"; do
        ip=${HPCC_HOSTS[$i]}
        if [ "$i" -eq 0 ]; then missing+="head ($ip) "; else missing+="$(printf 'compute-%03d' $(( i - 1 ))) ($ip) "; fi
      done
      fail "nodes never joined within 20 min: ${missing% }"
    fi
    log "waiting for ${#pending[@]} node(s) to accept SSH"
    sleep $(( 5 + RANDOM % 5 ))
  done
  log "all 9 nodes accept SSH"
}
# --- launch-env: hostfiles, the launch environment and the launch helpers ---------------------------
compute_ips() { printf '%s\n' "${HPCC_HOSTS[@]:1}"; }

# hostfile FORMAT SLOTS: compute nodes in name order, in the format infra/hostfile.py documents.
hostfile() {
  case "$1" in
    openmpi) compute_ips | awk -v s="$2" '{print $1 " slots=" s}' ;;
    mpich) compute_ips | awk -v s="$2" '{print $1 ":" s}' ;;
    hosts) compute_ips ;;
    horovod) compute_ips | awk -v s="$2" '{printf "%s%s:%s", (NR > 1 ? "," : ""), $1, s} END {print ""}' ;;
  esac
}

ofi_nccl_dir() {
  local d
  for d in /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib; do [ -d "$d" ] && { echo "$d"; return 0; }; done
  return 0
}

step_launch_env() {
  local rank="" i ofi ifname
  for i in "${!HPCC_HOSTS[@]}"; do [ "$i" -gt 0 ] && [ "${HPCC_HOSTS[$i]}" = "$HPCC_IP" ] && rank=$(( i - 1 )); done
  hostfile openmpi 8 | write_file /etc/hpcc/hostfile 0644
  hostfile mpich 8 | write_file /etc/hpcc/hostfile.mpich 0644
  hostfile hosts 8 | write_file /etc/hpcc/hosts 0644
  ofi=$(ofi_nccl_dir)
  ifname=$(ip -o -4 addr show | awk -v ip="$HPCC_IP" 'index($4, ip "/") == 1 {print $2; exit}')
  {
    echo "# hpcc bert: rendezvous and fabric settings for $HPCC_NODE"
    echo "HPCC_CLUSTER=bert"
    echo "HPCC_NODE=$HPCC_NODE"
    echo "MASTER_ADDR=${HPCC_HOSTS[1]}"
    echo "MASTER_PORT=29500"
    echo "NNODES=8"
    echo "NPROC_PER_NODE=8"
    [ -z "$rank" ] || echo "NODE_RANK=$rank"
    echo "HPCC_HOSTS=$(hostfile horovod 8)"
    echo "HPCC_HOSTFILE=/etc/hpcc/hostfile"
    # gloo (torch.distributed on CPU) takes one interface by name; this node's primary one.
    [ -z "$ifname" ] || echo "GLOO_SOCKET_IFNAME=$ifname"
    echo "FI_PROVIDER=efa"
    echo "FI_EFA_FORK_SAFE=1"
    echo "NCCL_SOCKET_IFNAME=^lo,docker"
    echo "NCCL_DEBUG=WARN"
    [ -z "$ofi" ] || echo "LD_LIBRARY_PATH=$ofi:/opt/amazon/efa/lib:/opt/amazon/openmpi/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
  } | write_file /etc/hpcc/env 0644
  printf '%s\n' "# hpcc: the cluster's launch environment in every login shell" "set -a" ". /etc/hpcc/env" "set +a" |
    write_file /etc/profile.d/hpcc.sh 0644
  if mountpoint -q "/fsx"; then
    mkdir -p "/fsx/hpcc"
    for i in hostfile hostfile.mpich hosts; do write_file "/fsx/hpcc/$i" 0644 </etc/hpcc/$i; done
  fi
}

main() {
  identify_node
  run_step os step_os
  run_step lustre step_lustre
  run_step mount step_mount
  run_step efa step_efa
  run_step ssh step_ssh
  run_step join step_join
  run_step launch-env step_launch_env
  set_step ready
  report ready true "bootstrap finished"
  log "ready"
}

main "$@"
