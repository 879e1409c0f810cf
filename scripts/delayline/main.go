// Command delayline is the benchmark's added network latency where the
// kernel has no netem qdisc (CONFIG_NET_SCH_NETEM unset): a link of two TUN
// devices, A in the current network namespace and B in a named one (ip
// netns), over which each packet is forwarded DELAY after it was read, in
// both directions, so that the round trip gains twice DELAY.
//
// The devices carry virtio-net headers with checksum and TCP segmentation
// offload, as a veth pair does: the kernel hands over segments of up to
// 64 KiB, which cross in one piece and are accounted by TCP at the link's
// MTU (set by the caller, 1500 by default), so the cost per byte stays low.
// Packets wait in order in a queue of at most -limit packets (netem's
// limit); when it is full, reading stops and the device's own queue
// (txqueuelen) drops.
//
// Usage: delayline [-delay 5ms] [-limit 100000] -netns NAME A B
//
// It runs until SIGINT or SIGTERM; the devices go with it. The caller sets
// the addresses, MTU, queue lengths and brings the links up.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// vnetHdrLen is the size of struct virtio_net_hdr, the TUN default.
const vnetHdrLen = 10

// packet is one packet read, with its virtio-net header: b, in the pooled
// buffer buf, or a copy of its own when small (buf nil).
type packet struct {
	due time.Time
	b   []byte
	buf *[]byte
}

// smallPacket is the largest packet copied out of the read buffer.
const smallPacket = 2048

// pool holds buffers of the largest packet, read into and written from
// with no copy in between.
var pool = sync.Pool{New: func() any { b := make([]byte, vnetHdrLen+65536); return &b }}

var (
	failed   atomic.Int64
	firstErr atomic.Value // string
)

func main() {
	delay := flag.Duration("delay", 5*time.Millisecond, "time each packet is held, each way")
	limit := flag.Int("limit", 100000, "packets held at most, each way")
	netns := flag.String("netns", "", "network namespace of device B (a name under /run/netns, or a path)")
	flag.Parse()
	if flag.NArg() != 2 || *netns == "" {
		fmt.Fprintln(os.Stderr, "usage: delayline [-delay 5ms] [-limit 100000] -netns NAME A B")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *netns, *delay, *limit); err != nil {
		fmt.Fprintln(os.Stderr, "delayline:", err)
		os.Exit(1)
	}
}

func run(nameA, nameB, netns string, delay time.Duration, limit int) error {
	a, err := openTun(nameA)
	if err != nil {
		return err
	}
	b, err := inNetns(netns, func() (int, error) { return openTun(nameB) })
	if err != nil {
		return err
	}
	go forward(a, b, delay, limit)
	go forward(b, a, delay, limit)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	if n := failed.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "delayline: %d packets could not be written (the first: %v)\n", n, firstErr.Load())
	}
	return nil
}

// openTun creates the TUN device name in the calling thread's network
// namespace, with virtio-net headers and TCP offloads.
func openTun(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	offload := unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offload); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETOFFLOAD %s: %w", name, err)
	}
	return fd, nil
}

// inNetns runs f on a thread moved into the network namespace netns, then
// moves the thread back.
func inNetns(netns string, f func() (int, error)) (int, error) {
	path := netns
	if path[0] != '/' {
		path = "/run/netns/" + netns
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(self)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("setns %s: %w", path, err)
	}
	fd, ferr := f()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		// A thread left in the other namespace is not given back.
		return -1, fmt.Errorf("setns back: %w", err)
	}
	return fd, ferr
}

// forward reads packets from src and writes each to dst delay after it was
// read, in order.
func forward(src, dst int, delay time.Duration, limit int) {
	queue := make(chan packet, limit)
	go func() {
		runtime.LockOSThread()
		for p := range queue {
			if d := time.Until(p.due); d > 0 {
				// A nanosleep of this thread: the runtime's timers may
				// round a short sleep up to a millisecond.
				ts := unix.NsecToTimespec(d.Nanoseconds())
				for unix.Nanosleep(&ts, &ts) == unix.EINTR {
				}
			}
			// EIO: dst is not up yet (IPv6 sends on A before B is up).
			if _, err := unix.Write(dst, p.b); err != nil && err != unix.EIO {
				if failed.Add(1) == 1 {
					firstErr.Store(err.Error())
				}
			}
			if p.buf != nil {
				pool.Put(p.buf)
			}
		}
	}()
	runtime.LockOSThread()
	for {
		buf := pool.Get().(*[]byte)
		n, err := unix.Read(src, *buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			pool.Put(buf)
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "delayline: read:", err)
			os.Exit(1)
		}
		p := packet{due: time.Now().Add(delay), b: (*buf)[:n]}
		if n <= smallPacket {
			// An acknowledgement: copied, so that a queue of them does
			// not hold a largest-packet buffer each.
			p.b = append([]byte(nil), p.b...)
			pool.Put(buf)
		} else {
			p.buf = buf
		}
		queue <- p
	}
}
