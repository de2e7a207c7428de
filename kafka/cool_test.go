package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"
)

// TestFreezeIdle: a service freezes the keys left unchanged for
// Config.FreezeIdle, and a request for a frozen key finds its state whole.
// (That a frozen key's state is exact is engine.TestColdKeys'.)
func TestFreezeIdle(t *testing.T) {
	svc, _ := testService(t, rulesCount, func(c *Config) { c.FreezeIdle = 100 * time.Millisecond })
	ctx := context.Background()
	for svc.Ready() != nil {
		time.Sleep(20 * time.Millisecond) // waiting for the group to assign
	}
	const users = 20
	for i := range users {
		body := fmt.Sprintf(`{"tx_id":"a%d","user_id":"u%d","amount":5,"ts":%d}`, i, i, 1000+i)
		if r, _, err := svc.Decide(ctx, "tx", []byte(body)); err != nil || reasonOf(t, r.Record) != "1" {
			t.Fatalf("decision %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for coldKeys(t, svc) < users {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d idle keys frozen after 30 s", coldKeys(t, svc), users)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r, _, err := svc.Decide(ctx, "tx", []byte(`{"tx_id":"b3","user_id":"u3","amount":5,"ts":2000}`))
	if err != nil || reasonOf(t, r.Record) != "2" {
		t.Fatalf("a frozen key's next decision: %s, %v; want it to see 2 events", r.Record, err)
	}
	v, err := svc.Entity(ctx, "u5", service.EntityQuery{})
	if err != nil || len(v.Decisions) != 1 || len(v.History["tx"]) != 1 {
		t.Fatalf("a frozen key's view: %+v, %v", v, err)
	}
}

// coldKeys returns how many keys the service's tasks hold frozen.
func coldKeys(t *testing.T, s *Service) int {
	s.mu.Lock()
	var tasks []*task
	for _, tk := range s.tasks {
		tasks = append(tasks, tk)
	}
	s.mu.Unlock()
	n := 0
	for _, tk := range tasks {
		got := make(chan int, 1)
		select {
		case tk.calls <- func() { k, _ := tk.eng.Cold(); got <- k }:
			n += <-got
		case <-time.After(10 * time.Second):
			t.Fatal("a task did not answer in 10 s")
		}
	}
	return n
}
