package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/vigil-cep/vigil/internal/cli"
	"github.com/vigil-cep/vigil/internal/jsonv"
)

// runBare serves a bare POST /v1/decisions: a chi router and a handler that
// reads and decodes the event as the API does and answers a fixed-shape
// decision record, with no engine, no Kafka and no middleware. It is the
// floor the decision API is measured against (docs/performance.md): the same
// load generator (loadtest) on the same machine, so that what is left is
// Vigil's own cost per request.
func runBare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := program().NewFlags("bare", "bare [--http ADDR]", stderr)
	addr := fs.String("http", "127.0.0.1:8090", "address to listen on")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bareHandler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "bare decision handler on http://%s/v1/decisions\n", ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// bareHandler is runBare's router.
func bareHandler() http.Handler {
	r := chi.NewRouter()
	r.Post("/v1/decisions", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var ev map[string]any
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _ := ev["tx_id"].(string)
		user, _ := ev["user_id"].(string)
		ts, _ := ev["ts"].(float64)
		b := jsonv.AppendString([]byte(`{"decision":{"kind":"decision","id":`), id)
		b = jsonv.AppendString(append(b, `,"stream":"transactions","key":`...), user)
		b = strconv.AppendInt(append(b, `,"time":`...), int64(ts), 10)
		b = append(b, `,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]}}`+"\n"...)
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	return r
}
