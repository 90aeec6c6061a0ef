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
	goleak.VerifyTestMain(m)
}
