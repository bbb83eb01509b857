#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp sources vendored in the pinned
# llama-cpp-python sdist (the version in constraints.txt), so the server runs the same llama.cpp
# as specmoe's llamacpp backend and the `llama-speculative` of docs/llamacpp.md.
#
# Usage: scripts/build_llama_server.sh [WORK_DIR]      (default WORK_DIR: /tmp/llama-server)
#   JOBS=N   parallel compile jobs (default: every core; the build is CPU-bound for 30+ minutes
#            on one core, so pass JOBS=1 on a machine that is measuring something else)
#   PIP=...  the pip to download the sdist with (default: pip)
# Prints the binary's path last: WORK_DIR/build/bin/llama-server.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/llama-server}
jobs=${JOBS:-$(nproc)}
pip=${PIP:-pip}

version=$(sed -n 's/^llama-cpp-python==\([0-9][0-9.]*\)$/\1/p' "$repo/constraints.txt")
if [[ -z "$version" ]]; then
    echo "build_llama_server: no 'llama-cpp-python==X.Y.Z' line in $repo/constraints.txt" >&2
    exit 2
fi

sdist="$work/sdist/llama_cpp_python-$version.tar.gz"
src="$work/sdist/llama_cpp_python-$version/vendor/llama.cpp"
if [[ ! -f "$sdist" ]]; then
    "$pip" download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d "$work/sdist"
fi
if [[ ! -d "$src" ]]; then
    tar xzf "$sdist" -C "$work/sdist"
fi

# The flags of docs/llamacpp.md's llama-speculative build, plus the server: tools must be on for
# tools/server to be configured. The web UI is neither built (npm) nor fetched (its prebuilt
# assets come from a Hugging Face bucket): benchmarks only use the HTTP API.
cmake -S "$src" -B "$work/build" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
cmake --build "$work/build" --target llama-server -j "$jobs"

echo "$work/build/bin/llama-server"
