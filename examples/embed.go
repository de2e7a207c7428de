// Package examples holds the example ruleset, embedded so that `vigil serve`
// runs with no file at hand.
package examples

import _ "embed"

// Fraud is examples/fraud.yaml: the ruleset that catches the fraud `vigil gen`
// plants.
//
//go:embed fraud.yaml
var Fraud []byte
