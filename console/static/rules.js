// Rules: the live ruleset, the rule editor (validated as you type, a diff
// against the live version, saved with If-Match), the whole-document
// editor, mode switches, a rule's versions with rollback, the audit log.
'use strict';

const R = {
  live: null,       // {version, meta, doc}: GET /v1/ruleset
  edit: null,       // {name, isNew, base, liveItem}: the rule being edited
  seq: 0,           // validation requests sent; older answers are dropped
  auditBefore: 0,   // next page of the audit log
  docBase: 0,       // the version the whole-document editor started from
  docLive: '',      // that version's text
};

const KINDS = ['streams', 'windows', 'patterns', 'joins', 'enrichments', 'rules'];

async function loadLive() {
  const res = await V.api('GET', '/v1/ruleset');
  if (res.status === 404) {
    R.live = { version: 0, meta: {}, doc: {} };
  } else if (!res.ok) {
    V.say('page-status', 'Could not read the ruleset: ' + V.problemText(res), 'error');
    return false;
  } else {
    R.live = { version: res.data.version, meta: res.data, doc: res.data.document || {} };
  }
  renderRuleset();
  return true;
}

function renderRuleset() {
  const { version, meta, doc } = R.live;
  V.put('live-version', 'version ' + version);
  V.put('live-meta', version ? `Published ${V.time(Date.parse(meta.time))} by ${meta.author || '—'}${meta.comment ? ': “' + meta.comment + '”' : ''}` : 'No version was published yet.');
  const out = [];
  const rules = doc.rules || {};
  const writer = V.can('rules:write');
  out.push(V.table('Rules', ['Name', 'Stream', 'Action', '#Score', 'Mode', 'Condition', 'Actions'],
    Object.keys(rules).sort().map((name) => {
      const r = rules[name];
      const mode = r.mode || 'active';
      const actions = [];
      if (writer) {
        actions.push(V.el('button', { type: 'button', onclick: () => openEditor(name), 'aria-label': 'Edit ' + name }, 'Edit'), ' ');
        const sel = V.el('select', { 'aria-label': 'Mode of ' + name, id: 'mode-' + name },
          ['active', 'shadow', 'disabled', 'draft'].map((m) => V.el('option', { value: m, selected: m === mode }, m)));
        actions.push(sel, ' ', V.el('button', { type: 'button', onclick: () => setMode(name, sel.value), 'aria-label': 'Set the mode of ' + name }, 'Set'), ' ');
      }
      actions.push(V.el('button', { type: 'button', onclick: () => showHistory(name), 'aria-label': 'History of ' + name }, 'History'));
      return [name, r.stream, V.badge(r.action || '—', r.action), { text: V.num(r.score || 0), class: 'num' }, V.badge(mode),
        { text: r.when || '', class: 'code' }, V.el('span', { class: 'actions' }, actions)];
    }), { id: 'rules-table' }));
  const streams = doc.streams || {};
  out.push(V.table('Streams', ['Name', 'Topic', 'Key', 'Time', 'Id', 'Decides'],
    Object.keys(streams).sort().map((n) => {
      const s = streams[n];
      return [n, s.topic || n, { text: s.key || '', class: 'code' }, { text: s.time || '', class: 'code' }, { text: s.id || '', class: 'code' }, String(s.decide ?? false)];
    })));
  for (const kind of KINDS) {
    if (kind === 'rules' || kind === 'streams' || !doc[kind] || !Object.keys(doc[kind]).length) continue;
    out.push(V.table(kind[0].toUpperCase() + kind.slice(1), ['Name', 'Stream', 'Definition'],
      Object.keys(doc[kind]).sort().map((n) => {
        const item = Object.assign({}, doc[kind][n]);
        const stream = item.stream || (item.left ? item.left + ' ⋈ ' + item.right : '');
        delete item.stream;
        return [n, stream, { text: JSON.stringify(item), class: 'code' }];
      })));
  }
  V.put('ruleset', out);
  const sel = document.getElementById('f-stream');
  if (sel) {
    const cur = sel.value;
    V.put(sel, Object.keys(streams).sort().filter((n) => streams[n].decide).map((n) => V.el('option', { value: n }, n)));
    if (cur) sel.value = cur;
  }
}

// The rule editor.

function openEditor(name) {
  const rules = R.live.doc.rules || {};
  const item = name ? rules[name] : null;
  R.edit = { name: name || '', isNew: !item, base: R.live.version, liveItem: item };
  const f = (id) => document.getElementById(id);
  f('f-name').value = name || '';
  f('f-name').readOnly = !!item;
  f('f-stream').value = item ? item.stream : (f('f-stream').options[0] || {}).value || '';
  f('f-action').value = item ? item.action : 'block';
  f('f-score').value = item ? (item.score || 0) : 0;
  f('f-mode').value = item ? (item.mode || 'active') : 'shadow';
  f('f-when').value = item ? (item.when || '') : '';
  f('f-reason').value = item ? (item.reason || '') : '';
  f('f-description').value = item ? (item.description || '') : '';
  f('f-comment').value = '';
  V.put('save-status');
  V.put('h-editor', item ? 'Edit rule ' + name : 'New rule');
  describeBase();
  const section = f('editor-section');
  section.hidden = false;
  section.scrollIntoView({ block: 'start' });
  (item ? f('f-when') : f('f-name')).focus();
  validate();
}

// restoreDraft reopens the editor as it was when "Backtest this rule"
// left it: the same fields, based on the same version.
function restoreDraft() {
  let d = null;
  try { d = JSON.parse(sessionStorage.getItem('vigil.draft') || 'null'); } catch (e) { d = null; }
  sessionStorage.removeItem('vigil.draft');
  if (!d || !d.edit) return;
  openEditor(d.edit.isNew ? null : d.name);
  R.edit = d.edit;
  const f = (id) => document.getElementById(id);
  f('f-name').value = d.name;
  f('f-name').readOnly = !d.edit.isNew;
  for (const k of ['stream', 'action', 'score', 'mode', 'when', 'reason', 'description']) f('f-' + k).value = d.item[k] ?? (k === 'score' ? 0 : '');
  f('f-comment').value = d.comment || '';
  describeBase();
  validate();
}

function describeBase() {
  V.put('editor-base', `Based on version ${R.edit.base}. Saving publishes the next version, only if version ${R.edit.base} is still the live one.`);
}

function readForm() {
  const f = (id) => document.getElementById(id).value;
  const item = { stream: f('f-stream'), action: f('f-action'), score: Number(f('f-score')) || 0, mode: f('f-mode'), when: f('f-when') };
  if (f('f-reason').trim()) item.reason = f('f-reason');
  if (f('f-description').trim()) item.description = f('f-description');
  return { name: f('f-name').trim(), item };
}

// candidateYAML writes the live document with the candidate rule in it, as
// YAML whose when and reason are literal blocks, so that an error's line
// and column say where in the expression it is: each block starts on a
// known line, indented six spaces. The other items are written as JSON
// (which YAML reads).
function candidateYAML(name, item) {
  const doc = R.live.doc;
  const lines = [];
  for (const [k, v] of Object.entries(doc)) {
    if (k !== 'rules') lines.push(JSON.stringify(k) + ': ' + JSON.stringify(v));
  }
  lines.push('rules:');
  for (const [n, r] of Object.entries(doc.rules || {})) {
    if (n !== name) lines.push('  ' + JSON.stringify(n) + ': ' + JSON.stringify(r));
  }
  lines.push('  ' + JSON.stringify(name) + ':');
  const at = {};
  for (const [k, v] of Object.entries(item)) {
    if ((k === 'when' || k === 'reason') && v !== '') {
      lines.push('    ' + JSON.stringify(k) + ': |2-');
      const body = v.split('\n');
      at[k] = { line: lines.length + 1, lines: body };
      for (const l of body) lines.push(l.trim() === '' ? '' : '      ' + l);
    } else {
      lines.push('    ' + JSON.stringify(k) + ': ' + JSON.stringify(v));
    }
  }
  return { text: lines.join('\n') + '\n', at };
}

let validateTimer = null;
function validateSoon() {
  clearTimeout(validateTimer);
  validateTimer = setTimeout(validate, 250);
}

async function validate() {
  if (!R.edit) return;
  const { name, item } = readForm();
  showRuleDiff(name, item);
  if (!name) {
    showErrors([], {}, name);
    V.say('validity', 'Give the rule a name.', 'error');
    return;
  }
  const { text, at } = candidateYAML(name, item);
  const seq = ++R.seq;
  V.say('validity', 'Checking…');
  const res = await V.api('POST', '/v1/rules:validate', { body: text, ctype: 'application/yaml' });
  if (seq !== R.seq) return; // a newer edit was sent since
  if (res.ok) {
    showErrors([], at, name);
    V.say('validity', `✓ Valid against version ${R.live.version}.`, 'ok');
  } else if (res.status === 422 && res.data.errors) {
    showErrors(res.data.errors, at, name);
    const n = res.data.errors.length;
    V.say('validity', `✗ ${n} ${n === 1 ? 'error' : 'errors'}: not valid yet.`, 'error');
  } else {
    showErrors([], at, name);
    V.say('validity', 'Could not validate: ' + V.problemText(res), 'error');
  }
}

// showErrors puts each error under the field it is about, at its line and
// column in the field when it is in an expression.
function showErrors(errors, at, name) {
  const boxes = { when: [], reason: [], other: [] };
  const prefix = 'rules.' + name;
  for (const e of errors) {
    const field = e.path.startsWith(prefix + '.') ? e.path.slice(prefix.length + 1).split('.')[0] : '';
    const block = at[field];
    if (block && e.line >= block.line && e.line < block.line + block.lines.length) {
      const line = e.line - block.line + 1, col = Math.max(1, e.column - 6);
      const src = block.lines[line - 1];
      boxes[field].push(V.el('div', { class: 'error' }, `Line ${line}, column ${col}: ${e.message}`),
        V.el('pre', { class: 'caret', 'aria-hidden': 'true' }, src + '\n' + ' '.repeat(col - 1) + '^'));
    } else if (field) {
      boxes.other.push(V.el('div', { class: 'error' }, `${field}: ${e.message}`));
    } else if (e.path === prefix) {
      boxes.other.push(V.el('div', { class: 'error' }, e.message));
    } else {
      boxes.other.push(V.el('div', { class: 'error' }, `Elsewhere in the ruleset, ${e.path}: ${e.message}`));
    }
  }
  V.put('when-errors', boxes.when);
  V.put('reason-errors', boxes.reason);
  V.put('other-errors', boxes.other);
  document.getElementById('f-when').setAttribute('aria-invalid', boxes.when.length ? 'true' : 'false');
}

function showRuleDiff(name, item) {
  const live = R.edit.liveItem;
  V.showDiff(document.getElementById('rule-diff'), live ? V.canonical(live) : '', V.canonical(item));
  V.put('h-editor', R.edit.isNew ? 'New rule' + (name ? ' ' + name : '') : 'Edit rule ' + name);
}

async function saveRule(ev) {
  ev.preventDefault();
  const { name, item } = readForm();
  if (!name) { V.say('validity', 'Give the rule a name.', 'error'); return; }
  const comment = document.getElementById('f-comment').value;
  const btn = document.getElementById('save-rule');
  btn.disabled = true;
  V.put('save-status', 'Saving…');
  const res = await V.api('PUT', '/v1/rules/' + encodeURIComponent(name) + '?comment=' + encodeURIComponent(comment),
    { body: item, headers: { 'If-Match': '"' + R.edit.base + '"' } });
  btn.disabled = false;
  if (res.ok) {
    const version = Number((res.headers.get('ETag') || '').replace(/"/g, ''));
    await loadLive();
    R.edit = { name, isNew: false, base: R.live.version, liveItem: (R.live.doc.rules || {})[name] };
    document.getElementById('f-name').readOnly = true;
    describeBase();
    showRuleDiff(name, item);
    document.getElementById('f-comment').value = ''; // it said why of this change, not of the next
    V.put('save-status', V.el('div', { class: 'notice' }, `Saved: version ${version} is live, with rule ${name} in ${item.mode} mode.`));
    loadAudit(true);
    if (document.getElementById('history').dataset.rule === name) showHistory(name);
    return;
  }
  if (res.status === 412) {
    await explainStale(res.data.current_version, R.edit.base, name, () => {
      R.edit.base = R.live.version;
      R.edit.liveItem = (R.live.doc.rules || {})[name] || null;
      describeBase();
      validate();
    });
    return;
  }
  if (res.status === 422 && res.data.errors) {
    V.put('save-status', V.el('div', { class: 'alert', role: 'alert' }, 'Not saved: the service refused the rule.',
      V.el('ul', {}, res.data.errors.map((e) => V.el('li', {}, e.path + ': ' + e.message)))));
    return;
  }
  V.put('save-status', V.el('div', { class: 'alert', role: 'alert' }, 'Not saved: ' + V.problemText(res)));
}

// explainStale says why a save was refused with 412: someone published
// since the edit began. It lists those versions and offers to re-base.
async function explainStale(current, base, name, rebase, target) {
  const box = target || 'save-status';
  const since = Math.max(1, Math.min(100, (current || base + 1) - base));
  const audit = await V.api('GET', '/v1/audit?limit=' + since);
  const entries = audit.ok ? audit.data.entries.filter((e) => e.version > base) : [];
  const touched = entries.filter((e) => e.changes.some((c) => c.kind === 'rules' && c.name === name));
  V.put(box, V.el('div', { class: 'alert', role: 'alert', id: 'stale' },
    V.el('strong', {}, 'Not saved: the ruleset changed while you were editing.'),
    V.el('p', {}, `Your edit started from version ${base}, but version ${current} is live now. Saving needs the version it changes to be the live one (If-Match), so that nobody's change is overwritten unseen.`),
    touched.length ? V.el('p', {}, `Rule ${name} itself was changed in version ${touched.map((e) => e.version).join(', ')}.`) : null,
    entries.length ? V.el('ul', {}, entries.map((e) => V.el('li', {},
      `Version ${e.version}, ${V.time(Date.parse(e.time))}, by ${e.author || '—'}${e.comment ? ' (“' + e.comment + '”)' : ''}: `,
      e.changes.map((c) => `${c.kind} ${c.name} ${c.op}`).join('; ') || 'no item changed'))) : null,
    V.el('p', {}, 'Your edit is kept. Re-base it on the live version to see the diff against it, then save again.'),
    V.el('button', { type: 'button', id: 'rebase', onclick: async () => { await loadLive(); rebase(); V.put(box, `Re-based on version ${R.live.version}: review the diff, then save.`); } },
      `Re-base on version ${current}`)));
}

async function setMode(name, mode) {
  const get = await V.api('GET', '/v1/rules/' + encodeURIComponent(name));
  if (!get.ok) { V.say('page-status', V.problemText(get), 'error'); return; }
  const item = Object.assign({}, get.data);
  delete item.name;
  const old = item.mode || 'active';
  if (old === mode) { V.say('page-status', `Rule ${name} is already ${mode}.`); return; }
  item.mode = mode;
  const res = await V.api('PUT', '/v1/rules/' + encodeURIComponent(name) + '?comment=' + encodeURIComponent(`mode ${old} → ${mode}`),
    { body: item, headers: { 'If-Match': get.headers.get('ETag') } });
  if (res.ok) {
    await loadLive();
    V.say('page-status', `Rule ${name} is now ${mode} (version ${R.live.version}).`, 'ok');
    loadAudit(true);
  } else if (res.status === 412) {
    await loadLive();
    V.say('page-status', `The ruleset changed meanwhile (version ${res.data.current_version} is live): it is reloaded; set the mode again.`, 'error');
  } else {
    V.say('page-status', `Mode of ${name} not changed: ` + V.problemText(res), 'error');
  }
}

// History and rollback.

async function showHistory(name) {
  const box = document.getElementById('history');
  box.dataset.rule = name;
  document.getElementById('history-hint').hidden = true;
  const res = await V.api('GET', '/v1/rules/' + encodeURIComponent(name) + '/versions');
  if (!res.ok) { V.put(box, V.el('p', { class: 'error' }, V.problemText(res))); return; }
  const vs = res.data.versions; // newest first
  const strip = (it) => { if (!it) return ''; const c = Object.assign({}, it); delete c.name; return V.canonical(c); };
  const writer = V.can('rules:write');
  V.put(box, V.el('h3', {}, `Rule ${name}: ${vs.length} ${vs.length === 1 ? 'version' : 'versions'}`),
    vs.map((v, i) => {
      const older = vs[i + 1];
      const pre = V.el('pre', { class: 'diff', tabindex: 0, 'aria-label': `Changes of ${name} in version ${v.version}` });
      V.showDiff(pre, older && !older.deleted ? strip(older.item) : '', v.deleted ? '' : strip(v.item));
      return V.el('div', { class: 'card version', dataset: { version: v.version } },
        V.el('strong', {}, `Version ${v.version}`), ` · ${V.time(Date.parse(v.time))} · ${v.author || '—'}`,
        v.comment ? ` · “${v.comment}”` : '', v.deleted ? ' · deleted' : '', i === 0 ? ' · current' : '',
        pre,
        writer && i > 0 ? V.el('button', { type: 'button', onclick: () => rollback(name, v.version), 'aria-label': `Roll back ${name} to version ${v.version}` },
          `Roll back to version ${v.version}`) : null);
    }),
    V.el('div', { id: 'rollback-status', role: 'status', 'aria-live': 'polite' }));
  box.scrollIntoView({ block: 'start' });
}

async function rollback(name, version) {
  const res = await V.api('POST', '/v1/rules/' + encodeURIComponent(name) + '/rollback',
    { body: { version }, headers: { 'If-Match': '"' + R.live.version + '"' } });
  if (res.ok) {
    await loadLive();
    await showHistory(name);
    V.put('rollback-status', V.el('div', { class: 'notice' }, `Rolled back: version ${R.live.version} has rule ${name} as it was in version ${version}.`));
    loadAudit(true);
  } else if (res.status === 412) {
    await explainStale(res.data.current_version, R.live.version, name, () => showHistory(name), 'rollback-status');
  } else {
    V.put('rollback-status', V.el('div', { class: 'alert', role: 'alert' }, 'Not rolled back: ' + V.problemText(res)));
  }
}

// The audit log.

async function loadAudit(fresh) {
  if (fresh) R.auditBefore = 0;
  const res = await V.api('GET', '/v1/audit?limit=20' + (R.auditBefore ? '&before=' + R.auditBefore : ''));
  if (!res.ok) { V.put('audit', V.el('p', { class: 'error' }, V.problemText(res))); return; }
  const rows = res.data.entries.map((e) => [
    { text: String(e.version), class: 'num' }, V.time(Date.parse(e.time)), e.author || '—', e.comment || '',
    e.error ? V.el('span', { class: 'error' }, e.error) : V.el('ul', {}, e.changes.map((c) => V.el('li', {},
      `${c.kind} ${c.name} ${c.op}`, c.fields ? ': ' + Object.keys(c.fields).sort().join(', ') : ''))),
  ]);
  const t = V.table(null, ['#Version', 'Time', 'Author', 'Comment', 'Changes'], rows, { id: 'audit-table' });
  if (fresh || !document.getElementById('audit-table')) V.put('audit', t);
  else document.getElementById('audit-table').tBodies[0].append(...t.tBodies[0].rows);
  R.auditBefore = res.data.next_before || 0;
  document.getElementById('audit-older').hidden = !R.auditBefore;
}

// The whole-document editor.

async function openDocument() {
  const res = await V.api('GET', '/v1/ruleset', { headers: { Accept: 'application/yaml' } });
  if (!res.ok && res.status !== 404) { V.say('doc-validity', V.problemText(res), 'error'); return; }
  R.docLive = res.ok ? String(res.data) : '';
  R.docBase = res.ok ? R.live.version : 0;
  const ta = document.getElementById('doc-text');
  ta.value = R.docLive;
  document.getElementById('document-editor').hidden = false;
  ta.focus();
  validateDocument();
}

let docTimer = null;
let docSeq = 0;
async function validateDocument() {
  const text = document.getElementById('doc-text').value;
  V.showDiff(document.getElementById('doc-diff'), R.docLive, text);
  const seq = ++docSeq;
  const res = await V.api('POST', '/v1/rules:validate', { body: text, ctype: 'application/yaml' });
  if (seq !== docSeq) return;
  const lines = text.split('\n');
  if (res.ok) {
    V.put('doc-errors');
    V.say('doc-validity', '✓ Valid.', 'ok');
    return;
  }
  const errors = (res.data && res.data.errors) || [];
  V.put('doc-errors', errors.map((e) => [
    V.el('div', { class: 'error' }, `Line ${e.line}, column ${e.column}, ${e.path}: ${e.message} `,
      V.el('button', { type: 'button', class: 'link', onclick: () => jumpTo(e.line, e.column) }, 'go there')),
    lines[e.line - 1] !== undefined ? V.el('pre', { class: 'caret', 'aria-hidden': 'true' }, lines[e.line - 1] + '\n' + ' '.repeat(Math.max(0, e.column - 1)) + '^') : null,
  ]));
  V.say('doc-validity', errors.length ? `✗ ${errors.length} ${errors.length === 1 ? 'error' : 'errors'}.` : 'Could not validate: ' + V.problemText(res), 'error');
}

function jumpTo(line, col) {
  const ta = document.getElementById('doc-text');
  const lines = ta.value.split('\n');
  let at = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) at += lines[i].length + 1;
  at += Math.max(0, col - 1);
  ta.focus();
  ta.setSelectionRange(at, at);
}

async function saveDocument() {
  const text = document.getElementById('doc-text').value;
  const comment = document.getElementById('doc-comment').value;
  V.put('doc-status', 'Saving…');
  const res = await V.api('PUT', '/v1/ruleset?comment=' + encodeURIComponent(comment),
    { body: text, ctype: 'application/yaml', headers: { 'If-Match': '"' + R.docBase + '"' } });
  if (res.ok) {
    await loadLive();
    R.docBase = R.live.version;
    R.docLive = text;
    document.getElementById('doc-comment').value = '';
    validateDocument();
    V.put('doc-status', V.el('div', { class: 'notice' }, `Saved: version ${R.live.version} is live.`));
    loadAudit(true);
  } else if (res.status === 412) {
    await explainStale(res.data.current_version, R.docBase, '', async () => {
      const cur = await V.api('GET', '/v1/ruleset', { headers: { Accept: 'application/yaml' } });
      R.docLive = cur.ok ? String(cur.data) : R.docLive;
      R.docBase = R.live.version;
      validateDocument();
    }, 'doc-status');
  } else {
    V.put('doc-status', V.el('div', { class: 'alert', role: 'alert' }, 'Not saved: ' + V.problemText(res)));
  }
}

V.start(async () => {
  await loadLive();
  loadAudit(true);
  document.getElementById('audit-older').addEventListener('click', () => loadAudit(false));
  if (V.can('rules:write')) {
    document.getElementById('new-rule').addEventListener('click', () => openEditor(null));
    const form = document.getElementById('rule-form');
    form.addEventListener('input', (ev) => { if (ev.target.id !== 'f-comment') validateSoon(); });
    form.addEventListener('submit', saveRule);
    document.getElementById('backtest-rule').addEventListener('click', () => {
      const { name, item } = readForm();
      sessionStorage.setItem('vigil.candidate', JSON.stringify(Object.assign({ name }, item)));
      sessionStorage.setItem('vigil.draft', JSON.stringify({ name, item, edit: R.edit, comment: document.getElementById('f-comment').value }));
      location.href = 'backtest?from=editor';
    });
    document.getElementById('open-document').addEventListener('click', openDocument);
    document.getElementById('doc-text').addEventListener('input', () => { clearTimeout(docTimer); docTimer = setTimeout(validateDocument, 300); });
    document.getElementById('save-document').addEventListener('click', saveDocument);
    if (V.param('edit')) openEditor(V.param('edit'));
    if (V.param('draft')) restoreDraft();
  }
  if (V.param('history')) showHistory(V.param('history'));
  document.body.dataset.ready = 'true';
});
