package gossip

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Gateways solicit their remotes after a delay of 1s by default.
	server.SetGatewaysSolicitDelay(10 * time.Millisecond)
	// memberlist's probe of a peer is not stopped by Shutdown: it returns
	// after its probe timeout (500ms), however the test ended.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"))
}
