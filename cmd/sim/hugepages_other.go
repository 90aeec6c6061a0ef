//go:build !linux

package main

// hugePages does nothing where huge pages are not asked for.
func hugePages(stop <-chan struct{}) { <-stop }
