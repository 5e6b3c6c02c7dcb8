#!/usr/bin/env bash
# Installs every build and test dependency of gpipe-compile on Debian 12 (root).
# clang-14, libclang-rt-14-dev (libFuzzer, sanitizers) and libomp-14-dev:
# the fuzz build (tools/fuzz.sh). python3-pip, python3-setuptools: fetch
# ONNX's source release for tools/build-onnx.sh. ccache: rebuilds from its cache (the
# build's compiles and the stage programs the tests compile). openssh-server:
# the sshd of the two-host test (test/multihost/two_hosts.sh); slurm-wlm and
# munge: the local Slurm of test/multihost/slurm.sh (the tests start the
# daemons they need).
set -euo pipefail
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
PACKAGES=(
  build-essential cmake ninja-build lld ccache git ca-certificates
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libprotobuf-dev protobuf-compiler python3-pip python3-setuptools
  libboost-program-options-dev nlohmann-json3-dev libopenmpi-dev openmpi-bin
  libdnnl-dev libopenblas-dev libopenblas0-pthread libgtest-dev
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
  clang-14 libclang-rt-14-dev libomp-14-dev
  openssh-server slurm-wlm munge)
# Every package already installed (a machine that ran this before): no apt.
missing=0
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing=1; break
  fi
done
if [[ $missing -eq 0 ]]; then
  echo "install-deps: every package is installed"
else
  $SUDO apt-get update -qq
  # openssh-server, slurm-wlm and munge are for the multi-host tests, which
  # start their own daemons: keep apt from starting the system's.
  policy=/usr/sbin/policy-rc.d
  added_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" > /dev/null
    $SUDO chmod +x "$policy"
    added_policy=1
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" > /dev/null
  if [[ $added_policy -eq 1 ]]; then $SUDO rm -f "$policy"; fi
fi
# ONNX 1.19's C++ library, built from source once (Debian's is 1.12).
$SUDO bash "$(dirname "$0")/build-onnx.sh"
