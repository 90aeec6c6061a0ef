package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/server/engine"
	"github.com/geolimit/geolimit/server/frontend"
)

// The kill switch over HTTP: GET and PUT /v1/rules/{name}/mode (the rest
// is the engine's: engine.App.SetRuleMode).

// RuleModeStatus is one rule's mode as the API shows it.
type RuleModeStatus = engine.RuleModeStatus

// ModeOverride is a mode set at run time: what, by which node, when.
type ModeOverride = engine.ModeOverride

// maxModeBody is the largest PUT /v1/rules/{name}/mode body, in bytes.
const maxModeBody = 1 << 10

// handleRuleMode serves GET and PUT /v1/rules/{name}/mode. Where scoped
// tokens apply, GET is the read scope's and PUT (the status page's mode
// controls too) the admin scope's.
func (a *App) handleRuleMode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		st, ok := a.eng.RuleMode(name)
		if !ok {
			frontend.WriteError(w, http.StatusNotFound, "unknown rule "+strconv.Quote(name))
			return
		}
		frontend.WriteJSON(w, http.StatusOK, st)
	case http.MethodPut:
		mode, msg := readModeBody(w, r)
		if msg != "" {
			frontend.WriteError(w, http.StatusBadRequest, msg)
			return
		}
		st, err := a.eng.SetRuleMode(name, mode)
		switch {
		case errors.Is(err, engine.ErrBadMode):
			frontend.WriteError(w, http.StatusBadRequest, "mode: unknown mode "+strconv.Quote(mode)+" (want enforce, shadow, off or config)")
		case errors.Is(err, pop.ErrUnknownRule):
			frontend.WriteError(w, http.StatusNotFound, "unknown rule "+strconv.Quote(name))
		case errors.Is(err, modes.ErrNoSignKey):
			frontend.WriteError(w, http.StatusForbidden, "this node holds no mode_authority.sign_key: set modes on a node that does")
		case err != nil:
			frontend.WriteError(w, http.StatusInternalServerError, err.Error())
		default:
			frontend.WriteJSON(w, http.StatusOK, st)
		}
	default:
		methodNotAllowed(w, "GET, HEAD, PUT")
	}
}

// readModeBody reads {"mode": "..."}; a non-empty msg says what is wrong.
func readModeBody(w http.ResponseWriter, r *http.Request) (mode, msg string) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxModeBody))
	if err != nil {
		return "", "read body: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var req struct {
		Mode *string `json:"mode"`
	}
	if err := dec.Decode(&req); err != nil {
		return "", "bad JSON: " + err.Error()
	}
	if dec.More() {
		return "", "bad JSON: more than one value"
	}
	if req.Mode == nil {
		return "", "mode: required (enforce, shadow, off or config)"
	}
	return *req.Mode, ""
}
