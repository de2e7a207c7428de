package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-cep/vigil"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/console"
	"github.com/vigil-cep/vigil/examples"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/telemetry"
)

var screenshots = flag.Bool("screenshots", false, "write the browser test's screenshots to ../docs/console/ (otherwise to a temporary directory)")

const (
	analystKey = "analyst-key-0123456789"
	readerKey  = "reader-key-0123456789"
	deciderKey = "decider-key-0123456789"
)

// chromium finds a Chromium binary: $VIGIL_CHROMIUM, or one on the PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("VIGIL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium binary found (chromium, chromium-browser, google-chrome, headless-shell): install Debian's chromium (apt-get install chromium), or set VIGIL_CHROMIUM; ./scripts/test installs it")
	return ""
}

// service runs the real service in-process, as vigil serve does: the
// embedded broker, the example ruleset, telemetry, the API with three keys
// and the console. It returns the API's base URL and the broker's address.
func service(t *testing.T) (string, string) {
	t.Helper()
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	tel, err := telemetry.New(telemetry.Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tel.Shutdown(context.Background()) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	kc := kconf.Config{Brokers: []string{b.Addr()}}
	svc, err := vigil.Open(t.Context(), vigil.Config{Kafka: kc, DataDir: t.TempDir(), Partitions: 2, Logger: log, Metrics: tel.Metrics()}, examples.Fraud)
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
	c, err := console.New()
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(svc, api.Options{Logger: log, Metrics: tel.MetricsHandler(), Console: c, Keys: []api.Key{
		{Name: "alice", Role: api.RoleAnalyst, Token: analystKey},
		{Name: "dana", Role: api.RoleReader, Token: readerKey},
		{Name: "gateway", Role: api.RoleDecider, Token: deciderKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewServer(ln.Addr().String(), h)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for svc.Ready(ctx) != nil { // the group assigns the partitions
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("service not ready after 30s: %v", svc.Ready(ctx))
		}
	}
	return "http://" + ln.Addr().String(), b.Addr()
}

// produce writes events to input topics as a producer of the service's
// inputs would: keyed, placed by murmur2 (franz-go's default, as Kafka's).
func produce(t *testing.T, broker string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitFor waits until cond holds, checking every 10 ms, for 20 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %s after 20 s", what)
		}
	}
}

// call makes an API request as a client other than the console would.
func call(t *testing.T, method, url, key, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// browser is one headless Chromium tab on the console.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string // the console's URL
	shots string // where screenshots go

	mu     sync.Mutex
	errors []string // JavaScript exceptions the pages threw, console.error calls
}

func newBrowser(t *testing.T, exe, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // tests run as root in containers, where Chromium's sandbox cannot start
		chromedp.WindowSize(1280, 800),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	b := &browser{t: t, ctx: ctx, base: base + "/console/", shots: t.TempDir()}
	if *screenshots {
		b.shots = filepath.Join("..", "docs", "console")
	}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	logged := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	watched := make(chan struct{}, 2)
	go func() {
		defer func() { watched <- struct{}{} }()
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.failure(fmt.Sprintf("JavaScript exception: %s %v", ev.ExceptionDetails.Text, ev.ExceptionDetails.Exception))
		}
	}()
	go func() { // console.error: the console's own complaints, CSP violations among them
		defer func() { watched <- struct{}{} }()
		for ev, err := range logged {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.failure("console.error: " + strings.Join(args, " "))
			}
		}
	}()
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc() // stops Chromium and removes its profile directory
		<-watched
		<-watched
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.errors {
			t.Error(e)
		}
	})
	return b
}

func (b *browser) failure(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, s)
}

// do runs actions, each step given 20 s at most.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\n%s", what, err, b.mainText())
	}
}

func (b *browser) open(page string) {
	b.t.Helper()
	b.do("open "+page, chromedp.Navigate(b.base+page), chromedp.WaitVisible(chromedp.CSS("body[data-ready=true]")))
}

// js returns a JavaScript string literal of s.
func js(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// waitText waits until an element sel selects holds want in its text.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	expr := fmt.Sprintf(`[...document.querySelectorAll(%s)].some((n) => n.textContent.includes(%s))`, js(sel), js(want))
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		b.t.Fatalf("waiting for %q in %s: %v; it holds %q\n%s", want, sel, err, b.text(sel), b.mainText())
	}
}

// waitTrue waits until a JavaScript expression is true.
func (b *browser) waitTrue(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		b.t.Fatalf("waiting for %s: %v\n%s", what, err, b.mainText())
	}
}

func (b *browser) text(sel string) string {
	s, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%s) || {}).textContent || ""`, js(sel))))
	return s
}

func (b *browser) count(sel string) int {
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%s).length`, js(sel))))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

func (b *browser) mainText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("main") ? document.querySelector("main").innerText : ""`))
	if len(s) > 30000 {
		s = s[:3000] + "…"
	}
	return "page text:\n" + s
}

// choose picks an option of a select as a user would: a change event.
func (b *browser) choose(sel, value string) {
	b.t.Helper()
	b.do("choose "+value+" in "+sel, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const s = document.querySelector(%s); s.value = %s; s.dispatchEvent(new Event("change", {bubbles: true})); })()`, js(sel), js(value))))
}

// click clicks the button whose text is label.
func (b *browser) click(label string) {
	b.t.Helper()
	b.do("click "+label, chromedp.Click(chromedp.Search(fmt.Sprintf(`//button[normalize-space()=%s]`, js(label)))))
}

// shot saves a screenshot of what the 1280×800 window shows, and checks
// that the page fits its width.
func (b *browser) shot(name string) {
	b.t.Helper()
	if wide, _ := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`)); wide {
		b.t.Errorf("%s: the page is wider than the 1280 px window", name)
	}
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestConsoleInChromium drives the console in a real, headless Chromium
// against the real service, as an analyst would: sign in; open the rules;
// type a broken condition and see the error at its line and column; fix it
// and save in shadow mode; save over a version someone else published
// meanwhile and read why it is refused; backtest over an uploaded file and
// see the changed decisions, before and after; find a decision posted
// through the API, with its features; open its entity; roll the rule back;
// read the overview. Then a reader: no edit controls, and a write crafted
// in the page is refused. Each step checks what the page shows.
func TestConsoleInChromium(t *testing.T) {
	exe := chromium(t)
	base, broker := service(t)
	b := newBrowser(t, exe, base)

	// Sign in (the key is checked with GET /v1/me), landing on the rules.
	b.do("open the sign-in page", chromedp.Navigate(b.base+"signin?next=rules"), chromedp.WaitVisible(chromedp.CSS("#key")))
	b.do("type a wrong key", chromedp.SendKeys(chromedp.CSS("#key"), "not-a-key-at-all-0000\n"))
	b.waitText("#signin-status", "That key is not known to this service.")
	b.shot("signin")
	b.do("type the key", chromedp.Evaluate[chromedp.Void](`document.querySelector("#key").value = ""`), chromedp.SendKeys(chromedp.CSS("#key"), analystKey+"\n"))
	b.do("land on the rules", chromedp.WaitVisible(chromedp.CSS("body[data-page=rules][data-ready=true]")))
	b.waitText("#who", "alice · analyst")

	// The live ruleset: the example's rules, version 1.
	b.waitText("#live-version", "version 1")
	for _, rule := range []string{"card_testing", "many_ips", "ato_spend", "large_amount"} {
		b.waitText("#rules-table", rule)
	}

	// A new rule with a broken condition: the error at its line and column.
	b.click("New rule")
	b.do("fill in the rule", chromedp.WaitVisible(chromedp.CSS("#editor-section")),
		chromedp.SendKeys(chromedp.CSS("#f-name"), "small_amount"),
		chromedp.SetValue(chromedp.CSS("#f-score"), "40"),
		chromedp.SendKeys(chromedp.CSS("#f-reason"), `"payment under 2.00"`),
		chromedp.SendKeys(chromedp.CSS("#f-when"), "amount <"))
	b.waitText("#when-errors", "Line 1, column 8: unexpected token EOF") // expr points at the operator that lacks its operand
	b.waitText("#when-errors pre.caret", "amount <\n       ^")
	b.waitText("#validity", "✗ 1 error")
	b.shot("rules")

	// Fixed: valid, and the diff against the live version shows the rule.
	b.do("finish the condition", chromedp.SendKeys(chromedp.CSS("#f-when"), " 2"))
	b.waitText("#validity", "✓ Valid against version 1.")
	if got := b.count("#when-errors .error"); got != 0 {
		t.Errorf("%d errors left under the condition", got)
	}
	b.waitText("#rule-diff .add", `"when": "amount < 2"`)
	if mode := b.text("#f-mode option:checked"); mode != "shadow" {
		t.Errorf("a new rule starts in mode %q, want shadow", mode)
	}
	b.do("comment", chromedp.SendKeys(chromedp.CSS("#f-comment"), "tiny payments, measured before they block"))

	// Backtest it before saving, active, over an uploaded file: the two
	// payments of 1.00 change from allow to block.
	b.click("Backtest this rule")
	b.do("the backtest page", chromedp.WaitVisible(chromedp.CSS("body[data-page=backtest][data-ready=true]")))
	b.waitTrue("the candidate handed over", `document.querySelector("#candidate").value.includes('"when": "amount < 2"')`)
	candidate := `{"name": "small_amount", "stream": "transactions", "action": "block", "score": 40, "mode": "active", "when": "amount < 2"}`
	events := filepath.Join(t.TempDir(), "events.ndjson")
	var nd strings.Builder
	for i, ev := range []struct {
		user   string
		amount float64
	}{{"u-a", 1}, {"u-a", 50}, {"u-b", 1}, {"u-b", 700}} {
		fmt.Fprintf(&nd, `{"stream":"transactions","value":{"tx_id":"bt-%d","user_id":%q,"amount":%v,"currency":"EUR","ip":"10.0.0.1","ts":%d}}`+"\n",
			i+1, ev.user, ev.amount, 1767225600000+int64(i)*60_000)
	}
	if err := os.WriteFile(events, []byte(nd.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("set the candidate and the file", chromedp.SetValue(chromedp.CSS("#candidate"), candidate),
		chromedp.SetUploadFiles(chromedp.CSS("#events-file"), []string{events}))
	b.waitText("#file-info", "events.ndjson")
	b.click("Run the backtest")
	b.waitText("#sum-changed", "2")
	b.waitText("#sum-events", "4")
	b.waitText("#sum-new-hits", "2")
	b.waitText("#changes", "allow → block")
	b.waitText("#samples-table", "bt-3")
	for _, row := range []string{"bt-1", "bt-3"} {
		tr := fmt.Sprintf(`[...document.querySelectorAll("#samples-table tbody tr")].find((r) => r.cells[0].textContent === %s)`, js(row))
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`(() => { const r = `+tr+`; return r ? [r.cells[3].textContent, r.cells[4].textContent, r.cells[5].textContent] : []; })()`))
		if err != nil || len(got) != 3 || !strings.HasPrefix(got[0], "allow") || !strings.HasPrefix(got[1], "block") || !strings.Contains(got[1], "small_amount") || got[2] != "+small_amount" {
			t.Errorf("changed decision %s: before, after, matches %q (%v)", row, got, err)
		}
	}
	if n := b.count("#timeline svg rect"); n == 0 {
		t.Error("no bar in the chart of new and lost matches")
	}
	b.shot("backtest")

	// Back in the editor, the draft as it was: saved in shadow mode.
	b.do("back to the editor", chromedp.Click(chromedp.CSS("#back a")), chromedp.WaitVisible(chromedp.CSS("body[data-page=rules][data-ready=true]")))
	b.waitText("#validity", "✓ Valid against version 1.")
	b.click("Save")
	b.waitText("#save-status", "Saved: version 2 is live, with rule small_amount in shadow mode.")
	b.waitText("#rules-table", "small_amount")
	b.waitText("#audit-table", "tiny payments, measured before they block")

	// Someone else publishes meanwhile: the save is refused, and said why.
	if status, body := call(t, "PUT", base+"/v1/rules/large_amount?comment=review+from+1500", analystKey,
		`{"stream":"transactions","action":"review","score":30,"mode":"shadow","when":"amount >= 1500"}`, "If-Match", `"2"`); status != 200 {
		t.Fatalf("publish version 3 from the side: %d %s", status, body)
	}
	b.do("edit the reason", chromedp.SendKeys(chromedp.CSS("#f-reason"), ` + " (small)"`))
	b.waitText("#validity", "✓ Valid")
	b.click("Save")
	b.waitText("#stale", "Your edit started from version 2, but version 3 is live now.")
	b.waitText("#stale", "Version 3")
	b.waitText("#stale", "review from 1500")
	b.click("Re-base on version 3")
	b.waitText("#editor-base", "Based on version 3.")
	b.waitText("#rule-diff .add", `(small)`)
	b.do("comment", chromedp.SendKeys(chromedp.CSS("#f-comment"), "the reason says how small"))
	b.click("Save")
	b.waitText("#save-status", "Saved: version 4 is live, with rule small_amount in shadow mode.")

	// A decision made through the API (five tiny payments: card testing)
	// found in the console with its features; the shadow rule apart. A
	// login and a device of the same user give its task a watermark (every
	// input has then delivered an event).
	now := time.Now().UnixMilli()
	produce(t, broker,
		&kgo.Record{Topic: "logins", Key: []byte("u-console"), Value: fmt.Appendf(nil, `{"user_id":"u-console","status":"SUCCESS","ip":"10.1.1.1","device":"d1","ts":%d}`, now-60_000)},
		&kgo.Record{Topic: "devices", Key: []byte("u-console"), Value: fmt.Appendf(nil, `{"user_id":"u-console","device":"d1","event":"seen","ts":%d}`, now-60_000)})
	for i := range 5 {
		body := fmt.Sprintf(`{"tx_id":"console-tx-%d","user_id":"u-console","amount":1,"currency":"EUR","ip":"10.1.1.1","ts":%d}`, i+1, now-int64(4-i)*1000)
		if status, resp := call(t, "POST", base+"/v1/decisions?stream=transactions", deciderKey, body); status != 200 {
			t.Fatalf("decide: %d %s", status, resp)
		}
	}
	waitFor(t, "a watermark on u-console's task", func() bool {
		_, body := call(t, "GET", base+"/v1/entities/u-console", readerKey, "")
		return !strings.Contains(body, `"watermark":null`)
	})
	b.open("decisions")
	b.do("look up the decision", chromedp.SendKeys(chromedp.CSS("#tx-id"), "console-tx-5\n"))
	b.waitText("#decision-card", "Decision console-tx-5: block score 90")
	b.waitText("#matched-rules", "card_testing")
	b.waitText("#matched-rules", `count(history("transactions", "1m"), .amount <= 2) = 5`)
	b.waitText("#shadow-rules", "small_amount")
	b.waitText("#shadow-rules", "amount = 1")
	b.waitText("#tail-table", "console-tx-5")
	b.choose("#tail-action", "block")
	b.waitTrue("the live view filtered to block", `(() => { const rows = [...document.querySelectorAll("#tail-table tbody tr")];
		return rows.length > 0 && rows.every((r) => r.cells[3].textContent === "block") && rows.some((r) => r.cells[1].textContent === "console-tx-5"); })()`)
	b.shot("decisions")

	// Its entity: the key's payments, decisions, window and watermark.
	b.do("open the entity", chromedp.Click(chromedp.CSS(`#decision-card a[href^="entities"]`)),
		chromedp.WaitVisible(chromedp.CSS("body[data-page=entities][data-ready=true]")))
	b.waitText("#entity-view", "Key u-console")
	b.waitText("#entity-decisions-count", "5")
	if n := b.count(`table.history[data-stream="transactions"] tbody tr`); n != 5 {
		t.Errorf("%d payments in the entity's history, want 5", n)
	}
	b.waitText("#entity-decisions", "console-tx-5")
	b.waitText("#entity-windows", "hourly_spend")
	if wm := b.text("#entity-watermark"); wm == "none yet" || !strings.HasPrefix(wm, "20") {
		t.Errorf("watermark %q", wm)
	}
	b.shot("entities")

	// Roll the rule back to the version before the re-based edit.
	b.open("rules?history=small_amount")
	b.waitText("#history", "Rule small_amount: 2 versions")
	b.click("Roll back to version 2")
	b.waitText("#rollback-status", "Rolled back: version 5 has rule small_amount as it was in version 2.")
	b.waitText("#live-version", "version 5")
	b.waitText("#audit-table", "rollback of rule small_amount to version 2")
	if status, body := call(t, "GET", base+"/v1/rules/small_amount", readerKey, ""); status != 200 || strings.Contains(body, "(small)") {
		t.Errorf("after the rollback: %d %s", status, body)
	}

	// The overview, from the service's own metrics, with decisions made
	// between its reads.
	b.open("")
	b.waitTrue("a first read of /metrics", `Number(document.body.dataset.scrapes) >= 1`)
	for i := range 30 {
		amount := []int{20, 35, 1200, 60, 5}[i%5]
		body := fmt.Sprintf(`{"tx_id":"ov-%d","user_id":"u-ov-%d","amount":%d,"currency":"EUR","ip":"10.2.0.%d","ts":%d}`, i, i%7, amount, i%4, now+int64(i))
		if status, resp := call(t, "POST", base+"/v1/decisions?stream=transactions", deciderKey, body); status != 200 {
			t.Fatalf("decide: %d %s", status, resp)
		}
	}
	b.waitTrue("three reads of /metrics", `Number(document.body.dataset.scrapes) >= 3`)
	b.waitText("#top-rules-table", "card_testing")
	b.waitText("#decisions-total", "decisions so far: 35")
	b.waitText("#consumer-lag-table", "transactions")
	b.waitText("#watermark-lag-table", "20")
	if n := b.count("#rate-chart svg path"); n != 3 {
		t.Errorf("%d lines in the decisions chart, want 3", n)
	}
	b.shot("overview")

	// A reader: the same pages without a single edit control, and a write
	// crafted in the page with the reader's key is refused.
	b.click("Sign out")
	b.do("sign in as a reader", chromedp.WaitVisible(chromedp.CSS("#key")), chromedp.SendKeys(chromedp.CSS("#key"), readerKey+"\n"),
		chromedp.WaitVisible(chromedp.CSS("body[data-page=''][data-ready=true]")))
	b.waitText("#who", "dana · reader")
	if n := b.count(`header nav a[href="backtest"]`); n != 0 {
		t.Error("a reader is offered the backtest page, which needs rules:test")
	}
	b.open("backtest")
	b.waitText("#no-access", "Your key's role (reader) may not use this page: it needs rules:test.")
	b.open("rules?history=small_amount")
	b.waitText("#rules-table", "small_amount")
	b.waitText("#history", "Rule small_amount")
	for _, sel := range []string{"#new-rule", "#editor-section", "#document-section", "#rule-form", "#save-rule", "#rules-table select", "#history button"} {
		if n := b.count(sel); n != 0 {
			t.Errorf("a reader sees %d × %s", n, sel)
		}
	}
	labels, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("button")].map((x) => x.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range labels {
		for _, edit := range []string{"Edit", "Set", "Save", "Roll back", "New rule", "Backtest"} {
			if strings.HasPrefix(l, edit) {
				t.Errorf("a reader sees the button %q", l)
			}
		}
	}
	b.shot("rules-reader")
	status, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`fetch("/v1/rules/small_amount", {method: "DELETE",
		headers: {Authorization: "Bearer " + sessionStorage.getItem("vigil.key"), "If-Match": "*"}}).then((r) => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusForbidden {
		t.Errorf("a crafted delete with the reader's key: %d (%v), want 403", status, err)
	}
	if status, body := call(t, "GET", base+"/v1/rules/small_amount", readerKey, ""); status != 200 {
		t.Errorf("the rule after the refused delete: %d %s", status, body)
	}
	if errors.Is(b.ctx.Err(), context.DeadlineExceeded) {
		t.Error("the browser test ran out of time")
	}
}

var (
	holdURL = flag.String("hold-url", "", "TestConsoleHold: the base URL of a running vigil serve")
	holdKey = flag.String("hold-key", "", "TestConsoleHold: the API key to sign in with")
	holdFor = flag.Duration("hold-for", 25*time.Second, "TestConsoleHold: how long to keep the console open")
)

// TestConsoleHold keeps the console open in headless Chromium on a running
// service, for measurements (docs/performance.md): signed in, one tab on
// the decisions page (its live view polls every 2 s), one on the overview
// (reading /metrics every 2 s). It runs only with -hold-url.
func TestConsoleHold(t *testing.T) {
	if *holdURL == "" {
		t.Skip("set -hold-url (and -hold-key) to keep the console open on a running service")
	}
	exe := chromium(t)
	b := newBrowser(t, exe, strings.TrimSuffix(*holdURL, "/"))
	signIn := func(ctx context.Context, next, page string) {
		err := chromedp.Do(ctx, chromedp.Navigate(b.base+"signin?next="+next), chromedp.WaitVisible(chromedp.CSS("#key")),
			chromedp.SendKeys(chromedp.CSS("#key"), *holdKey+"\n"), chromedp.WaitVisible(chromedp.CSS("body[data-page='"+page+"'][data-ready=true]")))
		if err != nil {
			t.Fatalf("sign in to %s: %v", page, err)
		}
	}
	signIn(b.ctx, "decisions", "decisions")
	overview, cancel := chromedp.NewContext(b.ctx) // a second tab; sessionStorage is per tab
	defer cancel()
	signIn(overview, "", "")
	t.Logf("the console is open (decisions, overview) for %s", *holdFor)
	select {
	case <-time.After(*holdFor):
	case <-b.ctx.Done():
		t.Fatal("the browser's context ended first")
	}
	t.Logf("live view: %s", b.text("#tail-status"))
}
