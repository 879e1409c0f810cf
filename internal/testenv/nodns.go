package testenv

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// WithoutDNS makes cmd, not yet started, run where every host name that
// /etc/hosts does not hold has no address: in a mount namespace of its own
// whose /etc/resolv.conf names a DNS server of the test, on 127.0.0.0/8,
// that answers every query with NXDOMAIN. A test of a host that does not
// resolve then asks nothing of the machine's own resolver, or of any
// address but its own. It needs root and unshare (util-linux). It returns
// how many queries the test's server has answered so far.
func WithoutDNS(t testing.TB, cmd *exec.Cmd) (answered func() int64) {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		missing(t, "root and unshare (util-linux), for a DNS of the test's own")
		return nil
	}
	addr, count := startNXDomainServer(t)
	conf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(conf, []byte("nameserver "+addr+"\noptions timeout:1 attempts:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `mount --bind "$0" /etc/resolv.conf && exec "$@"`
	cmd.Args = append([]string{unshare, "--mount", "--propagation", "private", "sh", "-c", script, conf, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = unshare
	return count.Load
}

// startNXDomainServer starts a DNS server on port 53 of a random address
// of 127.0.0.0/8 that answers every query with NXDOMAIN, until the test
// ends, and returns its address and the count of its answers.
func startNXDomainServer(t testing.TB) (string, *atomic.Int64) {
	t.Helper()
	var conn *net.UDPConn
	for attempt := 0; conn == nil; attempt++ {
		ip := net.IPv4(127, 53, byte(rand.IntN(250)+1), byte(rand.IntN(250)+1))
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip, Port: 53})
		if err == nil {
			conn = c
		} else if attempt == 5 {
			t.Fatalf("a DNS server of the test: %v", err)
		}
	}
	t.Cleanup(func() { conn.Close() })
	count := new(atomic.Int64)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if reply := nxdomain(buf[:n]); reply != nil {
				conn.WriteToUDP(reply, from)
				count.Add(1)
			}
		}
	}()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), count
}

// nxdomain returns the NXDOMAIN answer to a DNS query (RFC 1035 4.1): its
// header with QR, RA and RCODE 3 set and no records, and its first
// question; nil for what is not a query.
func nxdomain(q []byte) []byte {
	if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:]) == 0 {
		return nil
	}
	end := 12
	for end < len(q) && q[end] != 0 {
		end += int(q[end]) + 1
	}
	end += 5 // the root label, QTYPE and QCLASS
	if end > len(q) {
		return nil
	}
	r := append([]byte(nil), q[:end]...)
	r[2] = 0x80 | q[2]&0x79 // QR, the opcode and RD of the query
	r[3] = 0x80 | 3         // RA, NXDOMAIN
	binary.BigEndian.PutUint16(r[4:], 1)
	for i := 6; i < 12; i++ {
		r[i] = 0
	}
	return r
}
