#!/usr/bin/env bash
# Whole-mount figures, each a ratio against a baseline measured in the same
# run on the same machine (absolute numbers on a shared machine are noise).
#
#   1. a raw component read through the mount (1 MiB reads), first and second
#      time, against dd of the same byte range of the source file;
#   2. a zstd component read through the mount against decoding the same
#      stream in-process with the same library on one core;
#   3. the time to mount a file of 10,000 tensors;
#   4. the server's peak RSS while reading a zstd component several times
#      larger than the cache, against the cache size;
#   5. a Tensogram float64 field (TGM_SIZE, default 256MiB) coded with zstd,
#      lz4, simple_packing 16 bits and simple_packing + szip, read through
#      the mount, against decoding the same payload in-process on one core
#      (whole-buffer decodes with the fastest library at hand).
#
# Usage: scripts/bench.sh           SIZE=1GiB sets the component size, TGM_SIZE=256MiB the field,
#                                   WORK=dir where the files go (default /var/tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go
ensure_packages fuse3

size=${SIZE:-1GiB}
work=${WORK:-$(mktemp -d /var/tmp/ztfs-bench.XXXXXX)}
mkdir -p "$work/mnt" bin
mnt=$work/mnt
cleanup() {
  if grep -qs " $mnt fuse.ztfs " /proc/self/mounts; then bin/ztfs unmount -z "$mnt" >/dev/null 2>&1 || true; fi
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT

go build -o bin/ztfs ./cmd/ztfs
go build -o bin/ztgen ./scripts/ztgen
echo "writing test files ($size) in $work ..." >&2
bin/ztgen raw "$work/raw.zt" "$size"
bin/ztgen zstd "$work/zstd.zt" "$size"
bin/ztgen many "$work/many.zt" 10000
bytes=$(bin/ztfs inspect --json "$work/raw.zt" | jq '.tensors.big.components.data.size')
offset=$(bin/ztfs inspect --json "$work/raw.zt" | jq '.tensors.big.components.data.stored.offset')
stored=$(bin/ztfs inspect --json "$work/zstd.zt" | jq '.tensors.big.components.data.stored.length')

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / s / 1048576 }'; }
server_pid() { pgrep -f "ztfs mount --ready-fd 3 .* $mnt\$" | head -1; }

rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s |' "$1" "$2" "$3" "$4")"); }

# 1. Raw component, sequential 1 MiB reads.
cat "$work/raw.zt" >/dev/null # the source in the page cache, as for the baseline
t=$(now); dd if="$work/raw.zt" of=/dev/null bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$bytes" status=none
direct=$(elapsed "$t")
bin/ztfs mount "$work/raw.zt" "$mnt"
t=$(now); dd if="$mnt/tensors/big/data" of=/dev/null bs=1M status=none; first=$(elapsed "$t")
t=$(now); dd if="$mnt/tensors/big/data" of=/dev/null bs=1M status=none; second=$(elapsed "$t")
bin/ztfs unmount "$mnt"
row "raw $size component, 1 MiB reads, first read" "dd of the same range of the source ($(mbps "$bytes" "$direct") MiB/s)" "$(mbps "$bytes" "$first") MiB/s" "$(ratio "$direct" "$first")x"
row "the same, second read (kernel page cache kept)" "the same" "$(mbps "$bytes" "$second") MiB/s" "$(ratio "$direct" "$second")x"

# 2. zstd component, sequential, against the in-process decode.
cat "$work/zstd.zt" >/dev/null
read -r inproc _ < <(bin/ztgen decode "$work/zstd.zt" big)
bin/ztfs mount "$work/zstd.zt" "$mnt"
t=$(now); dd if="$mnt/tensors/big/data" of=/dev/null bs=1M status=none; zfirst=$(elapsed "$t")
bin/ztfs unmount "$mnt"
row "zstd $size component ($(ratio "$bytes" "$stored"):1), first read" "in-process decode, one core ($(mbps "$bytes" "$inproc") MiB/s)" "$(mbps "$bytes" "$zfirst") MiB/s" "$(ratio "$inproc" "$zfirst")x"

# 3. Mount time of 10,000 tensors: median of three, until the mount serves.
times=()
for i in 1 2 3; do
  t=$(now); bin/ztfs mount "$work/many.zt" "$mnt"; times+=("$(elapsed "$t")")
  ls "$mnt/tensors" | wc -l | grep -qx 10000 || { echo "FAIL: mount of many.zt does not list 10000 tensors" >&2; exit 1; }
  bin/ztfs unmount "$mnt"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
row "mount of a 10,000-tensor file, until it serves" "target < 1 s" "${median} s" "-"

# 4. Peak RSS while reading a zstd component several times the cache size.
cache=64
bin/ztfs mount --cache-size "${cache}MiB" "$work/zstd.zt" "$mnt"
pid=$(server_pid)
for i in 1 2; do cat "$mnt/tensors/big/data" >/dev/null; done
hwm=$(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
bin/ztfs unmount "$mnt"
row "server peak RSS reading the $size zstd component twice" "cache ${cache} MiB" "${hwm} MiB" "$(ratio "$hwm" "$cache")x the cache"

# 5. Tensogram codecs, sequential, against the in-process decode.
tgm_size=${TGM_SIZE:-256MiB}
for codec in zstd lz4 sp16 sp16-szip; do
  file=$work/field-$codec.tgm
  bin/ztgen tgm "$file" "$tgm_size" "$codec"
  cat "$file" >/dev/null
  read -r inproc decoded < <(bin/ztgen tgmdecode "$file")
  bin/ztfs mount "$file" "$mnt"
  t=$(now); dd if="$mnt/tensors/0/field/data" of=/dev/null bs=1M status=none; first=$(elapsed "$t")
  bin/ztfs unmount "$mnt"
  label=$(case $codec in zstd) echo zstd;; lz4) echo lz4;; sp16) echo "simple_packing 16-bit";; sp16-szip) echo "simple_packing 16-bit + szip";; esac)
  row "Tensogram $tgm_size float64 field, $label ($(ratio "$decoded" "$(stat -c %s "$file")"):1), first read" \
    "in-process decode, one core ($(mbps "$decoded" "$inproc") MiB/s)" "$(mbps "$decoded" "$first") MiB/s" "$(ratio "$inproc" "$first")x"
  rm -f "$file"
done

printf '\nztfs %s, %s, %d cores, %s\n\n' "$(bin/ztfs --version | cut -d' ' -f2)" "$(uname -r)" "$(nproc)" "$(date -u +%Y-%m-%d)"
echo "| workload | baseline | ztfs | ratio |"
echo "|---|---|---|---|"
printf '%s\n' "${rows[@]}"
