package edgerepl

import "testing"

// TestQueueBudget: the receive queue and the NATS buffers take a bounded
// share of limits.max_memory, within their former fixed sizes.
func TestQueueBudget(t *testing.T) {
	for _, tt := range []struct {
		budget  int64
		queue   int64
		pending int
	}{
		{64 << 20, 8 << 20, 1 << 20},
		{256 << 20, 32 << 20, 4 << 20},
		{1 << 30, 32 << 20, 8 << 20},
		{1 << 40, 32 << 20, 8 << 20},
		{1 << 20, 1 << 20, 256 << 10},
	} {
		q, p := QueueBudget(tt.budget)
		if q != tt.queue || p != tt.pending {
			t.Errorf("QueueBudget(%d) = %d, %d; want %d, %d", tt.budget, q, p, tt.queue, tt.pending)
		}
		if tt.budget >= 64<<20 && q+5*int64(p) > tt.budget/4 {
			t.Errorf("budget %d: queue %d and five subscriptions of %d pass a quarter of it", tt.budget, q, p)
		}
	}
}
