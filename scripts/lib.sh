# Shared by the scripts in this folder: set-up a fresh Debian machine needs.
# Source it; it changes nothing until a function is called.

# ensure_go puts the Go toolchain on PATH and checks it is at least the
# version go.mod's go line names: an older one would otherwise try to fetch
# a toolchain, or fail with errors that do not say why.
ensure_go() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH=$PATH:/usr/local/go/bin
  fi
  local want have
  want=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' go.mod)
  if ! command -v go >/dev/null 2>&1; then
    echo "ztfs needs Go $want or later (go.mod); there is none on PATH or in /usr/local/go/bin: install it from https://go.dev/dl/ into /usr/local/go" >&2
    exit 1
  fi
  have=$(GOTOOLCHAIN=local go env GOVERSION)
  have=${have#go}
  if [ -n "$want" ] && [ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -1)" != "$want" ]; then
    echo "ztfs needs Go $want or later (go.mod); this is go$have ($(command -v go)): install it from https://go.dev/dl/ into /usr/local/go" >&2
    exit 1
  fi
}

# ensure_packages installs the Debian packages given, if any is missing:
# fuse3 (fusermount3), jq, python3-numpy (NumPy for /usr/bin/python3),
# python3-cbor2, python3-xxhash and python3-zstandard (the independent
# zTensor v2 writer in testdata/ztensor/v2_interop), libaec-tools (libaec's
# aec, the szip reference the tests compare with), gcc (cgo, which the race
# detector needs), procps (pgrep: scripts/bench.sh and a lifecycle test find
# the mount's server with it), attr (getfattr, for the extended-attribute
# tests).
ensure_packages() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "Installing ${missing[*]} ..." >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# ensure_versitygw installs versitygw, the S3 server (POSIX backend) the
# s3:// source's tests start on 127.0.0.1, into $(go env GOPATH)/bin, where
# the tests look for it, unless it is on PATH or there already.
versitygw_version=v1.8.0
ensure_versitygw() {
  command -v versitygw >/dev/null 2>&1 && return 0
  local bin
  bin=$(go env GOPATH | cut -d: -f1)/bin
  [ -x "$bin/versitygw" ] && return 0
  echo "Installing versitygw $versitygw_version ..." >&2
  (cd / && GOFLAGS= go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version")
}

# python_with_numpy prints a python3 that imports numpy: Debian's first.
python_with_numpy() {
  for py in /usr/bin/python3 python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import numpy' 2>/dev/null; then
      command -v "$py"
      return 0
    fi
  done
  echo "no python3 with numpy (Debian package python3-numpy)" >&2
  return 1
}
