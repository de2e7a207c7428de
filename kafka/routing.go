package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Request routing (docs/design.md "Request routing"): a decision or an
// entity read for a key whose partition another instance of the group owns
// is answered by that instance. Every instance advertises the address of its
// API in the user data of its consumer-group subscription, as Kafka Streams
// advertises application.server; any instance learns from the group's
// description which member owns which partition and at which address. The
// API forwards the request there (api.Handler); this file keeps the map.

// memberData is the user data of an instance's subscription.
type memberData struct {
	HTTP string `json:"http"` // the address peers reach its API at; "" when it has none
}

// advertisingBalancer is a balancer whose join metadata carries the
// instance's memberData; the assignment is the wrapped balancer's (range).
type advertisingBalancer struct {
	kgo.GroupBalancer
	userData []byte
}

func newAdvertisingBalancer(inner kgo.GroupBalancer, http string) advertisingBalancer {
	ud, _ := json.Marshal(memberData{HTTP: http}) // cannot fail
	return advertisingBalancer{GroupBalancer: inner, userData: ud}
}

func (b advertisingBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	raw := b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
	var m kmsg.ConsumerMemberMetadata
	if err := m.ReadFrom(raw); err != nil {
		return raw // not a consumer protocol: nothing to add to
	}
	m.UserData = b.userData
	return m.AppendTo(nil)
}

// ownerMap is which instance owns each partition, as the group describes
// it. Safe for concurrent use.
type ownerMap struct {
	mu struct {
		sync.Mutex
		byPart map[int32]string // partition → owner's API address ("" if it has none)
		stable bool             // the group was stable at the last description
	}
	refresh chan struct{} // a description is wanted now (buffered 1)
}

func newOwnerMap() *ownerMap {
	o := &ownerMap{refresh: make(chan struct{}, 1)}
	o.mu.byPart = map[int32]string{}
	return o
}

// owner returns the address of partition p's owner and whether the group
// said who owns it.
func (o *ownerMap) owner(p int32) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	addr, ok := o.mu.byPart[p]
	return addr, ok && o.mu.stable
}

// poke asks for a new description without waiting for it.
func (o *ownerMap) poke() {
	select {
	case o.refresh <- struct{}{}:
	default:
	}
}

// set replaces the map and returns how many partitions changed owner.
func (o *ownerMap) set(byPart map[int32]string, stable bool) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := 0
	for p, a := range byPart {
		if prev, ok := o.mu.byPart[p]; ok && prev != a {
			changed++
		}
	}
	if stable {
		o.mu.byPart = byPart
	}
	o.mu.stable = stable
	return changed
}

// ownerRefreshEvery is how often the group is described when nothing asks:
// a rebalance elsewhere in the group is seen within it.
const ownerRefreshEvery = 2 * time.Second

// watchOwners describes the group at every poke and every
// ownerRefreshEvery (every 100 ms while it is rebalancing) until ctx ends.
func (s *Service) watchOwners(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.owners.refresh:
		}
		stable := s.describeOwners(ctx)
		next := ownerRefreshEvery
		if !stable {
			next = 100 * time.Millisecond
		}
		timer.Reset(next)
	}
}

// describeOwners reads the group's members and assignments into the owner
// map and reports whether the group was stable.
func (s *Service) describeOwners(ctx context.Context) bool {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	groups, err := s.adm.DescribeGroups(dctx, s.cfg.Group)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Debug("describe group", "group", s.cfg.Group, "err", err)
		}
		return false
	}
	g, ok := groups[s.cfg.Group]
	if !ok || g.Err != nil || g.State != "Stable" {
		s.owners.set(nil, false)
		return false
	}
	first := InputTopics(s.Ruleset())
	if len(first) == 0 {
		return true
	}
	byPart := map[int32]string{}
	for _, m := range g.Members {
		var md memberData
		if meta, ok := m.Join.AsConsumer(); ok && len(meta.UserData) > 0 {
			_ = json.Unmarshal(meta.UserData, &md) // another program's user data: no address
		}
		asg, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		for _, t := range asg.Topics {
			if t.Topic != first[0] { // co-partitioned: partition p of every input goes together
				continue
			}
			for _, p := range t.Partitions {
				byPart[p] = md.HTTP
			}
		}
	}
	if n := s.owners.set(byPart, true); n > 0 {
		s.cfg.Metrics.OwnershipChanges(n)
	}
	return true
}

// DefaultRouteWait bounds how long a request waits for the owner of its
// partition during a rebalance before it is answered 503.
const DefaultRouteWait = 5 * time.Second

// local returns the task of partition p, waiting up to the route wait
// while no instance owns p (a rebalance) or this one does but has not
// started its task yet. Otherwise it returns a *service.NotOwnerError naming the
// owner (or none, once the wait is over).
func (s *Service) local(ctx context.Context, p int32) (*task, error) {
	if s.stopping.Load() {
		return nil, &service.NotOwnerError{Partition: p} // its task is stopping, or stopped
	}
	if t := s.task(p); t != nil {
		return t, nil
	}
	if addr, ok := s.owners.owner(p); ok && addr != s.cfg.AdvertiseHTTP {
		return nil, &service.NotOwnerError{Partition: p, Owner: addr}
	}
	// Nobody owns p as far as this instance knows, or this one does and
	// its task is starting: ask the group now (only then: a request for
	// a partition known to be elsewhere describes nothing), and wait.
	s.owners.poke()
	deadline := time.NewTimer(s.cfg.RouteWait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if t := s.task(p); t != nil {
			return t, nil
		}
		if addr, ok := s.owners.owner(p); ok && addr != s.cfg.AdvertiseHTTP {
			return nil, &service.NotOwnerError{Partition: p, Owner: addr}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			addr, _ := s.owners.owner(p)
			if addr == s.cfg.AdvertiseHTTP {
				addr = ""
			}
			return nil, &service.NotOwnerError{Partition: p, Owner: addr}
		case <-ctx.Done():
			return nil, errors.Join(&service.NotOwnerError{Partition: p}, ctx.Err())
		}
	}
}
