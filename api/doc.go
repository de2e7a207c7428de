// Package api is Vigil's HTTP API (docs/design.md "Decision API"): rules authoring with
// versions and rollback, validation and backtests, the audit log,
// decisions, entity views, health and the OpenAPI document. It serves a
// Backend (the running service) through chi; New builds the handler and
// NewServer the http.Server with timeouts that cut off slow clients.
//
// # Routes
//
//	GET    /healthz                      open      200 while the process serves
//	GET    /readyz                       open      Backend.Ready: 200 or 503
//	GET    /openapi.json                 open      this API, OpenAPI 3.0
//	GET    /metrics                      open*     Options.Metrics (*MetricsAuth: metrics:read)
//	GET    /console/…                    open      Options.Console: the analyst console (pages only; not in openapi.json)
//	GET    /v1/me                        identity:read   the caller's key name, role and permissions
//	GET    /v1/ruleset                   rules:read      current document + version (ETag)
//	PUT    /v1/ruleset                   rules:write     publish a whole document (YAML or JSON)
//	GET    /v1/ruleset/versions          rules:read      versions, newest first, paged
//	GET    /v1/ruleset/versions/{n}      rules:read      version n with its document
//	GET    /v1/{kind}                    rules:read      the kind's items
//	POST   /v1/{kind}                    rules:write     create an item (409 if it exists)
//	GET    /v1/{kind}/{id}               rules:read      one item (ETag)
//	PUT    /v1/{kind}/{id}               rules:write     create or replace (201 / 200)
//	DELETE /v1/{kind}/{id}               rules:write     delete (204)
//	GET    /v1/{kind}/{id}/versions      rules:read      the item in each version where it changed
//	POST   /v1/{kind}/{id}/rollback      rules:write     {"version": n}: the item as in n (absent in n: deleted)
//	POST   /v1/rules:validate            rules:test      a document, or one item ({"rule": …}) in the live one: every error positioned
//	POST   /v1/rules:backtest            rules:test      candidate ruleset or item over events
//	GET    /v1/audit                     audit:read      versions with item-level changes, newest first
//	GET    /v1/decisions                 decisions:read  the newest decisions (decisions topic), ?action= ?rule= ?limit=
//	POST   /v1/decisions?stream=         decisions:write decide one event
//	GET    /v1/decisions/{id}            decisions:read  a recorded decision
//	GET    /v1/entities/{key}            entities:read   what the service holds about a key
//
// {kind} is each item type of rules.Document: streams, windows, rules,
// patterns, joins, enrichments (derived from its fields, so a new kind gets
// routes by itself). Each kind has its own static routes, so
// "/v1/rules:validate" and "/v1/rules:backtest" are routed explicitly and
// never taken for an item.
//
// # Roles
//
//	permission        admin analyst decider reader
//	identity:read       x      x       x      x       GET /v1/me
//	rules:read          x      x              x
//	rules:write         x      x
//	rules:test          x      x                      validate, backtest
//	audit:read          x      x              x
//	entities:read       x      x              x
//	decisions:read      x      x       x      x
//	decisions:write     x              x
//	metrics:read        x      x              x       only with MetricsAuth
//
// # Authentication
//
// Every /v1 route needs "Authorization: Bearer <token>": 401 (with
// WWW-Authenticate: Bearer) without a token or with an unknown one, 403
// when the key's role lacks the route's permission. Keys come from a file
// (LoadKeys: a YAML or JSON list of {name, role, token}) or from the
// environment (ParseKeyList of VIGIL_API_KEYS="name:role:token,…"). Tokens
// have at least MinTokenBytes bytes. The handler keeps only their SHA-256
// and compares a presented token's hash with every key's in constant time,
// so neither the length of a token nor which key matched shows in the
// timing. The key's name (never its token) is logged and is the author of
// the ruleset changes it makes. Options.NoAuth turns authentication off for
// local development.
//
// # Ruleset versions and optimistic concurrency
//
// The Backend holds whole documents; every write of an item is an edit of
// the current document: it is parsed into a generic tree (not rules'
// typed structs, which do not encode back to what was written), the item
// set or removed, and the result re-encoded as indented JSON with sorted
// keys and published as the next version (Backend.Publish validates it).
// Only PUT /v1/ruleset publishes the body as written, so YAML comments live
// until the next item edit. An edit that changes nothing publishes nothing.
//
// Responses about the ruleset carry ETag: "<version>". Every write needs
// If-Match with the version it changes ("0" before the first version; "*"
// for whatever is current): 428 without it, 412 when it names another
// version or Publish reports service.ErrVersionConflict (the problem's
// current_version says which is current). A document that does not load is
// 422 with every error (path, line, column, message, snippet); for item
// edits the positions are in the re-encoded JSON document. ?comment= on a
// write is the change's comment in the audit log.
//
// The service stores each version whole in one record of its rules topic,
// compressed (kafka.RulesetTooLargeError): a document whose record does not
// fit the topic's max.message.bytes even so is 413 ruleset-too-large, with
// max_bytes, and nothing is published; this holds for PUT /v1/ruleset and
// every item write (create, replace, delete, mode changes, rollback) alike.
//
// An item is shown as its fields plus "name". In a body, "name" names the
// item; "id" may too, except for streams, whose "id" is the event id
// expression. A rule's mode is draft, shadow, active or disabled, as
// rules.Load accepts.
//
// # Errors
//
// Every error is application/problem+json (RFC 9457) with type, title,
// status, detail, instance (the request path) and request_id; 422 adds
// errors, 412 current_version, 413 max_bytes. Types:
//
//	urn:vigil:problem:bad-request             400
//	urn:vigil:problem:malformed-json          400
//	urn:vigil:problem:unauthorized            401
//	urn:vigil:problem:forbidden               403
//	urn:vigil:problem:not-found               404
//	urn:vigil:problem:method-not-allowed      405 (with Allow)
//	urn:vigil:problem:conflict                409 (item exists; no deciding stream)
//	urn:vigil:problem:id-conflict             409 (decision id with another body)
//	urn:vigil:problem:version-mismatch        412
//	urn:vigil:problem:body-too-large          413 (max_bytes: the body limit)
//	urn:vigil:problem:ruleset-too-large       413 (max_bytes: the rules topic's limit)
//	urn:vigil:problem:unsupported-media-type  415
//	urn:vigil:problem:invalid-ruleset         422
//	urn:vigil:problem:bad-event               422 (an event with no key, time or id)
//	urn:vigil:problem:if-match-required       428
//	urn:vigil:problem:saturated               429 (with Retry-After)
//	urn:vigil:problem:internal                500 (panics are recovered and logged)
//	urn:vigil:problem:unavailable             503
//	urn:vigil:problem:not-owner               503 (with Retry-After)
//
// # The OpenAPI document
//
// openapi.json, served at /openapi.json, is written by hand and types
// every request and response, closed (additionalProperties: false) where
// the Go type is. The tests hold it to the code: TestOpenAPISync to the
// routes and permissions, TestOpenAPIGoTypes to the Go types,
// TestOpenAPIEngineRecords to the records the engine writes (decisions,
// entity views, backtest reports); and every API test validates its
// requests and responses against it (kin-openapi's openapi3filter).
// Redocly CLI lints it clean (redocly.yaml; TestRedoclyLint with
// VIGIL_REDOCLY=1).
//
// # Requests
//
// Bodies are bounded (Options.MaxBodyBytes, 1 MiB; backtests
// MaxBacktestBytes, 16 MiB): 413 beyond. JSON endpoints take
// application/json (or a +json type, or no Content-Type); documents and
// items take YAML too (application/yaml, application/x-yaml, text/yaml):
// 415 otherwise. Path parameters are percent-decoded exactly once, whatever
// the client escaped: /v1/entities/pct%2541 is the key "pct%41",
// /v1/entities/a%2Fb the key "a/b". X-Request-ID is echoed when it is a safe token of up to
// 128 characters, generated otherwise. GET /v1/ruleset and
// /v1/ruleset/versions/{n} answer with the document as published when
// Accept prefers YAML.
//
// # Decisions
//
// POST /v1/decisions takes the event as a JSON object and ?stream= (which
// may be left out when exactly one stream decides). 200 with the Decision,
// with Idempotent-Replay: true when the id was already decided; 409 for the
// same id with another body; 429 (service.ErrSaturated) and 503
// (service.ErrNotOwner) with Retry-After. GET /v1/decisions/{id} answers as
// the POST did, features included (the owning task keeps them with the id).
// GET /v1/decisions lists the newest decisions of every instance
// (Backend.RecentDecisions: the service reads the newest records of the
// decisions topic at each call), for a live view that polls.
//
// POST /v1/rules:backtest with "before": true also returns, by sample id,
// the current ruleset's decision of the same event: a second backtest whose
// candidate is the current document plus a shadow rule matching every event
// (backtestBefore).
//
// # Observability hooks
//
// Options.Middleware wraps every request inside the router (metrics,
// tracing); Options.Metrics is served at /metrics, open unless
// Options.MetricsAuth. Access logs go to Options.Logger: method, route
// pattern (never the raw path, which may hold user ids), status, duration,
// bytes, request id and key name.
//
// # Concurrency
//
// A Handler is safe for concurrent use and starts no goroutines. Its only
// mutable state are two caches of immutable per-version data: the deciding
// streams of the latest version (an atomic pointer) and the item indexes of
// recent versions (versionCache, one mutex, never held across a Backend
// call or a parse).
package api
