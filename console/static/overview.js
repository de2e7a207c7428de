// Overview: small charts from the service's own /metrics (Prometheus text
// format), read every two seconds while the page is visible; rates are
// the counters' differences between two reads.
'use strict';

const O = { scrapes: [], keep: 150 }; // 150 reads: five minutes

// parseMetrics reads the Prometheus text format into
// [{name, labels: {...}, value}] (comments and histograms' buckets skipped).
function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || m[1].endsWith('_bucket')) continue;
    const labels = {};
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[2] || '')) !== null) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function sum(samples, name, pred) {
  return samples.filter((s) => s.name === name && (!pred || pred(s.labels))).reduce((a, s) => a + s.value, 0);
}

function by(samples, name, label) {
  const out = {};
  for (const s of samples) if (s.name === name) out[s.labels[label]] = (out[s.labels[label]] || 0) + s.value;
  return out;
}

// rate is the per-second increase of f(samples) between consecutive reads.
function rate(f) {
  const pts = [];
  for (let i = 1; i < O.scrapes.length; i++) {
    const a = O.scrapes[i - 1], b = O.scrapes[i];
    const dt = (b.t - a.t) / 1000;
    if (dt > 0) pts.push([b.t, Math.max(0, f(b.samples) - f(a.samples)) / dt]);
  }
  return pts;
}

const clock = (t) => new Date(t).toLocaleTimeString('en-GB');

async function scrape() {
  const res = await V.api('GET', '/metrics', { headers: { Accept: 'text/plain' } });
  if (!res.ok) {
    V.say('scrape-status', 'Could not read /metrics: ' + V.problemText(res), 'error');
    return;
  }
  O.scrapes.push({ t: Date.now(), samples: parseMetrics(String(res.data)) });
  if (O.scrapes.length > O.keep) O.scrapes.shift();
  V.say('scrape-status', 'Last read ' + clock(Date.now()) + '.');
  render();
}

function render() {
  const cur = O.scrapes[O.scrapes.length - 1].samples;
  const actions = [{ name: 'allow', cls: 'c-allow' }, { name: 'review', cls: 'c-review' }, { name: 'block', cls: 'c-block' }];
  const series = actions.map((a) => ({ name: a.name, cls: a.cls, points: rate((s) => sum(s, 'vigil_decisions_total', (l) => l.action === a.name)) }));
  V.put('rate-chart', V.legend(actions), V.lineChart(series, { label: 'Decisions per second by action, over the last minutes', xLabel: clock, width: V.widthOf('rate-chart'), empty: 'Rates appear after the second read' }));
  const last = (pts) => (pts.length ? pts[pts.length - 1][1] : null);
  V.put('rate-now', actions.map((a, i) => V.el('span', { class: a.cls, id: 'rate-' + a.name }, `${a.name}: ${V.num(last(series[i].points), 1)}/s`)),
    V.el('span', { id: 'decisions-total' }, `decisions so far: ${V.num(sum(cur, 'vigil_decisions_total'), 0)}`));

  const hits = Object.entries(by(cur, 'vigil_rule_hits_total', 'rule')).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 10);
  const modes = {};
  for (const s of cur) if (s.name === 'vigil_rule_hits_total') modes[s.labels.rule] = s.labels.mode;
  const top = hits.length ? hits[0][1] : 1;
  V.put('top-rules', hits.length
    ? V.table(null, ['Rule', 'Mode', '#Hits', ''], hits.map(([r, n]) => [r, V.badge(modes[r] || 'active'), { text: V.num(n, 0), class: 'num' },
      V.el('span', { class: 'meter', 'data-width': Math.round((100 * n) / top) })]), { id: 'top-rules-table' })
    : V.el('p', { class: 'muted' }, 'No rule has matched yet.'));
  for (const m of document.querySelectorAll('#top-rules .meter')) m.style.width = m.dataset.width + 'px';

  const dlq = sum(cur, 'vigil_dlq_total'), late = sum(cur, 'vigil_records_out_total', (l) => l.kind === 'late');
  const fig = (label, value, id) => V.el('div', {}, V.el('dt', {}, label), V.el('dd', { id }, value));
  V.put('bad-counts', fig('Dead letters', V.num(dlq, 0), 'dlq-total'), fig('Late events', V.num(late, 0), 'late-total'));
  const bad = [{ name: 'dead letters/s', cls: 'c-dlq', points: rate((s) => sum(s, 'vigil_dlq_total')) },
    { name: 'late/s', cls: 'c-late', points: rate((s) => sum(s, 'vigil_records_out_total', (l) => l.kind === 'late')) }];
  V.put('bad-chart', V.legend(bad), V.lineChart(bad, { label: 'Dead letters and late events per second', xLabel: clock, height: 90, width: V.widthOf('bad-chart'), empty: 'Rates appear after the second read' }));

  const lag = cur.filter((s) => s.name === 'vigil_consumer_lag_records').sort((a, b) => a.labels.topic.localeCompare(b.labels.topic) || a.labels.partition - b.labels.partition);
  const maxLag = Math.max(1, ...lag.map((s) => s.value));
  V.put('consumer-lag', lag.length
    ? V.table(null, ['Topic', '#Partition', '#Records behind', ''], lag.map((s) => [s.labels.topic, { text: s.labels.partition, class: 'num' }, { text: V.num(s.value, 0), class: 'num' },
      V.el('span', { class: 'meter', 'data-width': Math.round((100 * s.value) / maxLag) })]), { id: 'consumer-lag-table' })
    : V.el('p', { class: 'muted' }, 'No partition assigned yet.'));
  const wm = cur.filter((s) => s.name === 'vigil_event_time_lag_seconds').sort((a, b) => a.labels.task - b.labels.task);
  const maxWm = Math.max(1e-9, ...wm.map((s) => s.value));
  V.put('watermark-lag', wm.length
    ? V.table(null, ['#Task', '#Behind now', 'Watermark', ''], wm.map((s) => {
      const w = cur.find((x) => x.name === 'vigil_watermark_timestamp_seconds' && x.labels.task === s.labels.task);
      return [{ text: s.labels.task, class: 'num' }, { text: V.duration(s.value * 1000), class: 'num' }, w ? V.time(w.value * 1000) : '—',
        V.el('span', { class: 'meter', 'data-width': Math.round((100 * s.value) / maxWm) })];
    }), { id: 'watermark-lag-table' })
    : V.el('p', { class: 'muted' }, 'No task has a watermark yet.'));
  for (const m of document.querySelectorAll('#consumer-lag .meter, #watermark-lag .meter')) m.style.width = m.dataset.width + 'px';
  document.body.dataset.scrapes = String(O.scrapes.length);
}

V.start(() => {
  V.every(2000, scrape);
  document.body.dataset.ready = 'true';
});
