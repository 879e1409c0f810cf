package testenv

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RequireNginx returns the path of Debian's nginx (/usr/sbin/nginx, or an
// nginx on PATH), or stops the test.
func RequireNginx(t testing.TB) string {
	t.Helper()
	for _, candidate := range []string{"/usr/sbin/nginx", "nginx"} {
		if path, err := exec.LookPath(candidate); err == nil {
			return path
		}
	}
	missing(t, "nginx (Debian package nginx)")
	return ""
}

// StartNginx starts an nginx of its own that serves the files of dir, on
// 127.0.0.1 and a free port, over HTTPS when tls is set, and stops it (by
// its pid) when the test ends. Its configuration, pid file and logs are in
// a temporary directory of the test; nginx's error log is shown when it
// fails to start. It returns the base URL (no trailing slash: add
// "/name") and, for HTTPS, the PEM of the test CA that signed the server's
// certificate for 127.0.0.1 and localhost, for a client's RootCAs or for
// SSL_CERT_FILE. nginx serves dir's files as Debian's default site does:
// strong ETags (modification time and size), Last-Modified, byte ranges,
// and 412 to an If-Match or If-Unmodified-Since that no longer holds.
func StartNginx(t testing.TB, dir string, tls bool) (baseURL string, caPEM []byte) {
	t.Helper()
	baseURL, caPEM, _ = StartNginxLogged(t, dir, tls)
	return baseURL, caPEM
}

// StartNginxLogged is StartNginx that also returns the path of nginx's
// access log, in the combined format: one line per request, with its
// method, path, status and the bytes of the reply's body.
func StartNginxLogged(t testing.TB, dir string, tls bool) (baseURL string, caPEM []byte, accessLog string) {
	t.Helper()
	nginx := RequireNginx(t)
	dir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	scheme, listenTLS, tlsConf := "http", "", ""
	if tls {
		var certPEM, keyPEM []byte
		caPEM, certPEM, keyPEM = TestCertificates(t)
		cert, key := filepath.Join(prefix, "server.pem"), filepath.Join(prefix, "server.key")
		for path, b := range map[string][]byte{cert: certPEM, key: keyPEM, filepath.Join(prefix, "ca.pem"): caPEM} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		scheme, listenTLS = "https", " ssl"
		tlsConf = fmt.Sprintf("ssl_certificate %s;\n    ssl_certificate_key %s;\n", cert, key)
	}
	// A port that was free a moment ago can be taken before nginx binds it:
	// try another a few times.
	var lastLog string
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(t)
		conf := fmt.Sprintf(`# One process in the foreground: the test owns it and stops it by pid.
daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log info;
events { worker_connections 256; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  default_type application/octet-stream;
  types { }
  sendfile on;
  keepalive_requests 100000;
  server {
    listen 127.0.0.1:%[2]d%[3]s;
    %[4]s    root %[5]s;
    location / { }
  }
}
`, prefix, port, listenTLS, tlsConf, dir)
		confPath := filepath.Join(prefix, "nginx.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(prefix, "error.log"))
		var stderr bytes.Buffer
		cmd := exec.Command(nginx, "-p", prefix, "-c", confPath, "-e", filepath.Join(prefix, "error.log"))
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if startListening(t, cmd, addr, "nginx") {
			return fmt.Sprintf("%s://%s", scheme, addr), caPEM, filepath.Join(prefix, "access.log")
		}
		log, _ := os.ReadFile(filepath.Join(prefix, "error.log"))
		lastLog = stderr.String() + string(log)
	}
	t.Fatalf("nginx did not start:\n%s", lastLog)
	return "", nil, ""
}

// startListening starts cmd, a server that is to listen on addr, and
// waits until it does. It then arranges for the server to be stopped by
// its pid when the test ends (SIGTERM, SIGKILL after 10 s) and returns
// true; if the server exits or does not listen in 10 s, it is killed and
// reaped, and startListening returns false (a port taken meanwhile: the
// caller tries another).
func startListening(t testing.TB, cmd *exec.Cmd, addr, name string) bool {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	if !waitListening(addr, exited) {
		syscall.Kill(pid, syscall.SIGKILL)
		<-exited
		return false
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(pid, syscall.SIGKILL)
			<-exited
		}
	})
	return true
}

// waitListening waits until addr accepts connections (true), or the
// process exits or 10 s pass (false).
func waitListening(addr string, exited <-chan error) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestCertificates makes a test CA and a server certificate that it signed
// for 127.0.0.1, ::1 and localhost, valid for a day, and returns the CA's
// certificate, the server's certificate and the server's private key
// (PKCS #8), as PEM.
func TestCertificates(t testing.TB) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ztfs test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return caPEM, certPEM, keyPEM
}
