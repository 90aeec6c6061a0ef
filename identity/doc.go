// Package identity names who owns counts: a PoP (PoPID, region/pop), a node
// of a PoP in one incarnation, and the aggregates a PoP or a region speaks
// through (Replica: region/pop/node#incarnation, region/pop/*#epoch,
// region/*/*#epoch), with the one validator of the names they are made of
// (ValidName). The replication protocol, the transports, the configuration,
// the status page and the simulator all name PoPs and replicas by these
// values; they are plain values, safe for concurrent use.
package identity
