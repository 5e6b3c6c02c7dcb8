#!/usr/bin/env bash
# Builds ONNX's C++ library (libonnx.a, libonnx_proto.a, headers, CMake
# package) from its source release on PyPI, against Debian's protobuf, into
# PREFIX (default /opt/gpipe-deps/onnx-VERSION). Debian 12's libonnx-dev is
# ONNX 1.12: opsets up to 17 and IR up to 8, while today's PyTorch exporters
# write opset 20 and IR 10. Run by tools/install-deps.sh; does nothing when
# PREFIX holds a complete build. About 100 s on 2 cores, seconds with a warm
# ccache (the sources are unpacked into a fresh temporary directory each time;
# CCACHE_BASEDIR makes their paths relative, so the cache still matches).
#
#   bash tools/build-onnx.sh [PREFIX]
set -euo pipefail
VERSION=1.19.1
SHA256=737524d6eb3907d3499ea459c6f01c5a96278bb3a0f2ff8ae04786fb5d7f1ed5
PREFIX=${1:-/opt/gpipe-deps/onnx-$VERSION}
stamp=$PREFIX/.gpipe-onnx-$VERSION
if [[ -f $stamp ]]; then
  echo "build-onnx: ONNX $VERSION is in $PREFIX"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build-onnx: ONNX $VERSION from PyPI into $PREFIX"
# pip is PyPI's client; --no-build-isolation: only the archive is wanted.
/usr/bin/python3 -m pip download --quiet --no-deps --no-binary :all: \
  --no-build-isolation "onnx==$VERSION" -d "$work"
echo "$SHA256  $work/onnx-$VERSION.tar.gz" | sha256sum --check --quiet
tar -xzf "$work/onnx-$VERSION.tar.gz" -C "$work"
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR=$work CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# ONNX_NAMESPACE=onnx and ONNX_ML=1: the same as Debian's (and what
# gpipe-compile's sources name); PIC: it is linked into the tools.
cmake -S "$work/onnx-$VERSION" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DONNX_BUILD_PYTHON=OFF -DONNX_BUILD_TESTS=OFF -DONNX_USE_PROTOBUF_SHARED_LIBS=ON \
  -DONNX_ML=1 -DONNX_NAMESPACE=onnx -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DCMAKE_INSTALL_PREFIX="$PREFIX.partial" "${launcher[@]}" > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }
rm -rf "$PREFIX.partial"
cmake --install "$work/build" > /dev/null
touch "$PREFIX.partial/.gpipe-onnx-$VERSION"
rm -rf "$PREFIX"
mv "$PREFIX.partial" "$PREFIX"
echo "build-onnx: done"
