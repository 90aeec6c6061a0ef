package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fenceRE   = regexp.MustCompile("(?s)```.*?```")
)

// slug is a heading's anchor as GitHub makes it.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(string(b), ""), -1) {
		out[slug(m[1])] = true
	}
	return out
}

// TestLinks: every relative link of the README and of these pages names a
// file of the repository, and an anchor of it that exists.
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	require.NoError(t, err)
	pages = append(pages, "../README.md")
	require.Greater(t, len(pages), 5)
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		text := fenceRE.ReplaceAllString(string(b), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				_, err := os.Stat(path)
				if !assert.NoError(t, err, "%s links to %s", page, target) {
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") {
				assert.True(t, anchors(t, path)[anchor], "%s links to %s: no such heading", page, target)
			}
		}
	}
	assert.Greater(t, checked, 50, "links found")
}

// TestREADMEConfigs: every YAML block of the README is a config the daemon
// accepts.
func TestREADMEConfigs(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	require.NotEmpty(t, blocks)
	for _, m := range blocks {
		_, err := config.Parse([]byte(m[1]))
		assert.NoError(t, err, "%s", m[1])
	}
}
