package source

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fuzzData is the file the fuzzed server holds.
var fuzzData = func() []byte {
	b := make([]byte, 3000)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}()

const fuzzURL = "http://fuzz.invalid/m.bin"

// fuzzTransport is a server whose replies a fuzz input scripts: four bytes
// per request (status, headers, body, a parameter), then honest replies
// once the script is spent. Its replies may have any status, lie in any
// header and be cut short, fail or run on past the range asked, but a
// body never holds other bytes than the file's at the range its
// Content-Range names (or, without one, at the range asked): no client
// could tell such bytes from the truth.
type fuzzTransport struct {
	script []byte
	junk   string // a header value from the fuzzer

	mu       sync.Mutex
	requests int
	problems []string
}

func (ft *fuzzTransport) problem(format string, args ...any) {
	ft.mu.Lock()
	ft.problems = append(ft.problems, fmt.Sprintf(format, args...))
	ft.mu.Unlock()
}

// next returns the next four script bytes, zeros (honest) when spent.
func (ft *fuzzTransport) next() (s, h, b, k byte) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	i := 4 * ft.requests
	ft.requests++
	var op [4]byte
	if i < len(ft.script) {
		copy(op[:], ft.script[i:])
	}
	return op[0], op[1], op[2], op[3]
}

func (ft *fuzzTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	size := int64(len(fuzzData))
	s, h, b, k := ft.next()
	resp := &http.Response{Request: req, Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1, Proto: "HTTP/1.1"}
	etag := `"v1"`
	// The range asked, and the range the body holds.
	first, last := int64(0), size-1
	ranged := false
	if r := req.Header.Get("Range"); r != "" {
		ranged = true
		a, z, ok := strings.Cut(strings.TrimPrefix(r, "bytes="), "-")
		fa, err1 := strconv.ParseInt(a, 10, 64)
		fz, err2 := strconv.ParseInt(z, 10, 64)
		if !ok || !strings.HasPrefix(r, "bytes=") || err1 != nil || err2 != nil || fa < 0 || fz < fa {
			ft.problem("malformed Range %q", r)
			return nil, errors.New("malformed Range")
		}
		first, last = fa, fz
	}
	if req.Method == http.MethodGet && ranged && req.Header.Get("If-Match") == "" &&
		req.Header.Get("If-Unmodified-Since") == "" && req.Header.Get("Range") != "bytes=0-0" {
		ft.problem("a range GET %q pinned to no version", req.Header.Get("Range"))
	}
	status := http.StatusOK
	if ranged {
		status = http.StatusPartialContent
	}
	switch s % 16 {
	case 6:
		status, ranged, first, last = http.StatusOK, false, 0, size-1
	case 7:
		status = 500
	case 8:
		status = 503
	case 9:
		status = 429
	case 10:
		status = 404
	case 11:
		status = 412
	case 12:
		status = 416
	case 13:
		status = 302 // without a Location
	case 14:
		return nil, errors.New("connection reset by fuzzer")
	case 15:
		status = 200 + int(k)*400/256
	}
	resp.StatusCode, resp.Status = status, fmt.Sprintf("%d %s", status, http.StatusText(status))
	if status == 416 {
		resp.Header.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
	}
	// The body's bytes: the file's, at [first, last] cut to the file.
	if first > last || first >= size {
		first, last = size, size-1
	}
	last = min(last, size-1)
	if ranged && status == 206 {
		if h%8 == 3 { // another range than asked, said so
			first = min(first+int64(k), size)
			last = min(last+int64(k), size-1)
		}
		if first <= last {
			total := strconv.FormatInt(size, 10)
			switch {
			case h%8 == 4:
				total = strconv.FormatInt(size+int64(k)-128, 10)
			case h%8 == 1 && k%2 == 1:
				total = "*"
			}
			resp.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%s", first, last, total))
		}
	}
	if h%8 == 5 {
		resp.Header.Set("Content-Range", ft.junk)
	}
	var body []byte
	if first <= last {
		body = fuzzData[first : last+1]
	}
	if req.Method == http.MethodHead {
		body = nil
	}
	length := int64(last - first + 1)
	if length < 0 {
		length = 0
	}
	resp.Header.Set("Content-Length", strconv.FormatInt(length, 10))
	resp.Header.Set("Accept-Ranges", "bytes")
	switch h % 8 {
	case 6:
		switch k % 4 {
		case 0:
			resp.Header.Del("Content-Length")
		case 1:
			resp.Header.Set("Content-Length", strconv.FormatInt(length+int64(k)-128, 10))
		case 2:
			resp.Header.Set("Content-Length", ft.junk)
		case 3:
			resp.Header.Del("Accept-Ranges")
		}
	case 7:
		switch k % 4 {
		case 0:
			etag = `"v2"`
		case 1:
			etag = `W/"v1"`
		case 2:
			etag = ""
		case 3:
			etag = ft.junk
		}
	}
	if etag != "" {
		resp.Header.Set("ETag", etag)
	}
	resp.Header.Set("Last-Modified", "Tue, 24 Nov 2026 10:00:00 GMT")
	resp.ContentLength = -1
	fb := &fuzzBody{ft: ft, data: body}
	switch b % 8 {
	case 4:
		fb.data = body[:len(body)*int(k)/256]
	case 5:
		fb.data = body[:len(body)*int(k)/256]
		fb.err = io.ErrUnexpectedEOF
	case 6:
		fb.extra = bytes.Repeat([]byte{0xEE}, int(k)+1)
	case 7:
		fb.oneByte = true
	}
	resp.Body = fb
	return resp, nil
}

// fuzzBody is a reply body: data, then extra bytes past the range (which
// no reader may take), then err or EOF.
type fuzzBody struct {
	ft      *fuzzTransport
	data    []byte
	extra   []byte
	err     error
	oneByte bool
}

func (b *fuzzBody) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if b.oneByte {
		p = p[:1]
	}
	if len(b.data) > 0 {
		n := copy(p, b.data)
		b.data = b.data[n:]
		return n, nil
	}
	if len(b.extra) > 0 {
		b.ft.problem("a body read past the range its reply holds")
		n := copy(p, b.extra)
		b.extra = b.extra[n:]
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return 0, io.EOF
}

func (b *fuzzBody) Close() error { return nil }

// FuzzHTTPReplies opens the HTTP source over a server whose replies the
// input scripts (any status, lying headers, bodies cut short, failing or
// running on), then reads three fuzzed ranges. Open fails with one line
// naming the URL, or gives a source whose reads return exactly the file's
// bytes at the offset asked, all of them or an error (io.EOF only at the
// size opened), never other bytes, never a panic or a hang; no body is read
// past the range its reply holds, and every range request is pinned to
// the version opened.
func FuzzHTTPReplies(f *testing.F) {
	f.Add([]byte{}, "x", uint16(0), uint16(100), uint16(2990), uint16(20), uint16(500), uint16(2000), uint8(0))
	f.Add([]byte{0, 0, 0, 0, 0, 3, 0, 7}, "bytes 0-9/3000", uint16(10), uint16(600), uint16(0), uint16(3000), uint16(1000), uint16(5), uint8(1))
	f.Add([]byte{0, 0, 0, 0, 7, 0, 5, 200, 0, 0, 4, 100}, `"v2"`, uint16(256), uint16(256), uint16(1), uint16(1), uint16(2999), uint16(1), uint8(2))
	f.Add([]byte{0, 6, 0, 1, 0, 0, 0, 0, 6, 0, 0, 0}, "12", uint16(100), uint16(100), uint16(0), uint16(0), uint16(0), uint16(0), uint8(3))
	f.Add([]byte{0, 7, 0, 0, 0, 7, 0, 0}, "", uint16(1000), uint16(100), uint16(0), uint16(0), uint16(0), uint16(0), uint8(0))
	f.Add([]byte{12, 0, 0, 0}, "", uint16(0), uint16(1), uint16(0), uint16(0), uint16(0), uint16(0), uint8(0))
	f.Add([]byte{0, 0, 0, 0, 0, 4, 0, 129, 14, 0, 0, 0, 0, 0, 6, 9, 0, 0, 7, 0}, "", uint16(0), uint16(3000), uint16(0), uint16(0), uint16(0), uint16(0), uint8(1))
	f.Fuzz(func(t *testing.T, script []byte, junk string, off1, n1, off2, n2, off3, n3 uint16, flags uint8) {
		if len(script) > 256 {
			return
		}
		ft := &fuzzTransport{script: script, junk: junk}
		opts := HTTPOptions{
			Client:    &http.Client{Transport: ft},
			RetryFor:  20 * time.Millisecond,
			BlockSize: []int64{256, 1000, 4096}[int(flags)%3],
			Parallel:  1 + int(flags>>2)%2,
			MaxAhead:  []int64{-1, 512}[int(flags>>3)%2],
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			readReplies(t, opts, [][2]uint16{{off1, n1}, {off2, n2}, {off3, n3}})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Fatalf("no answer in 10 s (hang); script %v, junk %q, flags %d:\n%s", script, junk, flags, stacks)
		}
		ft.mu.Lock()
		defer ft.mu.Unlock()
		for _, p := range ft.problems {
			t.Error(p)
		}
	})
}

// readReplies opens the source and makes the reads; it reports with
// t.Errorf only, as it runs in a goroutine of its own.
func readReplies(t *testing.T, opts HTTPOptions, reads [][2]uint16) {
	src, err := OpenHTTP(context.Background(), fuzzURL, opts)
	if err != nil {
		if msg := err.Error(); !strings.Contains(msg, fuzzURL) || strings.Contains(msg, "\n") {
			t.Errorf("open error %q does not name the URL in one line", msg)
		}
		return
	}
	defer src.Close()
	size := src.Size()
	failed := false
	fail := func(format string, args ...any) { t.Errorf(format, args...); failed = true }
	for _, r := range reads {
		off, p := int64(r[0]), make([]byte, r[1])
		n, err := src.ReadAt(p, off)
		switch {
		case n < 0 || n > len(p):
			fail("ReadAt(%d bytes at %d) = %d", len(p), off, n)
		case n < len(p) && err == nil:
			fail("ReadAt(%d bytes at %d) = %d without an error", len(p), off, n)
		case errors.Is(err, io.EOF) && off+int64(n) != size && !(n == 0 && off >= size):
			fail("ReadAt(%d bytes at %d) = %d, EOF, of a source of size %d", len(p), off, n, size)
		case err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), fuzzURL):
			t.Errorf("read error %q does not name the URL", err)
		}
		if failed {
			return
		}
		if n == 0 {
			continue
		}
		if int(off)+n > len(fuzzData) {
			t.Errorf("ReadAt(%d bytes at %d) gave %d bytes of a %d-byte file (size opened %d)", len(p), off, n, len(fuzzData), size)
			return
		}
		if !bytes.Equal(p[:n], fuzzData[off:off+int64(n)]) {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v: wrong bytes", len(p), off, n, err)
			return
		}
	}
}
