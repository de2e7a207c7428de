// Backtest: a candidate rule next to the live ruleset over the retained
// input topics or an uploaded NDJSON file; hits, new hits, changed
// decisions before and after, and new and lost matches over event time.
'use strict';

const B = { doc: {} };

function ruleJSON(name, item) {
  return JSON.stringify(Object.assign({ name }, item), null, 2);
}

async function init() {
  const res = await V.api('GET', '/v1/ruleset');
  B.doc = res.ok ? res.data.document : {};
  const rules = B.doc.rules || {};
  const sel = document.getElementById('start-from');
  for (const n of Object.keys(rules).sort()) sel.append(V.el('option', { value: n }, n));
  sel.addEventListener('change', () => {
    document.getElementById('candidate').value = sel.value ? ruleJSON(sel.value, rules[sel.value]) : template();
  });
  const handoff = sessionStorage.getItem('vigil.candidate');
  if (handoff && V.param('from') === 'editor') {
    sessionStorage.removeItem('vigil.candidate');
    document.getElementById('candidate').value = JSON.stringify(JSON.parse(handoff), null, 2);
    V.put('back', V.el('a', { href: 'rules?draft=1#editor-section' }, 'Back to the rule editor'), ' (your draft is kept there)');
  } else {
    document.getElementById('candidate').value = template();
  }
  const file = document.getElementById('events-file');
  file.addEventListener('change', () => {
    const f = file.files[0];
    document.getElementById('source-file').checked = !!f;
    V.put('file-info', f ? `${f.name}: ${V.num(f.size, 0)} bytes` : '');
  });
  document.getElementById('backtest-form').addEventListener('submit', run);
  document.body.dataset.ready = 'true';
}

function template() {
  const streams = B.doc.streams || {};
  const stream = Object.keys(streams).sort().find((n) => streams[n].decide) || '';
  return ruleJSON('candidate', { stream, action: 'block', score: 0, mode: 'shadow', when: 'amount > 1000' });
}

async function run(ev) {
  ev.preventDefault();
  let rule;
  try {
    rule = JSON.parse(document.getElementById('candidate').value);
  } catch (err) {
    V.say('run-status', 'The candidate is not JSON: ' + err.message, 'error');
    return;
  }
  const body = { rule, limit: Number(document.getElementById('limit').value) || 0, before: true };
  const fromFile = document.querySelector('input[name=source]:checked').value === 'file';
  if (fromFile) {
    const f = document.getElementById('events-file').files[0];
    if (!f) { V.say('run-status', 'Choose an NDJSON file first.', 'error'); return; }
    body.events = await f.text();
  }
  const btn = document.getElementById('run');
  btn.disabled = true;
  document.getElementById('results').setAttribute('aria-busy', 'true');
  V.say('run-status', 'Running over ' + (fromFile ? 'the file' : 'what the input topics retain') + '…');
  const started = performance.now();
  const res = await V.api('POST', '/v1/rules:backtest', { body });
  btn.disabled = false;
  document.getElementById('results').removeAttribute('aria-busy');
  if (!res.ok) {
    const errs = (res.data && res.data.errors) || [];
    V.put('run-status', V.el('div', { class: 'alert', role: 'alert' }, V.problemText(res),
      errs.length ? V.el('ul', {}, errs.map((e) => V.el('li', {}, `${e.path}: ${e.message}`))) : null));
    return;
  }
  V.say('run-status', `Done in ${V.duration(performance.now() - started)}.`, 'ok');
  show(res.data, rule.name, body.limit);
  const h = document.getElementById('h-results');
  h.scrollIntoView({ block: 'start' });
  h.focus({ preventScroll: true });
}

function matched(d) {
  return d ? (d.rules || []).map((r) => r.rule).concat((d.shadow || []).map((r) => r.rule + ' (shadow)')) : [];
}

function decisionCell(d) {
  if (!d) return V.el('span', { class: 'muted' }, 'no decision');
  const rules = matched(d);
  return V.el('span', {}, V.badge(d.action), ' ', V.num(d.score), rules.length ? ' · ' + rules.join(', ') : ' · no rule');
}

function show(rep, candidate, limit) {
  document.getElementById('results').hidden = false;
  const fig = (label, value, id) => V.el('div', {}, V.el('dt', {}, label), V.el('dd', { id }, value));
  V.put('summary', fig('Events', V.num(rep.events, 0), 'sum-events'), fig('Decisions', V.num(rep.decisions, 0), 'sum-decisions'),
    fig('Changed actions', V.num(rep.changed, 0), 'sum-changed'),
    fig(`Hits of ${candidate}`, V.num((rep.hits || {})[candidate] || 0, 0), 'sum-hits'),
    fig(`New hits of ${candidate}`, V.num((rep.new_hits || {})[candidate] || 0, 0), 'sum-new-hits'));
  const rules = Object.keys(rep.hits || {}).sort((a, b) => rep.hits[b] - rep.hits[a] || a.localeCompare(b));
  V.put('hits', rules.length
    ? V.table(null, ['Rule', '#Hits', '#New hits'], rules.map((r) => [r, { text: V.num(rep.hits[r], 0), class: 'num' }, { text: V.num((rep.new_hits || {})[r] || 0, 0), class: 'num' }]))
    : V.el('p', { class: 'muted' }, 'No rule matched.'));
  const changes = Object.keys(rep.changed_by_action || {}).sort();
  V.put('changes', changes.length
    ? V.table(null, ['Before → after', '#Decisions'], changes.map((c) => [c.replace('->', ' → '), { text: V.num(rep.changed_by_action[c], 0), class: 'num' }]))
    : V.el('p', { class: 'muted' }, 'No decision changed its action.'));

  // New and lost matches of the samples, over event time.
  const before = rep.before || {};
  const samples = rep.samples || [];
  const times = samples.map((s) => s.time);
  const series = [{ name: 'new matches', cls: 'c-new' }, { name: 'lost matches', cls: 'c-lost' }];
  if (times.length) {
    const t0 = Math.min(...times), t1 = Math.max(...times);
    const n = t1 > t0 ? 24 : 1;
    const width = Math.max(1, (t1 - t0 + 1) / n);
    const buckets = Array.from({ length: n }, (_, i) => ({ x: t0 + i * width, values: {} }));
    for (const s of samples) {
      const b = buckets[Math.min(n - 1, Math.floor((s.time - t0) / width))];
      const a = new Set(matched(s)), o = new Set(matched(before[s.id]));
      b.values['new matches'] = (b.values['new matches'] || 0) + [...a].filter((r) => !o.has(r)).length;
      b.values['lost matches'] = (b.values['lost matches'] || 0) + [...o].filter((r) => !a.has(r)).length;
    }
    V.put('timeline', V.legend(series), V.barChart(buckets, series, { label: 'New and lost rule matches over event time, of the changed decisions shown below', xLabel: V.time, height: 120, width: V.widthOf('timeline') }));
  } else {
    V.put('timeline', V.el('p', { class: 'muted' }, 'No decision changed.'));
  }

  V.put('samples', samples.length
    ? V.table(`${samples.length} changed ${samples.length === 1 ? 'decision' : 'decisions'}${samples.length >= limit ? ' (the first ones)' : ''}`,
      ['Id', 'Key', 'Event time', 'Before (live ruleset)', 'After (with the candidate)', 'Matches'],
      samples.map((s) => {
        const a = new Set(matched(s)), o = new Set(matched(before[s.id]));
        const delta = [...a].filter((r) => !o.has(r)).map((r) => '+' + r).concat([...o].filter((r) => !a.has(r)).map((r) => '−' + r));
        return [{ text: s.id, class: 'code' }, V.el('a', { href: 'entities?key=' + encodeURIComponent(s.key) }, s.key), V.time(s.time),
          decisionCell(before[s.id]), decisionCell(s), delta.join(' ')];
      }), { id: 'samples-table' })
    : V.el('p', { class: 'muted' }, 'No decision changed.'));
}

V.start(init);
