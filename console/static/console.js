// Vigil console: what every page shares. The API key lives in this tab's
// sessionStorage and goes to the API only in the Authorization header of
// the requests made here (docs/console.md). Values from the API reach the
// page as text nodes, never as HTML.
'use strict';

const V = (() => {
  const KEY = 'vigil.key';
  const WHO = 'vigil.who';
  // The API is served beside the console: /console/ may sit under a prefix.
  const consoleAt = location.pathname.lastIndexOf('/console/');
  const base = consoleAt >= 0 ? location.pathname.slice(0, consoleAt) : '';

  function session() {
    const key = sessionStorage.getItem(KEY);
    let who = null;
    try { who = JSON.parse(sessionStorage.getItem(WHO) || 'null'); } catch (e) { who = null; }
    return key && who ? { key, who } : null;
  }

  function signIn(key, who) {
    sessionStorage.setItem(KEY, key);
    sessionStorage.setItem(WHO, JSON.stringify(who));
  }

  // signOut forgets the key and goes to the sign-in page; why is one of
  // the reasons signin.js knows (a link cannot make it say anything else).
  function signOut(why) {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(WHO);
    const page = document.body.dataset.page || '';
    let to = 'signin?next=' + encodeURIComponent(page);
    if (why) to += '&why=' + encodeURIComponent(why);
    location.replace(to);
  }

  // can reports whether the signed-in key's role grants a permission.
  function can(perm) {
    const s = session();
    return !!s && s.who.permissions.includes(perm);
  }

  // api calls the REST API and returns {status, ok, headers, data}: data
  // is the parsed JSON (a problem document for errors) or the text.
  async function api(method, path, opts = {}) {
    const headers = Object.assign({ Accept: 'application/json' }, opts.headers || {});
    const key = opts.key || (session() || {}).key;
    if (key) headers.Authorization = 'Bearer ' + key;
    let body = opts.body;
    if (body !== undefined && typeof body !== 'string') {
      body = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    } else if (opts.ctype) {
      headers['Content-Type'] = opts.ctype;
    }
    let resp;
    try {
      resp = await fetch(base + path, { method, headers, body, cache: 'no-store', credentials: 'omit' });
    } catch (err) {
      return { status: 0, ok: false, headers: new Headers(), data: { title: 'Network error', detail: String(err) } };
    }
    const text = await resp.text();
    let data = text;
    const ctype = resp.headers.get('Content-Type') || '';
    if (ctype.includes('json')) {
      try { data = JSON.parse(text); } catch (e) { data = text; }
    }
    if (resp.status === 401 && !opts.key) {
      signOut('refused');
    }
    return { status: resp.status, ok: resp.ok, headers: resp.headers, data };
  }

  // problemText says what an error answer means, in one line.
  function problemText(res) {
    const d = res.data;
    if (d && typeof d === 'object') {
      return (d.title || 'Error') + (d.detail ? ': ' + d.detail : '') + (res.status ? ' (' + res.status + ')' : '');
    }
    return 'Error ' + res.status + (d ? ': ' + String(d).slice(0, 200) : '');
  }

  // el builds an element: el('td', {class: 'num'}, 'text', child, ...).
  // Strings become text nodes; attributes starting with "on" are listeners.
  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') n.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(n.dataset, v);
      else n.setAttribute(k, v === true ? '' : String(v));
    }
    append(n, children);
    return n;
  }

  function append(n, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return n;
  }

  function put(target, ...children) {
    const n = typeof target === 'string' ? document.getElementById(target) : target;
    n.replaceChildren();
    return append(n, children);
  }

  function say(id, text, cls) {
    const n = document.getElementById(id);
    n.className = cls || '';
    n.textContent = text || '';
  }

  // table builds a table from column titles and rows of cells (strings,
  // nodes, or {text, class} objects).
  function table(caption, heads, rows, attrs) {
    const cell = (tag, c) => {
      if (c && typeof c === 'object' && !(c instanceof Node) && !Array.isArray(c)) return el(tag, { class: c.class }, c.text);
      return el(tag, {}, c);
    };
    return el('table', attrs || {},
      caption ? el('caption', {}, caption) : null,
      el('thead', {}, el('tr', {}, heads.map((h) => cell('th', typeof h === 'string' ? { text: h.replace(/^#/, ''), class: h.startsWith('#') ? 'num' : undefined } : h)))),
      el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => cell('td', c))))));
  }

  function badge(text, kind) {
    return el('span', { class: 'badge ' + (kind || text) }, text);
  }

  function time(ms) {
    if (ms === null || ms === undefined) return '—';
    const d = new Date(Number(ms));
    return isNaN(d) ? String(ms) : d.toISOString().replace('T', ' ').replace('.000Z', 'Z');
  }

  // duration says how long ms is, in the unit that reads best.
  function duration(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return '—';
    const s = ms / 1000, a = Math.abs(s);
    if (a < 1) return num(ms, 0) + ' ms';
    if (a < 120) return num(s, 1) + ' s';
    if (a < 7200) return num(s / 60, 1) + ' min';
    if (a < 172800) return num(s / 3600, 1) + ' h';
    return num(s / 86400, 1) + ' days';
  }

  function num(n, digits) {
    if (n === null || n === undefined || isNaN(n)) return '—';
    return Number(n).toLocaleString('en-US', { maximumFractionDigits: digits === undefined ? 2 : digits });
  }

  // canonical is JSON with sorted keys, two-space indented: what diffs
  // compare.
  function canonical(v) {
    const sort = (x) => {
      if (Array.isArray(x)) return x.map(sort);
      if (x && typeof x === 'object') return Object.fromEntries(Object.keys(x).sort().map((k) => [k, sort(x[k])]));
      return x;
    };
    return JSON.stringify(sort(v), null, 2);
  }

  // diffLines compares two texts line by line (longest common subsequence)
  // and returns [{op: 'same'|'add'|'del', text}].
  function diffLines(a, b) {
    const x = a === '' ? [] : a.split('\n');
    const y = b === '' ? [] : b.split('\n');
    if (x.length * y.length > 4e6) { // too large to align: all out, all in
      return x.map((t) => ({ op: 'del', text: t })).concat(y.map((t) => ({ op: 'add', text: t })));
    }
    const n = x.length, m = y.length;
    const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
      }
    }
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (x[i] === y[j]) { out.push({ op: 'same', text: x[i] }); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) out.push({ op: 'del', text: x[i++] });
      else out.push({ op: 'add', text: y[j++] });
    }
    while (i < n) out.push({ op: 'del', text: x[i++] });
    while (j < m) out.push({ op: 'add', text: y[j++] });
    return out;
  }

  // showDiff renders a diff into a <pre class="diff">; unchanged runs
  // longer than six lines are shortened.
  function showDiff(pre, a, b) {
    const d = diffLines(a, b);
    const nodes = [];
    if (!d.some((l) => l.op !== 'same')) {
      nodes.push(el('span', { class: 'same muted' }, 'No changes.'));
    }
    for (let k = 0; k < d.length; k++) {
      const l = d[k];
      if (l.op === 'same') {
        let e = k;
        while (e < d.length && d[e].op === 'same') e++;
        if (e - k > 6) {
          const keepHead = k === 0 ? 0 : 2, keepTail = e === d.length ? 0 : 2;
          for (let q = k; q < k + keepHead; q++) nodes.push(el('span', { class: 'same' }, d[q].text));
          nodes.push(el('span', { class: 'same muted' }, '… ' + (e - k - keepHead - keepTail) + ' unchanged lines'));
          for (let q = e - keepTail; q < e; q++) nodes.push(el('span', { class: 'same' }, d[q].text));
          k = e - 1;
          continue;
        }
      }
      nodes.push(el('span', { class: l.op }, l.text));
    }
    put(pre, nodes);
    return d;
  }

  // Charts: small inline SVGs, built as DOM nodes (no HTML strings).
  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, ...children) {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
    for (const c of children) n.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return n;
  }

  // lineChart draws series [{name, cls, points: [[x, y], ...]}] sharing
  // axes; label says what the chart shows (its accessible name).
  function lineChart(series, opts) {
    const W = opts.width || 600, H = opts.height || 140, P = { l: 44, r: 8, t: 8, b: 20 };
    const pts = series.flatMap((s) => s.points);
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label });
    root.append(svg('title', {}, opts.label));
    if (pts.length === 0) {
      root.append(svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, opts.empty || 'No data yet'));
      return root;
    }
    const x0 = Math.min(...pts.map((p) => p[0])), x1 = Math.max(...pts.map((p) => p[0]));
    const y1 = Math.max(opts.minTop || 1, ...pts.map((p) => p[1]));
    const sx = (x) => P.l + (x1 === x0 ? 0 : (x - x0) / (x1 - x0)) * (W - P.l - P.r);
    const sy = (y) => H - P.b - (y / y1) * (H - P.t - P.b);
    root.append(svg('line', { class: 'axis', x1: P.l, y1: H - P.b, x2: W - P.r, y2: H - P.b }));
    root.append(svg('line', { class: 'axis', x1: P.l, y1: P.t, x2: P.l, y2: H - P.b }));
    root.append(svg('text', { x: P.l - 4, y: P.t + 8, 'text-anchor': 'end' }, num(y1, 1)));
    root.append(svg('text', { x: P.l - 4, y: H - P.b, 'text-anchor': 'end' }, '0'));
    if (opts.xLabel) {
      root.append(svg('text', { x: P.l, y: H - 4 }, opts.xLabel(x0)));
      root.append(svg('text', { x: W - P.r, y: H - 4, 'text-anchor': 'end' }, opts.xLabel(x1)));
    }
    for (const s of series) {
      if (s.points.length === 0) continue;
      const d = s.points.map((p, i) => (i ? 'L' : 'M') + sx(p[0]).toFixed(1) + ' ' + sy(p[1]).toFixed(1)).join(' ');
      root.append(svg('path', { d, fill: 'none', stroke: 'currentColor', 'stroke-width': 2, class: s.cls }));
    }
    return root;
  }

  // barChart draws grouped bars: buckets [{x, values: {series: n}}] with
  // series [{name, cls}].
  function barChart(buckets, series, opts) {
    const W = opts.width || 600, H = opts.height || 140, P = { l: 44, r: 8, t: 8, b: 20 };
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': opts.label });
    root.append(svg('title', {}, opts.label));
    const top = Math.max(1, ...buckets.flatMap((b) => series.map((s) => b.values[s.name] || 0)));
    const bw = (W - P.l - P.r) / Math.max(1, buckets.length);
    const gw = Math.max(1, (bw - 2) / series.length);
    root.append(svg('line', { class: 'axis', x1: P.l, y1: H - P.b, x2: W - P.r, y2: H - P.b }));
    root.append(svg('text', { x: P.l - 4, y: P.t + 8, 'text-anchor': 'end' }, num(top, 0)));
    root.append(svg('text', { x: P.l - 4, y: H - P.b, 'text-anchor': 'end' }, '0'));
    buckets.forEach((b, i) => {
      series.forEach((s, k) => {
        const v = b.values[s.name] || 0;
        if (!v) return;
        const h = (v / top) * (H - P.t - P.b);
        const r = svg('rect', { x: (P.l + i * bw + 1 + k * gw).toFixed(1), y: (H - P.b - h).toFixed(1), width: Math.max(1, gw - 1).toFixed(1), height: h.toFixed(1), fill: 'currentColor', class: s.cls });
        r.append(svg('title', {}, `${s.name}: ${v} (${opts.xLabel ? opts.xLabel(b.x) : b.x})`));
        root.append(r);
      });
    });
    if (opts.xLabel && buckets.length) {
      root.append(svg('text', { x: P.l, y: H - 4 }, opts.xLabel(buckets[0].x)));
      root.append(svg('text', { x: W - P.r, y: H - 4, 'text-anchor': 'end' }, opts.xLabel(buckets[buckets.length - 1].x)));
    }
    return root;
  }

  // widthOf is an element's width in CSS pixels, so that a chart's SVG
  // units are pixels and its text keeps its size.
  function widthOf(id) {
    return Math.max(200, Math.floor(document.getElementById(id).clientWidth) - 2);
  }

  function legend(series) {
    return el('div', { class: 'legend' }, series.map((s) => el('span', { class: s.cls }, s.name)));
  }

  // A blocked script, style or connection is a bug of the console: say so.
  document.addEventListener('securitypolicyviolation', (ev) => {
    console.error('Content-Security-Policy refused ' + ev.blockedURI + ' (' + ev.violatedDirective + ')');
  });

  // Every page but sign-in needs a session; controls a role cannot use are
  // removed, not just hidden (the API refuses them anyway).
  function start(init) {
    document.addEventListener('DOMContentLoaded', () => {
      const page = document.body.dataset.page;
      if (page !== 'signin') {
        const s = session();
        if (!s) { signOut(); return; }
        const who = document.getElementById('who');
        if (who) who.textContent = s.who.name + ' · ' + s.who.role;
        const out = document.getElementById('signout');
        if (out) out.addEventListener('click', () => signOut());
        for (const n of document.querySelectorAll('[data-needs]')) {
          if (!can(n.dataset.needs)) n.remove();
        }
        const needs = document.body.dataset.needsPage;
        if (needs && !can(needs)) {
          const main = document.getElementById('main');
          main.replaceChildren(main.querySelector('h1'),
            el('p', { class: 'alert', id: 'no-access' }, `Your key's role (${s.who.role}) may not use this page: it needs ${needs}.`));
          document.body.dataset.ready = 'true';
          return;
        }
      }
      init(session());
    });
  }

  // every runs fn now and then every ms while the page is visible; a
  // run is never started before the previous one has finished.
  function every(ms, fn) {
    let timer = null, stopped = false;
    const tick = async () => {
      timer = null;
      if (stopped) return;
      if (!document.hidden) {
        try { await fn(); } catch (err) { console.error(err); }
      }
      if (!stopped) timer = setTimeout(tick, ms);
    };
    tick();
    return { stop() { stopped = true; if (timer) clearTimeout(timer); } };
  }

  function param(name) {
    return new URLSearchParams(location.search).get(name);
  }

  return { api, problemText, session, signIn, signOut, can, el, put, say, table, badge, time, duration, num, canonical, diffLines, showDiff, lineChart, barChart, legend, widthOf, start, every, param, base };
})();
