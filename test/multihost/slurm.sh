#!/usr/bin/env bash
# A local Slurm (munge, slurmctld and slurmd on this machine, one node): inside
# an allocation `gpipe-run OUT` leaves the launcher to Open MPI, whose mpirun
# takes the allocation's slots (one more than the machine's cores),
# and trains the weights of the run outside Slurm, bit for bit.
#
# usage: slurm.sh BIN_DIR EXAMPLES_DIR WORKDIR
# Exit 77 (ctest: skipped) with the reason when it cannot set up: not root,
# no slurmctld / slurmd / munged (apt-get install slurm-wlm munge).
set -euo pipefail
BIN=$1 EX=$2 W=$3
source "$(dirname "$0")/lib.sh"
[[ $(id -u) -eq 0 ]] || skip "slurmd runs as root here"
for p in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged; do
  [[ -x $p ]] || skip "no $p (apt-get install slurm-wlm munge)"
done
command -v salloc > /dev/null || skip "no salloc"
[[ -r /etc/munge/munge.key ]] || skip "no /etc/munge/munge.key"

rm -rf "$W" && mkdir -p "$W/state" "$W/spool"
H=$(hostname)
SLOTS=$(($(nproc) + 1)) # more than the cores: only Slurm's allocation has that many
started_munge=0
cleanup() {
  for f in "$W/slurmd.pid" "$W/slurmctld.pid"; do
    [[ -f $f ]] && kill "$(cat "$f")" 2> /dev/null || true
  done
  # slurmctld's helper (slurmscriptd) and any daemon the pid files missed.
  pkill -f "slurm[a-z]* -f $W/slurm.conf" 2> /dev/null || true
  pkill -x slurmscriptd 2> /dev/null || true
  if [[ $started_munge -eq 1 ]]; then pkill -x munged 2> /dev/null || true; fi
}
trap cleanup EXIT
if ! munge -n 2> /dev/null | unmunge > /dev/null 2>&1; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2> /dev/null || true
  su -s /bin/sh munge -c /usr/sbin/munged 2> "$W/munged.err" ||
    /usr/sbin/munged --force 2>> "$W/munged.err" ||
    skip "cannot start munged: $(cat "$W/munged.err")"
  started_munge=1
  sleep 0.5
fi
cat > "$W/slurm.conf" << EOF
ClusterName=gpipetest
SlurmctldHost=$H
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldPort=16817
SlurmdPort=16818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
NodeName=$H CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$W/slurm.conf
/usr/sbin/slurmctld -f "$SLURM_CONF" 2> "$W/slurmctld.err" || skip "cannot start slurmctld: $(cat "$W/slurmctld.err")"
/usr/sbin/slurmd -f "$SLURM_CONF" 2> "$W/slurmd.err" || skip "cannot start slurmd: $(cat "$W/slurmd.err")"
for _ in $(seq 50); do
  sinfo -h -o %t 2> /dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %t 2> /dev/null | grep -q idle || skip "the local Slurm node did not come up: $(tail -3 "$W/slurmd.log" 2> /dev/null)"

"$BIN/gpipe-compile" "$EX/mlp.onnx" -o "$W/out" --stages 2 --microbatches 4 > /dev/null 2> "$W/compile.log"
env -u SLURM_CONF "$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 30 --weights-out "$W/plain" -q
timeout 120 salloc -n "$SLOTS" --overcommit "$BIN/gpipe-run" "$W/out" --data "$EX/data" --steps 30 \
  --weights-out "$W/slurm" -q --mpirun-arg=--display-allocation > "$W/slurm.out" 2> "$W/slurm.err" ||
  fail "the run inside the allocation failed: $(tail -5 "$W/slurm.err")"
# mpirun's allocation is Slurm's: $SLOTS slots on this node.
grep -A1 "ALLOCATED NODES" "$W/slurm.out" | grep -q "$H: .*slots=$SLOTS " ||
  fail "mpirun did not take Slurm's allocation: $(cat "$W/slurm.out" | head -20)"
same_weights "$W/plain" "$W/slurm" "inside Slurm"
echo "PASS: inside a Slurm allocation ($SLOTS slots on $H) the 2-stage pipeline trained $weight_files weight files equal to the run outside, bit for bit"
