package main

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/codes"

	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/service"
	"github.com/vigil-cep/vigil/telemetry"
)

// tracedBackend gives every API decision its own span ("decide", child of
// the request's span), with the stream and the transaction id, when traces
// are exported (telemetry.StartDecision is free otherwise).
type tracedBackend struct {
	api.Backend
	tel *telemetry.Telemetry
}

func (b tracedBackend) Decide(ctx context.Context, stream string, body []byte) (*service.Decision, bool, error) {
	// The id is known once the service has read the event: set below.
	ctx, span := b.tel.StartDecision(ctx, stream, "")
	defer span.End()
	d, replay, err := b.Backend.Decide(ctx, stream, body)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return d, replay, err
	}
	if span.IsRecording() {
		var rec struct {
			ID     string `json:"id"`
			Action string `json:"action"`
		}
		if json.Unmarshal(d.Record, &rec) == nil {
			span.SetAttributes(telemetry.AttrDecisionID.String(rec.ID), telemetry.AttrAction.String(rec.Action))
		}
	}
	return d, replay, nil
}
