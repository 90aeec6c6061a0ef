package pop

import "time"

// MoreAfter returns the time until more quota is available to key after
// the decision d that a check of the rule h under o made at now,
// if no other request arrives: the RateLimit field's t in
// draft-ietf-httpapi-ratelimit-headers-11. For a denied request (shadow-
// denied too) it is d.RetryAfter; for an admitted one the time until the
// remaining grows by at least 1, as the sliding estimates decay (for a rule
// of several windows, until every window has that much room); 0 when the
// whole limit is available. It looks the key up again without counting
// (what a request of cost d.Remaining+1 would wait), so decisions whose
// answer does not report it do not pay for it.
func (n *Node) MoreAfter(now int64, h RuleHandle, key string, d Decision, o Options) time.Duration {
	if !d.Allowed || d.ShadowDenied {
		return d.RetryAfter
	}
	if d.Remaining >= d.Limit {
		return 0
	}
	p, err := n.peekHandleWith(now, h, key, d.Remaining+1, o)
	if err != nil || (p.Allowed && !p.ShadowDenied) {
		return 0
	}
	return p.RetryAfter
}
