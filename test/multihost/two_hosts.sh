#!/usr/bin/env bash
# Two hosts on one machine: a second host made from a network namespace (its
# own UTS hostname, a veth pair 10.77.0.1 / 10.77.0.2, an sshd on port 2222
# inside it), and Open MPI told to reach it (plm_rsh_agent with this test's
# key and port, btl tcp,self and the interfaces of the veth subnet). A
# 2-stage MLP trained by `gpipe-run --hostfile` with stage 1 on the second
# host, and a 2-replica one (--data-parallel 2) with replica 1 there, must
# each give the weights of its one-host run bit for bit. Without the
# agent, gpipe-run must say in one line which host Open MPI could not reach;
# a stage killed on the second host must be named with that host within 10 s.
#
# usage: two_hosts.sh BIN_DIR EXAMPLES_DIR WORKDIR
# Exit 77 (ctest: skipped) with the reason when it cannot set up: not root,
# no `ip netns`, no sshd (openssh-server), no veth.
set -euo pipefail
BIN=$1 EX=$2 W=$3
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
command -v ip > /dev/null || skip "no ip (iproute2)"
[[ -x /usr/sbin/sshd ]] || skip "no /usr/sbin/sshd (apt-get install openssh-server)"
command -v ssh > /dev/null || skip "no ssh client"

rm -rf "$W" && mkdir -p "$W"
NS=gph2-$$
VA=vgpa$$ VB=vgpb$$
VA=${VA:0:15} VB=${VB:0:15}
cleanup() {
  [[ -f $W/sshd.pid ]] && kill "$(cat "$W/sshd.pid")" 2> /dev/null || true
  ip netns del "$NS" 2> /dev/null || true
  ip link del "$VA" 2> /dev/null || true
}
trap cleanup EXIT
ip netns add "$NS" 2> "$W/netns.err" || skip "cannot create a network namespace: $(cat "$W/netns.err")"
ip link add "$VA" type veth peer name "$VB" 2> "$W/veth.err" || skip "cannot create a veth pair: $(cat "$W/veth.err")"
ip link set "$VB" netns "$NS"
ip addr add 10.77.0.1/24 dev "$VA"
ip link set "$VA" up
ip netns exec "$NS" ip addr add 10.77.0.2/24 dev "$VB"
ip netns exec "$NS" ip link set "$VB" up
ip netns exec "$NS" ip link set lo up

# The second host's sshd: this test's host key, and its client key as the
# only authorized one.
ssh-keygen -q -t ed25519 -N '' -f "$W/key"
ssh-keygen -q -t ed25519 -N '' -f "$W/hostkey"
cp "$W/key.pub" "$W/authorized_keys"
cat > "$W/sshd_config" << EOF
Port 2222
ListenAddress 10.77.0.2
HostKey $W/hostkey
AuthorizedKeysFile $W/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
StrictModes no
UsePAM no
PidFile $W/sshd.pid
EOF
mkdir -p /run/sshd
ip netns exec "$NS" unshare --uts sh -c \
  "hostname gpipe-host2 && exec /usr/sbin/sshd -f $W/sshd_config -E $W/sshd.log"
AGENT="ssh -i $W/key -p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
for _ in $(seq 50); do
  $AGENT root@10.77.0.2 true 2> /dev/null && break
  sleep 0.2
done
remote=$($AGENT root@10.77.0.2 hostname) || fail "cannot ssh to the second host (sshd log: $(cat "$W/sshd.log"))"
[[ $remote == gpipe-host2 ]] || fail "the second host calls itself '$remote', not gpipe-host2"
[[ $(hostname) != gpipe-host2 ]] || fail "this host is gpipe-host2 too"
echo "second host: $remote at 10.77.0.2 (ssh port 2222)"

"$BIN/gpipe-compile" "$EX/mlp.onnx" -o "$W/out" --stages 2 --microbatches 4 > /dev/null 2> "$W/compile.log"
"$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 50 --weights-out "$W/one" -q
# Data parallel: two replicas of one stage (ranks 0 and 1), on one host here.
"$BIN/gpipe-compile" "$EX/mlp.onnx" -o "$W/dp" --stages 1 --microbatches 4 --data-parallel 2 > /dev/null 2>> "$W/compile.log"
"$BIN/gpipe-run" "$W/dp" --data "$EX/data" --steps 50 --weights-out "$W/dp-one" -q
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' > "$W/hosts"
export OMPI_MCA_plm_rsh_agent="$AGENT"
export OMPI_MCA_btl=tcp,self
export OMPI_MCA_btl_tcp_if_include=10.77.0.0/24
export OMPI_MCA_oob_tcp_if_include=10.77.0.0/24
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
logins=$(grep -c "Accepted publickey" "$W/sshd.log" || true)
"$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 50 --weights-out "$W/two" \
  --hostfile "$W/hosts" -q --mpirun-arg=--display-map > "$W/two.out" 2> "$W/two.err" ||
  fail "the two-host run failed: $(tail -5 "$W/two.err")"
after=$(grep -c "Accepted publickey" "$W/sshd.log" || true)
(( after > logins )) || fail "no ssh login to the second host during the two-host run"
# Open MPI's map: rank 1 (stage 1) on the second host.
grep -A1 "Data for node: 10.77.0.2" "$W/two.out" | grep -q "Process rank: 1 " ||
  fail "stage 1 was not mapped to the second host: $(cat "$W/two.out" "$W/two.err" | head -40)"
echo "two-host run: stage 1 mapped to 10.77.0.2; Open MPI logged in there $((after - logins)) time(s)"

same_weights "$W/one" "$W/two" "between one host and two"
echo "K = 2 across two hosts: $weight_files weight files equal to the one-host run bit for bit (50 steps)"

# D = 2 across the hosts: replica 1 on the second host, the gradients averaged
# over TCP; the same bits as on one host (the sum's order is fixed).
"$BIN/gpipe-run" "$W/dp" --data "$EX/data" --steps 50 --weights-out "$W/dp-two" \
  --hostfile "$W/hosts" -q --mpirun-arg=--display-map > "$W/dp-two.out" 2> "$W/dp-two.err" ||
  fail "the two-host data-parallel run failed: $(tail -5 "$W/dp-two.err")"
grep -A1 "Data for node: 10.77.0.2" "$W/dp-two.out" | grep -q "Process rank: 1 " ||
  fail "replica 1 was not mapped to the second host: $(cat "$W/dp-two.out" "$W/dp-two.err" | head -40)"
same_weights "$W/dp-one" "$W/dp-two" "between D = 2 on one host and across two"
echo "D = 2 across two hosts: $weight_files weight files equal to the one-host run bit for bit (50 steps)"

# Without the agent, Open MPI's ssh reaches port 22, where nothing listens:
# gpipe-run says in one line which host it could not reach and what to check.
unset OMPI_MCA_plm_rsh_agent
if "$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 2 --hostfile "$W/hosts" -q \
  > "$W/noagent.out" 2> "$W/noagent.err"; then
  fail "the run without a working agent succeeded"
fi
grep -q "gpipe-run: error: Open MPI could not start its daemon on host 10.77.0.2" "$W/noagent.err" ||
  fail "no one-line message about the unreachable host: $(cat "$W/noagent.err")"
! grep -q "ORTE was unable to reliably start" "$W/noagent.err" ||
  fail "Open MPI's banner was not replaced: $(cat "$W/noagent.err")"
echo "unreachable host: $(grep "gpipe-run: error: Open MPI could not start" "$W/noagent.err")"
# GPIPE_RUN_VERBOSE=1 prints Open MPI's banner too.
if GPIPE_RUN_VERBOSE=1 "$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 2 --hostfile "$W/hosts" -q \
  > /dev/null 2> "$W/noagent-verbose.err"; then
  fail "the verbose run without a working agent succeeded"
fi
grep -q "ORTE was unable to reliably start" "$W/noagent-verbose.err" &&
  grep -q "gpipe-run: error: Open MPI could not start its daemon on host 10.77.0.2" "$W/noagent-verbose.err" ||
  fail "GPIPE_RUN_VERBOSE=1 did not print the banner and the line: $(cat "$W/noagent-verbose.err")"

# A stage killed on the second host: gpipe-run names it and its host (from
# the stage's heartbeat) within 10 s.
export OMPI_MCA_plm_rsh_agent="$AGENT"
"$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 1000000 --hostfile "$W/hosts" -q \
  > "$W/kill.out" 2> "$W/kill.err" &
run=$!
for _ in $(seq 100); do
  pgrep -f "^$W/out/stage1 " > /dev/null && break
  sleep 0.1
done
victim=$(pgrep -f "^$W/out/stage1 " | head -1) || fail "stage 1 did not start"
sleep 1 # its first heartbeat
t0=$(date +%s%N)
kill -9 "$victim"
rc=0
wait "$run" || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
(( rc != 0 )) || fail "gpipe-run exited 0 after stage 1 was killed"
(( ms < 10000 )) || fail "gpipe-run took $ms ms to report the killed stage"
grep -q "stage 1 (.*) was killed by signal 9 (Killed); host gpipe-host2" "$W/kill.err" ||
  fail "the killed stage and its host are not named: $(cat "$W/kill.err")"
! grep -q "unexpectedly disconnected" "$W/kill.err" ||
  fail "Open MPI's teardown banner was not held back: $(cat "$W/kill.err")"
echo "killed stage: $(grep "was killed by" "$W/kill.err") (after $ms ms)"
echo "PASS"
