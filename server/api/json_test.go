package api

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCheck(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		rule, key string
		idem      string
		cost      uint64
		hasCost   bool
		costErr   bool
		err       bool
	}{
		{name: "full", in: `{"rule":"api","key":"203.0.113.7","cost":3}`, rule: "api", key: "203.0.113.7", cost: 3, hasCost: true},
		{name: "spaces", in: " \n{ \"rule\" : \"api\" ,\t\"key\":\"k\" }\r\n", rule: "api", key: "k"},
		{name: "no cost", in: `{"rule":"api","key":"k"}`, rule: "api", key: "k"},
		{name: "null cost", in: `{"rule":"api","key":"k","cost":null}`, rule: "api", key: "k"},
		{name: "zero cost", in: `{"rule":"a","key":"k","cost":0}`, rule: "a", key: "k", hasCost: true, costErr: true},
		{name: "negative cost", in: `{"rule":"a","key":"k","cost":-1}`, rule: "a", key: "k", hasCost: true, costErr: true},
		{name: "fraction cost", in: `{"rule":"a","key":"k","cost":1.5}`, rule: "a", key: "k", hasCost: true, costErr: true},
		{name: "exp cost", in: `{"rule":"a","key":"k","cost":1e3}`, rule: "a", key: "k", hasCost: true, costErr: true},
		{name: "huge cost", in: `{"rule":"a","key":"k","cost":184467440737095516150}`, rule: "a", key: "k", hasCost: true, costErr: true},
		{name: "escapes", in: `{"rule":"a","key":"\u00e9\"\\\/\n\ud83d\ude00x"}`, rule: "a", key: "é\"\\/\n😀x"},
		{name: "lone surrogate", in: `{"rule":"a","key":"\ud83dx"}`, rule: "a", key: "\uFFFDx"},
		{name: "unknown fields skipped", in: `{"x":[1,{"y":null},true,false,"s",-0.5e+2],"rule":"a","z":{},"key":"k"}`, rule: "a", key: "k"},
		{name: "last duplicate wins", in: `{"rule":"a","rule":"b","key":"k"}`, rule: "b", key: "k"},
		{name: "empty object", in: `{}`},
		{name: "idempotency key", in: `{"rule":"a","key":"k","idempotency_key":"req-1"}`, rule: "a", key: "k", idem: "req-1"},
		{name: "idempotency key escaped", in: `{"idempotency_key":"r\u00e9q","rule":"a","key":"k"}`, rule: "a", key: "k", idem: "réq"},
		{name: "idempotency key null", in: `{"rule":"a","key":"k","idempotency_key":"x","idempotency_key":null}`, rule: "a", key: "k"},
		{name: "idempotency key case matters", in: `{"rule":"a","key":"k","Idempotency_Key":"x"}`, rule: "a", key: "k"},
		{name: "idempotency key number", in: `{"rule":"a","key":"k","idempotency_key":7}`, err: true},
		{name: "idempotency key object", in: `{"rule":"a","key":"k","idempotency_key":{}}`, err: true},
		{name: "null key", in: `{"rule":"a","key":null}`, rule: "a"},
		{name: "empty", in: ``, err: true},
		{name: "array", in: `[]`, err: true},
		{name: "trailing", in: `{"rule":"a"} x`, err: true},
		{name: "two objects", in: `{}{}`, err: true},
		{name: "truncated", in: `{"rule":"a`, err: true},
		{name: "missing colon", in: `{"rule" "a"}`, err: true},
		{name: "trailing comma", in: `{"rule":"a",}`, err: true},
		{name: "number key", in: `{"rule":"a","key":7}`, err: true},
		{name: "string cost", in: `{"rule":"a","key":"k","cost":"1"}`, err: true},
		{name: "bool cost", in: `{"cost":true}`, err: true},
		{name: "control char", in: "{\"key\":\"a\x01\"}", err: true},
		{name: "bad escape", in: `{"key":"\x"}`, err: true},
		{name: "bad unicode", in: `{"key":"\u12"}`, err: true},
		{name: "bad literal", in: `{"x":nul}`, err: true},
		{name: "leading zero", in: `{"x":01}`, err: true},
		{name: "bare minus", in: `{"cost":-}`, err: true},
		{name: "deep nesting", in: `{"x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c check
			err := parseCheckBody([]byte(tt.in), &c)
			if tt.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.rule, string(c.rule))
			assert.Equal(t, tt.key, string(c.key))
			assert.Equal(t, tt.idem, string(c.idem))
			assert.Equal(t, tt.hasCost, c.hasCost)
			assert.Equal(t, tt.costErr, c.costErr)
			if !tt.costErr {
				assert.Equal(t, tt.cost, c.cost)
			}
		})
	}
}

// TestParseCost holds a check's cost and the errors around it to exact
// values and messages: plain integers of up to 19 digits are read in place,
// every other number as strconv.ParseUint reads it.
func TestParseCost(t *testing.T) {
	const head = `{"rule":"a","key":"k","cost":`
	tests := []struct {
		in            string
		cost          uint64
		hasCost, cerr bool
		err           string
	}{
		{in: `1}`, cost: 1, hasCost: true},
		{in: `7 }`, cost: 7, hasCost: true},
		{in: `9999999999999999999}`, cost: 9999999999999999999, hasCost: true},
		{in: `18446744073709551615}`, cost: 18446744073709551615, hasCost: true},
		{in: `18446744073709551616}`, hasCost: true, cerr: true},
		{in: `12345678901234567890123}`, hasCost: true, cerr: true},
		{in: `0}`, hasCost: true, cerr: true},
		{in: `-0}`, hasCost: true, cerr: true},
		{in: `-5}`, hasCost: true, cerr: true},
		{in: `1.0}`, hasCost: true, cerr: true},
		{in: `1e0}`, hasCost: true, cerr: true},
		{in: `1E2}`, hasCost: true, cerr: true},
		{in: `null}`},
		{in: `01}`, err: "invalid JSON: want ',' or '}' at offset 30"},
		{in: `00}`, err: "invalid JSON: want ',' or '}' at offset 30"},
		{in: `7x}`, err: "invalid JSON: want ',' or '}' at offset 30"},
		{in: `1.}`, err: "invalid JSON: bad number at offset 29"},
		{in: `1e}`, err: "invalid JSON: bad number at offset 29"},
		{in: `10`, err: "unexpected end of JSON input at offset 31"},
		{in: ``, err: "unexpected end of JSON input at offset 29"},
		{in: `"7"}`, err: "wrong JSON type: cost: want a number at offset 29"},
		{in: `[1]}`, err: "wrong JSON type: cost: want a number at offset 29"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var c check
			err := parseCheckBody([]byte(head+tt.in), &c)
			if tt.err != "" {
				require.Error(t, err)
				assert.Equal(t, tt.err, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.hasCost, c.hasCost)
			assert.Equal(t, tt.cerr, c.costErr)
			if !tt.cerr {
				assert.Equal(t, tt.cost, c.cost)
			}
		})
	}
}

// A string's bytes stand for themselves up to a quote, a backslash or a
// control character, whatever their value above 0x1f.
func TestParseStringBytes(t *testing.T) {
	for c := 0; c < 256; c++ {
		in := []byte(`{"rule":"a","key":"x` + string([]byte{byte(c)}) + `y"}`)
		var ck check
		err := parseCheckBody(in, &ck)
		switch {
		case c == '"':
			assert.EqualError(t, err, "invalid JSON: want ',' or '}' at offset 21", "byte %#x", c)
		case c == '\\':
			assert.EqualError(t, err, "invalid JSON: bad escape at offset 20", "byte %#x", c)
		case c < 0x20:
			assert.EqualError(t, err, "invalid JSON: control character in string at offset 20", "byte %#x", c)
		default:
			require.NoError(t, err, "byte %#x", c)
			assert.Equal(t, "x"+string([]byte{byte(c)})+"y", string(ck.key), "byte %#x", c)
		}
	}
}

func TestParseChecks(t *testing.T) {
	cs, atomic, err := parseChecksBody([]byte(`{"other":1,"checks":[{"rule":"a","key":"1"},{"rule":"b","key":"2","cost":2}]}`), nil, 10)
	require.NoError(t, err)
	require.Len(t, cs, 2)
	assert.False(t, atomic)
	assert.Equal(t, "b", string(cs[1].rule))
	assert.Equal(t, uint64(2), cs[1].cost)

	cs, _, err = parseChecksBody([]byte(`{"checks":[]}`), cs, 10)
	require.NoError(t, err)
	assert.Empty(t, cs)
	cs, _, err = parseChecksBody([]byte(`{}`), cs, 10)
	require.NoError(t, err)
	assert.Empty(t, cs)

	_, _, err = parseChecksBody([]byte(`{"checks":[{},{},{}]}`), nil, 2)
	assert.ErrorIs(t, err, errTooMany)
	for _, bad := range []string{`{"checks":{}}`, `{"checks":[1]}`, `{"checks":[{}`, `{"checks":[{}] `[:12], `[]`, `{"checks":[{},]}`} {
		_, _, err = parseChecksBody([]byte(bad), nil, 10)
		assert.Error(t, err, bad)
	}
}

func TestParseChecksAtomic(t *testing.T) {
	for in, want := range map[string]bool{
		`{"checks":[{"rule":"a","key":"1"}],"atomic":true}`: true,
		`{"atomic":true,"checks":[]}`:                       true,
		` { "atomic" : false , "checks" : [ ] } `:           false,
		`{"atomic":null}`:                                   false,
		`{"atomic":true,"atomic":false}`:                    false,
		`{"atomic":false,"atomic":true}`:                    true,
		`{"atomic":true,"atomic":null}`:                     false,
		`{"Atomic":true}`:                                   false,
		`{"checks":[{"atomic":true}]}`:                      false,
	} {
		_, atomic, err := parseChecksBody([]byte(in), nil, 10)
		require.NoError(t, err, in)
		assert.Equal(t, want, atomic, in)
	}
	for in, msg := range map[string]string{
		`{"atomic":1}`:      "atomic: want true or false",
		`{"atomic":"true"}`: "atomic: want true or false",
		`{"atomic":[true]}`: "atomic: want true or false",
		`{"atomic":{}}`:     "atomic: want true or false",
		`{"atomic":tru}`:    "bad literal",
		`{"atomic":truex}`:  "want ',' or '}'",
		`{"atomic":}`:       "unexpected character",
		`{"atomic":"x}`:     "unexpected end",
		`{"atomic":true`:    "unexpected end",
		`{"atomic":fals}`:   "bad literal",
		`{"atomic":nul`:     "unexpected end",
		`{"atomic":true}{}`: "after top-level value",
		`{"atomic":[1,}`:    "unexpected character",
		`{"atomic":"\x"}`:   "bad escape",
		`{"atomic":-}`:      "bad number",
		`{"atomic":true,}`:  "unexpected character",
	} {
		_, _, err := parseChecksBody([]byte(in), nil, 10)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
		// encoding/json rejects each too.
		var v struct {
			Atomic bool `json:"atomic"`
		}
		assert.Error(t, json.Unmarshal([]byte(in), &v), in)
	}
}

// TestParseDifferential mutates valid documents at random and checks that
// whatever encoding/json finds invalid the parser rejects too.
func TestParseDifferential(t *testing.T) {
	seed := uint64(42)
	rng := rand.New(rand.NewPCG(seed, 7))
	base := []string{
		`{"rule":"api","key":"203.0.113.7","cost":1}`,
		`{"checks":[{"rule":"a","key":"x\u00e9"},{"rule":"b","key":"y","cost":2,"z":[true,null,{"q":-1.5e3}]}]}`,
		`{"atomic":true,"checks":[{"rule":"a","key":"k"}],"atomic":false}`,
		`{"rule":"api","key":"k","tier":"pro","cost":2}`,
		`{"rule":"api","key":"k","idempotency_key":"req-1","cost":2}`,
	}
	const alphabet = "{}[]\",:\\ 0123456789-.eEtrufalsn"
	for i := 0; i < 20000; i++ {
		b := []byte(base[rng.IntN(len(base))])
		for n := rng.IntN(3) + 1; n > 0; n-- {
			p := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b = append(b[:p], b[p+1:]...)
			case 1:
				b[p] = alphabet[rng.IntN(len(alphabet))]
			default:
				b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
			}
		}
		var c check
		err1 := parseCheckBody(b, &c)
		_, _, err2 := parseChecksBody(b, nil, 1000)
		if !json.Valid(b) {
			require.Error(t, err1, "seed %d: accepted invalid JSON %q", seed, b)
			require.Error(t, err2, "seed %d: accepted invalid JSON %q", seed, b)
		}
	}
}

func FuzzParseCheck(f *testing.F) {
	f.Add([]byte(`{"rule":"api","key":"k","cost":1}`))
	f.Add([]byte(`{"checks":[{"rule":"a","key":"\u00e9"}]}`))
	f.Add([]byte(`{"checks":[{"rule":"a","key":"k"}],"atomic":true}`))
	f.Add([]byte(`{"atomic":null,"atomic":false,"checks":null}`))
	f.Add([]byte(`{"rule":"api","key":"k","idempotency_key":"7c1f\u00e9","idempotency_key":null}`))
	f.Add([]byte(`{"checks":[{"rule":"a","key":"k","idempotency_key":"i-1"}],"atomic":true}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c check
		err := parseCheckBody(b, &c)
		cs, atomic, err2 := parseChecksBody(b, nil, 100)
		if !json.Valid(b) && (err == nil || err2 == nil) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		if !utf8.Valid(b) {
			return
		}
		// What the reader returns is what encoding/json reads.
		var m map[string]any
		if err == nil || err2 == nil {
			if jerr := json.Unmarshal(b, &m); jerr != nil {
				t.Fatalf("accepted %q, which encoding/json rejects: %v", b, jerr)
			}
		}
		if err == nil {
			for _, f := range []struct {
				name string
				got  []byte
			}{{"rule", c.rule}, {"key", c.key}, {"tier", c.tier}, {"idempotency_key", c.idem}} {
				if v, ok := m[f.name].(string); ok && v != string(f.got) {
					t.Fatalf("%q: %s = %q, encoding/json reads %q", b, f.name, f.got, v)
				}
			}
		}
		if err2 == nil {
			switch v := m["atomic"].(type) {
			case nil: // omitted or null
				if atomic {
					t.Fatalf("%q: atomic = true, encoding/json reads %v", b, v)
				}
			case bool:
				if atomic != v {
					t.Fatalf("%q: atomic = %v, encoding/json reads %v", b, atomic, v)
				}
			default:
				t.Fatalf("%q: accepted atomic %v, not a boolean", b, v)
			}
			if arr, ok := m["checks"].([]any); ok && len(arr) != len(cs) {
				t.Fatalf("%q: %d checks, encoding/json reads %d", b, len(cs), len(arr))
			}
		}
	})
}

// BenchmarkParseChecks100 parses a /v1/checks body of 100 checks with the
// API's reader (also with "atomic":true), and with encoding/json into the
// same shape as the baseline in the same run: the reason the API has its
// own reader.
func BenchmarkParseChecks100(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := 0; i < 100; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"rule":"api","key":"10.0.0.` + string(rune('0'+i%10)) + `","cost":1}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	atomicBody := []byte(`{"atomic":true,` + sb.String()[1:])
	reader := func(body []byte, atomic bool) func(b *testing.B) {
		return func(b *testing.B) {
			var dst []check
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var err error
				var got bool
				if dst, got, err = parseChecksBody(body, dst, 1000); err != nil || got != atomic {
					b.Fatal(err, got)
				}
			}
		}
	}
	b.Run("reader", reader(body, false))
	b.Run("reader-atomic", reader(atomicBody, true))
	b.Run("encoding-json", func(b *testing.B) {
		type jcheck struct {
			Rule string  `json:"rule"`
			Key  string  `json:"key"`
			Cost *uint64 `json:"cost"`
		}
		var dst struct {
			Checks []jcheck `json:"checks"`
			Atomic bool     `json:"atomic"`
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			dst.Checks = dst.Checks[:0]
			if err := json.Unmarshal(body, &dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkParseCheck parses a /v1/check body, as scripts/bench-http.sh
// sends it.
func BenchmarkParseCheck(b *testing.B) {
	body := []byte(`{"rule":"bench","key":"10.0.3.232","cost":1}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var c check
	for b.Loop() {
		if err := parseCheckBody(body, &c); err != nil || c.cost != 1 {
			b.Fatal(err)
		}
	}
}
