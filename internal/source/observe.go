package source

import (
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Observer is told what the sources of one scheme ask for and receive, for
// a mount's metrics. Its methods are called from many goroutines, some on
// the read path, and must be cheap.
type Observer interface {
	// Requested is told of each request sent to a server: the status of
	// its reply, or 0 when none came (refused, reset, timed out). Each hop
	// of a redirect is a request.
	Requested(code int)
	// Received is told of bytes received: of a reply's body, or read from
	// a local file (spliced ones included).
	Received(n int64)
	// Retried is told of each request sent again after a failure.
	Retried()
}

// Observers returns the Observer of the sources of a scheme: "file",
// "http", "https", "s3" or "hf". A nil Observers, or a nil Observer,
// observes nothing.
type Observers func(scheme string) Observer

// of returns the Observer of scheme, never nil.
func (o Observers) of(scheme string) Observer {
	if o != nil {
		if x := o(scheme); x != nil {
			return x
		}
	}
	return nopObserver{}
}

type nopObserver struct{}

func (nopObserver) Requested(int)  {}
func (nopObserver) Received(int64) {}
func (nopObserver) Retried()       {}

// observedTransport counts the requests of an HTTP client and the bytes of
// their replies' bodies.
type observedTransport struct {
	base http.RoundTripper
	obs  Observer
}

func (t *observedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		t.obs.Requested(0)
		return resp, err
	}
	t.obs.Requested(resp.StatusCode)
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = &observedBody{ReadCloser: resp.Body, obs: t.obs}
	}
	return resp, nil
}

// CloseIdleConnections passes on to the base transport, so that a client's
// CloseIdleConnections still reaches it.
func (t *observedTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

type observedBody struct {
	io.ReadCloser
	obs Observer
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.obs.Received(int64(n))
	}
	return n, err
}

// observeClient returns a copy of c (nil: def()) whose requests obs counts;
// c itself when obs observes nothing.
func observeClient(c *http.Client, obs Observer) *http.Client {
	if _, nop := obs.(nopObserver); nop {
		return c
	}
	copied := *c
	base := copied.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	copied.Transport = &observedTransport{base: base, obs: obs}
	return &copied
}

// observedDoer counts the requests of an AWS SDK client.
type observedDoer struct {
	base aws.HTTPClient
	obs  Observer
}

func (d observedDoer) Do(req *http.Request) (*http.Response, error) {
	return (&observedTransport{base: roundTripFunc(d.base.Do), obs: d.obs}).RoundTrip(req)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
