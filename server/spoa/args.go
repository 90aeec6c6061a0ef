package spoa

import (
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/geolimit/geolimit/server/frontend"
)

// MessageName is the SPOE message the agent decides. Its arguments, all
// required, each once:
//
//	method   string  the request's method (HAProxy: method)
//	path     string  the URL path, as sent (path); decoded here
//	host     string  the Host header (req.hdr(host)); null when absent
//	src      address the client's address (src), or a string holding one
//	headers  binary  the request's headers in HAProxy's binary form (req.hdrs_bin)
//
// In SPOE's configuration:
//
//	spoe-message geolimit-check
//	    args method=method path=path host=req.hdr(host) src=src headers=req.hdrs_bin
const MessageName = "geolimit-check"

// Argument names of MessageName.
const (
	argMethod  = "method"
	argPath    = "path"
	argHost    = "host"
	argSrc     = "src"
	argHeaders = "headers"
)

// arg is one argument of a message; its value aliases the frame.
type arg struct {
	name []byte
	v    value
}

// message is one message of a NOTIFY frame; args is a window of the
// frame's argument list.
type message struct {
	name []byte
	args []arg
}

// decodeMessages decodes a NOTIFY frame's payload, a list of messages,
// into msgs and args (reused, appended to); the messages' args are
// windows of the returned args. A malformed payload is an error: the
// frame as a whole is invalid.
func decodeMessages(p []byte, msgs []message, args []arg) ([]message, []arg, error) {
	d := decoder{b: p}
	for len(d.b) > 0 && d.err == nil {
		name := d.str()
		n := int(d.byte1())
		from := len(args)
		for i := 0; i < n && d.err == nil; i++ {
			k, v := d.kv()
			args = append(args, arg{name: k, v: v})
		}
		msgs = append(msgs, message{name: name, args: args[from:len(args):len(args)]})
	}
	if d.err != nil {
		return msgs[:0], args[:0], d.err
	}
	return msgs, args, nil
}

// originOf reads the arguments of a MessageName message into the origin
// they describe: the client address is src's (HAProxy is the proxy that
// saw it); trusted, whether HAProxy connects from proxy.trusted_proxies,
// decides whether a header may name the tier. A non-empty msg says what is
// wrong with the message; nothing may be counted then.
func originOf(args []arg, trusted bool) (o frontend.Origin, msg string) {
	var seen [5]bool
	o.Trusted = trusted
	for _, a := range args {
		i := argIndex(a.name)
		if i < 0 {
			return o, "argument " + strconv.Quote(string(a.name)) + " unknown; " + MessageName + " takes method, path, host, src and headers"
		}
		if seen[i] {
			return o, "argument " + string(a.name) + " sent twice"
		}
		seen[i] = true
		if msg := setArg(&o, i, a); msg != "" {
			return o, "argument " + string(a.name) + ": " + msg
		}
	}
	for i, ok := range seen {
		if !ok {
			return o, "argument " + argNames[i] + " missing; " + MessageName + " takes method, path, host, src and headers"
		}
	}
	return o, ""
}

var argNames = [5]string{argMethod, argPath, argHost, argSrc, argHeaders}

func argIndex(name []byte) int {
	for i, n := range argNames {
		if string(name) == n {
			return i
		}
	}
	return -1
}

// setArg sets the part of o that argument i gives.
func setArg(o *frontend.Origin, i int, a arg) string {
	v := a.v
	switch argNames[i] {
	case argMethod:
		if v.typ != dataString {
			return "want a string, got " + typeName(v.typ)
		}
		if !frontend.IsToken(v.bytes) {
			return strconv.Quote(string(v.bytes)) + " is not an HTTP method"
		}
		o.Method = string(v.bytes)
	case argPath:
		if v.typ != dataString {
			return "want a string, got " + typeName(v.typ)
		}
		p := string(v.bytes)
		u, err := url.ParseRequestURI(p)
		if err != nil || !strings.HasPrefix(p, "/") || u.RawQuery != "" || u.Fragment != "" {
			return strconv.Quote(p) + " is not a URL path such as /api/v1"
		}
		o.Path = frontend.RulePath(u.Path)
	case argHost:
		switch v.typ {
		case dataNull:
		case dataString:
			o.Host = string(v.bytes)
		default:
			return "want a string or null, got " + typeName(v.typ)
		}
	case argSrc:
		ip, ok := v.addr()
		if v.typ == dataString {
			var err error
			ip, err = netip.ParseAddr(string(v.bytes))
			ok = err == nil
		}
		if !ok {
			return "want an address, got " + typeName(v.typ)
		}
		o.IP = ip.Unmap().WithZone("")
	case argHeaders:
		if v.typ != dataBinary {
			return "want binary (req.hdrs_bin), got " + typeName(v.typ)
		}
		h, msg := parseHeaders(v.bytes)
		if msg != "" {
			return msg
		}
		o.Header = h
	}
	return ""
}

// parseHeaders reads HAProxy's binary header block (req.hdrs_bin): pairs
// of length-prefixed (varint) name and value, ended by an empty pair. A
// block without its end (cut short to fit a frame) is refused: a header
// a rule keys on may be missing from it.
func parseHeaders(b []byte) (http.Header, string) {
	d := decoder{b: b}
	h := http.Header{}
	for {
		name := d.str()
		val := d.str()
		if d.err != nil {
			return nil, "header block truncated (raise HAProxy's tune.bufsize, or send fewer headers)"
		}
		if len(name) == 0 {
			if len(val) != 0 || len(d.b) != 0 {
				return nil, "header block malformed (an empty name)"
			}
			return h, ""
		}
		k := textproto.CanonicalMIMEHeaderKey(string(name))
		h[k] = append(h[k], string(val))
	}
}
