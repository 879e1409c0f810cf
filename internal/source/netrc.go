package source

import (
	"bufio"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
)

// maxNetrcSize bounds the netrc file read: it holds a few lines per host.
const maxNetrcSize = 1 << 20

// netrcAuthorization returns the Authorization header for host from the
// netrc file ($NETRC, else ~/.netrc), as curl and Git read it: the login
// and password of the first "machine host" entry, else of "default", sent
// as basic authentication. It returns "" when the file, or an entry with
// a password, is missing.
func netrcAuthorization(host string) string {
	path := os.Getenv("NETRC")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".netrc")
	}
	data, err := os.ReadFile(path)
	if err != nil || len(data) > maxNetrcSize {
		return ""
	}
	login, password, ok := netrcEntry(string(data), host)
	if !ok {
		return ""
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(login+":"+password))
}

// netrcEntry finds host's login and password in the text of a netrc
// file: the first "machine host" entry, else the "default" one. Macro
// definitions (macdef, up to an empty line) are skipped.
func netrcEntry(text, host string) (login, password string, ok bool) {
	type entry struct{ login, password string }
	var found, fallback *entry
	var cur *entry
	inMacro := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64<<10), maxNetrcSize)
	for sc.Scan() {
		line := sc.Text()
		if inMacro {
			inMacro = strings.TrimSpace(line) != ""
			continue
		}
		fields := strings.Fields(line)
		for i := 0; i < len(fields); i++ {
			next := func() string {
				if i+1 < len(fields) {
					i++
					return fields[i]
				}
				return ""
			}
			switch fields[i] {
			case "machine":
				cur = nil
				if name := next(); strings.EqualFold(name, host) && found == nil {
					found = &entry{}
					cur = found
				}
			case "default":
				cur = nil
				if fallback == nil {
					fallback = &entry{}
					cur = fallback
				}
			case "login":
				if v := next(); cur != nil {
					cur.login = v
				}
			case "password":
				if v := next(); cur != nil {
					cur.password = v
				}
			case "account":
				next()
			case "macdef":
				inMacro = true
				i = len(fields)
			}
		}
	}
	for _, e := range []*entry{found, fallback} {
		if e != nil && e.password != "" {
			return e.login, e.password, true
		}
	}
	return "", "", false
}
