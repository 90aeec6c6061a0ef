package api

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small, allocation-lean JSON reader for the decision API's two request
// shapes, {"rule","key","cost","tier","idempotency_key"} and
// {"checks":[...],"atomic":bool}. It accepts exactly what
// encoding/json accepts for these shapes (unknown fields are skipped, null
// means omitted, the last duplicate field wins) and rejects what it rejects.
// Strings without escapes are returned as slices of the input.
//
// Why not encoding/json: /v1/checks must reach a million decisions per second
// on two cores, and encoding/json spends 8x the time of the decisions' own
// parse on a 100-check body (BenchmarkParseChecks100: about 81 us and 207
// allocations against 10 us and none here). FuzzParseCheck and
// TestParseDifferential hold it to encoding/json: it rejects what that
// rejects, and the rule, key, tier, idempotency key and atomic flag it
// reads are the ones encoding/json reads.

// check is one decoded check request. rule, key, tier and idem (the
// idempotency key) may alias the request body and are valid only while it
// is.
type check struct {
	rule, key, tier, idem []byte
	cost                  uint64
	hasCost               bool
	// costErr is set for a cost that is present but not a positive integer.
	costErr bool
}

var (
	errJSONSyntax  = errors.New("invalid JSON")
	errJSONEOF     = errors.New("unexpected end of JSON input")
	errJSONType    = errors.New("wrong JSON type")
	errJSONTrailer = errors.New("invalid JSON after top-level value")
)

type jsonErr struct {
	err error
	off int
	msg string
}

func (e *jsonErr) Error() string {
	s := e.err.Error()
	if e.msg != "" {
		s += ": " + e.msg
	}
	return s + " at offset " + strconv.Itoa(e.off)
}

func (e *jsonErr) Unwrap() error { return e.err }

func synErr(off int, msg string) error { return &jsonErr{err: errJSONSyntax, off: off, msg: msg} }

func ws(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// parseCheckBody parses a whole body holding one check object.
func parseCheckBody(b []byte, c *check) error {
	i := ws(b, 0)
	i, err := parseCheck(b, i, c)
	if err != nil {
		return err
	}
	if i = ws(b, i); i != len(b) {
		return &jsonErr{err: errJSONTrailer, off: i}
	}
	return nil
}

// parseChecksBody parses {"checks":[...],"atomic":bool} into dst (reused)
// and returns it and atomic ("atomic" omitted or null: false). It fails
// with errTooMany once more than max checks are seen.
func parseChecksBody(b []byte, dst []check, max int) (checks []check, atomic bool, err error) {
	i := ws(b, 0)
	if i >= len(b) {
		return dst, false, &jsonErr{err: errJSONEOF, off: i}
	}
	if b[i] != '{' {
		return dst, false, &jsonErr{err: errJSONType, off: i, msg: "want an object"}
	}
	i = ws(b, i+1)
	seen := false
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			name, j, err := parseString(b, i)
			if err != nil {
				return dst, false, err
			}
			if i = ws(b, j); i >= len(b) || b[i] != ':' {
				return dst, false, synErr(i, "want ':'")
			}
			i = ws(b, i+1)
			switch string(name) {
			case "checks":
				dst, i, err = parseCheckArray(b, i, dst[:0], max)
				if err != nil {
					return dst, false, err
				}
				seen = true
			case "atomic":
				if atomic, i, err = parseBool(b, i, "atomic"); err != nil {
					return dst, false, err
				}
			default:
				if i, err = skipValue(b, i, 0); err != nil {
					return dst, false, err
				}
			}
			if i = ws(b, i); i >= len(b) {
				return dst, false, &jsonErr{err: errJSONEOF, off: i}
			}
			if b[i] == '}' {
				i++
				break
			}
			if b[i] != ',' {
				return dst, false, synErr(i, "want ',' or '}'")
			}
			i = ws(b, i+1)
		}
	}
	if i = ws(b, i); i != len(b) {
		return dst, false, &jsonErr{err: errJSONTrailer, off: i}
	}
	if !seen {
		dst = dst[:0]
	}
	return dst, atomic, nil
}

// parseBool parses true, false or null (false) at b[i]; field names the
// field in a type error.
func parseBool(b []byte, i int, field string) (bool, int, error) {
	if i >= len(b) {
		return false, i, &jsonErr{err: errJSONEOF, off: i}
	}
	switch b[i] {
	case 't':
		j, err := lit(b, i, "true")
		return err == nil, j, err
	case 'f':
		j, err := lit(b, i, "false")
		return false, j, err
	case 'n':
		j, err := lit(b, i, "null")
		return false, j, err
	}
	if j, err := skipValue(b, i, 0); err != nil {
		return false, j, err
	}
	return false, i, &jsonErr{err: errJSONType, off: i, msg: field + ": want true or false"}
}

var errTooMany = errors.New("too many checks")

func parseCheckArray(b []byte, i int, dst []check, max int) ([]check, int, error) {
	if i >= len(b) {
		return dst, i, &jsonErr{err: errJSONEOF, off: i}
	}
	if isNull(b, i) {
		return dst, i + 4, nil
	}
	if b[i] != '[' {
		return dst, i, &jsonErr{err: errJSONType, off: i, msg: "checks: want an array"}
	}
	i = ws(b, i+1)
	if i < len(b) && b[i] == ']' {
		return dst, i + 1, nil
	}
	for {
		if len(dst) >= max {
			return dst, i, errTooMany
		}
		dst = append(dst, check{})
		var err error
		if i, err = parseCheck(b, i, &dst[len(dst)-1]); err != nil {
			return dst, i, err
		}
		if i = ws(b, i); i >= len(b) {
			return dst, i, &jsonErr{err: errJSONEOF, off: i}
		}
		if b[i] == ']' {
			return dst, i + 1, nil
		}
		if b[i] != ',' {
			return dst, i, synErr(i, "want ',' or ']'")
		}
		i = ws(b, i+1)
	}
}

func isNull(b []byte, i int) bool {
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

// parseCheck parses one check object starting at b[i] (no leading space).
func parseCheck(b []byte, i int, c *check) (int, error) {
	*c = check{}
	if i >= len(b) {
		return i, &jsonErr{err: errJSONEOF, off: i}
	}
	if b[i] != '{' {
		return i, &jsonErr{err: errJSONType, off: i, msg: "want an object"}
	}
	i = ws(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		name, j, err := parseString(b, i)
		if err != nil {
			return j, err
		}
		if i = ws(b, j); i >= len(b) || b[i] != ':' {
			return i, synErr(i, "want ':'")
		}
		i = ws(b, i+1)
		var dst *[]byte
		switch string(name) {
		case "rule":
			dst = &c.rule
		case "key":
			dst = &c.key
		case "tier":
			dst = &c.tier
		case "idempotency_key":
			dst = &c.idem
		case "cost":
			if i, err = parseCost(b, i, c); err != nil {
				return i, err
			}
		default:
			if i, err = skipValue(b, i, 0); err != nil {
				return i, err
			}
		}
		if dst != nil {
			var s []byte
			if isNull(b, i) {
				i += 4
			} else if s, i, err = parseString(b, i); err != nil {
				var je *jsonErr
				if errors.As(err, &je) && je.err == errJSONType {
					je.msg = string(name) + ": want a string"
				}
				return i, err
			}
			*dst = s
		}
		if i = ws(b, i); i >= len(b) {
			return i, &jsonErr{err: errJSONEOF, off: i}
		}
		if b[i] == '}' {
			return i + 1, nil
		}
		if b[i] != ',' {
			return i, synErr(i, "want ',' or '}'")
		}
		i = ws(b, i+1)
	}
}

// parseCost parses a check's "cost" value at b[i] into c: null (omitted),
// or a number; a number that is not a positive integer of at most 64 bits
// sets c.costErr.
func parseCost(b []byte, i int, c *check) (int, error) {
	if isNull(b, i) {
		c.hasCost, c.costErr, c.cost = false, false, 0
		return i + 4, nil
	}
	if i >= len(b) || (b[i] != '-' && (b[i] < '0' || b[i] > '9')) {
		if i >= len(b) {
			return i, &jsonErr{err: errJSONEOF, off: i}
		}
		if j, err := skipValue(b, i, 0); err != nil {
			return j, err
		}
		return i, &jsonErr{err: errJSONType, off: i, msg: "cost: want a number"}
	}
	// The usual cost, a plain integer of up to 19 digits (below 2^64) not
	// followed by a fraction or an exponent, is read in place.
	if v, j := plainUint(b, i); j > i {
		c.hasCost, c.cost, c.costErr = true, v, v == 0
		return j, nil
	}
	start := i
	j, err := skipNumber(b, i)
	if err != nil {
		return j, err
	}
	c.hasCost = true
	v, perr := strconv.ParseUint(string(b[start:j]), 10, 64)
	c.cost, c.costErr = v, perr != nil || v == 0
	return j, nil
}

// plainUint reads a JSON integer at b[i] of up to 19 digits, without sign,
// fraction or exponent, and returns it and its end; j == i when b[i:] is
// not one (a number skipNumber and strconv.ParseUint must judge).
func plainUint(b []byte, i int) (v uint64, j int) {
	j = i
	for j < len(b) && j-i < 19 && b[j] >= '0' && b[j] <= '9' {
		v = v*10 + uint64(b[j]-'0')
		j++
	}
	switch {
	case j == i:
		return 0, i
	case b[i] == '0' && j-i > 1: // a leading zero: not JSON
		return 0, i
	case j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E' || (b[j] >= '0' && b[j] <= '9')):
		return 0, i
	}
	return v, j
}

// strPlain marks the bytes that stand for themselves in a JSON string:
// not a quote, a backslash or a control character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// parseString parses a JSON string at b[i]. Without escapes the result
// aliases b; with escapes it is a new slice.
func parseString(b []byte, i int) ([]byte, int, error) {
	if i >= len(b) {
		return nil, i, &jsonErr{err: errJSONEOF, off: i}
	}
	if b[i] != '"' {
		if _, err := skipValue(b, i, 0); err != nil {
			return nil, i, err
		}
		return nil, i, &jsonErr{err: errJSONType, off: i, msg: "want a string"}
	}
	start := i + 1
	j := start
	for j < len(b) && strPlain[b[j]] {
		j++
	}
	switch {
	case j == len(b):
		return nil, len(b), &jsonErr{err: errJSONEOF, off: len(b)}
	case b[j] == '"':
		return b[start:j], j + 1, nil
	case b[j] == '\\':
		return unescape(b, start, j)
	}
	return nil, j, synErr(j, "control character in string")
}

// unescape decodes a string that has an escape at b[j], starting at b[start].
func unescape(b []byte, start, j int) ([]byte, int, error) {
	out := make([]byte, 0, j-start+16)
	out = append(out, b[start:j]...)
	for j < len(b) {
		c := b[j]
		switch {
		case c == '"':
			return out, j + 1, nil
		case c < 0x20:
			return nil, j, synErr(j, "control character in string")
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(b) {
			return nil, len(b), &jsonErr{err: errJSONEOF, off: len(b)}
		}
		switch e := b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, j+2)
			if !ok {
				return nil, j, synErr(j, "bad \\u escape")
			}
			j += 6
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(b, j+2); ok && j+1 < len(b) && b[j] == '\\' && b[j+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						j += 6
						out = utf8.AppendRune(out, d)
						continue
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return nil, j, synErr(j, "bad escape")
		}
		j += 2
	}
	return nil, len(b), &jsonErr{err: errJSONEOF, off: len(b)}
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skipNumber validates a JSON number at b[i] and returns its end.
func skipNumber(b []byte, i int) (int, error) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, &jsonErr{err: errJSONEOF, off: i}
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, synErr(start, "bad number")
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, synErr(start, "bad number")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return i, synErr(start, "bad number")
		}
	}
	return i, nil
}

const maxJSONDepth = 64

// skipValue validates and skips any JSON value at b[i].
func skipValue(b []byte, i, depth int) (int, error) {
	if depth > maxJSONDepth {
		return i, synErr(i, "nested too deeply")
	}
	if i >= len(b) {
		return i, &jsonErr{err: errJSONEOF, off: i}
	}
	switch c := b[i]; {
	case c == '"':
		_, j, err := parseString(b, i)
		return j, err
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return lit(b, i, "true")
	case c == 'f':
		return lit(b, i, "false")
	case c == 'n':
		return lit(b, i, "null")
	case c == '[':
		i = ws(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skipValue(b, i, depth+1); err != nil {
				return i, err
			}
			if i = ws(b, i); i >= len(b) {
				return i, &jsonErr{err: errJSONEOF, off: i}
			}
			if b[i] == ']' {
				return i + 1, nil
			}
			if b[i] != ',' {
				return i, synErr(i, "want ',' or ']'")
			}
			i = ws(b, i+1)
		}
	case c == '{':
		i = ws(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, nil
		}
		for {
			_, j, err := parseString(b, i)
			if err != nil {
				return j, err
			}
			if i = ws(b, j); i >= len(b) || b[i] != ':' {
				return i, synErr(i, "want ':'")
			}
			if i, err = skipValue(b, ws(b, i+1), depth+1); err != nil {
				return i, err
			}
			if i = ws(b, i); i >= len(b) {
				return i, &jsonErr{err: errJSONEOF, off: i}
			}
			if b[i] == '}' {
				return i + 1, nil
			}
			if b[i] != ',' {
				return i, synErr(i, "want ',' or '}'")
			}
			i = ws(b, i+1)
		}
	}
	return i, synErr(i, "unexpected character")
}

func lit(b []byte, i int, s string) (int, error) {
	if len(b)-i < len(s) {
		return len(b), &jsonErr{err: errJSONEOF, off: len(b)}
	}
	if string(b[i:i+len(s)]) != s {
		return i, synErr(i, "bad literal")
	}
	return i + len(s), nil
}
