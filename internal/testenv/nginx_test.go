package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// StartNginx serves a directory over HTTP and HTTPS (with a certificate
// that the CA it returns signed), with ranges and strong ETags, and its
// nginx is gone once the test that started it ends.
func TestStartNginx(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f.bin"), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, useTLS := range []bool{false, true} {
		var host string
		t.Run(fmt.Sprintf("tls=%v", useTLS), func(t *testing.T) {
			base, caPEM := StartNginx(t, dir, useTLS)
			u, err := url.Parse(base)
			if err != nil {
				t.Fatal(err)
			}
			host = u.Host
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			if useTLS {
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(caPEM) {
					t.Fatal("no certificate in the CA's PEM")
				}
				tr.TLSClientConfig = &tls.Config{RootCAs: pool}
			} else if caPEM != nil {
				t.Error("a CA for plain HTTP")
			}
			req, _ := http.NewRequest(http.MethodGet, base+"/f.bin", nil)
			req.Header.Set("Range", "bytes=2-4")
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusPartialContent || string(body) != "234" ||
				resp.Header.Get("Content-Range") != "bytes 2-4/10" || resp.Header.Get("ETag") == "" {
				t.Errorf("%s %q %q ETag %q", resp.Status, body, resp.Header.Get("Content-Range"), resp.Header.Get("ETag"))
			}
		})
		if c, err := net.Dial("tcp", host); err == nil {
			c.Close()
			t.Errorf("nginx still listens on %s after its test ended", host)
		}
	}
}
