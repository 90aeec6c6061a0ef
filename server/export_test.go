package server

import "net/http"

// middleware wraps next in the App's middleware front end, as
// middleware.New's Limiter does in a program of its own: the daemon's
// tests compare it with the other front ends on one node.
func (a *App) middleware(next http.Handler) http.Handler { return a.fronts.Middleware(next) }
