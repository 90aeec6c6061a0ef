package api

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stallReader yields its bytes, then fails as a connection whose client
// stopped sending would (the read deadline).
type stallReader struct{ b []byte }

func (s *stallReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, errors.New("read deadline exceeded")
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// A declared Content-Length is not trusted for the allocation beyond
// preallocMax: a client that declares 1 MiB and sends 100 bytes costs about
// what it sent, while whole bodies of any allowed size still read exactly.
func TestReadBodyDoesNotTrustContentLength(t *testing.T) {
	r := httptest.NewRequest("POST", "/v1/checks", nil)
	r.ContentLength = 1 << 20
	r.Body = io.NopCloser(&stallReader{b: make([]byte, 100)})
	buf, err := readBody(httptest.NewRecorder(), r, 1<<20, nil)
	require.Error(t, err)
	assert.LessOrEqual(t, cap(buf), 1024, "grown for the 100 bytes sent, not the megabyte declared")

	for _, n := range []int{10, preallocMax, preallocMax + 1, 300 << 10} {
		body := bytes.Repeat([]byte("x"), n)
		r := httptest.NewRequest("POST", "/v1/checks", bytes.NewReader(body))
		got, err := readBody(httptest.NewRecorder(), r, 1<<20, nil)
		require.NoError(t, err, n)
		assert.Equal(t, body, got, n)
	}
	r = httptest.NewRequest("POST", "/v1/checks", bytes.NewReader(make([]byte, 100<<10)))
	r.ContentLength = 200 << 10
	_, err = readBody(httptest.NewRecorder(), r, 1<<20, nil)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "a body shorter than declared")
}
