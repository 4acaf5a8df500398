package liveview

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/actorkube/controllermanager/internal/respond"
)

// hostAllowlist is the live view's Host allowlist: the loopback names and
// addresses, and the names WithAllowedHosts adds.
//
// It is what stops DNS rebinding: a page on evil.example that rebinds its
// name to 127.0.0.1 reaches a view bound to localhost as same-origin, since
// the origin check of the controls compares Origin with Host, and both say
// evil.example; the browser never sends a Host the attacker does not own, so
// refusing the names the view is not served under refuses that page.
type hostAllowlist struct {
	names map[string]bool // lowercased, without port or trailing dot
}

// newHostAllowlist checks and normalises the names of WithAllowedHosts.
func newHostAllowlist(extra []string) (hostAllowlist, error) {
	h := hostAllowlist{names: map[string]bool{"localhost": true}}
	for _, name := range extra {
		n, ok := hostName(name)
		if !ok || strings.ContainsAny(n, "/?#@ \t") {
			return hostAllowlist{}, fmt.Errorf("WithAllowedHosts(%q): want a host name or address, with or without a port", name)
		}
		h.names[n] = true
	}
	return h, nil
}

// hostName is host without its port, brackets or trailing dot, lowercased.
func hostName(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if addr, err := netip.ParseAddr(host); err == nil {
		host = addr.Unmap().WithZone("").String()
	}
	return host, host != ""
}

// allows reports whether a request's Host is one the view is served under.
func (h hostAllowlist) allows(host string) bool {
	n, ok := hostName(host)
	if !ok {
		return false
	}
	if addr, err := netip.ParseAddr(n); err == nil && addr.IsLoopback() {
		return true
	}
	return h.names[n]
}

// checkHost answers 403 to a request whose Host is not allowed, and reports
// whether it did.
func (h *View) checkHost(w http.ResponseWriter, r *http.Request) bool {
	if h.hosts.allows(r.Host) {
		return true
	}
	respond.Text(w, http.StatusForbidden, fmt.Sprintf("refused: Host %q is not a name this live view is served under "+
		"(loopback names and addresses, and those of liveview.WithAllowedHosts): "+
		"a page that rebinds its own name to this address must not read it\n", r.Host))
	return false
}

// loopbackPeer reports whether the request came from a loopback address.
func loopbackPeer(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}
