package source

import (
	"net/url"
	"path"
	"strings"
	"testing"
)

// FuzzParseHF: any string parses as an hf:// URL or is refused, never a
// panic; what parses is a repository id of the Hub's form, a path with no
// empty, . or .. segment, and prints as a URL that parses back to it.
func FuzzParseHF(f *testing.F) {
	for _, s := range []string{"hf://org/repo", "hf://org/repo@refs/pr/1/a/b", "hf://datasets/o/r@v%2F1/x", "hf://o/r/f@1.txt",
		"hf://models/o/r@", "hf://o/r@refs/convert/parquet", "hf://spaces/o/r", "HF://o/r/../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := parseHF(raw)
		if err != nil {
			return
		}
		if !hfRepoPart.MatchString(strings.Split(r.repo, "/")[0]) || strings.Count(r.repo, "/") != 1 {
			t.Fatalf("%q: repository %q", raw, r.repo)
		}
		if r.path != "" {
			for _, seg := range strings.Split(r.path, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("%q: path %q", raw, r.path)
				}
			}
		}
		again, err := parseHF(r.String())
		if err != nil || again != r {
			t.Fatalf("%q parses to %+v, printed %q, which parses to %+v, %v", raw, r, r.String(), again, err)
		}
	})
}

// FuzzHFListing: any bytes are a page of a listing or refused; every entry
// kept is directly in the folder listed, and every file has a hash to pin
// it by and a size that is not negative.
func FuzzHFListing(f *testing.F) {
	f.Add([]byte(`[{"type":"file","oid":"0123456789012345678901234567890123456789","size":3,"path":"d/a.json"},{"type":"directory","oid":"x","size":0,"path":"d/sub"}]`), "d")
	f.Add([]byte(`[{"type":"file","oid":"0123456789012345678901234567890123456789","size":134,"path":"w.bin","lfs":{"oid":"`+strings.Repeat("ab", 32)+`","size":5,"pointerSize":134},"xetHash":"x"}]`), "")
	f.Add([]byte(`[{"type":"file","path":"../etc/passwd"}]`), "")
	f.Fuzz(func(t *testing.T, body []byte, dir string) {
		if dir != "" && (path.Clean(dir) != dir || strings.HasPrefix(dir, "/") || strings.HasPrefix(dir, "..")) {
			return // the folders listed are paths of a parsed URL: clean and relative
		}
		files, err := parseHFListing(body, dir)
		if err != nil {
			return
		}
		for _, e := range files {
			parent := path.Dir(e.Path)
			if parent == "." {
				parent = ""
			}
			if parent != dir || path.Base(e.Path) == ".." || path.Base(e.Path) == "." {
				t.Fatalf("entry %q kept in the listing of %q", e.Path, dir)
			}
			if e.Type == "file" && (!hfHash.MatchString(e.etag()) || e.size() < 0) {
				t.Fatalf("file %+v kept", e)
			}
		}
	})
}

// FuzzLinkHeader: any Link header gives the next page's URL or none, never
// a panic, and what it gives is a URL.
func FuzzLinkHeader(f *testing.F) {
	f.Add(`<https://h/api/models/o/r/tree/s?cursor=x>; rel="next"`)
	f.Add(`<a>; rel="prev", </next?c=1>; rel="next last"`)
	f.Add(`<https://h/x,y>; title="a,b"; rel=next`)
	base, _ := url.Parse("https://h.example/api/models/o/r/tree/s")
	f.Fuzz(func(t *testing.T, header string) {
		next := nextLink(header, base)
		if next == "" {
			return
		}
		if _, err := url.Parse(next); err != nil {
			t.Fatalf("%q gives %q: %v", header, next, err)
		}
	})
}

// The Link headers the Hub and GitHub write, and what is not a next page.
func TestNextLink(t *testing.T) {
	base, _ := url.Parse("https://h/api/models/o/r/tree/s?limit=2")
	for header, want := range map[string]string{
		`<https://h/api/models/o/r/tree/s?cursor=abc>; rel="next"`:           "https://h/api/models/o/r/tree/s?cursor=abc",
		`<https://h/p?page=1>; rel="prev", <https://h/p?page=3>; rel="next"`: "https://h/p?page=3",
		`</api/models/o/r/tree/s?cursor=2>; rel=next`:                        "https://h/api/models/o/r/tree/s?cursor=2",
		`<https://h/p?a=1,2>; rel="last"`:                                    "",
		`<https://h/x,y>; rel="next"`:                                        "https://h/x,y",
		``:                                                                   "",
	} {
		if got := nextLink(header, base); got != want {
			t.Errorf("nextLink(%q) = %q, want %q", header, got, want)
		}
	}
}
