// Package console is Vigil's analyst console: web pages served by vigil
// serve at /console/ on the API's address (api.Options.Console), for the
// risk analysts who write rules, backtest them, look up decisions and look
// at entities (docs/console.md).
//
// # How it works
//
// The Handler renders each page's HTML from templates (html/template) and
// serves the stylesheet and scripts; all of it is embedded in the binary
// (go:embed), so the console works offline and needs no build step, no npm
// and no CDN. The pages hold no data: their scripts (vanilla JavaScript,
// one shared file and one per page) call the REST API from the browser with
// the signed-in API key and fill the pages in. Every API rule therefore
// holds for the console too: a reader's key is refused a write however the
// request is made; the console only leaves out the controls a key's role
// cannot use (GET /v1/me says which).
//
// # Security model
//
//   - The key lives in the tab's sessionStorage, never in a cookie: the
//     browser sends it only when the console's own script adds it to a
//     request (Authorization: Bearer), so another site cannot make the
//     browser send it (no CSRF), and it is gone when the tab closes.
//   - The pages' Content-Security-Policy lets only the console's own
//     scripts run (no inline script, no eval) and lets them talk only to
//     their own origin; every value from the API is put into the page as
//     text (textContent), never as HTML. A script that could run on the
//     page could read the key, so this is what keeps it.
//   - Pages are framed by no one (frame-ancestors 'none'), send no
//     Referer, and are not cached by shared caches.
//
// # Concurrency
//
// A Handler is immutable after New and safe for concurrent use; it starts
// no goroutines.
package console
