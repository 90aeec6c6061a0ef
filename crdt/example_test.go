package crdt_test

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
)

// Two replicas count the same key; a delta from one raises the other's view.
func ExampleStore() {
	width := int64(time.Minute)
	now := crdt.Now{Index: 29_000_000, Elapsed: width / 2, Width: width}
	ams := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}
	iad := identity.Replica{PoPID: identity.PoPID{Region: "us", PoP: "iad"}, Node: "iad-1", Incarnation: 1}
	a := crdt.NewStore(crdt.StoreConfig{Self: ams})
	b := crdt.NewStore(crdt.StoreConfig{Self: iad})

	for i := 0; i < 3; i++ {
		a.Admit(0, "203.0.113.7", now, 10, 1, true)
	}
	id, _ := b.Intern(ams)
	a.Flush(func(e crdt.FlushEntry) {
		b.Merge(e.Rule, e.Key, now.Index, e.Window, id, e.Count)
	})
	r := b.Admit(0, "203.0.113.7", now, 10, 1, true)
	fmt.Println(r.Allowed, r.Remaining)
	// Output: true 6
}
