package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Soak is the soak mode's report.
type Soak struct {
	DurationS float64 `json:"duration_s"`
}

func (s *Soak) writeTable(w io.Writer) { fmt.Fprintf(w, "soak %gs\n", s.DurationS) }

// RunSoak is not implemented yet.
func RunSoak(ctx context.Context, d time.Duration, seed uint64, opts Options) (*Report, error) {
	return nil, errors.New("chaos: soak: not implemented")
}
