#!/usr/bin/env bash
# Whole-mount figures, each a ratio against a baseline measured in the same
# run on the same machine (absolute numbers on a shared machine are noise):
# the table of the performance targets, then the Tensogram codecs.
#
#   - a raw component read through the mount (1 MiB reads), first and second
#     time, against dd of the same byte range of the source file;
#   - numpy.load(mmap_mode="r") + sum over a raw tensor.npy, against the same
#     on a plain .npy file;
#   - zstd components (one frame; independent frames) against decoding the
#     same stream in-process on one core, and against the same data in a
#     squashfs image (mksquashfs -comp zstd) mounted by squashfuse, first and
#     second read;
#   - random 4 KiB reads across a RANDOM_SIZE zstd file with a 256 MiB cache,
#     against squashfuse;
#   - q4 and k4 dequantized tensor.npy against dd of a plain file of the
#     float32 output's size;
#   - two readers on two tensors against one reader;
#   - the time to mount a file of 100,000 tensors and the server's RSS;
#   - the server's peak RSS reading a zstd component larger than the cache;
#   - a Tensogram float64 field (TGM_SIZE) coded with zstd, lz4,
#     simple_packing 16 bits and simple_packing + szip, against decoding the
#     same payload in-process on one core.
#
#   - model folders: every tensor of a MODEL_SIZE bf16 safetensors checkpoint
#     folder (193 tensors, llama-shaped, 4 shards), memory-mapped and summed
#     as a loader does, through the mount's root files with and without FUSE
#     passthrough, against the same on the source folder; and the computed
#     model.safetensors of the same model as a zstd zTensor v2 file against
#     its tensor.npy files;
#   - GGUF: the tensor.npy of a Q4_0, Q8_0, Q4_K and Q6_K tensor (256 MiB of
#     float32 each) against a memory copy of the same size.
#   - remote: the first read of a REMOTE_SIZE raw component and of a zstd one
#     through a mount of an http:// URL (nginx on 127.0.0.1), against curl
#     of the same object; the raw one also with --remote-requests 1. The
#     requests and bytes nginx sends for a mount (and a stat of its root) of
#     one file per format. The same first reads again with REMOTE_DELAY
#     milliseconds added each way (twice that to the round trip): nginx in a
#     network namespace of the script's, reached over a veth pair with netem
#     on both ends, or, where the kernel has no netem, over a pair of TUN
#     devices joined by scripts/delayline.
#   - warm: ztfs warm --jobs N of a WARM_SIZE object over the same link with
#     REMOTE_DELAY ms added each way, into an empty cache directory, against
#     N parallel curl range streams of the object (one Nth each), for N = 1
#     and WARM_JOBS (4 8).
#
# Remote sources are read with --no-cache-dir, but by warm (which fills
# $ZTFS_CACHE_DIR's own directory in WORK): the rows measure the network.
#
# Usage: scripts/bench.sh   SIZE=1GiB component size, RANDOM_SIZE=4GiB, TGM_SIZE=256MiB,
#                           MODEL_SCALE=20 (about 600 MiB), REMOTE_SIZE=512MiB,
#                           REMOTE_DELAY=5 (ms each way: a 10 ms round trip),
#                           WARM_SIZE=512MiB, WARM_JOBS="4 8",
#                           SECTIONS="core folders gguf remote warm",
#                           WORK=dir where the files go (default /var/tmp), KEEP=1 keeps them
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_go
ensure_packages fuse3 jq python3-numpy squashfs-tools squashfuse procps libaec-tools
python=$(python_with_numpy)

size=${SIZE:-1GiB}
random_size=${RANDOM_SIZE:-4GiB}
tgm_size=${TGM_SIZE:-256MiB}
work=${WORK:-$(mktemp -d /var/tmp/ztfs-bench.XXXXXX)}
mkdir -p "$work/mnt" "$work/sqmnt" "$work/sq" bin
mnt=$work/mnt
sqmnt=$work/sqmnt
cleanup() {
  if grep -qs " $mnt fuse.ztfs " /proc/self/mounts; then bin/ztfs unmount -z "$mnt" >/dev/null 2>&1 || true; fi
  if grep -qs " $sqmnt " /proc/self/mounts; then fusermount3 -uz "$sqmnt" >/dev/null 2>&1 || umount -l "$sqmnt" || true; fi
  if [ -n "${nginx_pid:-}" ]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi
  latency_down
  [ -n "${KEEP:-}" ] || rm -rf "$work"
}
# latency_down stops what latency_up started: the namespace's nginx, the
# delay line (its TUN devices go with it), the veth pair, the namespace.
latency_down() {
  if [ -n "${ns_nginx_pid:-}" ]; then kill "$ns_nginx_pid" 2>/dev/null || true; wait "$ns_nginx_pid" 2>/dev/null || true; ns_nginx_pid=; fi
  if [ -n "${delay_pid:-}" ]; then kill "$delay_pid" 2>/dev/null || true; wait "$delay_pid" 2>/dev/null || true; delay_pid=; fi
  if [ -n "${lat_ns:-}" ]; then
    ip link del "$lat_a" 2>/dev/null || true
    ip netns del "$lat_ns" 2>/dev/null || true
    lat_ns=
  fi
}
trap cleanup EXIT
# An interrupt or a kill ends the script through the EXIT trap's cleanup.
trap 'exit 130' INT
trap 'exit 143' TERM

sections=${SECTIONS:-core folders gguf remote warm}
want() { [[ " $sections " == *" $1 "* ]]; }
go build -o bin/ztfs ./cmd/ztfs
go build -o bin/ztgen ./scripts/ztgen
go build -o bin/fuseceiling ./scripts/fuseceiling
{ want remote || want warm; } && go build -o bin/delayline ./scripts/delayline
# Blocks of remote sources never go to the machine's cache directory.
export ZTFS_CACHE_DIR=$work/cache
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.0f", n / s / 1048576 }'; }
server_pid() { pgrep -f "ztfs mount --ready-fd 3 .* $mnt\$" | head -1; }
# settle writes dirty pages back before a measurement: the files written
# just before (test files, copies for squashfs) would otherwise be written
# back during it, taking a core (one run measured a single-frame read at
# 0.64x rather than 0.93x of the in-process decode).
settle() { sync; }
read_time() { local t; settle; t=$(now); dd if="$1" of=/dev/null bs=1M status=none; elapsed "$t"; }
rows=()
# row WORKLOAD BASELINE ZTFS RATIO TARGET: one line of the table, with the
# peak RSS of the last ztfs server stopped by unmount_ztfs (reset here).
row() { rows+=("$(printf '| %s | %s | %s | %s | %s | %s |' "$1" "$2" "$3" "$4" "$5" "${last_rss:--}")"); last_rss=; }
last_rss=
# bdi_of MNT prints the backing device of a mount, as sysfs names it.
bdi_of() { local d; d=$(stat -c %d "$1"); echo "$((d >> 8 & 0xfff)):$((d & 0xff | (d >> 12 & 0xfff00)))"; }
read_ahead_kb() { cat "/sys/class/bdi/$(bdi_of "$1")/read_ahead_kb" 2>/dev/null || echo "?"; }
# set_read_ahead MNT KB gives another FUSE mount ztfs's read-ahead (root only).
set_read_ahead() { echo "$2" >"/sys/class/bdi/$(bdi_of "$1")/read_ahead_kb" 2>/dev/null || true; }
ztfs_ra=? sq_ra=? ceiling_ra=?
# mount_copy BYTES prints the time of a first read of a raw component of
# BYTES through a mount: the copy the dequantized rows are measured against.
mount_copy() {
  local t
  bin/ztgen raw "$work/copy.zt" "$1"
  cat "$work/copy.zt" >/dev/null
  bin/ztfs mount "$work/copy.zt" "$mnt"
  t=$(read_time "$mnt/tensors/big/data")
  bin/ztfs unmount "$mnt"
  rm -f "$work/copy.zt"
  echo "$t"
}
# unmount_ztfs records the server's peak RSS (last_rss) and unmounts.
unmount_ztfs() {
  local pid
  pid=$(server_pid)
  [ -n "$pid" ] && last_rss="$(awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' "/proc/$pid/status")"
  ztfs_ra=$(read_ahead_kb "$mnt")
  bin/ztfs unmount "$mnt"
}
sq_mount() { squashfuse "$1" "$sqmnt"; set_read_ahead "$sqmnt" "$ztfs_ra"; sq_ra=$(read_ahead_kb "$sqmnt"); }

# nginx_conf DIR LISTEN [ROOT] writes DIR/nginx.conf: nginx serving ROOT ($www) on
# LISTEN, with no access log but for /fmt/, whose requests go to
# DIR/access.log, one line each: method, status, bytes sent (headers
# included), Range header, URI.
nginx_conf() {
  cat >"$1/nginx.conf" <<CONF
daemon off;
master_process off;
pid $1/nginx.pid;
error_log $1/error.log;
events { worker_connections 256; }
http {
  access_log off;
  log_format costs '\$request_method \$status \$bytes_sent "\$http_range" \$uri';
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  default_type application/octet-stream;
  types { }
  sendfile on;
  keepalive_requests 100000;
  server {
    listen $2;
    root ${3:-$www};
    location / { }
    location /fmt/ { access_log $1/access.log costs; }
  }
}
CONF
}

# latency_up ROOT FILE: nginx serving ROOT in a network namespace of the
# script's, reached from this one at $lbase over a link with REMOTE_DELAY ms
# added each way (twice that to the round trip): netem (delay, limit 100000
# packets) on both ends of a veth pair, or, where the kernel has no netem
# (CONFIG_NET_SCH_NETEM unset), a pair of TUN devices joined by
# scripts/delayline, which holds each packet as long, in either direction,
# with a queue of as many packets. MTU 1500 either way, with TCP
# segmentation offload as veth has; Linux's default TCP buffers. It waits
# until FILE is served, measures the round trip TCP sees (the fastest of
# five connects) and sets lat_label. latency_down undoes it.
latency_up() {
  lat_delay=${REMOTE_DELAY:-5}
  lat_ns=ztfs-bench-$$
  lat_a=ztb$$a
  lat_b=ztb$$b
  lat_net=10.200.$(($$ % 256))
  ip netns add "$lat_ns"
  ip netns exec "$lat_ns" ip link set lo up
  if ip link add "$lat_a" type veth peer name "$lat_b" netns "$lat_ns" 2>/dev/null &&
    tc qdisc add dev "$lat_a" root netem delay "${lat_delay}ms" limit 100000 2>/dev/null &&
    ip netns exec "$lat_ns" tc qdisc add dev "$lat_b" root netem delay "${lat_delay}ms" limit 100000 2>/dev/null; then
    lat_how="netem on both ends of a veth pair"
  else
    ip link del "$lat_a" 2>/dev/null || true
    bin/delayline -delay "${lat_delay}ms" -limit 100000 -netns "$lat_ns" "$lat_a" "$lat_b" &
    delay_pid=$!
    for i in $(seq 50); do ip netns exec "$lat_ns" ip link show "$lat_b" >/dev/null 2>&1 && break; sleep 0.1; done
    lat_how="scripts/delayline between two TUN devices: this kernel has no netem"
  fi
  ip link set "$lat_a" mtu 1500 txqueuelen 10000 up
  ip addr add "$lat_net.1/30" dev "$lat_a"
  ip netns exec "$lat_ns" ip link set "$lat_b" mtu 1500 txqueuelen 10000 up
  ip netns exec "$lat_ns" ip addr add "$lat_net.2/30" dev "$lat_b"
  mkdir -p "$work/nginx-ns"
  nginx_conf "$work/nginx-ns" "$lat_net.2:8080" "$1"
  ip netns exec "$lat_ns" /usr/sbin/nginx -p "$work/nginx-ns" -c "$work/nginx-ns/nginx.conf" -e "$work/nginx-ns/error.log" &
  ns_nginx_pid=$!
  lbase=http://$lat_net.2:8080
  for i in $(seq 50); do curl -sf -o /dev/null -r 0-0 "$lbase/$2" && break; sleep 0.1; done
  # The round trip as TCP sees it: the fastest of five connects.
  rtt=$(for i in 1 2 3 4 5; do curl -sf -o /dev/null -r 0-0 -w '%{time_connect}\n' "$lbase/$2"; done | sort -n | head -1 | awk '{ printf "%.1f", $1 * 1000 }')
  lat_label="$((2 * lat_delay)) ms round trip added ($lat_delay ms each way, $lat_how; TCP connect ${rtt} ms)"
}

if want core; then
echo "writing test files in $work ..." >&2
bin/ztgen raw "$work/raw.zt" "$size"
bin/ztgen zstd "$work/zstd.zt" "$size"
bin/ztgen zstd-frames "$work/frames.zt" "$size"
bin/ztgen many "$work/many.zt" 100000
bytes=$(bin/ztfs inspect --json "$work/raw.zt" | jq '.tensors.big.components.data.size')
offset=$(bin/ztfs inspect --json "$work/raw.zt" | jq '.tensors.big.components.data.stored.offset')
stored=$(bin/ztfs inspect --json "$work/zstd.zt" | jq '.tensors.big.components.data.stored.length')
fstored=$(bin/ztfs inspect --json "$work/frames.zt" | jq '.tensors.big.components.data.stored.length')

# sq_unmount unmounts squashfuse, waiting out a moment of "busy" right after
# a reader closed its file, then detaching lazily.
sq_unmount() {
  local i
  for i in 1 2 3 4 5 6 7 8 9 10; do fusermount3 -u "$sqmnt" 2>/dev/null && return 0; sleep 0.2; done
  fusermount3 -uz "$sqmnt"
}

# Raw component, sequential 1 MiB reads.
cat "$work/raw.zt" >/dev/null # the source in the page cache, as for the baseline
settle; t=$(now); dd if="$work/raw.zt" of=/dev/null bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$bytes" status=none
direct=$(elapsed "$t")
bin/ztfs mount "$work/raw.zt" "$mnt"
first=$(read_time "$mnt/tensors/big/data")
second=$(read_time "$mnt/tensors/big/data")
cp "$mnt/tensors/big/data" "$work/sq/big.bin" # the same data for squashfs below
npy_plain=$work/plain.npy
cp "$mnt/tensors/big/tensor.npy" "$npy_plain"
unmount_ztfs
row "raw $size component, 1 MiB reads, first read" "dd of the same range of the source ($(mbps "$bytes" "$direct") MiB/s)" "$(mbps "$bytes" "$first") MiB/s" "$(ratio "$direct" "$first")x" ">= 0.6x"
row "the same, second read" "the same" "$(mbps "$bytes" "$second") MiB/s" "$(ratio "$direct" "$second")x" ">= 0.8x"
# The FUSE ceiling: a minimal go-fuse server of the same byte range, with
# the same mount options and read-ahead (scripts/fuseceiling).
bin/fuseceiling -read-ahead $((ztfs_ra * 1024)) "$work/raw.zt" "$offset" "$bytes" "$sqmnt" &
ceiling_pid=$!
for i in $(seq 50); do [ -e "$sqmnt/data" ] && break; sleep 0.1; done
ceiling_ra=$(read_ahead_kb "$sqmnt")
cfirst=$(read_time "$sqmnt/data")
csecond=$(read_time "$sqmnt/data")
ceiling_rss=$(awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' "/proc/$ceiling_pid/status")
kill "$ceiling_pid"; wait "$ceiling_pid" || true
row "the FUSE ceiling (scripts/fuseceiling: splice or one pread, same mount options), first read" "dd of the same range of the source" "$(mbps "$bytes" "$cfirst") MiB/s" "$(ratio "$direct" "$cfirst")x" "-"
last_rss=$ceiling_rss
row "raw component, first read, ztfs against the FUSE ceiling" "the FUSE ceiling's first read ($(mbps "$bytes" "$cfirst") MiB/s)" "$(mbps "$bytes" "$first") MiB/s" "$(ratio "$cfirst" "$first")x" ">= 0.9x"
row "the same, second read" "the FUSE ceiling's second read ($(mbps "$bytes" "$csecond") MiB/s)" "$(mbps "$bytes" "$second") MiB/s" "$(ratio "$csecond" "$second")x" ">= 0.9x"

# numpy over a raw tensor.npy.
npsum='import sys, time, numpy as np
t = time.time(); a = np.load(sys.argv[1], mmap_mode="r"); s = float(a.sum(dtype=np.float64)); print(time.time() - t)'
cat "$npy_plain" >/dev/null
settle; plain=$("$python" -c "$npsum" "$npy_plain")
bin/ztfs mount "$work/raw.zt" "$mnt"
settle; viaztfs=$("$python" -c "$npsum" "$mnt/tensors/big/tensor.npy")
unmount_ztfs
rm -f "$npy_plain"
row "numpy.load(mmap_mode=\"r\") + sum, raw $size tensor.npy" "the same on a plain .npy ($(mbps "$bytes" "$plain") MiB/s)" "$(mbps "$bytes" "$viaztfs") MiB/s" "$(ratio "$plain" "$viaztfs")x" ">= 0.7x"

# zstd against the in-process decoder.
cat "$work/zstd.zt" "$work/frames.zt" >/dev/null
settle; read -r inproc _ < <(bin/ztgen decode "$work/zstd.zt" big)
settle; read -r finproc _ < <(bin/ztgen decode "$work/frames.zt" big)
bin/ztfs mount "$work/zstd.zt" "$mnt"
zfirst=$(read_time "$mnt/tensors/big/data")
zsecond=$(read_time "$mnt/tensors/big/data")
unmount_ztfs
bin/ztfs mount "$work/frames.zt" "$mnt"
ffirst=$(read_time "$mnt/tensors/big/data")
fsecond=$(read_time "$mnt/tensors/big/data")
unmount_ztfs
row "zstd $size component, one frame ($(ratio "$bytes" "$stored"):1), sequential" "in-process decode, one core ($(mbps "$bytes" "$inproc") MiB/s)" "$(mbps "$bytes" "$zfirst") MiB/s" "$(ratio "$inproc" "$zfirst")x" ">= 0.85x"
row "zstd $size component, independent frames ($(ratio "$bytes" "$fstored"):1)" "in-process decode, one core ($(mbps "$bytes" "$finproc") MiB/s)" "$(mbps "$bytes" "$ffirst") MiB/s" "$(ratio "$finproc" "$ffirst")x" ">= 1.6x"

# The same data in squashfs, mounted by squashfuse.
mksquashfs "$work/sq" "$work/sq.img" -comp zstd -noappend -quiet >/dev/null
cat "$work/sq.img" >/dev/null
sq_mount "$work/sq.img"
sqfirst=$(read_time "$sqmnt/big.bin")
sqsecond=$(read_time "$sqmnt/big.bin")
sq_unmount
row "zstd, one frame, mounted, first read" "squashfuse on the same data ($(mbps "$bytes" "$sqfirst") MiB/s)" "$(mbps "$bytes" "$zfirst") MiB/s" "$(ratio "$sqfirst" "$zfirst")x" ">= 1.0x"
row "zstd, independent frames, mounted, first read" "the same" "$(mbps "$bytes" "$ffirst") MiB/s" "$(ratio "$sqfirst" "$ffirst")x" ">= 1.5x"
row "zstd, independent frames, second read" "squashfuse's second read ($(mbps "$bytes" "$sqsecond") MiB/s)" "$(mbps "$bytes" "$fsecond") MiB/s" "$(ratio "$sqsecond" "$fsecond")x" ">= 1.0x"
rm -f "$work/sq.img" "$work/sq/big.bin" "$work/raw.zt"

# Random 4 KiB reads across a large zstd file, cache 256 MiB.
bin/ztgen zstd-frames "$work/random.zt" "$random_size"
bin/ztfs mount --cache-size 256MiB "$work/random.zt" "$mnt"
cp "$mnt/tensors/big/data" "$work/sq/random.bin"
unmount_ztfs
mksquashfs "$work/sq" "$work/random.img" -comp zstd -noappend -quiet >/dev/null
rm -f "$work/sq/random.bin"
cat "$work/random.zt" "$work/random.img" >/dev/null
reads=${RANDOM_READS:-3000}
sq_mount "$work/random.img"
settle; read -r sqrand _ < <(bin/ztgen randread "$sqmnt/random.bin" "$reads" 1)
sq_unmount
bin/ztfs mount --cache-size 256MiB "$work/random.zt" "$mnt"
settle; read -r zrand _ < <(bin/ztgen randread "$mnt/tensors/big/data" "$reads" 1)
unmount_ztfs
rm -f "$work/random.zt" "$work/random.img"
row "$reads random 4 KiB reads across a $random_size zstd file, cache 256 MiB" "squashfuse ($(awk -v n="$reads" -v s="$sqrand" 'BEGIN { printf "%.0f", n / s }') reads/s)" "$(awk -v n="$reads" -v s="$zrand" 'BEGIN { printf "%.0f", n / s }') reads/s" "$(ratio "$sqrand" "$zrand")x" ">= 1.0x"

# Dequantized tensor.npy against a plain copy of the float32 output size.
for method in q4 k4; do
  bin/ztgen mcf "$work/$method.mcf" 8192x16384 "$method"
  out=$((8192 * 16384 * 4))
  cat "$work/$method.mcf" >/dev/null
  plain=$(mount_copy "$out")
  bin/ztfs mount "$work/$method.mcf" "$mnt"
  deq=$(read_time "$mnt/tensors/w/tensor.npy")
  unmount_ztfs
  rm -f "$work/$method.mcf"
  row "$method dequantized tensor.npy (512 MiB of float32), sequential" "a raw component of that size through a mount, first read ($(mbps "$out" "$plain") MiB/s)" "$(mbps "$out" "$deq") MiB/s" "$(ratio "$plain" "$deq")x" ">= 0.5x"
done

# Two readers on different tensors against one reader.
half=${TWO_SIZE:-512MiB}
bin/ztgen two "$work/two.zt" "$half" zstd
cat "$work/two.zt" >/dev/null
two_bytes=$(bin/ztfs inspect --json "$work/two.zt" | jq '.tensors.a.components.data.size')
bin/ztfs mount "$work/two.zt" "$mnt"
one=$(read_time "$mnt/tensors/a/data")
unmount_ztfs
bin/ztfs mount "$work/two.zt" "$mnt"
settle; t=$(now)
dd if="$mnt/tensors/a/data" of=/dev/null bs=1M status=none &
dd if="$mnt/tensors/b/data" of=/dev/null bs=1M status=none
wait
both=$(elapsed "$t")
unmount_ztfs
rm -f "$work/two.zt"
row "two readers on two $half zstd tensors" "one reader ($(mbps "$two_bytes" "$one") MiB/s)" "$(mbps $((2 * two_bytes)) "$both") MiB/s in all" "$(awk -v a="$one" -v b="$both" 'BEGIN { printf "%.2f", 2 * a / b }')x" ">= 1.7x"

# Mount of 100,000 tensors: median of three, until the mount serves.
times=()
for i in 1 2 3; do
  settle; t=$(now); bin/ztfs mount "$work/many.zt" "$mnt"; times+=("$(elapsed "$t")")
  ls "$mnt/tensors" | wc -l | grep -qx 100000 || { echo "FAIL: mount of many.zt does not list 100000 tensors" >&2; exit 1; }
  pid=$(server_pid)
  rss=$(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
  unmount_ztfs
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 2p)
row "mount of a 100,000-tensor file, until it serves" "(absolute)" "${median} s, peak RSS ${rss} MiB after ls" "-" "< 1 s, < 200 MiB"

# Peak RSS while reading a zstd component several times the cache size.
cache=64
bin/ztfs mount --cache-size "${cache}MiB" "$work/zstd.zt" "$mnt"
pid=$(server_pid)
for i in 1 2; do cat "$mnt/tensors/big/data" >/dev/null; done
hwm=$(awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")
unmount_ztfs
row "server peak RSS reading the $size zstd component twice" "cache ${cache} MiB" "${hwm} MiB" "$(ratio "$hwm" "$cache")x the cache" "bounded"

# Tensogram codecs, sequential, against the in-process decode.
for codec in zstd lz4 sp16 sp16-szip; do
  file=$work/field-$codec.tgm
  bin/ztgen tgm "$file" "$tgm_size" "$codec"
  cat "$file" >/dev/null
  settle; read -r inproc decoded < <(bin/ztgen tgmdecode "$file")
  bin/ztfs mount "$file" "$mnt"
  first=$(read_time "$mnt/tensors/0/field/data")
  unmount_ztfs
  label=$(case $codec in zstd) echo zstd;; lz4) echo lz4;; sp16) echo "simple_packing 16-bit";; sp16-szip) echo "simple_packing 16-bit + szip";; esac)
  row "Tensogram $tgm_size float64 field, $label ($(ratio "$decoded" "$(stat -c %s "$file")"):1), first read" \
    "in-process decode, one core ($(mbps "$decoded" "$inproc") MiB/s)" "$(mbps "$decoded" "$first") MiB/s" "$(ratio "$inproc" "$first")x" "-"
  if [ "$codec" = sp16-szip ]; then
    # szip against libaec's own aec, on the field's szip stream: aec's time
    # includes reading its input and writing its output (page cache).
    read -r ours szbytes aecargs < <(bin/ztgen tgmszip "$file" "$work/field.sz")
    cat "$work/field.sz" >/dev/null
    settle; t=$(now); aec $aecargs "$work/field.sz" "$work/field.out"; aect=$(elapsed "$t")
    rm -f "$work/field.sz" "$work/field.out"
    row "szip decode of that field's stream (16-bit samples), ztfs's decoder in-process" "libaec's aec -d on the same stream ($(mbps "$szbytes" "$aect") MiB/s)" "$(mbps "$szbytes" "$ours") MiB/s" "$(ratio "$aect" "$ours")x" "-"
    row "the same field through the mount (szip, then simple_packing to float64), first read" "aec -d of its szip step alone" "$(mbps "$decoded" "$first") MiB/s of float64" "$(ratio "$aect" "$first")x" "-"
  fi
  rm -f "$file"
done

fi # core

if want folders; then
  model=$work/model
  echo "writing a checkpoint folder in $model ..." >&2
  "$python" testdata/folders/make_checkpoint.py "$model" --scale "${MODEL_SCALE:-20}" --layers 21 --shard-size $((160 << 20))
  model_bytes=$(cat "$model"/*.safetensors | wc -c)
  shards=$(ls "$model"/*.safetensors | wc -l)
  # A loader's pass (scripts/loaders.py): every tensor memory-mapped and
  # summed, from the source folder's files, through the mount's root files
  # (passthrough, then splice), its data components and its tensor.npy.
  loads() { settle; "$python" scripts/loaders.py "$@" | jq -r .seconds; }
  cat "$model"/* >/dev/null
  loads source "$model" >/dev/null
  direct=$(loads source "$model")
  bin/ztfs mount "$model" "$mnt"
  pt=$(loads source "$mnt")
  unmount_ztfs
  row "load every tensor of a $(mbps "$model_bytes" 1) MiB bf16 checkpoint folder ($shards shards, 193 tensors, each memory-mapped and summed) through the root files, passthrough" "the same on the source folder ($(mbps "$model_bytes" "$direct") MiB/s)" "$(mbps "$model_bytes" "$pt") MiB/s" "$(ratio "$direct" "$pt")x" ">= 0.87x (1.15x the time)"
  bin/ztfs mount --no-passthrough "$model" "$mnt"
  nopt=$(loads source "$mnt")
  unmount_ztfs
  row "the same without passthrough (--no-passthrough: splice)" "the same" "$(mbps "$model_bytes" "$nopt") MiB/s" "$(ratio "$direct" "$nopt")x" "-"
  bin/ztfs mount "$model" "$mnt"
  data=$(loads data "$mnt")
  unmount_ztfs
  row "the same model through the tensors' data components" "the same" "$(mbps "$model_bytes" "$data") MiB/s" "$(ratio "$direct" "$data")x" ">= 0.67x (1.5x the time)"
  # A decode-once store at best: each tensor copied to a file of its own in
  # tmpfs, then loaded from there (as passthrough would serve it), with no
  # FUSE or server cost (scripts/store_probe.py).
  store=$(mktemp -d /dev/shm/ztfs-store.XXXXXX)
  settle; probe=$("$python" scripts/store_probe.py "$model" "$store")
  rm -rf "$store"
  stored=$(jq '.copy_seconds + .store_load_seconds' <<<"$probe")
  row "the same through a decode-once store at best (each tensor copied to its own tmpfs file, then memory-mapped; no FUSE or server cost: scripts/store_probe.py)" "the same" "$(mbps "$model_bytes" "$stored") MiB/s" "$(ratio "$direct" "$stored")x" "- (kept only if it beats the data components)"
  bin/ztfs mount "$model" "$mnt"
  npy=$(loads npy "$mnt")
  unmount_ztfs
  row "the same model through tensor.npy (numpy.load mmap_mode=\"r\", bf16 widened: twice the bytes)" "the same" "$(mbps "$model_bytes" "$npy") MiB/s of source" "$(ratio "$direct" "$npy")x" ">= 0.5x (2x the time)"
  # The same model as zstd zTensor v2: the computed view against tensor.npy.
  bin/ztfs convert --encoding zstd "$model" "$work/model.zt" >/dev/null
  cat "$work/model.zt" >/dev/null
  bin/ztfs mount "$work/model.zt" "$mnt"
  view_bytes=$(stat -c %s "$mnt/model.safetensors")
  view=$(read_time "$mnt/model.safetensors")
  unmount_ztfs
  npy_bytes=$(bin/ztfs inspect --json "$work/model.zt" | jq '[.tensors[].npy.size] | add')
  bin/ztfs mount "$work/model.zt" "$mnt"
  settle; t=$(now); cat "$mnt"/tensors/*/tensor.npy >/dev/null; npy=$(elapsed "$t")
  unmount_ztfs
  # Parallel loaders on the zstd file with a 64 MiB cache: 8 processes on
  # different tensors against one process on all of them.
  for mode in pread npy; do
    bin/ztfs mount --cache-size 64MiB "$work/model.zt" "$mnt"
    settle; "$python" scripts/loaders.py "$mode" "$mnt" 1 >"$work/one.json"
    unmount_ztfs
    bin/ztfs mount --cache-size 64MiB "$work/model.zt" "$mnt"
    settle; "$python" scripts/loaders.py "$mode" "$mnt" 8 >"$work/eight.json"
    unmount_ztfs
    cmp -s <(jq -S .tensors "$work/one.json") <(jq -S .tensors "$work/eight.json") || { echo "FAIL: 8 $mode loaders read other bytes than one" >&2; exit 1; }
    pbytes=$(jq .bytes "$work/one.json")
    one=$(jq .seconds "$work/one.json"); eight=$(jq .seconds "$work/eight.json")
    stall=$(jq '.worst_read_seconds * 1000 | floor' "$work/eight.json")
    label=$([ "$mode" = pread ] && echo "1 MiB preads of the data components" || echo "memory maps of every tensor.npy, summed")
    row "8 processes, $label, of the zstd file, cache 64 MiB (longest read ${stall} ms)" "one process ($(mbps "$pbytes" "$one") MiB/s)" "$(mbps "$pbytes" "$eight") MiB/s in all" "$(ratio "$one" "$eight")x" ">= 1.0x, no read over 1 s"
  done
  rm -rf "$model" "$work/model.zt"
  row "model.safetensors of the same model as zstd zTensor v2 ($(mbps "$view_bytes" 1) MiB, bf16 kept), first read" "its tensor.npy files, first read ($(mbps "$npy_bytes" 1) MiB widened to f32, $(mbps "$npy_bytes" "$npy") MiB/s)" "$(mbps "$view_bytes" "$view") MiB/s" "$(ratio "$npy" "$view")x the speed" ">= 0.9x"
fi # folders

if want gguf; then
  # GGUF: each tensor's tensor.npy (float32 dequantized from ggml blocks)
  # read through a mount, against a memory copy of the same size.
  elems=$((64 << 20))
  out_bytes=$((elems * 4))
  bin/ztgen gguf "$work/bench.gguf" "$elems"
  cat "$work/bench.gguf" >/dev/null
  settle; copy=$(bin/ztgen memcpy "$out_bytes")
  for t in q4_0 q8_0 q4_k q6_k; do
    bin/ztfs mount "$work/bench.gguf" "$mnt"
    npy=$(read_time "$mnt/tensors/$t/tensor.npy")
    unmount_ztfs
    row "GGUF ${t^^} tensor.npy ($(mbps "$out_bytes" 1) MiB of float32), first read" "memory copy of that size ($(mbps "$out_bytes" "$copy") MiB/s)" "$(mbps "$out_bytes" "$npy") MiB/s" "$(ratio "$copy" "$npy")x" ">= 0.35x"
    [ "$t" = q4_k ] && q4k=$npy
  done
  rm -f "$work/bench.gguf"
  mcopy=$(mount_copy "$out_bytes")
  row "GGUF Q4_K tensor.npy, first read, against a copy through the mount" "a raw component of that size through a mount, first read ($(mbps "$out_bytes" "$mcopy") MiB/s)" "$(mbps "$out_bytes" "$q4k") MiB/s" "$(ratio "$mcopy" "$q4k")x" ">= 0.5x"
fi # gguf

if want remote; then
  # A first read through a mount of an http:// URL: nginx of the bench's
  # own on 127.0.0.1 (no latency: this measures the source's overhead, one
  # stream), the page cache warm for nginx and curl alike.
  ensure_packages nginx curl iproute2
  remote_size=${REMOTE_SIZE:-512MiB}
  www=$work/www
  mkdir -p "$www/fmt" "$work/nginx"
  bin/ztgen raw "$www/raw.zt" "$remote_size"
  bin/ztgen zstd "$www/zstd.zt" "$remote_size"
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  nginx_conf "$work/nginx" "127.0.0.1:$port"
  /usr/sbin/nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
  nginx_pid=$!
  base=http://127.0.0.1:$port
  for i in $(seq 50); do curl -sf -o /dev/null -r 0-0 "$base/raw.zt" && break; sleep 0.1; done
  cat "$www/raw.zt" "$www/zstd.zt" >/dev/null
  rbytes=$(bin/ztfs inspect --json "$www/raw.zt" | jq '.tensors.big.components.data.size')
  robject=$(stat -c %s "$www/raw.zt")
  zobject=$(stat -c %s "$www/zstd.zt")
  curl_time() { local t; t=$(now); curl -sf -o /dev/null "$1"; elapsed "$t"; }
  # speed_ratio BYTES SECONDS OBJECT CURL_SECONDS: the mount's MiB/s over curl's.
  speed_ratio() { awk -v a="$1" -v at="$2" -v b="$3" -v bt="$4" 'BEGIN { printf "%.2f", (a / at) / (b / bt) }'; }
  curl -sf -o /dev/null "$base/raw.zt" # one warm-up of nginx's path
  rcurl=$(curl_time "$base/raw.zt")
  zcurl=$(curl_time "$base/zstd.zt")
  bin/ztfs mount --no-cache-dir "$base/raw.zt" "$mnt"
  rfirst=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "raw $remote_size component of an http:// URL (nginx, 127.0.0.1), 1 MiB reads, first read" "curl of the whole object ($(mbps "$robject" "$rcurl") MiB/s)" "$(mbps "$rbytes" "$rfirst") MiB/s" "$(speed_ratio "$rbytes" "$rfirst" "$robject" "$rcurl")x" ">= 0.9x"
  bin/ztfs mount --no-cache-dir --remote-requests 1 "$base/raw.zt" "$mnt"
  rone=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "the same with --remote-requests 1" "the same" "$(mbps "$rbytes" "$rone") MiB/s" "$(speed_ratio "$rbytes" "$rone" "$robject" "$rcurl")x" "-"
  # The default: every block fetched also written to the (empty) cache
  # directory, behind the reads; then a remount reading it from there.
  rm -rf "$ZTFS_CACHE_DIR"
  bin/ztfs mount "$base/raw.zt" "$mnt"
  rdisk=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "the same with the cache directory (the default), empty" "the same" "$(mbps "$rbytes" "$rdisk") MiB/s" "$(speed_ratio "$rbytes" "$rdisk" "$robject" "$rcurl")x" "-"
  bin/ztfs mount "$base/raw.zt" "$mnt"
  rhit=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "a remount reading every block from the cache directory" "the same" "$(mbps "$rbytes" "$rhit") MiB/s" "$(speed_ratio "$rbytes" "$rhit" "$robject" "$rcurl")x" "-"
  rm -rf "$ZTFS_CACHE_DIR"
  bin/ztfs mount --no-cache-dir "$base/zstd.zt" "$mnt"
  zfirst=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "zstd $remote_size component of an http:// URL ($(ratio "$rbytes" "$zobject"):1), first read" "the time of curl of the whole object ($(mbps "$zobject" "$zcurl") MiB/s of stored bytes)" "$(mbps "$rbytes" "$zfirst") MiB/s" "$(ratio "$zcurl" "$zfirst")x the speed" "-"

  # What a mount costs over HTTP, per format: the requests nginx logs, and
  # the bytes it sends (headers included), from the start of `ztfs mount`
  # to its unmount, with nothing but a stat of the mount's root in between
  # (no listing: the count is the mount's own). One file per format, in
  # $www/fmt/: a bf16 checkpoint of 193 tensors (make_checkpoint.py, one
  # file), the same converted to zTensor v2, a zTensor v1.1 file of 10,000
  # small tensors (ztgen many), GGUF of four quantized tensors (ztgen gguf),
  # an MCF q4 matrix (ztgen mcf), and Tensogram of eight messages of one
  # zstd float64 field each (ztgen tgm, concatenated).
  fmt=$www/fmt
  "$python" testdata/folders/make_checkpoint.py "$work/ckpt" --scale 8 --layers 21 --single >/dev/null
  mv "$work/ckpt/model.safetensors" "$fmt/model.safetensors"
  rm -rf "$work/ckpt"
  bin/ztfs convert "$fmt/model.safetensors" "$fmt/model.zt" >/dev/null
  bin/ztgen many "$fmt/many.zt" 10000
  bin/ztgen gguf "$fmt/model.gguf" $((16 << 20))
  bin/ztgen mcf "$fmt/w.mcf" 8192x8192 q4
  for i in 0 1 2 3 4 5 6 7; do bin/ztgen tgm "$work/m$i.tgm" 8MiB zstd; done
  cat "$work"/m?.tgm >"$fmt/fields.tgm"
  rm -f "$work"/m?.tgm
  alog=$work/nginx/access.log
  touch "$alog"
  mib() { awk -v n="$1" 'BEGIN { printf "%.1f MiB", n / 1048576 }'; }
  for f in model.safetensors model.zt many.zt model.gguf w.mcf fields.tgm; do
    fsize=$(stat -c %s "$fmt/$f")
    read -r fformat fversion ftensors < <(bin/ztfs inspect --json "$fmt/$f" | jq -r '[.format, (.format_version // "-"), (.tensors | length)] | @tsv')
    mark=$(wc -l <"$alog")
    bin/ztfs mount --no-cache-dir "$base/fmt/$f" "$mnt"
    stat "$mnt" >/dev/null
    unmount_ztfs
    # requests, bytes sent, and the requests by method: HEAD, GET with a
    # Range header, GET of the whole object.
    read -r freqs fsent fhead franged fwhole < <(tail -n +"$((mark + 1))" "$alog" | awk -v uri="/fmt/$f" '$NF == uri { n++; b += $3; if ($1 == "HEAD") h++; else if ($4 != "\"-\"") r++; else w++ } END { printf "%d %d %d %d %d\n", n, b, h, r, w }')
    [ "$freqs" -gt 0 ] || { echo "FAIL: nginx logged no request for the mount of $f" >&2; exit 1; }
    flabel=$(case $fformat in ztensor) echo zTensor;; gguf) echo GGUF;; mcf) echo MCF;; tensogram) echo Tensogram;; *) echo "$fformat";; esac)
    [ "$fversion" = - ] || flabel="$flabel v$fversion"
    row "mount of $f ($flabel, $(mib "$fsize"), $ftensors tensor$([ "$ftensors" = 1 ] || echo s)) over http (nginx, 127.0.0.1): mount, stat of the root, unmount" "the file: $fsize bytes" "$freqs requests (HEAD $fhead, ranged GET $franged, whole GET $fwhole), $fsent bytes sent" "$(awk -v a="$fsent" -v b="$fsize" 'BEGIN { printf "%.2f%%", 100 * a / b }') of the file" "-"
  done
  rm -rf "$fmt"
  kill "$nginx_pid"; wait "$nginx_pid" 2>/dev/null || true; nginx_pid=

  # The same first reads with latency (latency_up): nginx in a network
  # namespace of the script's, the mount and curl in this one.
  latency_up "$www" raw.zt
  cat "$www/raw.zt" "$www/zstd.zt" >/dev/null
  curl -sf -o /dev/null "$lbase/raw.zt" # one warm-up
  lcurl=$(curl_time "$lbase/raw.zt")
  # delay_cpu prints the CPU seconds the delay line has used (0 with netem):
  # it runs on the same cores as the mount.
  delay_cpu() { if [ -n "${delay_pid:-}" ]; then awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$delay_pid/stat"; else echo 0; fi; }
  bin/ztfs mount --no-cache-dir "$lbase/raw.zt" "$mnt"
  c0=$(delay_cpu)
  lfirst=$(read_time "$mnt/tensors/big/data")
  lcpu=$(awk -v a="$c0" -v b="$(delay_cpu)" 'BEGIN { printf "%.2f", b - a }')
  unmount_ztfs
  row "raw $remote_size component of an http:// URL, $lat_label, 1 MiB reads, first read$([ -z "${delay_pid:-}" ] || echo " (the delay line used $lcpu s of CPU during it)")" "single-stream curl of the whole object ($(mbps "$robject" "$lcurl") MiB/s)" "$(mbps "$rbytes" "$lfirst") MiB/s" "$(speed_ratio "$rbytes" "$lfirst" "$robject" "$lcurl")x" ">= 2x"
  bin/ztfs mount --no-cache-dir --remote-requests 1 "$lbase/raw.zt" "$mnt"
  lone=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "the same with --remote-requests 1" "the same" "$(mbps "$rbytes" "$lone") MiB/s" "$(speed_ratio "$rbytes" "$lone" "$robject" "$lcurl")x" "-"
  lzcurl=$(curl_time "$lbase/zstd.zt")
  bin/ztfs mount --no-cache-dir "$lbase/zstd.zt" "$mnt"
  lzfirst=$(read_time "$mnt/tensors/big/data")
  unmount_ztfs
  row "zstd $remote_size component of an http:// URL ($(ratio "$rbytes" "$zobject"):1), $((2 * lat_delay)) ms round trip added, first read" "the time of single-stream curl of the whole object ($(mbps "$zobject" "$lzcurl") MiB/s of stored bytes)" "$(mbps "$rbytes" "$lzfirst") MiB/s" "$(ratio "$lzcurl" "$lzfirst")x the speed" "-"
  latency_down
  rm -rf "$www"
fi # remote

if want warm; then
  # ztfs warm against parallel curl range streams over the link of
  # latency_up: a WARM_SIZE object (nginx's page cache warm), fetched by N
  # curl processes each asking for one Nth of it with one range request,
  # and by ztfs warm --jobs N into an empty cache directory (its blocks
  # written to the page cache as they come, and synced before the next
  # run); three runs of each, alternating, and their medians.
  ensure_packages nginx curl iproute2
  warm_size=${WARM_SIZE:-512MiB}
  wroot=$work/warm-www
  mkdir -p "$wroot"
  bin/ztgen raw "$wroot/object.zt" "$warm_size"
  wobject=$(stat -c %s "$wroot/object.zt")
  cat "$wroot/object.zt" >/dev/null
  latency_up "$wroot" object.zt
  # parallel_curl N prints the seconds N curl range streams take to fetch
  # the object, one Nth each.
  parallel_curl() {
    local n=$1 t i from to p pids=()
    t=$(now)
    for ((i = 0; i < n; i++)); do
      from=$((wobject * i / n))
      to=$((wobject * (i + 1) / n - 1))
      curl -sf -o /dev/null -r "$from-$to" "$lbase/object.zt" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { echo "FAIL: curl of $lbase/object.zt" >&2; exit 1; }; done
    elapsed "$t"
  }
  # warm_once N prints the seconds ztfs warm --jobs N takes to fetch the
  # object into an empty cache directory.
  warm_once() {
    local t
    rm -rf "$work/wcache"
    settle
    t=$(now)
    bin/ztfs warm --cache-dir "$work/wcache" --jobs "$1" "$lbase/object.zt" >/dev/null
    elapsed "$t"
  }
  median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
  parallel_curl 4 >/dev/null # one warm-up of nginx and the link
  for jobs in 1 ${WARM_JOBS:-4 8}; do
    tcs=() tws=()
    for rep in 1 2 3; do
      tcs+=("$(parallel_curl "$jobs")")
      tws+=("$(warm_once "$jobs")")
    done
    tc=$(median3 "${tcs[@]}")
    tw=$(median3 "${tws[@]}")
    row "ztfs warm --jobs $jobs of a $warm_size object over http://, $lat_label, into an empty cache directory (medians of 3 alternating runs: curl ${tcs[*]} s, warm ${tws[*]} s)" "$jobs parallel curl range stream(s) of the object, one Nth each ($(mbps "$wobject" "$tc") MiB/s)" "$(mbps "$wobject" "$tw") MiB/s" "$(ratio "$tc" "$tw")x" ">= 0.8x"
  done
  rm -rf "$work/wcache"
  latency_down
  rm -rf "$wroot"
fi # warm

printf '\nztfs %s (commit %s%s), Linux %s, %d cores, %s, as %s (uid %d), sections: %s\n' "$(bin/ztfs --version | cut -d' ' -f2)" "$(git rev-parse --short HEAD)" "$(git diff --quiet HEAD || echo ', with changes')" "$(uname -r)" "$(nproc)" "$(date -u +%Y-%m-%dT%H:%MZ)" "$(id -un)" "$(id -u)" "$sections"
printf 'kernel read-ahead: ztfs %s KiB, squashfuse %s KiB, FUSE ceiling %s KiB; one run, every row\n\n' "$ztfs_ra" "$sq_ra" "$ceiling_ra"
echo "| workload | baseline | ztfs | ratio | target | server peak RSS |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
