package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fault is what a FaultProxy does to the bytes it carries. The zero value
// passes everything.
type Fault struct {
	Mode FaultMode
	// After lets this many more bytes of each connection's replies (server
	// to client) through, counted from when the fault is set (or from
	// the connection's start for a later one), before Mode applies: a
	// stall or a reset in the middle of a body.
	After int64
	// Rate is the bytes per second of Drip (at least one byte every 100 ms).
	Rate int
}

// FaultMode is one way a network fails.
type FaultMode int

const (
	// Pass forwards everything.
	Pass FaultMode = iota
	// Stall accepts connections and forwards nothing in either direction
	// until the fault changes (a server that hangs, a dead link): the
	// bytes held are forwarded then.
	Stall
	// Drip forwards replies at Fault.Rate bytes per second.
	Drip
	// Reset closes every connection with a TCP reset (RST), new ones as
	// soon as they are accepted.
	Reset
	// Refuse stops listening: connections are refused, and open ones are
	// reset. The proxy listens again, on the same port, when the fault
	// changes.
	Refuse
)

func (m FaultMode) String() string {
	return [...]string{"pass", "stall", "drip", "reset", "refuse"}[m]
}

// FaultProxy is a TCP proxy on 127.0.0.1 between a client under test and
// one upstream server, whose Fault can be changed at any time, for open
// connections as well as new ones: the network between ztfs and a server
// failing the ways real ones do.
type FaultProxy struct {
	t        testing.TB
	upstream string // host:port
	addr     string // host:port the proxy listens on

	mu       sync.Mutex
	fault    Fault
	changed  chan struct{} // closed and replaced when fault changes
	ln       net.Listener  // nil while refusing
	conns    map[*proxyConn]bool
	accepted int
	closed   bool
	wg       sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
}

// StartFaultProxy starts a proxy to upstream (host:port, or a URL whose
// host and port are taken) that passes everything until told otherwise,
// and stops it, closing every connection, when the test ends.
func StartFaultProxy(t testing.TB, upstream string) *FaultProxy {
	t.Helper()
	if i := strings.Index(upstream, "://"); i >= 0 {
		upstream = upstream[i+3:]
		if j := strings.IndexByte(upstream, '/'); j >= 0 {
			upstream = upstream[:j]
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{t: t, upstream: upstream, addr: ln.Addr().String(), changed: make(chan struct{}), conns: map[*proxyConn]bool{}}
	p.listen(ln)
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.addr }

// URL returns rawURL (the upstream's) with its host and port replaced by
// the proxy's.
func (p *FaultProxy) URL(rawURL string) string {
	return strings.Replace(rawURL, p.upstream, p.addr, 1)
}

// Accepted returns how many connections the proxy has accepted.
func (p *FaultProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Set changes the fault, for the connections open and later ones.
func (p *FaultProxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	switch {
	case f.Mode == Refuse && p.ln != nil:
		p.ln.Close()
		p.ln = nil
		for c := range p.conns {
			c.reset()
		}
	case f.Mode == Reset:
		for c := range p.conns {
			if f.After == 0 {
				c.reset()
			}
		}
	case f.Mode != Refuse && p.ln == nil:
		ln, err := net.Listen("tcp", p.addr)
		if err != nil {
			p.t.Errorf("fault proxy: listening again on %s: %v", p.addr, err)
			return
		}
		p.listen(ln)
	}
}

// listen serves ln; p.mu is held or the proxy not yet shared.
func (p *FaultProxy) listen(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.serve(c)
		}
	}()
}

// serve starts carrying the bytes of one accepted connection.
func (p *FaultProxy) serve(client net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		client.Close()
		return
	}
	p.accepted++
	if p.fault.Mode == Reset && p.fault.After == 0 {
		resetConn(client)
		return
	}
	pc := &proxyConn{client: client}
	p.conns[pc] = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.forget(pc)
		server, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
		if err != nil {
			resetConn(client)
			return
		}
		p.mu.Lock()
		pc.server = server
		closed := p.closed
		p.mu.Unlock()
		if closed {
			server.Close()
			client.Close()
			return
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); p.pump(pc, client, server, true) }()
		go func() { defer wg.Done(); p.pump(pc, server, client, false) }()
		wg.Wait()
		client.Close()
		server.Close()
	}()
}

func (p *FaultProxy) forget(pc *proxyConn) {
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pump carries the bytes from src to dst, replies when reply is set,
// applying the fault before each write.
func (p *FaultProxy) pump(pc *proxyConn, dst, src net.Conn, reply bool) {
	buf := make([]byte, 32<<10)
	var budget int64 // reply bytes still let through before the fault applies
	var seen chan struct{}
	for {
		n, err := src.Read(buf)
		data := buf[:n]
		for len(data) > 0 {
			p.mu.Lock()
			f, changed, closed := p.fault, p.changed, p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			if changed != seen {
				seen, budget = changed, f.After
			}
			mode := f.Mode
			switch {
			case reply && budget > 0:
				mode = Pass
			case !reply && (mode == Drip || f.After > 0 && mode != Refuse):
				// Requests go through: the fault is in the replies.
				mode = Pass
			}
			switch mode {
			case Pass:
				k := len(data)
				if reply && budget > 0 {
					k = int(min(int64(k), budget))
					budget -= int64(k)
				}
				if _, err := dst.Write(data[:k]); err != nil {
					return
				}
				data = data[k:]
			case Drip:
				k := min(len(data), max(1, f.Rate/10))
				if _, err := dst.Write(data[:k]); err != nil {
					return
				}
				data = data[k:]
				select {
				case <-time.After(100 * time.Millisecond):
				case <-changed:
				}
			case Stall:
				<-changed
			case Reset, Refuse:
				pc.reset()
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Half-close: the other direction may still be carrying.
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			pc.reset()
			return
		}
	}
}

// reset ends both sides of the connection with a TCP reset.
func (c *proxyConn) reset() {
	resetConn(c.client)
	if c.server != nil {
		resetConn(c.server)
	}
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *FaultProxy) close() {
	p.mu.Lock()
	p.closed = true
	close(p.changed)
	p.changed = make(chan struct{})
	if p.ln != nil {
		p.ln.Close()
	}
	for c := range p.conns {
		c.reset()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// String describes the proxy, for messages.
func (p *FaultProxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("fault proxy %s -> %s (%v)", p.addr, p.upstream, p.fault.Mode)
}
