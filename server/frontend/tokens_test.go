package frontend

import (
	"context"
	"net/http"
	"testing"
)

const (
	benchToken1 = "k7H2p9Qw3Zx8Lm4Rt6Yv1Bn5Cd0Fg2Hj"
	benchToken2 = "Zq8Wx3Ec5Rv7Tb9Yn1Um4Ik6Ol0Pa2Sd"
)

// BenchmarkAuthCheck is the bearer check alone: two tokens, the request
// bearing the second.
func BenchmarkAuthCheck(b *testing.B) {
	au := NewTokens([]string{benchToken1, benchToken2})
	req, _ := http.NewRequestWithContext(context.Background(), "POST", "/v1/check", nil)
	req.Header.Set("Authorization", "Bearer "+benchToken2)
	b.ReportAllocs()
	for b.Loop() {
		if au.Check(req) != AuthOK {
			b.Fatal("refused")
		}
	}
}
