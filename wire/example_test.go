package wire_test

import (
	"fmt"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

// A delta travels as msgpack; the decoder checks every cap before allocating.
func ExampleEncode() {
	d := &wire.Delta{
		Sender:  identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1},
		Entries: []crdt.Entry{{Rule: "api", Key: "203.0.113.7", Window: 29_000_000, Count: 3}},
	}
	msgs, err := wire.Encode(d, 0)
	if err != nil {
		panic(err)
	}
	got, err := wire.Decode(msgs[0])
	fmt.Println(len(msgs), got.Entries[0].Key, got.Entries[0].Count, err)
	// Output: 1 203.0.113.7 3 <nil>
}

// Three nodes of one PoP: a node's Flush reports its own count and the PoP
// total, its own count plus what its members counted.
func ExampleStore_Flush() {
	width := int64(time.Minute)
	now := crdt.Now{Index: 29_000_000, Elapsed: width / 2, Width: width}
	self := identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "ams-1", Incarnation: 1}
	st := crdt.NewStore(crdt.StoreConfig{Self: self})
	for _, m := range []struct {
		node  string
		count uint64
	}{{"ams-2", 4}, {"ams-3", 5}} {
		id, _ := st.Intern(identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: m.node, Incarnation: 1})
		st.Merge(0, "203.0.113.7", now.Index, now.Index, id, m.count)
	}
	st.Admit(0, "203.0.113.7", now, 100, 1, true)
	st.Flush(func(e crdt.FlushEntry) {
		fmt.Println(e.Key, e.Count, e.PoP, e.Changed&crdt.OwnChanged != 0, e.Changed&crdt.PoPChanged != 0)
	})
	// Output: 203.0.113.7 1 10 true true
}
