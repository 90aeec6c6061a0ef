package server

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/internal/servertest"
)

// TestEmbeddedConfigFile starts the embedded server from a nats-server
// config file that makes clients authenticate: it runs the file's users.
// Start reads the file again, so a file made unsafe after New validated
// the config is refused at start, naming the field.
func TestEmbeddedConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\nauthorization { users: [{user: eu-ams, password: s3cret}] }\n"), 0o600))
	yaml := "node: {id: ams-1, region: eu, pop: ams}\nlisten: {api: \"127.0.0.1:0\"}\n" +
		"nats: {embedded: {config_file: " + conf + "}, user: eu-ams, password: s3cret}\n"
	cfg, err := config.Parse([]byte(yaml))
	require.NoError(t, err)

	app, err := New(Options{Config: cfg, Self: testSelf, WatchInterval: -1, Logger: servertest.Logger(t)})
	require.NoError(t, err)
	later, err := New(Options{Config: cfg, Self: testSelf, WatchInterval: -1, Logger: servertest.Logger(t)})
	require.NoError(t, err)
	require.NoError(t, app.Start(context.Background()))
	_, err = nats.Connect(app.NATSURL())
	require.Error(t, err, "the file's authorization applies")
	nc, err := nats.Connect(app.NATSURL(), nats.UserInfo("eu-ams", "s3cret"))
	require.NoError(t, err)
	nc.Close()
	require.NoError(t, app.Shutdown(context.Background()))

	// The file now opens the client port on every interface without
	// authentication: New validated the old one, Start reads the new one.
	require.NoError(t, os.WriteFile(conf, []byte("listen: 0.0.0.0:-1\n"), 0o600))
	err = later.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "server: embedded nats: nats.embedded.config_file: listen 0.0.0.0:-1 is beyond loopback without client authentication")
	_, err = New(Options{Config: cfg, Self: testSelf, WatchInterval: -1, Logger: servertest.Logger(t)})
	require.Error(t, err, "and New refuses it from now on")
}
