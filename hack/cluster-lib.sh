# Functions cluster-up.sh and node-up.sh share; sourced after
# cluster-env.sh. $D is the cluster's state directory (its PKI and
# kubeconfigs); $STATE is the directory of the node being started (its
# pids/ and logs/: $D for the first node, nodes/nodeN for another); log
# prints a line for the calling script.

# running NAME: whether the process start NAME started is alive (that very
# process: a run stopped halfway leaves pid files whose pids others reuse).
running() { pid_alive "$STATE/pids/$1" >/dev/null; }

# start NAME COMMAND...: starts COMMAND in its own session unless running,
# logging to logs/NAME.log and recording its pid and start time in
# pids/NAME.
start() {
  local n=$1
  shift
  if running "$n"; then return; fi
  setsid "$@" >>"$STATE/logs/$n.log" 2>&1 &
  echo "$! $(proc_start $!)" >"$STATE/pids/$n"
}

# wait_for WHAT COMMAND...: waits up to a minute for COMMAND to succeed.
wait_for() {
  local what=$1
  shift
  for _ in $(seq 1 120); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "$what did not come up; see $STATE/logs"
  exit 1
}

# pki NAME SUBJECT [SAN]: a key and a certificate of the local CA, for a
# client, or for a server and client when SAN names its addresses.
pki() {
  local n=$1 subj=$2 san=${3:-}
  [ -f "$D/pki/$n.crt" ] && return
  openssl req -newkey rsa:2048 -nodes -keyout "$D/pki/$n.key" -subj "$subj" -out "$D/pki/$n.csr" 2>/dev/null
  local ext="$D/pki/$n.ext"
  echo "basicConstraints=CA:FALSE" >"$ext"
  echo "keyUsage=digitalSignature,keyEncipherment" >>"$ext"
  if [ -n "$san" ]; then
    echo "extendedKeyUsage=serverAuth,clientAuth" >>"$ext"
    echo "subjectAltName=$san" >>"$ext"
  else
    echo "extendedKeyUsage=clientAuth" >>"$ext"
  fi
  openssl x509 -req -in "$D/pki/$n.csr" -CA "$D/pki/ca.crt" -CAkey "$D/pki/ca.key" -CAcreateserial \
    -days 365 -extfile "$ext" -out "$D/pki/$n.crt" 2>/dev/null
}

# kubeconfig NAME CERT [SERVER]: kubeconfig/NAME.kubeconfig, acting with
# the certificate CERT, against the API server at SERVER (default
# loopback).
kubeconfig() {
  local f="$D/kubeconfig/$1.kubeconfig"
  [ -f "$f" ] && return
  cat >"$f" <<KC
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: ${3:-https://127.0.0.1:$API_PORT}
    certificate-authority: $D/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $D/pki/$2.crt
    client-key: $D/pki/$2.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
KC
}
