package main

import (
	"path/filepath"
	"testing"

	"github.com/geolimit/geolimit/gossip/gossiptest"
	"github.com/geolimit/geolimit/internal/browsertest"
)

// TestStatusPageThreeRegions: on the three-region example (embedded NATS
// servers linked by gateways, a PoP of two nodes on memberlist), headless
// Chromium shows on ams-1's /ui the node's id, every rule with its mode and
// every PoP heard; once region ap stops, its PoP shows as cut, and region
// ap as cut, within a refresh after replication.peer_timeout.
func TestStatusPageThreeRegions(t *testing.T) {
	b := browsertest.New(t)
	e := gossiptest.CopyExample(t, filepath.Join("..", "..", "examples/multi-region"), "examples/multi-region")
	var ds []*daemon
	for _, f := range []string{"eu-ams-1.yaml", "us-iad-1.yaml", "ap-sin-1.yaml", "eu-ams-2.yaml"} {
		ds = append(ds, startDaemon(t, e.Path(f)))
	}
	stopped := map[*daemon]bool{}
	defer func() {
		for _, d := range ds {
			if !stopped[d] {
				d.stop(t)
			}
		}
	}()
	ams1, sin := ds[0], ds[2]

	b.Open(ams1.api + "/ui")
	b.WaitTrue(`document.body.dataset.loaded === "1"`, "the page read the node")
	b.WaitTrue(`document.getElementById("node").dataset.node === "ams-1"`, "the node's id")
	b.WaitTrue(`document.getElementById("node").textContent.startsWith("eu/ams/ams-1#")`, "the node's replica id")
	for _, rule := range []string{"api", "login"} {
		b.WaitTrue(`document.querySelector('#rules tr[data-rule="`+rule+`"] td[data-mode]').dataset.mode === "enforce"`, rule+"'s mode")
	}
	for _, pop := range []string{"eu/ams", "us/iad", "ap/sin"} {
		b.WaitTrue(`document.querySelector('#fleet [data-pop="`+pop+`"]').dataset.state === "heard"`, pop+" heard")
	}
	b.WaitTrue(`/ams-2#/.test(document.querySelector('#fleet [data-pop="eu/ams"]').textContent)`, "ams-2 in ams-1's PoP")

	sin.stop(t)
	stopped[sin] = true
	b.WaitTrue(`document.querySelector('#fleet [data-pop="ap/sin"]').dataset.state === "partitioned"`, "ap/sin cut")
	b.WaitTrue(`document.querySelector('#fleet [data-region="ap"]').dataset.state === "cut"`, "region ap cut")
	b.WaitTrue(`getComputedStyle(document.querySelector('#fleet [data-pop="ap/sin"]')).borderTopColor === "rgb(207, 34, 46)"`, "ap/sin in red")
	b.WaitTrue(`document.querySelector('#fleet [data-pop="us/iad"]').dataset.state === "heard"`, "us/iad still heard")
}
