#!/usr/bin/env bash
# Builds ztfs and installs it with what the system needs to use it like any
# mount program: the binary, the mount(8) helper link (so that
# `mount -t fuse.ztfs`, /etc/fstab and systemd mount units work), the man
# pages (generated from the command definitions), shell completion, and the
# documentation (README.md and docs/, which the man pages point at).
#
# Usage: scripts/install.sh
#   PREFIX=/usr/local  where bin/ztfs, share/man, the completions and
#                      share/doc/ztfs go (an absolute path)
#   SBIN               the folder of the helper link mount.fuse.ztfs. By
#                      default /sbin, where mount(8) looks, when PREFIX is
#                      /usr/local or /usr; for any other PREFIX, PREFIX/sbin
#                      (the script then says how to link it into /sbin).
#                      A SBIN given must exist.
#   DESTDIR            a staging folder everything is written under, for
#                      packaging: DESTDIR=/tmp/pkg PREFIX=/usr writes
#                      /tmp/pkg/usr/bin/ztfs and /tmp/pkg/sbin/mount.fuse.ztfs,
#                      a link to /usr/bin/ztfs
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

prefix=${PREFIX:-/usr/local}
case $prefix in
  /*) ;;
  *) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
prefix=${prefix%/}
dest=${DESTDIR:-}
dest=${dest%/}
if [ -n "${SBIN:-}" ]; then
  sbin=${SBIN%/}
  if [ ! -d "$dest$sbin" ]; then
    echo "install.sh: the folder SBIN=$sbin${dest:+ (under DESTDIR=$dest)} does not exist" >&2
    exit 1
  fi
else
  case $prefix in
    /usr/local | /usr) sbin=/sbin ;;
    *) sbin=$prefix/sbin ;;
  esac
fi
bin=$prefix/bin
man1=$prefix/share/man/man1
docdir=$prefix/share/doc/ztfs

ensure_go
# mkdir reports a folder it cannot make with its own reason (permission, a
# file in the way).
mkdir -p "$dest$bin" "$dest$man1" "$dest$prefix/share/bash-completion/completions" \
  "$dest$prefix/share/zsh/site-functions" "$dest$prefix/share/fish/vendor_completions.d" "$dest$docdir"
go build -o "$dest$bin/ztfs" ./cmd/ztfs
"$dest$bin/ztfs" man --doc-dir "$docdir" "$dest$man1"
"$dest$bin/ztfs" completion bash >"$dest$prefix/share/bash-completion/completions/ztfs"
"$dest$bin/ztfs" completion zsh >"$dest$prefix/share/zsh/site-functions/_ztfs"
"$dest$bin/ztfs" completion fish >"$dest$prefix/share/fish/vendor_completions.d/ztfs.fish"
cp README.md "$dest$docdir/"
rm -rf "$dest$docdir/docs"
cp -R docs "$dest$docdir/docs"
echo "installed $dest$bin/ztfs, its man pages, completion and documentation ($dest$docdir)"

# The helper link names the binary where it will be, without DESTDIR.
if [ "$sbin" = "$prefix/sbin" ] || [ -n "$dest" ]; then
  mkdir -p "$dest$sbin"
fi
if [ ! -d "$dest$sbin" ]; then
  echo "no folder $dest$sbin: the mount helper link was not made; mount(8) looks in /sbin: ln -s $bin/ztfs /sbin/mount.fuse.ztfs"
elif [ ! -w "$dest$sbin" ]; then
  echo "$dest$sbin is not writable by $(id -un): the mount helper link was not made; as root: ln -s $bin/ztfs $sbin/mount.fuse.ztfs"
else
  ln -sfn "$bin/ztfs" "$dest$sbin/mount.fuse.ztfs"
  echo "installed the mount helper link $dest$sbin/mount.fuse.ztfs -> $bin/ztfs"
  if [ "$sbin" != /sbin ] && [ -z "$dest" ]; then
    echo "mount(8) looks for its helpers in /sbin: for mount -t fuse.ztfs and fstab, as root: ln -s $bin/ztfs /sbin/mount.fuse.ztfs"
  fi
fi
