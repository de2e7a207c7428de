package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scaled has the defaults' per-user density (10 events a user, 0.02 events a
// user a second) at a fifth of the size, so that tests stay quick.
var scaled = Config{Users: 20_000, Events: 200_000, Rate: 400, Seed: 1}

// value is the union of the three streams' values, as parse checked them.
type value struct {
	TxID, UserID                   string
	Amount                         float64
	Currency, Merchant, Card, IP   string
	Device, Country, Status, Event string
	TS                             int64
}

// record is one parsed line.
type record struct {
	Stream string
	Value  value
	Line   string
}

// generate runs Generate and fails the test on error.
func generate(t testing.TB, c Config) ([]byte, []Planted) {
	t.Helper()
	var buf bytes.Buffer
	planted, err := Generate(&buf, c)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", c, err)
	}
	return buf.Bytes(), planted
}

// run is a generated and parsed workload.
type run struct {
	planted []Planted
	recs    []record
	err     error // from parse
}

// scaledRun generates and parses the scaled workload once for the tests that share it.
var scaledRun = sync.OnceValue(func() run {
	var buf bytes.Buffer
	planted, err := Generate(&buf, scaled)
	if err != nil {
		return run{err: err}
	}
	recs, err := parse(buf.Bytes())
	return run{planted: planted, recs: recs, err: err}
})

// scaledWorkload returns the scaled workload, failing the test if it is malformed.
func scaledWorkload(t testing.TB) run {
	t.Helper()
	r := scaledRun()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}

// generateParsed runs Generate and parse, failing the test on error.
func generateParsed(t testing.TB, c Config) ([]record, []Planted) {
	t.Helper()
	out, planted := generate(t, c)
	recs, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return recs, planted
}

// strictValue has a pointer for each field of any stream, so that a missing
// field shows as nil.
type strictValue struct {
	TxID     *string  `json:"tx_id"`
	UserID   *string  `json:"user_id"`
	Amount   *float64 `json:"amount"`
	Currency *string  `json:"currency"`
	Merchant *string  `json:"merchant"`
	Card     *string  `json:"card"`
	IP       *string  `json:"ip"`
	Device   *string  `json:"device"`
	Country  *string  `json:"country"`
	Status   *string  `json:"status"`
	Event    *string  `json:"event"`
	TS       *int64   `json:"ts"`
}

// strictRecord is a replay input record as the workload writes it: no
// partition, key or timestamp.
type strictRecord struct {
	Stream string       `json:"stream"`
	Value  *strictValue `json:"value"`
}

// stringFields gives, per stream, the pattern of each string field of the
// value; every stream also has a numeric ts, and transactions a numeric amount.
var stringFields = map[string]map[string]*regexp.Regexp{
	"transactions": {
		"tx_id": regexp.MustCompile(`^t\d{7,}$`), "user_id": regexp.MustCompile(`^u\d{6,}$`),
		"currency": regexp.MustCompile(`^[A-Z]{3}$`), "merchant": regexp.MustCompile(`^m\d{4}$`),
		"card": regexp.MustCompile(`^c\d{6,}[ab]$`), "ip": regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`),
		"device": regexp.MustCompile(`^d\d{6,}[abx]$`), "country": regexp.MustCompile(`^[A-Z]{2}$`),
	},
	"logins": {
		"user_id": regexp.MustCompile(`^u\d{6,}$`), "status": regexp.MustCompile(`^(SUCCESS|FAILED)$`),
		"ip": regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`), "device": regexp.MustCompile(`^d\d{6,}[abx]$`),
	},
	"devices": {
		"user_id": regexp.MustCompile(`^u\d{6,}$`), "device": regexp.MustCompile(`^d\d{6,}[abx]$`),
		"event": regexp.MustCompile(`^(new_device|seen)$`),
	},
}

// parse checks that every line of out is a replay input record of the
// workload's format, with exactly its stream's fields, and returns the records.
func parse(out []byte) ([]record, error) {
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	recs := make([]record, 0, bytes.Count(out, []byte("\n")))
	for start := 0; start < len(out); {
		var r strictRecord
		err := dec.Decode(&r)
		end := int(dec.InputOffset())
		if err == nil && (out[start] != '{' || end >= len(out) || out[end] != '\n') {
			err = fmt.Errorf("want one record a line, each ending with a newline")
		}
		if err == nil {
			var rec record
			rec, err = check(&r)
			rec.Line = string(out[start:end])
			recs = append(recs, rec)
		}
		if err != nil {
			line, _, _ := bytes.Cut(out[start:], []byte("\n"))
			return nil, fmt.Errorf("line %d: %v\n%s", len(recs)+1, err, line)
		}
		start = end + 1
	}
	return recs, nil
}

// check checks a decoded record's fields and returns it as a record (without its line).
func check(r *strictRecord) (record, error) {
	patterns, ok := stringFields[r.Stream]
	if !ok || r.Value == nil || r.Value.TS == nil {
		return record{}, fmt.Errorf("want a known stream and a value with a ts")
	}
	sv := r.Value
	v := value{TS: *sv.TS}
	if r.Stream == "transactions" {
		if sv.Amount == nil || *sv.Amount <= 0 || math.Abs(*sv.Amount*100-math.Round(*sv.Amount*100)) > 1e-6 {
			return record{}, fmt.Errorf("want a positive amount in cents")
		}
		v.Amount = *sv.Amount
	} else if sv.Amount != nil {
		return record{}, fmt.Errorf("field amount does not belong to %s", r.Stream)
	}
	for _, f := range [...]struct {
		name string
		dst  *string
		src  *string
	}{
		{"tx_id", &v.TxID, sv.TxID}, {"user_id", &v.UserID, sv.UserID}, {"currency", &v.Currency, sv.Currency},
		{"merchant", &v.Merchant, sv.Merchant}, {"card", &v.Card, sv.Card}, {"ip", &v.IP, sv.IP},
		{"device", &v.Device, sv.Device}, {"country", &v.Country, sv.Country},
		{"status", &v.Status, sv.Status}, {"event", &v.Event, sv.Event},
	} {
		re, want := patterns[f.name]
		switch {
		case want && f.src == nil:
			return record{}, fmt.Errorf("no field %s", f.name)
		case !want && f.src != nil:
			return record{}, fmt.Errorf("field %s does not belong to %s", f.name, r.Stream)
		case want && !re.MatchString(*f.src):
			return record{}, fmt.Errorf("field %s = %q, want %v", f.name, *f.src, re)
		case want:
			*f.dst = *f.src
		}
	}
	return record{Stream: r.Stream, Value: v}, nil
}

func TestDeterministic(t *testing.T) {
	c := scaled
	a, pa := generate(t, c)
	b, pb := generate(t, c)
	if !bytes.Equal(a, b) {
		t.Errorf("two runs of the same config differ")
	}
	if diff := cmp.Diff(pa, pb); diff != "" {
		t.Errorf("planted cases differ (-first +second):\n%s", diff)
	}
	c.Seed++
	d, pd := generate(t, c)
	if bytes.Equal(a, d) {
		t.Errorf("seeds %d and %d give the same output", scaled.Seed, c.Seed)
	}
	if cmp.Equal(pa, pd) {
		t.Errorf("seeds %d and %d plant the same cases", scaled.Seed, c.Seed)
	}
}

func TestFormat(t *testing.T) {
	recs := scaledWorkload(t).recs
	// Transaction numbers are 1..n without gaps; user numbers at most Users.
	ids := make(map[string]bool)
	for _, r := range recs {
		if strings.Contains(r.Line, " ") {
			t.Fatalf("space in %s", r.Line)
		}
		if r.Stream == "transactions" {
			ids[r.Value.TxID] = true
		}
		if r.Value.UserID > fmt.Sprintf("u%06d", scaled.Users) {
			t.Fatalf("user beyond Users: %s", r.Line)
		}
	}
	for i := range len(ids) {
		if id := fmt.Sprintf("t%07d", i+1); !ids[id] {
			t.Fatalf("%d transactions but no %s", len(ids), id)
		}
	}
}

func TestAppendHelpers(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{string(appendCents(nil, 4250)), "42.5"},
		{string(appendCents(nil, 4205)), "42.05"},
		{string(appendCents(nil, 4200)), "42"},
		{string(appendCents(nil, 7)), "0.07"},
		{string(appendPadded(nil, 42, 6)), "000042"},
		{string(appendPadded(nil, 0, 3)), "000"},
		{string(appendPadded(nil, 1234567, 6)), "1234567"},
		{string(appendIP(nil, 10<<24|0<<16|1<<8|7)), "10.0.1.7"},
		{txID(1), "t0000001"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// stats are the measured properties of a workload.
type stats struct {
	lines, tx, logins, devices int
	uniqueTx, dups             int
	late                       int // lines behind their stream's maximum so far, duplicates aside
	maxLag                     int64
	minTS, maxTS               int64
	users                      int
	failed, newDevices         int
}

// measure computes stats and checks that every duplicate repeats the line of
// its tx_id's first occurrence byte for byte.
func measure(t *testing.T, recs []record) stats {
	t.Helper()
	s := stats{lines: len(recs), minTS: math.MaxInt64}
	first := make(map[string]string)
	users := make(map[string]bool)
	maxSeen := make(map[string]int64)
	for _, r := range recs {
		v := r.Value
		users[v.UserID] = true
		s.minTS, s.maxTS = min(s.minTS, v.TS), max(s.maxTS, v.TS)
		dup := false
		switch r.Stream {
		case "transactions":
			s.tx++
			if line, ok := first[v.TxID]; ok {
				if line != r.Line {
					t.Fatalf("duplicate of %s differs:\n%s\n%s", v.TxID, line, r.Line)
				}
				s.dups++
				dup = true
			} else {
				first[v.TxID] = r.Line
			}
		case "logins":
			s.logins++
			if v.Status == "FAILED" {
				s.failed++
			}
		case "devices":
			s.devices++
			if v.Event == "new_device" {
				s.newDevices++
			}
		}
		if m, ok := maxSeen[r.Stream]; ok && v.TS < m {
			s.maxLag = max(s.maxLag, m-v.TS)
			if !dup {
				s.late++
			}
		}
		maxSeen[r.Stream] = max(maxSeen[r.Stream], v.TS)
	}
	s.uniqueTx = len(first)
	s.users = len(users)
	return s
}

// within reports whether got is within tol (relative) of want.
func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func TestStatistics(t *testing.T) {
	for _, c := range []Config{scaled, {Users: 2000, Events: 50_000, Seed: 7, OutOfOrder: 0.2, MaxDelay: 400, Duplicates: 0.05}} {
		t.Run(fmt.Sprintf("events=%d", c.Events), func(t *testing.T) {
			var recs []record
			if c == scaled {
				recs = scaledWorkload(t).recs
			} else {
				recs, _ = generateParsed(t, c)
			}
			s := measure(t, recs)
			d := c.withDefaults()
			t.Logf("%+v", s)
			if s.lines != d.Events {
				t.Errorf("%d lines, want %d", s.lines, d.Events)
			}
			n := float64(s.lines)
			for _, m := range []struct {
				name      string
				got, want float64
			}{
				{"transactions", float64(s.tx) / n, 0.70},
				{"logins", float64(s.logins) / n, 0.22},
				{"devices", float64(s.devices) / n, 0.08},
			} {
				if math.Abs(m.got-m.want) > 0.015 {
					t.Errorf("%s are %.4f of the lines, want %.2f ± 0.015", m.name, m.got, m.want)
				}
			}
			if got := float64(s.dups) / float64(s.uniqueTx); !within(got, d.Duplicates, 0.25) {
				t.Errorf("duplicates are %.4f of the transactions, want %.4f ± 25%%", got, d.Duplicates)
			}
			// Planted events (a few percent) are never late: allow for them.
			if got := float64(s.late) / float64(s.lines-s.dups); !within(got, d.OutOfOrder*0.98, 0.2) {
				t.Errorf("%.4f of the events are late, want %.4f ± 20%%", got, d.OutOfOrder)
			}
			if s.maxLag > d.MaxDelay {
				t.Errorf("an event is %d ms behind its stream, more than MaxDelay %d", s.maxLag, d.MaxDelay)
			}
			if s.minTS != d.Start {
				t.Errorf("first event time %d, want Start %d", s.minTS, d.Start)
			}
			// The span is Events/Rate; planted cases may end up to minutes after it.
			if span := float64(s.maxTS - s.minTS); span < 0.95*d.spanMs() || span > 1.05*d.spanMs()+maxScenarioSpan {
				t.Errorf("workload spans %.0f ms, want about %.0f", span, d.spanMs())
			}
			if got := float64(s.failed) / float64(s.logins); got < 0.03 || got > 0.08 {
				t.Errorf("%.4f of the logins failed, want mostly successes", got)
			}
			if got := float64(s.newDevices) / float64(s.devices); got < 0.02 || got > 0.08 {
				t.Errorf("%.4f of the device events are new devices", got)
			}
			if want := float64(d.Users) * (1 - math.Exp(-float64(d.Events)/float64(d.Users))); float64(s.users) < 0.9*want || s.users > d.Users {
				t.Errorf("%d distinct users, want about %.0f and at most %d", s.users, want, d.Users)
			}
		})
	}
}

func TestAmounts(t *testing.T) {
	w := scaledWorkload(t)
	fraud := make(map[string]bool)
	for _, p := range w.planted {
		fraud[p.User] = true
	}
	var n, typical, large int
	for _, r := range w.recs {
		if r.Stream != "transactions" || fraud[r.Value.UserID] {
			continue
		}
		n++
		if a := r.Value.Amount; a >= 5 && a <= 200 {
			typical++
		} else if a >= 1000 {
			large++
		}
	}
	if got := float64(typical) / float64(n); got < 0.85 {
		t.Errorf("%.3f of normal amounts are in 5–200, want most", got)
	}
	if got := float64(large) / float64(n); got == 0 || got > 0.002 {
		t.Errorf("%.5f of normal amounts are 1000 or more, want rare but present", got)
	}
}

func TestNoLateness(t *testing.T) {
	c := Config{Users: 1000, Events: 20_000, Seed: 3, OutOfOrder: -1, Duplicates: -1, Fraud: -1}
	recs, planted := generateParsed(t, c)
	if len(planted) != 0 {
		t.Errorf("Fraud < 0 planted %d cases", len(planted))
	}
	s := measure(t, recs)
	if s.late != 0 || s.dups != 0 || s.maxLag != 0 {
		t.Errorf("want an in-order workload without duplicates, got %+v", s)
	}
}

func TestTiny(t *testing.T) {
	for _, c := range []Config{{Events: 1, Users: 1, Fraud: -1}, {Events: 30, Users: 100}, {Events: 40, Users: 1, Fraud: 1, Rate: 0.5}} {
		out, planted := generate(t, c)
		if got := bytes.Count(out, []byte("\n")); got != c.Events {
			t.Errorf("%+v: %d lines, want %d", c, got, c.Events)
		}
		if _, err := parse(out); err != nil {
			t.Error(err)
		}
		for _, p := range planted {
			if len(p.TxIDs) == 0 {
				t.Errorf("%+v: case without transactions: %+v", c, p)
			}
		}
	}
}

// byUser groups records by user_id, in output order.
func byUser(recs []record) map[string][]record {
	m := make(map[string][]record)
	for _, r := range recs {
		m[r.Value.UserID] = append(m[r.Value.UserID], r)
	}
	return m
}

func TestPlantedShape(t *testing.T) {
	w := scaledWorkload(t)
	recs, planted := w.recs, w.planted
	if !slices.IsSortedFunc(planted, func(a, b Planted) int { return strings.Compare(a.User, b.User) }) {
		t.Errorf("planted cases are not sorted by user")
	}
	if want := scaled.withDefaults().fraudUsers(); len(planted) != want {
		t.Fatalf("%d planted cases, want %d", len(planted), want)
	}
	tx := make(map[string]value)
	for _, r := range recs {
		if r.Stream == "transactions" {
			tx[r.Value.TxID] = r.Value
		}
	}
	users := byUser(recs)
	kinds := make(map[string]int)
	for _, p := range planted {
		kinds[p.Kind]++
		if len(p.TxIDs) == 0 {
			t.Fatalf("%+v: no transactions to flag", p)
		}
		first, ok := tx[p.TxIDs[0]]
		if !ok || first.UserID != p.User {
			t.Fatalf("%+v: first transaction %+v is not the user's", p, first)
		}
		// The case's events are those on the attacker's device.
		var caseTx, logins, devices []value
		for _, r := range users[p.User] {
			if r.Value.Device != first.Device {
				continue
			}
			switch r.Stream {
			case "transactions":
				caseTx = append(caseTx, r.Value)
			case "logins":
				logins = append(logins, r.Value)
			case "devices":
				devices = append(devices, r.Value)
			}
		}
		var flagged []string
		switch p.Kind {
		case IPHopping:
			flagged = checkIPHopping(t, p, caseTx)
		case CardTesting:
			flagged = checkCardTesting(t, p, caseTx)
		case AccountTakeover:
			flagged = checkAccountTakeover(t, p, caseTx, logins, devices, users[p.User])
		default:
			t.Fatalf("unknown kind %q", p.Kind)
		}
		if diff := cmp.Diff(flagged, p.TxIDs); diff != "" {
			t.Errorf("%s of %s: planted TxIDs (-want +got):\n%s", p.Kind, p.User, diff)
		}
	}
	for _, k := range []string{IPHopping, CardTesting, AccountTakeover} {
		if kinds[k] < len(planted)/5 {
			t.Errorf("only %d of %d cases are %s", kinds[k], len(planted), k)
		}
	}
}

// checkIPHopping checks the case's transactions and returns those that must be flagged.
func checkIPHopping(t *testing.T, p Planted, txs []value) []string {
	t.Helper()
	if len(txs) < 4 || len(txs) > 6 || txs[len(txs)-1].TS-txs[0].TS > 3*60_000 {
		t.Errorf("%s: want 4–6 transactions within 3 minutes, got %+v", p.User, txs)
	}
	ips := make(map[string]bool)
	countries := make(map[string]bool)
	var flag []string
	for _, v := range txs {
		ips[v.IP] = true
		countries[v.Country] = true
		if len(ips) >= 3 {
			flag = append(flag, v.TxID)
		}
	}
	if len(ips) < 3 || len(countries) != len(ips) {
		t.Errorf("%s: want 3+ IPs in as many countries, got %d IPs in %d countries", p.User, len(ips), len(countries))
	}
	return flag
}

// checkCardTesting checks the burst and returns the transactions that must be flagged.
func checkCardTesting(t *testing.T, p Planted, txs []value) []string {
	t.Helper()
	if len(txs) < 8 || len(txs) > 15 || txs[len(txs)-1].TS-txs[0].TS > 60_000 {
		t.Errorf("%s: want 8–15 transactions within 60 s, got %+v", p.User, txs)
	}
	merchants := make(map[string]bool)
	var flag []string
	for i, v := range txs {
		merchants[v.Merchant] = true
		if v.Amount < 0.5 || v.Amount > 2 || v.Card != txs[0].Card {
			t.Errorf("%s: want amounts 0.5–2.0 on one card, got %+v", p.User, v)
		}
		if i >= 4 {
			flag = append(flag, v.TxID)
		}
	}
	if len(merchants) != len(txs) {
		t.Errorf("%s: %d merchants for %d transactions", p.User, len(merchants), len(txs))
	}
	return flag
}

// checkAccountTakeover checks the takeover and returns the transaction that must be flagged.
func checkAccountTakeover(t *testing.T, p Planted, txs, logins, devices []value, all []record) []string {
	t.Helper()
	if len(txs) != 1 || len(logins) < 4 || len(devices) != 1 {
		t.Fatalf("%s: want 1 transaction, 4+ logins and a device event, got %+v %+v %+v", p.User, txs, logins, devices)
	}
	spend, success := txs[0], logins[len(logins)-1]
	for _, l := range logins[:len(logins)-1] {
		if l.Status != "FAILED" || l.IP == success.IP || l.TS >= success.TS {
			t.Errorf("%s: want FAILED logins from other IPs before the success, got %+v", p.User, l)
		}
	}
	if success.Status != "SUCCESS" || success.IP != spend.IP {
		t.Errorf("%s: want a SUCCESS login from the spending IP, got %+v", p.User, success)
	}
	if d := devices[0]; d.Event != "new_device" || d.TS < success.TS || d.TS > spend.TS {
		t.Errorf("%s: want a new_device event after the login, got %+v", p.User, d)
	}
	if spend.Amount < 1000 || spend.TS <= success.TS || spend.TS-success.TS > 10*60_000 {
		t.Errorf("%s: want 1000+ within 10 minutes of the login, got %+v after %+v", p.User, spend, success)
	}
	for _, r := range all {
		if r.Value.Device != spend.Device && r.Value.IP == spend.IP {
			t.Errorf("%s: the takeover IP is not new: %s", p.User, r.Line)
		}
	}
	return []string{spend.TxID}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, ""},
		{Config{OutOfOrder: -1, Duplicates: -0.5, Fraud: -1, Seed: 9}, ""},
		{Config{Users: 1, Events: 1, Fraud: -1}, ""},
		{Config{Users: -1}, "workload: Users must not be negative, got -1"},
		{Config{Events: -2, Start: -3}, "workload: Events must not be negative, got -2\n" +
			"workload: Start must not be negative, got -3"},
		{Config{Rate: math.NaN()}, "workload: Rate must be a finite, non-negative number of events per second, got NaN"},
		{Config{Rate: -1}, "workload: Rate must be a finite, non-negative number of events per second, got -1"},
		{Config{MaxDelay: -1}, "workload: MaxDelay must not be negative, got -1"},
		{Config{OutOfOrder: 1.5, Duplicates: math.Inf(1), Fraud: math.NaN()},
			"workload: OutOfOrder must be a fraction at most 1 (negative means none), got 1.5\n" +
				"workload: Duplicates must be a fraction at most 1 (negative means none), got +Inf\n" +
				"workload: Fraud must be a fraction at most 1 (negative means none), got NaN"},
		{Config{Rate: 1e-9}, "workload: event times would reach 1000001767226203008 ms, beyond 2^53: lower Start, Events or MaxDelay, or raise Rate"},
		{Config{Events: 10_000}, "workload: Fraud 0.01 of 100000 users plants 1000 cases of up to 15 events each, more than half of the 10000 events: lower Fraud or Users, or raise Events"},
	} {
		err := tc.c.Validate()
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("%+v.Validate() = %q, want %q", tc.c, got, tc.want)
		}
		if tc.want == "" {
			continue
		}
		if _, gerr := Generate(&bytes.Buffer{}, tc.c); gerr == nil || gerr.Error() != tc.want {
			t.Errorf("Generate(%+v) = %v, want the validation error", tc.c, gerr)
		}
	}
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

func TestWriteError(t *testing.T) {
	_, err := Generate(failingWriter{}, Config{Users: 1000, Events: 50_000})
	if got, want := fmt.Sprint(err), "workload: write: disk full"; got != want {
		t.Errorf("Generate = %q, want %q", got, want)
	}
}

// BenchmarkGenerate measures generation into a discarding writer: 100k events
// (10k users) and the default workload of 1M events.
func BenchmarkGenerate(b *testing.B) {
	for _, c := range []Config{{Users: 10_000, Events: 100_000, Seed: 1}, {Seed: 1}} {
		c := c.withDefaults()
		b.Run(fmt.Sprintf("events=%d", c.Events), func(b *testing.B) {
			b.ReportAllocs()
			var n int64
			for b.Loop() {
				if _, err := Generate(countingWriter{n: &n}, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.Events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(n)/float64(b.N)/float64(c.Events), "B/event")
		})
	}
}

// countingWriter discards what it is given and counts the bytes.
type countingWriter struct{ n *int64 }

func (w countingWriter) Write(p []byte) (int, error) {
	*w.n += int64(len(p))
	return len(p), nil
}

func TestPartitions(t *testing.T) {
	var one, four bytes.Buffer
	if _, err := Generate(&one, Config{Users: 200, Events: 2000, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(&four, Config{Users: 200, Events: 2000, Seed: 5, Partitions: 4}); err != nil {
		t.Fatal(err)
	}
	lines1 := strings.Split(strings.TrimSpace(one.String()), "\n")
	lines4 := strings.Split(strings.TrimSpace(four.String()), "\n")
	seen := map[string]int{}
	for i, l := range lines4 {
		var rec struct {
			Value     map[string]any
			Partition *int
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Partition == nil {
			t.Fatalf("line %d: %v, partition %v: %s", i, err, rec.Partition, l)
		}
		user := rec.Value["user_id"].(string)
		if p, ok := seen[user]; ok && p != *rec.Partition {
			t.Fatalf("user %s on partitions %d and %d", user, p, *rec.Partition)
		}
		seen[user] = *rec.Partition
		if want := strings.TrimSuffix(lines1[i], "}"); !strings.HasPrefix(l, want) {
			t.Fatalf("line %d differs beyond the partition field:\n%s\n%s", i, lines1[i], l)
		}
	}
	count := map[int]int{}
	for _, p := range seen {
		count[p]++
	}
	if len(count) != 4 {
		t.Errorf("users on %d partitions, want 4: %v", len(count), count)
	}
}
