package sim

import "io"

// WriteSVG writes a plot of true admitted / limit over time.
func WriteSVG(w io.Writer, runs ...*Result) error { return nil }
