package gossip

import "github.com/geolimit/geolimit/identity"

// Region voices (repl.Settings.RegionVoices) on the transports between
// PoPs. One PoP of each region, its voice, publishes the region's totals
// (repl.LinkRegion) on its own subject <prefix>.region.<region>.<pop>, as
// any PoP does with what must reach every PoP (rules' modes, penalty
// blocks); every node hears them on <prefix>.region.*.*, the subject's PoP
// vouching for the sender's region as the delta subject's does for its PoP. A PoP's
// own totals then need reach only its region: a node subscribes to
// <prefix>.delta.<own region>.* instead of every region's, so the gateways
// between regions carry region totals, heartbeats, sync requests and
// relayed state, never another region's PoP totals. A sync request reaches
// the PoPs of its region and the voices of the others (RegionSpeaker):
// only a voice answers another region's request.

// KindRegion is what a transport between PoPs carries for repl.LinkRegion:
// a region's totals (a repl.KindDelta on the region link). It is a kind of
// the transports, not of the protocol (repl never sees it): Publish sends
// it on the own PoP's region subject, and Handler.Receive gets it from the
// region subject of the PoP that published it.
const KindRegion Kind = 0x80

// RegionSubject returns the subject a PoP publishes its region's totals on
// when it is its region's voice: <prefix>.region.<region>.<pop>.
func RegionSubject(prefix string, p identity.PoPID) string { return subject(prefix, "region", p) }

// kindName names a transport kind in logs.
func kindName(k Kind) string {
	if k == KindRegion {
		return "region"
	}
	return k.String()
}
