#!/usr/bin/env bash
# Builds ztfs and installs it with what the system needs to use it like any
# mount program: the binary, the mount(8) helper link (so that
# `mount -t fuse.ztfs`, /etc/fstab and systemd mount units work), the man
# pages (generated from the command definitions) and shell completion.
#
# Usage: scripts/install.sh            PREFIX=/usr/local (default);
#                                      SBIN=/sbin for the helper link (root only)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go
prefix=${PREFIX:-/usr/local}
sbin=${SBIN:-/sbin}
mkdir -p "$prefix/bin" "$prefix/share/man/man1" "$prefix/share/bash-completion/completions" \
  "$prefix/share/zsh/site-functions" "$prefix/share/fish/vendor_completions.d"
go build -o "$prefix/bin/ztfs" ./cmd/ztfs
"$prefix/bin/ztfs" man "$prefix/share/man/man1"
"$prefix/bin/ztfs" completion bash >"$prefix/share/bash-completion/completions/ztfs"
"$prefix/bin/ztfs" completion zsh >"$prefix/share/zsh/site-functions/_ztfs"
"$prefix/bin/ztfs" completion fish >"$prefix/share/fish/vendor_completions.d/ztfs.fish"
if [ -w "$sbin" ]; then
  ln -sf "$prefix/bin/ztfs" "$sbin/mount.fuse.ztfs"
  echo "installed $prefix/bin/ztfs, $sbin/mount.fuse.ztfs, man pages and completion"
else
  echo "installed $prefix/bin/ztfs, man pages and completion; as root, also: ln -s $prefix/bin/ztfs $sbin/mount.fuse.ztfs"
fi
