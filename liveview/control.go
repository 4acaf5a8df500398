package liveview

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/actorkube/controllermanager/supervisor"

	"github.com/actorkube/controllermanager/internal/respond"
)

// TokenHeader is the header of a control request. It must be present
// (a cross-site form cannot set a header, and a cross-origin script that
// sets one is stopped by the browser's CORS preflight, which the handler
// never approves) and, with a token, equal it.
const TokenHeader = "X-Supervision-Token"

// The actions of prefix+"/control" (its "action" form field).
var controlActions = map[string]func(name string) any{
	"restart": func(name string) any { return supervisor.RestartChild{Name: name} },
	"stop":    func(name string) any { return supervisor.StopChild{Name: name} },
	"start":   func(name string) any { return supervisor.StartChild{Name: name} },
}

// controlAnswer is the JSON answer of a control request.
type controlAnswer struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// serveControl sends a lifecycle message for the named child and answers
// once the supervisor has: 200 {"ok":true}, or an error naming what is
// wrong: 404 while the controls are off, 405 for another method than POST,
// 403 for a cross-origin request, a missing or wrong token, or an empty
// token from a peer that is not loopback, 400 for a missing or unknown
// action, a missing child name or a malformed path ("g//x", "g/"), 404 for
// an unknown child (with the names of its would-be siblings), 409
// when the child is busy, already running or has nothing to start, or the
// manager is not running, 504 when the
// supervisor does not answer within controlTimeout, 500 when the start call
// failed.
func (h *View) serveControl(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.controls {
		respond.JSON(w, http.StatusNotFound, controlAnswer{Error: "the controls are off: liveview.Handler(src, liveview.WithControls(token)) turns them on"})
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		respond.JSON(w, http.StatusMethodNotAllowed, controlAnswer{Error: fmt.Sprintf("method %s not allowed on %s: use POST", r.Method, r.URL.Path)})
		return
	}
	if err := h.origins.Check(r); err != nil {
		respond.JSON(w, http.StatusForbidden, controlAnswer{Error: "refused: " + err.Error()})
		return
	}
	got, present := r.Header[http.CanonicalHeaderKey(TokenHeader)]
	if !present {
		respond.JSON(w, http.StatusForbidden, controlAnswer{Error: "refused: the " + TokenHeader + " header is missing"})
		return
	}
	if h.cfg.token != "" && (len(got) != 1 || !equalTokens(got[0], h.cfg.token)) {
		respond.JSON(w, http.StatusForbidden, controlAnswer{Error: "refused: wrong " + TokenHeader})
		return
	}
	if h.cfg.token == "" && !loopbackPeer(r) {
		respond.JSON(w, http.StatusForbidden, controlAnswer{Error: fmt.Sprintf(
			"refused: the controls have no token, which is accepted only from a loopback address, and this request came from %s: "+
				"turn them on with a token, liveview.WithControls(token), made with `openssl rand -hex 32`, and send it in %s",
			r.RemoteAddr, TokenHeader)})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
	if err := r.ParseForm(); err != nil {
		respond.JSON(w, http.StatusBadRequest, controlAnswer{Error: "bad form: " + err.Error()})
		return
	}
	action, name := r.PostForm.Get("action"), r.PostForm.Get("child")
	build, ok := controlActions[action]
	switch {
	case !ok:
		respond.JSON(w, http.StatusBadRequest, controlAnswer{Error: fmt.Sprintf("unknown action %q: use restart, stop or start", action)})
		return
	case name == "":
		respond.JSON(w, http.StatusBadRequest, controlAnswer{Error: "the child field is empty: name the child to " + action})
		return
	}
	// A name the manager's Status has is sent as it is; another must be a
	// well-formed path (no name has a "/" since the manager refuses one,
	// ErrInvalidName, but the Status is the manager's word, not the view's).
	// The Status also says what is where an unknown path points. When it
	// fails the path is checked alone; either way the supervisor has the
	// last word.
	st, stErr := h.statusForControl(r)
	if _, known := st.Child(name); !known {
		if err := checkPath(name); err != nil {
			respond.JSON(w, http.StatusBadRequest, controlAnswer{Error: fmt.Sprintf("%s %q: %v", action, name, err)})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), controlTimeout)
	defer cancel()
	if _, err := h.src.Request(ctx, build(name)); err != nil {
		msg := fmt.Sprintf("%s %q: %v", action, name, err)
		if errors.Is(err, supervisor.ErrUnknownChild) && stErr == nil {
			msg += "; " + whereUnknown(st, name)
		}
		respond.JSON(w, controlCode(err), controlAnswer{Error: msg})
		return
	}
	respond.JSON(w, http.StatusOK, controlAnswer{OK: true})
}

// statusForControl is the manager's Status for a control request, within
// the handler's timeout.
func (h *View) statusForControl(r *http.Request) (supervisor.Status, error) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.timeout)
	defer cancel()
	return h.src.Status(ctx)
}

// checkPath reports why name cannot be a child's path: a path is the names
// of its groups and its own joined by "/", none of them empty, and no name
// has control characters.
func checkPath(name string) error {
	if !utf8.ValidString(name) {
		return errors.New("not valid UTF-8")
	}
	if i := strings.IndexFunc(name, unicode.IsControl); i >= 0 {
		return fmt.Errorf("a control character (%U) at byte %d: a child's name has none", []rune(name[i:])[0], i)
	}
	for i, seg := range strings.Split(name, "/") {
		if strings.TrimSpace(seg) == "" {
			return fmt.Errorf("segment %d of the path is empty: a path is a group's path and a child's name joined by \"/\", as \"tenant-a/store\"", i+1)
		}
	}
	return nil
}

// maxNamesListed bounds the names whereUnknown lists.
const maxNamesListed = 10

// whereUnknown says what st has where the unknown path points: the
// children of the deepest group on its way (or of the root), or the child
// on its way that is not a group.
func whereUnknown(st supervisor.Status, path string) string {
	level, where := st.Children, "the root"
walk:
	for {
		for _, c := range level {
			if !strings.HasPrefix(path, c.Name+"/") {
				continue
			}
			if !c.Kind.IsGroup() {
				return fmt.Sprintf("%q is a %s, not a group: it has no children", c.Name, c.Kind)
			}
			level, where = c.Children, fmt.Sprintf("group %q", c.Name)
			continue walk
		}
		break
	}
	if len(level) == 0 {
		return where + " has no children"
	}
	names := make([]string, 0, min(len(level), maxNamesListed))
	for _, c := range level[:min(len(level), maxNamesListed)] {
		names = append(names, strconv.Quote(c.Name))
	}
	list := strings.Join(names, ", ")
	if n := len(level) - maxNamesListed; n > 0 {
		list += fmt.Sprintf(" and %d more", n)
	}
	return "the children of " + where + " are " + list
}

func controlCode(err error) int {
	switch {
	case errors.Is(err, supervisor.ErrUnknownChild):
		return http.StatusNotFound
	case errors.Is(err, supervisor.ErrInvalidName):
		return http.StatusBadRequest
	case errors.Is(err, supervisor.ErrBusy), errors.Is(err, supervisor.ErrNotRunning), errors.Is(err, supervisor.ErrStopped),
		errors.Is(err, supervisor.ErrAlreadyRunning), errors.Is(err, supervisor.ErrNothingToStart),
		errors.Is(err, supervisor.ErrClusterOffline), errors.Is(err, supervisor.ErrShardNotHeld),
		errors.Is(err, supervisor.ErrStartInterrupted), errors.Is(err, supervisor.ErrChildStopped),
		errors.Is(err, supervisor.ErrChildRemoved):
		// Refused, or cut short, by the child's state or by another
		// lifecycle call: the request may succeed later.
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// equalTokens compares in constant time; hashing first hides the length of
// the token too.
func equalTokens(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
