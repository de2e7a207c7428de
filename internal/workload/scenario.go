package workload

import (
	"cmp"
	"slices"
)

// Planted fraud kinds: the values of Planted.Kind.
const (
	// IPHopping is 4–6 transactions within 3 minutes from 3 or more distinct
	// IPs, each in another country; the transactions from the first one on the
	// third distinct IP onward must be flagged.
	IPHopping = "ip_hopping"
	// CardTesting is a burst of 8–15 transactions of 0.50–1.99 within 60 s on
	// one card at varied merchants; the burst's 5th transaction onward must be flagged.
	CardTesting = "card_testing"
	// AccountTakeover is 3–5 FAILED logins, then a SUCCESS login from a new IP
	// and device with a new_device event, then within 10 minutes a transaction
	// of 1000 or more from that IP, which must be flagged.
	AccountTakeover = "account_takeover"
)

// Planted describes one planted fraud case: the scenario and the tx_id(s) a good
// ruleset must flag (block or review). The case's other events may be flagged too.
type Planted struct {
	// Kind is IPHopping, CardTesting or AccountTakeover.
	Kind string
	// User is the victim's user_id; each user has at most one case.
	User string
	// TxIDs are the transactions to flag, in event-time order.
	TxIDs []string
}

// plant picks the fraud users, fills g.cases (sorted by user) and returns the
// planted events in event-time order. A case's events are laid out from time 0,
// then moved to a random start that keeps the whole case inside the span when
// the span is long enough.
func (g *generator) plant() []event {
	users := g.sampleUsers(g.c.fraudUsers())
	g.cases = make([]Planted, len(users))
	var all []event
	for i, u := range users {
		s := scenario{g: g, p: userTraits(g.salt, u), user: int64(u) + 1, idx: int32(i)}
		var evs []event
		switch g.rng.IntN(3) {
		case 0:
			g.cases[i].Kind, evs = IPHopping, s.ipHopping()
		case 1:
			g.cases[i].Kind, evs = CardTesting, s.cardTesting()
		default:
			g.cases[i].Kind, evs = AccountTakeover, s.accountTakeover()
		}
		g.cases[i].User = string(appendPadded([]byte{'u'}, s.user, 6))
		room := max(int64(g.c.spanMs())-evs[len(evs)-1].ts, 0)
		start := g.c.Start + g.rng.Int64N(room+1)
		for j := range evs {
			evs[j].ts += start
		}
		all = append(all, evs...)
	}
	slices.SortStableFunc(all, func(a, b event) int { return cmp.Compare(a.ts, b.ts) })
	return all
}

// sampleUsers returns n distinct user indexes, sorted (Floyd's algorithm).
func (g *generator) sampleUsers(n int) []int {
	chosen := make(map[int]bool, n)
	users := make([]int, 0, n)
	for j := g.c.Users - n; j < g.c.Users; j++ {
		u := g.rng.IntN(j + 1)
		if chosen[u] {
			u = j
		}
		chosen[u] = true
		users = append(users, u)
	}
	slices.Sort(users)
	return users
}

// scenario builds the events of one planted case, times counted from 0.
type scenario struct {
	g    *generator
	p    profile
	user int64 // user number
	idx  int32 // index of the case
}

// event returns an event of the case with the attacker's device dev.
func (s *scenario) event(kind streamKind, ts int64, dev int64) event {
	return event{kind: kind, ts: ts, user: s.user, devUser: dev, devTag: 'x', planted: s.idx}
}

// tx returns a transaction of the case on the user's first card.
func (s *scenario) tx(ts, cents int64, ip uint32, country uint8, dev int64, merch int32) event {
	e := s.event(kindTx, ts, dev)
	e.cents, e.ip, e.country, e.home, e.card, e.merch = cents, ip, country, s.p.home, 'a', merch
	return e
}

// attackerDevice returns a device number for the attacker's device (tag x,
// never one of the user's own).
func (s *scenario) attackerDevice() int64 { return s.g.rng.Int64N(1_000_000) }

// foreign returns n distinct countries other than the user's home, in random order.
func (s *scenario) foreign(n int) []uint8 {
	out := make([]uint8, 0, len(countries)-1)
	for _, i := range s.g.rng.Perm(len(countries)) {
		if uint8(i) != s.p.home {
			out = append(out, uint8(i))
		}
	}
	return out[:n]
}

// times returns n strictly increasing times from 0 to at most within.
func (s *scenario) times(n int, within int64) []int64 {
	t := make([]int64, n)
	for i := range t {
		t[i] = s.g.rng.Int64N(within - int64(n) + 2)
	}
	slices.Sort(t)
	first := t[0]
	for i := range t {
		t[i] += int64(i) - first
	}
	return t
}

// merchant returns a random merchant.
func (s *scenario) merchant() int32 { return int32(s.g.rng.IntN(merchants)) }

// ipHopping: 4–6 transactions within 3 minutes from k ≥ 3 distinct IPs in k
// countries; the first use of each new IP comes in order, and every
// transaction from the first on the third IP onward must be flagged.
func (s *scenario) ipHopping() []event {
	rng := s.g.rng
	n := 4 + rng.IntN(3)
	k := 3 + rng.IntN(n-2)
	where := s.foreign(k)
	ips := make([]uint32, k)
	for i := range ips {
		ips[i] = randomIP(where[i], rng.Uint64())
	}
	dev := s.attackerDevice()
	evs := make([]event, n)
	used := 0 // distinct IPs used so far
	for i, ts := range s.times(n, 170_000) {
		var ip int
		if need := k - used; used == 0 || need == n-i || (need > 0 && rng.Float64() < 0.6) {
			ip = used
			used++
		} else {
			ip = rng.IntN(used)
		}
		evs[i] = s.tx(ts, 8000+rng.Int64N(82_000), ips[ip], where[ip], dev, s.merchant())
		evs[i].mustFlag = used >= 3
	}
	return evs
}

// cardTesting: 8–15 transactions of 0.50–1.99 within 55 s on the user's
// first card at distinct merchants, from one attacker IP; the 5th onward must
// be flagged.
func (s *scenario) cardTesting() []event {
	rng := s.g.rng
	n := 8 + rng.IntN(8)
	where := s.foreign(1)[0]
	ip := randomIP(where, rng.Uint64())
	dev := s.attackerDevice()
	evs := make([]event, n)
	seen := make(map[int32]bool, n)
	for i, ts := range s.times(n, 55_000) {
		m := s.merchant()
		for seen[m] {
			m = s.merchant()
		}
		seen[m] = true
		evs[i] = s.tx(ts, 50+rng.Int64N(150), ip, where, dev, m)
		evs[i].mustFlag = i >= 4
	}
	return evs
}

// accountTakeover: 3–5 FAILED logins within 90 s from one or two attacker
// IPs, a SUCCESS login 5–60 s later from another new IP on the attacker's
// device, a new_device event for that device within 3 s, and 20 s to 4 min
// after the login a transaction of 1000.00–4999.99 from the new IP, which
// must be flagged.
func (s *scenario) accountTakeover() []event {
	rng := s.g.rng
	where := s.foreign(2)
	tried := [2]uint32{randomIP(where[0], rng.Uint64()), randomIP(where[0], rng.Uint64())}
	entry := randomIP(where[1], rng.Uint64())
	dev := s.attackerDevice()
	failed := s.times(3+rng.IntN(3), 90_000)
	evs := make([]event, 0, len(failed)+3)
	for _, ts := range failed {
		e := s.event(kindLogin, ts, dev)
		e.ip, e.flag = tried[rng.IntN(2)], true
		evs = append(evs, e)
	}
	login := failed[len(failed)-1] + 5000 + rng.Int64N(55_000)
	success := s.event(kindLogin, login, dev)
	success.ip = entry
	fresh := s.event(kindDevice, login+500+rng.Int64N(2500), dev)
	fresh.flag = true
	spend := s.tx(login+20_000+rng.Int64N(220_000), 100_000+rng.Int64N(400_000), entry, where[1], dev, s.merchant())
	spend.mustFlag = true
	return append(evs, success, fresh, spend)
}
