package pop

// SetSynced records whether the node holds its PoP's and the other PoPs' view
// of its former incarnations' counts. A node starts synced (a node core with
// no past, as in the simulator or a test); the runtime marks it unsynced at
// start while it waits for that view and synced once it has it or has given
// up waiting. Decisions taken while unsynced may undercount.
func (l Link) SetSynced(ok bool) { l.n.unsynced.Store(!ok) }

// Synced reports what SetSynced last recorded (true for a new Node).
func (n *Node) Synced() bool { return !n.unsynced.Load() }
