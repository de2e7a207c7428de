// Decisions: look up one by transaction id (matched rules with reasons and
// the feature values their conditions compared, shadow rules apart), and a
// live tail of the newest decisions, filtered by action and rule, polled
// every two seconds while the page is visible.
'use strict';

const D = { tail: null, paused: false };

function features(f) {
  const entries = Object.entries(f || {});
  if (!entries.length) return V.el('span', { class: 'muted' }, '—');
  return V.el('ul', { class: 'features' }, entries.map(([expr, v]) => V.el('li', {}, V.el('code', {}, expr), ' = ', V.el('strong', { class: 'code' }, JSON.stringify(v)))));
}

function hitsTable(caption, hits, feats, id) {
  return V.table(caption, ['Rule', 'Action', '#Score', 'Reason', 'Feature values'],
    hits.map((h) => [h.rule, V.badge(h.action), { text: V.num(h.score), class: 'num' }, h.reason || '', features((feats || {})[h.rule])]), { id });
}

async function lookup(id) {
  if (!id) return;
  document.getElementById('tx-id').value = id;
  V.say('lookup-status', 'Looking up ' + id + '…');
  const res = await V.api('GET', '/v1/decisions/' + encodeURIComponent(id));
  if (!res.ok) {
    V.put('decision');
    V.say('lookup-status', res.status === 404
      ? `No decision ${id} on this instance (a decision is kept by the instance whose task decided it).`
      : V.problemText(res), 'error');
    return;
  }
  V.say('lookup-status', '');
  const d = res.data.decision, f = res.data.features;
  history.replaceState(null, '', '?id=' + encodeURIComponent(id));
  V.put('decision', V.el('div', { id: 'decision-card' },
    V.el('p', { class: 'figures' },
      V.el('span', {}, 'Decision ', V.el('strong', {}, d.id), ': ', V.badge(d.action), ' score ', V.el('strong', {}, V.num(d.score))),
      V.el('span', {}, 'stream ', d.stream), V.el('span', {}, 'key ', V.el('a', { href: 'entities?key=' + encodeURIComponent(d.key) }, d.key)),
      V.el('span', {}, 'event time ', V.time(d.time))),
    d.rules.length ? hitsTable('Matched rules (they decided)', d.rules, f, 'matched-rules') : V.el('p', {}, 'No active rule matched.'),
    d.shadow.length ? hitsTable('Shadow rules that matched (reported, never acted on)', d.shadow, f, 'shadow-rules') : V.el('p', { class: 'muted' }, 'No shadow rule matched.'),
    d.errors.length ? V.table('Rules that failed', ['Rule', 'Error'], d.errors.map((e) => [e.rule, e.error])) : null,
    !f && (d.rules.length || d.shadow.length) ? V.el('p', { class: 'muted' }, 'Feature values are known for decisions this instance made through the API.') : null));
}

async function poll() {
  if (D.paused) return;
  const action = document.getElementById('tail-action').value, rule = document.getElementById('tail-rule').value;
  const q = new URLSearchParams({ limit: '25' });
  if (action) q.set('action', action);
  if (rule) q.set('rule', rule);
  const res = await V.api('GET', '/v1/decisions?' + q);
  if (!res.ok) {
    V.say('tail-status', 'The live view stopped: ' + V.problemText(res), 'error');
    return;
  }
  const ds = res.data.decisions;
  V.say('tail-status', `${ds.length} ${ds.length === 1 ? 'decision' : 'decisions'} among the newest ${V.num(res.data.scanned, 0)} · updated ${new Date().toLocaleTimeString('en-GB')}`, 'muted');
  V.put('tail', V.table(null, ['Event time', 'Id', 'Key', 'Action', '#Score', 'Rules'], ds.map((d) => [
    V.time(d.time), V.el('a', { href: '?id=' + encodeURIComponent(d.id), onclick: (ev) => { ev.preventDefault(); lookup(d.id); } }, d.id),
    V.el('a', { href: 'entities?key=' + encodeURIComponent(d.key) }, d.key), V.badge(d.action), { text: V.num(d.score), class: 'num' },
    d.rules.map((r) => r.rule).concat(d.shadow.map((r) => r.rule + ' (shadow)')).join(', '),
  ]), { id: 'tail-table' }));
}

V.start(async () => {
  document.getElementById('lookup-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    lookup(document.getElementById('tx-id').value.trim());
  });
  const rs = await V.api('GET', '/v1/ruleset');
  const sel = document.getElementById('tail-rule');
  for (const n of Object.keys((rs.ok && rs.data.document.rules) || {}).sort()) sel.append(V.el('option', { value: n }, n));
  for (const id of ['tail-action', 'tail-rule']) document.getElementById(id).addEventListener('change', poll);
  const pause = document.getElementById('tail-pause');
  pause.addEventListener('click', () => {
    D.paused = !D.paused;
    pause.setAttribute('aria-pressed', String(D.paused));
    pause.textContent = D.paused ? 'Resume' : 'Pause';
    if (!D.paused) poll();
  });
  D.tail = V.every(2000, poll);
  if (V.param('id')) await lookup(V.param('id'));
  document.body.dataset.ready = 'true';
});
