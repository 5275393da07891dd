package adminapi

import (
	"crypto/subtle"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// Cross-site request guard. The admin listeners have no session to steal,
// but a browser on the operator's machine can still be made to send a
// request to them: a page on another site can POST a form or a
// fetch(…, {mode: "no-cors"}) with a "simple" content type, and the
// browser sends it without asking (no CORS preflight), so a switch of the
// active arm would move all traffic. The admin APIs answer no CORS
// preflight, so a browser sends a cross-site request only in the simple
// form; Guard refuses exactly those for every request that changes state.

// Header is the header a client may send, with any value, instead of a JSON
// content type (for example a POST with ?arm=x and no body). A browser
// sends a custom header cross-site only after a preflight, which these
// listeners never allow.
const Header = "X-LLMesh-Admin"

// TokenEnv is the environment variable from which `llmesh gateway` and
// `llmesh control` read the admin token (Guard's token): empty or unset,
// none.
const TokenEnv = "LLMESH_ADMIN_TOKEN"

// Guard refuses, with 403 and {"error": …}, every request to next whose
// method changes state (all but GET, HEAD and OPTIONS) when
//
//   - it carries an Origin (or, without one, a Referer) that is not this
//     listener's own host (the request's Host), "null" included, or
//   - it is a POST whose content type is one a browser sends cross-site
//     without a preflight (none, text/plain,
//     application/x-www-form-urlencoded, multipart/form-data) and it has
//     no Header.
//
// Reads pass as they are. Other methods (PUT, DELETE, PATCH) are always
// preflighted by browsers, so only the origin check applies to them.
//
// A non-empty token is also required of every state-changing request, as
// "Authorization: Bearer <token>" (401 without it or with another one,
// compared in constant time); reads stay open (Prometheus scrapes
// /metrics). An empty token requires none.
func Guard(next http.Handler, token string) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := crossSite(r); msg != "" {
			WriteJSON(w, http.StatusForbidden, map[string]string{"error": msg})
			return
		}
		if token != "" && changesState(r) && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llmesh admin"`)
			WriteJSON(w, http.StatusUnauthorized, map[string]string{"error": "admin " + r.Method + " needs authorization: Bearer <token> (the admin token, " + TokenEnv + ")"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// changesState: every method but the reads.
func changesState(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// crossSite says why r is refused, "" when it may pass.
func crossSite(r *http.Request) string {
	if !changesState(r) {
		return ""
	}
	if o := r.Header.Get("Origin"); o != "" {
		if !sameHost(o, r.Host) {
			return "cross-site admin request refused: Origin " + quote(o) + " is not this admin listener (" + r.Host + ")"
		}
	} else if ref := r.Header.Get("Referer"); ref != "" && !sameHost(ref, r.Host) {
		return "cross-site admin request refused: Referer " + quote(ref) + " is not this admin listener (" + r.Host + ")"
	}
	if r.Method == http.MethodPost && simpleContentType(r.Header.Get("Content-Type")) && r.Header.Get(Header) == "" {
		ct := r.Header.Get("Content-Type")
		if ct == "" {
			ct = "none"
		}
		return "admin " + r.Method + " needs content-type: application/json or a " + Header + " header (content type " + quote(ct) +
			" is one a browser sends from any site)"
	}
	return ""
}

// quote bounds what a refusal repeats of the request.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return `"` + s + `"`
}

// simpleContentType: a content type a browser sends cross-site without a
// preflight (the Fetch standard's CORS-safelisted request header values),
// or none.
func simpleContentType(ct string) bool {
	if strings.TrimSpace(ct) == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		// Unparseable: the Fetch standard safelists by the essence only
		// when it parses; refusing costs a careful client nothing.
		return true
	}
	switch mt {
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		return true
	}
	return false
}

// sameHost: the origin or referer URL names host (the request's Host
// header), ports compared with the scheme's default filled in.
func sameHost(raw, host string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (a sandboxed or file: page) included
	}
	return strings.EqualFold(withPort(u.Host, u.Scheme), withPort(host, u.Scheme))
}

func withPort(h, scheme string) string {
	if strings.LastIndexByte(h, ':') > strings.LastIndexByte(h, ']') {
		return h
	}
	if scheme == "https" {
		return h + ":443"
	}
	return h + ":80"
}
