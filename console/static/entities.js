// Entities: what the service holds about one key: recent history per
// stream, live windows, open partial matches, recent decisions, and the
// owning task's watermark and lag.
'use strict';

async function lookup(key) {
  if (!key) return;
  document.getElementById('entity-key').value = key;
  const limit = Number(document.getElementById('entity-limit').value) || 20;
  V.say('entity-status', 'Looking up ' + key + '…');
  const res = await V.api('GET', '/v1/entities/' + encodeURIComponent(key) + '?limit=' + limit);
  if (!res.ok) {
    V.put('entity');
    V.say('entity-status', V.problemText(res), 'error');
    return;
  }
  V.say('entity-status', '');
  history.replaceState(null, '', '?key=' + encodeURIComponent(key));
  const e = res.data;
  const fig = (label, value, id) => V.el('div', {}, V.el('dt', {}, label), V.el('dd', { id }, value));
  const streams = Object.keys(e.history).sort();
  V.put('entity', V.el('div', { id: 'entity-view' },
    V.el('h2', {}, 'Key ', V.el('span', { class: 'code' }, e.key)),
    V.el('dl', { class: 'figures' },
      fig('Task (partition)', String(e.task), 'entity-task'),
      fig('Watermark', e.watermark === null ? 'none yet' : V.time(e.watermark), 'entity-watermark'),
      fig('Lag behind now', e.lag_ms === null ? '—' : V.duration(e.lag_ms), 'entity-lag'),
      fig('Recent decisions', String(e.recent_decisions.length), 'entity-decisions-count')),
    V.el('h3', {}, 'Recent decisions'),
    e.recent_decisions.length
      ? V.table(null, ['Event time', 'Id', 'Action', '#Score', 'Rules'], e.recent_decisions.map((d) => [
        V.time(d.time), V.el('a', { href: 'decisions?id=' + encodeURIComponent(d.id) }, d.id), V.badge(d.action), { text: V.num(d.score), class: 'num' },
        d.rules.map((r) => r.rule).concat(d.shadow.map((r) => r.rule + ' (shadow)')).join(', ') || '—']), { id: 'entity-decisions' })
      : V.el('p', { class: 'muted' }, 'None.'),
    V.el('h3', {}, 'History per stream'),
    streams.length ? streams.map((s) => V.table(`${s}: ${e.history[s].length} newest ${e.history[s].length === 1 ? 'event' : 'events'} (the fields rules read)`,
      ['Event time', 'Event'], e.history[s].map((h) => [V.time(h.time), { text: JSON.stringify(h.event), class: 'code' }]), { class: 'history', dataset: { stream: s } }))
      : V.el('p', { class: 'muted' }, 'No history.'),
    V.el('h3', {}, 'Live windows'),
    e.windows.length
      ? V.table(null, ['Window', 'Start', 'End', 'Values', 'Fired'], e.windows.map((w) => [w.window, V.time(w.start), V.time(w.end), { text: JSON.stringify(w.values), class: 'code' }, String(w.fired)]), { id: 'entity-windows' })
      : V.el('p', { class: 'muted' }, 'No open window.'),
    V.el('h3', {}, 'Open partial matches'),
    Object.keys(e.partial_matches).length
      ? V.table(null, ['Pattern', '#Open'], Object.entries(e.partial_matches).sort().map(([p, n]) => [p, { text: String(n), class: 'num' }]), { id: 'entity-partials' })
      : V.el('p', { class: 'muted' }, 'None.')));
}

V.start(() => {
  document.getElementById('entity-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    lookup(document.getElementById('entity-key').value.trim());
  });
  const key = V.param('key');
  (key ? lookup(key) : Promise.resolve()).then(() => { document.body.dataset.ready = 'true'; });
});
