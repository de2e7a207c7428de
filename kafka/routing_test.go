package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// The join metadata keeps the range balancer's subscription and adds the
// API address as user data.
func TestAdvertisingBalancer(t *testing.T) {
	b := newAdvertisingBalancer(kgo.RangeBalancer(), "vigil-1.vigil:8080")
	if b.ProtocolName() != "range" {
		t.Errorf("protocol %q, want range (instances of older versions balance with it)", b.ProtocolName())
	}
	var m kmsg.ConsumerMemberMetadata
	if err := m.ReadFrom(b.JoinGroupMetadata([]string{"logins", "tx"}, nil, 3)); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m.Topics) != "[logins tx]" || m.Generation != 3 || string(m.UserData) != `{"http":"vigil-1.vigil:8080"}` {
		t.Errorf("metadata %+v (user data %s)", m, m.UserData)
	}
}

// Two instances in one group: each learns which partitions the other owns
// and at which address, and a request for a partition of the other is
// answered with a service.NotOwnerError naming it.
func TestOwnersAcrossInstances(t *testing.T) {
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	start := func(addr string) *Service {
		cfg := Config{Kafka: kconf.Config{Brokers: []string{b.Addr()}}, DataDir: t.TempDir(), Partitions: 4,
			Group: "routing", InstanceID: addr, AdvertiseHTTP: addr, SessionTimeout: 6 * time.Second,
			RouteWait: 200 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
			Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
		svc, err := New(context.Background(), cfg, []byte(rulesA), true)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
		return svc
	}
	a, c := start("a.test:8080"), start("c.test:8080")
	svcs := map[string]*Service{"a.test:8080": a, "c.test:8080": c}

	// Poll until both instances hold tasks and agree on a map that covers
	// the four partitions with exactly those tasks.
	deadline := time.Now().Add(time.Minute)
	for {
		agreed := true
		for addr, s := range svcs {
			m := s.owners.snapshot()
			if len(m) != 4 {
				agreed = false
			}
			for p := range int32(4) {
				if (m[p] == addr) != (s.task(p) != nil) {
					agreed = false
				}
			}
		}
		if agreed && len(a.taskList()) > 0 && len(c.taskList()) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no agreement after a minute: a %v (tasks %v), c %v (tasks %v)",
				a.owners.snapshot(), len(a.taskList()), c.owners.snapshot(), len(c.taskList()))
		}
		time.Sleep(50 * time.Millisecond) // polling the group's rebalance
	}
	for addr, s := range svcs {
		for p := range int32(4) {
			_, err := s.local(context.Background(), p)
			owner := s.owners.snapshot()[p]
			var no *service.NotOwnerError
			switch {
			case owner == addr && err != nil:
				t.Errorf("%s, partition %d: its own, but %v", addr, p, err)
			case owner != addr && (!errors.As(err, &no) || no.Owner != owner || !errors.Is(err, service.ErrNotOwner)):
				t.Errorf("%s, partition %d: %v, want service.NotOwnerError naming %s", addr, p, err, owner)
			}
		}
	}
}

// snapshot returns a copy of the map.
func (o *ownerMap) snapshot() map[int32]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.mu.byPart)
}
