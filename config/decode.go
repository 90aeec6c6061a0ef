package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML parses Go duration syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as 50ms, 2s, 1m", n.Line)}}
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	return nil
}

// UnmarshalYAML accepts one key part ("ip") or a list (["ip", "header:X-Key"]).
func (k *KeySpec) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*k = KeySpec{n.Value}
		return nil
	case yaml.SequenceNode:
		var parts []string
		if err := n.Decode(&parts); err != nil {
			return err
		}
		*k = parts
		return nil
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a key part (ip, header:<Name>, path, host) or a list of them", n.Line)}}
}

// decode decodes YAML b into c, rejecting unknown fields, and rewrites
// yaml's "line N: ..." messages so that they name the field's path.
func decode(b []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil // empty file: all defaults
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(c)
	if err == nil || errors.Is(err, io.EOF) {
		return nil
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	idx := indexPaths(&doc, "")
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = rewrite(m, idx)
	}
	return errors.New(strings.Join(msgs, "; "))
}

// pathRec is one field of the document: where it is and what it holds.
type pathRec struct {
	line  int
	path  string
	key   string // mapping key, "" for sequence items
	value string // scalar value, "" otherwise
}

func indexPaths(n *yaml.Node, path string) []pathRec {
	var out []pathRec
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			out = append(out, indexPaths(c, path)...)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			rec := pathRec{line: k.Line, path: p, key: k.Value}
			if v.Kind == yaml.ScalarNode {
				rec.value = v.Value
			}
			out = append(out, rec)
			if v.Line != k.Line && v.Kind == yaml.ScalarNode {
				out = append(out, pathRec{line: v.Line, path: p, value: v.Value})
			}
			out = append(out, indexPaths(v, p)...)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			if c.Kind == yaml.ScalarNode {
				out = append(out, pathRec{line: c.Line, path: p, value: c.Value})
			}
			out = append(out, indexPaths(c, p)...)
		}
	}
	return out
}

var (
	lineRe    = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownRe = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	// durationRe matches yaml's refusal of a value for a time.Duration.
	durationRe = regexp.MustCompile("^cannot unmarshal (?:!!\\w+ )?`(.*)` into time.Duration$")
)

func rewrite(msg string, idx []pathRec) string {
	sm := lineRe.FindStringSubmatch(msg)
	if sm == nil {
		return msg
	}
	line, _ := strconv.Atoi(sm[1])
	body := sm[2]
	var onLine []pathRec
	for _, r := range idx {
		if r.line == line {
			onLine = append(onLine, r)
		}
	}
	if um := unknownRe.FindStringSubmatch(body); um != nil {
		for _, r := range onLine {
			if r.key == um[1] {
				return fmt.Sprintf("%s: unknown field (line %d)", r.path, line)
			}
		}
		return fmt.Sprintf("unknown field %q (line %d)", um[1], line)
	}
	body = strings.Replace(body, "!!str ", "", 1)
	if dm := durationRe.FindStringSubmatch(body); dm != nil {
		// A time.Duration field (repl.Settings): word it as Duration does.
		body = fmt.Sprintf("bad duration %q (want Go syntax such as 50ms, 2s, 1m)", dm[1])
	}
	var pick *pathRec
	for i := range onLine {
		r := &onLine[i]
		if r.value != "" && (strings.Contains(body, "`"+r.value+"`") || strings.Contains(body, strconv.Quote(r.value))) {
			pick = r
			break
		}
	}
	if pick == nil && len(onLine) > 0 {
		pick = &onLine[len(onLine)-1]
	}
	if pick == nil {
		return fmt.Sprintf("line %d: %s", line, body)
	}
	return fmt.Sprintf("%s: %s (line %d)", pick.path, body, line)
}
