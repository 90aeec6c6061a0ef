package frontend

import "sync/atomic"

// calendarPolicy caches a calendar rule's RateLimit-Policy field for the
// period it was made for: w, the period's length, changes with the period
// (month lengths, daylight saving), so the field is made once per period,
// not per answer. Safe for concurrent use.
type calendarPolicy struct {
	cur atomic.Pointer[periodPolicy]
}

type periodPolicy struct {
	start, end int64 // the period [start, end), Unix nanoseconds
	field      string
}

// policyAt returns the rule's RateLimit-Policy field at now (Unix
// nanoseconds): its own limits, and for a calendar rule w of the period
// holding now.
func (cr *Rule) policyAt(now int64) string {
	if cr.cal == nil {
		return cr.policy
	}
	if p := cr.cal.cur.Load(); p != nil && now >= p.start && now < p.end {
		return p.field
	}
	_, start, end := cr.Pop.Calendar.PeriodOf(now)
	p := &periodPolicy{start: start, end: end, field: PolicyField(cr.Pop, nil, now)}
	cr.cal.cur.Store(p)
	return p.field
}
