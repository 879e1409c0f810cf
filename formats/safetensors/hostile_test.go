package safetensors_test

import (
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ztfs/ztfs/formats"
	"github.com/ztfs/ztfs/formats/formatstest"
	"github.com/ztfs/ztfs/formats/safetensors"
	"github.com/ztfs/ztfs/formats/safetensors/safetensorstest"
)

// f32a is a valid entry for tensor "a": one F32 at [0, 4].
const f32a = `"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}`

// lengthOnly is a file holding only a header length field and extra bytes.
func lengthOnly(n uint64, extra int) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, n), make([]byte, extra)...)
}

// hostileCase is a file Open must reject with an error containing want.
type hostileCase struct {
	name string
	file []byte
	want string
}

// hostileCases returns files that break each rule, in many ways.
func hostileCases() []hostileCase {
	four := make([]byte, 4)
	return []hostileCase{
		// Rule 1: at least the 8-byte length.
		{"empty", nil, "file is 0 bytes, too short"},
		{"7 bytes", make([]byte, 7), "file is 7 bytes, too short"},
		// Rule 2: N ≤ 100,000,000.
		{"N 100000001", lengthOnly(100_000_001, 100), "header length 100000001 exceeds the limit of 100000000"},
		{"N 2^63", lengthOnly(1<<63, 0), "header length 9223372036854775808 exceeds the limit"},
		{"N 2^64-1", lengthOnly(1<<64-1, 10), "header length 18446744073709551615 exceeds the limit"},
		// Rule 3: 8 + N ≤ size.
		{"N past EOF", lengthOnly(10, 9), "header length 10 runs past the end of the file (only 9 bytes"},
		{"N 100000000 small file", lengthOnly(100_000_000, 64), "header length 100000000 runs past the end"},
		// Rule 4: UTF-8.
		{"invalid byte", mkfile("{\"a\xff\":1}", nil), "header is not valid UTF-8 (first bad byte at offset 3)"},
		{"overlong NUL", mkfile("{\"\xc0\x80\":1}", nil), "header is not valid UTF-8"},
		{"UTF-8 surrogate", mkfile("{\"\xed\xa0\x80\":1}", nil), "header is not valid UTF-8"},
		{"truncated sequence", mkfile("{}\xe2\x98", nil), "header is not valid UTF-8 (first bad byte at offset 2)"},
		// Rule 5: one JSON object of the expected shape.
		{"empty header", mkfile("", nil), "header holds no JSON object"},
		{"only whitespace", mkfile(" \t\r\n", nil), "header holds no JSON object"},
		{"array", mkfile("[]", nil), "header is not a JSON object"},
		{"string", mkfile(`"{}"`, nil), "header is not a JSON object"},
		{"null", mkfile("null", nil), "header is not a JSON object"},
		{"form feed before", mkfile("\f{}", nil), "header is not a JSON object"},
		{"BOM", mkfile("\uFEFF{}", nil), "byte order mark"},
		{"two objects", mkfile("{} {}", nil), "header has byte 0x7b at offset 3 after the JSON object"},
		{"NUL after", mkfile("{}\x00", nil), "header has byte 0x00 at offset 2 after the JSON object"},
		{"vertical tab after", mkfile("{}\v", nil), "after the JSON object"},
		{"unclosed", mkfile(`{"a":{"dtype":"F32"`, nil), "header is not valid JSON"},
		{"trailing comma", mkfile(`{`+f32a+`,}`, four), "header is not valid JSON"},
		{"trailing comma in entry", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],}}`, four), "header is not valid JSON"},
		{"trailing comma in array", mkfile(`{"a":{"dtype":"F32","shape":[1,],"data_offsets":[0,4]}}`, four), "header is not valid JSON"},
		{"missing colon", mkfile(`{"a" {}}`, nil), "header is not valid JSON"},
		{"single quotes", mkfile(`{'a':{}}`, nil), "header is not valid JSON"},
		{"comment", mkfile(`{/* */}`, nil), "header is not valid JSON"},
		{"raw control char", mkfile("{\"a\tb\":{}}", nil), "header is not valid JSON"},
		{"bad escape", mkfile(`{"a\x":{}}`, nil), "header is not valid JSON"},
		{"lone lead surrogate", mkfile(`{"\ud800":{}}`, nil), `lone UTF-16 surrogate escape \ud800`},
		{"lone trail surrogate", mkfile(`{"x\uDC00":{}}`, nil), `lone UTF-16 surrogate escape \udc00`},
		{"lead then non-trail", mkfile(`{"\ud83d\u0041":{}}`, nil), `lone UTF-16 surrogate escape \ud83d`},
		{"lead then lead", mkfile(`{"\ud83d\ud83d":{}}`, nil), `lone UTF-16 surrogate escape \ud83d`},
		{"lead at end", mkfile(`{"a":{"x":"\ud83d"}}`, nil), `lone UTF-16 surrogate escape`},
		{"entry array form", mkfile(`{"a":["F32",[1],[0,4]]}`, four), `tensor "a": entry is an array, not an object`},
		{"entry null", mkfile(`{"a":null}`, nil), `tensor "a": entry is null, not an object`},
		{"entry number", mkfile(`{"a":1}`, nil), `tensor "a": entry is the number 1, not an object`},
		{"missing dtype", mkfile(`{"a":{"shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": missing field "dtype"`},
		{"missing offsets", mkfile(`{"a":{"dtype":"F32","shape":[1]}}`, four), `tensor "a": missing field "data_offsets"`},
		{"field names are case-sensitive", mkfile(`{"a":{"DTYPE":"F32","dtype":"F32","Shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": missing field "shape"`},
		{"dtype twice", mkfile(`{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": field "dtype" appears twice`},
		{"shape twice", mkfile(`{"a":{"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": field "shape" appears twice`},
		{"offsets twice", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"data_offsets":[0,4]}}`, four), `tensor "a": field "data_offsets" appears twice`},
		{"dtype number", mkfile(`{"a":{"dtype":32,"shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": dtype is the number 32, not a string`},
		{"dtype null", mkfile(`{"a":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": dtype is null, not a string`},
		{"dtype F8_E4M3FN", mkfile(`{"a":{"dtype":"F8_E4M3FN","shape":[1],"data_offsets":[0,1]}}`, four[:1]), `tensor "a": unknown dtype "F8_E4M3FN"`},
		{"dtype I4", mkfile(`{"a":{"dtype":"I4","shape":[2],"data_offsets":[0,1]}}`, four[:1]), `tensor "a": unknown dtype "I4"`},
		{"dtype C128", mkfile(`{"a":{"dtype":"C128","shape":[1],"data_offsets":[0,16]}}`, nil), `tensor "a": unknown dtype "C128"`},
		{"dtype with space", mkfile(`{"a":{"dtype":"F32 ","shape":[1],"data_offsets":[0,4]}}`, four), `tensor "a": unknown dtype "F32 "`},
		{"shape float", mkfile(`{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}`, four), `tensor "a": shape value 1.0 is not an integer`},
		{"shape exponent", mkfile(`{"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}}`, four), `tensor "a": shape value 1e0 is not an integer`},
		{"shape negative zero", mkfile(`{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}`, nil), `tensor "a": shape value -0 is negative`},
		{"shape 2^64", mkfile(`{"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}}`, four), `tensor "a": shape value 18446744073709551616 does not fit in 64 bits`},
		{"shape 10^30", mkfile(`{"a":{"dtype":"F32","shape":[1000000000000000000000000000000],"data_offsets":[0,4]}}`, four), `does not fit in 64 bits`},
		{"shape string", mkfile(`{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, four), `tensor "a": shape holds a string, not an integer`},
		{"shape nested", mkfile(`{"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}}`, four), `tensor "a": shape holds an array, not an integer`},
		{"shape null", mkfile(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, four), `tensor "a": shape is null, not an array of integers`},
		{"shape bool", mkfile(`{"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}}`, four), `tensor "a": shape holds a boolean, not an integer`},
		{"offsets 0 values", mkfile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[]}}`, nil), `tensor "a": data_offsets needs exactly 2 values, found 0`},
		{"offsets 3 values", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, four), `tensor "a": data_offsets needs exactly 2 values, found more`},
		{"offsets object", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":{"0":4}}}`, four), `tensor "a": data_offsets is an object, not an array of integers`},
		{"offset 2^64", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}}`, four), `tensor "a": data_offsets value 18446744073709551616 does not fit in 64 bits`},
		{"metadata array", mkfile(`{"__metadata__":[]}`, nil), `__metadata__ is an array, not an object of strings`},
		{"metadata string", mkfile(`{"__metadata__":"x"}`, nil), `__metadata__ is a string, not an object of strings`},
		{"metadata value null", mkfile(`{"__metadata__":{"k":null}}`, nil), `__metadata__ value for "k" is not a string but null`},
		{"metadata value bool", mkfile(`{"__metadata__":{"k":true}}`, nil), `__metadata__ value for "k" is not a string but a boolean`},
		{"metadata value array", mkfile(`{"__metadata__":{"k":["v"]}}`, nil), `__metadata__ value for "k" is not a string but an array`},
		{"metadata twice, null first", mkfile(`{"__metadata__":null,"__metadata__":{}}`, nil), `__metadata__ appears twice`},
		{"metadata key escaped", mkfile(`{"__metadata__":{},"\u005f_metadata__":{}}`, nil), `__metadata__ appears twice`},
		{"duplicate name via escape", mkfile(`{`+f32a+`,"\u0061":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), `duplicate tensor name "a"`},
		{"duplicate zero-size", mkfile(`{"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, nil), `duplicate tensor name "z"`},
		{"ignored number out of range", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1e400}}`, four), `header number 1e400 is out of range`},
		// Rule 6: the tensors tile the buffer from 0 in (begin, end) order.
		{"first at 4", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), `tensor "a": data starts at 4 but the first tensor must start at 0`},
		{"end before begin", mkfile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, four), `tensor "a": data_offsets [4, 0] end before they begin`},
		{"same span twice", mkfile(`{`+f32a+`,"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), `tensor "b": data starts at 0 but the previous tensor "a" ends at 4: the tensors overlap`},
		{"hole", mkfile(`{`+f32a+`,"b":{"dtype":"F32","shape":[1],"data_offsets":[5,9]}}`, make([]byte, 9)), `tensor "b": data starts at 5 but the previous tensor "a" ends at 4: 1 unused bytes`},
		{"zero-size inside another", mkfile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}}`, make([]byte, 8)), `tensor "z": data starts at 4 but the previous tensor "a" ends at 8: the tensors overlap`},
		{"offsets near 2^64", mkfile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}}`, nil), `tensor "a": data starts at 18446744073709551615 but the first tensor must start at 0`},
		// A single lying entry is named, not the neighbour it leaves a hole
		// before: the rules about one entry come first.
		{"lying start named", mkfile(`{`+f32a+`,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), `tensor "b": data_offsets [12, 8] end before they begin`},
		{"lying span named", mkfile(`{`+f32a+`,"b":{"dtype":"F32","shape":[1],"data_offsets":[5,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), `tensor "b": data_offsets [5, 8] span 3 bytes but shape [1] of F32 needs 4`},
		{"end 2^64-1 after a tensor", mkfile(`{`+f32a+`,"b":{"dtype":"U8","shape":[18446744073709551611],"data_offsets":[4,18446744073709551615]}}`, four), `tensor "b": 18446744073709551611 elements of U8: bit count overflows 64 bits`},
		// Rule 7: element and bit counts fit in 64 bits.
		{"element count overflow", mkfile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, nil), `tensor "a": shape [4294967296 4294967296]: element count overflows 64 bits`},
		{"overflow before a zero dim", mkfile(`{"a":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}`, nil), `element count overflows 64 bits`},
		{"U8 bit count overflow", mkfile(`{"a":{"dtype":"U8","shape":[2305843009213693952],"data_offsets":[0,2305843009213693952]}}`, nil), `tensor "a": 2305843009213693952 elements of U8: bit count overflows 64 bits`},
		{"F4 bit count overflow", mkfile(`{"a":{"dtype":"F4","shape":[4611686018427387904],"data_offsets":[0,2305843009213693952]}}`, nil), `elements of F4: bit count overflows 64 bits`},
		// Rule 8: whole bytes.
		{"F4 one element", mkfile(`{"a":{"dtype":"F4","shape":[1],"data_offsets":[0,1]}}`, four[:1]), `tensor "a": 1 elements of F4 (4 bits each) do not fill whole bytes`},
		{"F6 two elements", mkfile(`{"a":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,2]}}`, four[:2]), `2 elements of F6_E3M2 (6 bits each) do not fill whole bytes`},
		// Rule 9: the span matches shape × dtype.
		{"span too long", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)), `tensor "a": data_offsets [0, 8] span 8 bytes but shape [1] of F32 needs 4`},
		{"F4 span", mkfile(`{"a":{"dtype":"F4","shape":[4],"data_offsets":[0,1]}}`, four[:1]), `shape [4] of F4 needs 2`},
		{"scalar span", mkfile(`{"a":{"dtype":"F64","shape":[],"data_offsets":[0,4]}}`, four), `shape [] of F64 needs 8`},
		{"huge span checked before EOF", mkfile(`{"a":{"dtype":"F4","shape":[2305843009213693952],"data_offsets":[0,1152921504606846977]}}`, nil), `needs 1152921504606846976`},
		// Rule 10: the last tensor ends at EOF.
		{"one byte after", mkfile(`{`+f32a+`}`, make([]byte, 5)), `1 bytes after the last tensor`},
		{"bytes after empty header", mkfile(`{}`, four), `4 bytes after the header, which declares no tensor data`},
		{"bytes after zero-size tensors", mkfile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, four), `4 bytes after the last tensor`},
		{"truncated", mkfile(`{`+f32a+`}`, four[:3]), `tensor "a": data ends at 4 but the data buffer holds only 3 bytes`},
		{"offset far past EOF", mkfile(`{"a":{"dtype":"F4","shape":[2305843009213693952],"data_offsets":[0,1152921504606846976]}}`, nil), `tensor "a": data ends at 1152921504606846976 but the data buffer holds only 0 bytes`},
		{"2^64-1 past EOF", mkfile(`{"a":{"dtype":"F8_E8M0","shape":[18446744073709551615],"data_offsets":[0,18446744073709551615]}}`, nil), `bit count overflows 64 bits`},
	}
}

// TestHostile feeds files that break each rule and checks that Open names
// the reason in one line.
func TestHostile(t *testing.T) {
	for _, tt := range hostileCases() {
		t.Run(tt.name, func(t *testing.T) {
			c, err := formatstest.OpenBytes(safetensors.Open, tt.file)
			if err == nil {
				t.Fatalf("Open succeeded with %d tensors, want an error containing %q", len(c.Tensors), tt.want)
			}
			formatstest.Refused(t, err, "safetensors", tt.want)
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("error %q spans several lines", err)
			}
		})
	}
}

// lenientCase is a file Open must accept, giving the tensors names.
type lenientCase struct {
	name  string
	file  []byte
	names []string
}

// lenientCases returns files that use the official reader's leniencies.
func lenientCases() []lenientCase {
	four := make([]byte, 4)
	return []lenientCase{
		{"whitespace around", mkfile(" \t\r\n{"+f32a+"}\n\r\t ", four), []string{"a"}},
		{"whitespace inside", mkfile("{ \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 4 ] } }", four), []string{"a"}},
		{"unknown fields of any type", mkfile(`{"a":{"x":null,"dtype":"F32","y":{"z":[1.5,-2e3,"s",true]},"shape":[1],"data_offsets":[0,4],"dtype_":"bad"}}`, four), []string{"a"}},
		{"unknown field repeated", mkfile(`{"a":{"x":1,"x":2,"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), []string{"a"}},
		{"tiny ignored number", mkfile(`{"a":{"x":1e-400,"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), []string{"a"}},
		{"escaped field names", mkfile(`{"a":{"\u0064type":"F32","shape":[1],"data_offsets":[0,4]}}`, four), []string{"a"}},
		{"escaped dtype", mkfile(`{"a":{"dtype":"F\u00332","shape":[1],"data_offsets":[0,4]}}`, four), []string{"a"}},
		{"surrogate pair", mkfile(`{"\ud83d\ude00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), []string{"😀"}},
		{"escapes in names", mkfile(`{"q\"b\\s\/\n\u0000":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, four), []string{"q\"b\\s/\n\x00"}},
		{"zero-size tensors share offsets", mkfile(`{"z2":{"dtype":"I64","shape":[0,5],"data_offsets":[4,4]},`+f32a+`,"z1":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]},"z3":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}}`, four), []string{"a", "z1", "z2", "z3"}},
		{"zero dim first hides huge dims", mkfile(`{"z":{"dtype":"U8","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}}`, nil), []string{"z"}},
		{"zero dim with huge dims", mkfile(`{"z":{"dtype":"F64","shape":[0,18446744073709551615],"data_offsets":[0,0]}}`, nil), []string{"z"}},
		{"scalar", mkfile(`{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}}`, make([]byte, 8)), []string{"s"}},
		{"empty header object", mkfile(`{}`, nil), nil},
		{"metadata null", mkfile(`{"__metadata__":null}`, nil), nil},
		{"metadata last", mkfile(`{`+f32a+`,"__metadata__":{"k":"v"}}`, four), []string{"a"}},
		{"leading zero-length header padding", mkfile(strings.Repeat(" ", 4096)+"{}", nil), nil},
		{"nesting 127 deep", mkfile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":`+strings.Repeat("[", 125)+strings.Repeat("]", 125)+`}}`, four), []string{"a"}},
	}
}

// TestLenient checks the official reader's leniencies, which ztfs keeps.
func TestLenient(t *testing.T) {
	for _, tt := range lenientCases() {
		t.Run(tt.name, func(t *testing.T) {
			c := formatstest.MustOpen(t, safetensors.Open, tt.file)
			safetensorstest.CheckInvariants(t, c, tt.file)
			var names []string
			for _, tn := range c.Tensors {
				names = append(names, tn.Name)
			}
			if strings.Join(names, "|") != strings.Join(tt.names, "|") || len(names) != len(tt.names) {
				t.Fatalf("tensors %q, want %q", names, tt.names)
			}
		})
	}
}

// TestDeepNesting checks that deeply nested JSON fails fast with an error
// instead of exhausting the stack or memory.
func TestDeepNesting(t *testing.T) {
	const deep = 1_000_000
	tests := []struct {
		name, header, want string
	}{
		{"bare arrays", strings.Repeat("[", deep), "header is not a JSON object"},
		{"closed bare arrays", strings.Repeat("[", deep) + strings.Repeat("]", deep), "header is not a JSON object"},
		{"ignored field", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":` + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "}}", "nests JSON more than 127 levels deep"},
		{"ignored objects", `{"a":` + strings.Repeat(`{"b":`, deep), "nests JSON more than 127 levels deep"},
		{"just past the limit", `{"a":{"x":` + strings.Repeat("[", 126) + strings.Repeat("]", 126) + "}}", "nests JSON more than 127 levels deep"},
		{"metadata", `{"__metadata__":{"k":` + strings.Repeat("[", deep), `__metadata__ value for "k" is not a string`},
		{"shape", `{"a":{"shape":` + strings.Repeat("[", deep), `tensor "a": shape holds an array`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			_, err := formatstest.OpenBytes(safetensors.Open, mkfile(tt.header, nil))
			formatstest.Refused(t, err, "safetensors", tt.want)
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// recordingReader serves a file made of a length field, a header prefix
// and fill bytes up to any size, without holding it, and records the
// largest read.
type recordingReader struct {
	n       uint64
	prefix  string
	fill    byte
	maxRead int
}

func (r *recordingReader) ReadAt(p []byte, off int64) (int, error) {
	r.maxRead = max(r.maxRead, len(p))
	var lenField [8]byte
	binary.LittleEndian.PutUint64(lenField[:], r.n)
	for i := range p {
		switch pos := off + int64(i); {
		case pos < 8:
			p[i] = lenField[pos]
		case pos-8 < int64(len(r.prefix)):
			p[i] = r.prefix[pos-8]
		default:
			p[i] = r.fill
		}
	}
	return len(p), nil
}

// TestHugeLengthSmallFile checks that a forged header length makes Open
// neither read nor allocate more than the file holds.
func TestHugeLengthSmallFile(t *testing.T) {
	for _, n := range []uint64{100_000_000, 1 << 40, 1<<64 - 1} {
		r := &recordingReader{n: n, fill: '{'}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := safetensors.Open(r, 64)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("N=%d: Open succeeded", n)
		}
		if r.maxRead > 8 {
			t.Errorf("N=%d: read %d bytes at once", n, r.maxRead)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("N=%d: allocated %d bytes", n, grew)
		}
	}
}

// TestMaxHeaderSize checks that a header of exactly 100,000,000 bytes is
// accepted: the limit is inclusive.
func TestMaxHeaderSize(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a 100 MB header")
	}
	r := &recordingReader{n: safetensors.MaxHeaderSize, prefix: "{}", fill: ' '}
	c, err := safetensors.Open(r, 8+safetensors.MaxHeaderSize)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tensors) != 0 {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
}

// failingReader fails every read.
type failingReader struct{ err error }

func (r failingReader) ReadAt([]byte, int64) (int, error) { return 0, r.err }

// shortReader returns fewer bytes than asked, without an error.
type shortReader struct{ b []byte }

func (r shortReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r.b)) {
		return 0, nil
	}
	return copy(p[:min(len(p), 4)], r.b[off:]), nil
}

// TestReadErrors checks that I/O errors and short reads are reported as
// read errors, not as faults of the file, and that a negative size is
// handled.
func TestReadErrors(t *testing.T) {
	boom := errors.New("boom")
	isReadError := func(err error) bool {
		var re *formats.ReadError
		var fe *formats.Error
		return errors.As(err, &re) && re.Off == 0 && re.Len == 8 && !errors.As(err, &fe)
	}
	if _, err := safetensors.Open(failingReader{boom}, 100); !errors.Is(err, boom) || !isReadError(err) {
		t.Errorf("failing reader: %v", err)
	}
	file := mkfile(`{`+f32a+`}`, make([]byte, 4))
	if _, err := safetensors.Open(shortReader{file}, int64(len(file))); !errors.Is(err, io.ErrUnexpectedEOF) || !isReadError(err) {
		t.Errorf("short reader: %v", err)
	}
	if _, err := safetensors.Open(failingReader{boom}, -1); !errors.Is(err, formats.ErrTruncated) {
		t.Errorf("negative size: %v", err)
	}
}

// TestTensorMapping checks the mapping of one tensor in full.
func TestTensorMapping(t *testing.T) {
	file := mkfile(`{"__metadata__":{"k":"v"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12],"extra":1}}`, make([]byte, 12))
	c := formatstest.MustOpen(t, safetensors.Open, file)
	hdr := uint64(len(file) - 12)
	want := &formats.Tensor{
		Name:       "w",
		Shape:      []uint64{2, 3},
		DType:      formats.BF16,
		Layout:     "dense",
		Attributes: map[string]any{},
		Components: []*formats.Component{{Role: "data", DType: formats.BF16, Offset: hdr, Length: 12, Encoding: formats.Raw, Size: 12}},
		Logical:    formats.Dense{Role: "data", DType: formats.BF16},
	}
	if len(c.Tensors) != 1 {
		t.Fatalf("%d tensors", len(c.Tensors))
	}
	got := c.Tensors[0]
	if got.Name != want.Name || got.DType != want.DType || got.Layout != want.Layout || got.Path != nil ||
		got.Logical != want.Logical || got.Unsupported != "" || len(got.Attributes) != 0 || got.Attributes == nil ||
		len(got.Components) != 1 || !reflect.DeepEqual(got.Components[0], want.Components[0]) || len(got.Shape) != 2 || got.Shape[0] != 2 || got.Shape[1] != 3 {
		t.Fatalf("got %+v (component %+v), want %+v", got, got.Components[0], want)
	}
	if c.Format != "safetensors" || c.FormatVersion != "" || c.Attributes["k"] != "v" || c.Files != nil {
		t.Fatalf("container %+v", c)
	}
	// Scalars get a non-nil, empty shape.
	c = formatstest.MustOpen(t, safetensors.Open, mkfile(`{"s":{"dtype":"U8","shape":[],"data_offsets":[0,1]}}`, []byte{7}))
	if s := c.Tensors[0].Shape; s == nil || len(s) != 0 {
		t.Fatalf("scalar shape %#v", s)
	}
}
